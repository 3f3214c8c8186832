"""`rewrite --for ort`: the onnxruntime family only with that goal, its recipe without --rules."""
from __future__ import annotations

import json
from collections import Counter

import onnx

from core import save_model
from tests.helpers import run_cli
from tests.rewrites.models import llama_decoder
from tests.rewrites.test_onnxscript_sets import skip_layernorm


def test_onnxruntime_rules_need_the_ort_goal(tmp_path):
    src = tmp_path / "llama.onnx"
    save_model(llama_decoder(opset=18, layers=1), src)
    r = run_cli("rewrite", src, "--rules", "ort-silu", "-o", tmp_path / "out.onnx")
    assert r.returncode == 2 and "ort-silu" in r.stderr and "--for ort" in r.stderr
    assert not (tmp_path / "out.onnx").exists()
    r = run_cli("rewrite", src, "--rules", "ort-silu", "--for", "ort", "-o", tmp_path / "out.onnx", "--verify", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rules"][0]["applied"] == 1
    ops = Counter(n.op_type for n in onnx.load(tmp_path / "out.onnx").graph.node)
    assert ops["QuickGelu"] == 1 and ops["Sigmoid"] == 0


def test_the_ort_recipe_alone(tmp_path):
    src = tmp_path / "bert_block.onnx"
    save_model(skip_layernorm(), src)
    out = tmp_path / "out.onnx"
    r = run_cli("rewrite", src, "--for", "ort", "-o", out, "--verify", "--json")
    assert r.returncode == 0, r.stderr
    report = {x["rule"]: x for x in json.loads(r.stdout)["rules"]}
    assert report["ort-skip-layer-normalization"]["applied"] == 1 and report["ort-skip-layer-normalization"]["verified"]
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert [n.op_type for n in m.graph.node] == ["SkipLayerNormalization"]


def test_neither_rules_nor_goal_is_one_sentence(tmp_path):
    src = tmp_path / "bert_block.onnx"
    save_model(skip_layernorm(), src)
    r = run_cli("rewrite", src, "-o", tmp_path / "out.onnx")
    assert r.returncode == 2 and "--rules" in r.stderr and "--for ort" in r.stderr
