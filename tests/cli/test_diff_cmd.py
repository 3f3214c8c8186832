"""`main.py diff`: model-level differences first (text and --json), one deleted node read as one.

Checked against the diff before issue 44 item 5 / issue 41 item 2: opset 17 against 13 printed
"(identical)", and the CNN with one BN deleted "1 matched, ... 17 removed, 16 added"."""
from __future__ import annotations

import json

import onnx

from tests.core.views.test_diff_matching import cnn, delete_reconnect
from tests.helpers import run_cli


def test_opset_ir_version_and_input_type_in_text_and_json(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    m = cnn()
    m.ir_version = 8
    onnx.save(m, a)
    m.opset_import[0].version = 13
    m.ir_version = 7
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(m, b)
    r = run_cli("diff", a, b)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[2:5] == ["model: IR version 8 → 7", "model: opset ai.onnx 17 → 13",
                          "model: input 'x' float32 [1, 3, 8, 8] → float32 [N, 3, 8, 8]"]
    assert lines[5].startswith("18 matched, ") and lines[5].endswith(" 0 removed, 0 added")  # shapes now [N, ...]
    r = run_cli("diff", a, b, "--json")
    obj = json.loads(r.stdout)
    assert obj["identical"] is False and obj["removed"] == [] and obj["added"] == []
    assert [(c["field"], c["key"], c["b"]) for c in obj["model"]] == [
        ("ir_version", "", 7), ("opset", "ai.onnx", 13), ("input", "x", "float32 [N, 3, 8, 8]")]
    assert obj["model"][1]["a"] == 17 and obj["model"][1]["what"] == "opset ai.onnx 17 → 13"


def test_identical_only_when_everything_agrees_and_one_deleted_node(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(cnn(), a)
    onnx.save(cnn(), b)
    r = run_cli("diff", a, b)
    assert r.returncode == 0 and "18 matched, 0 changed, 0 removed, 0 added  (identical)" in r.stdout
    assert "model:" not in r.stdout
    onnx.save(delete_reconnect(cnn(), 1), b)
    obj = json.loads(run_cli("diff", a, b, "--json").stdout)
    assert obj["removed"] == ["BatchNormalization#1"] and obj["added"] == [] and len(obj["changed"]) <= 1
    assert obj["model"] == [] and obj["identical"] is False
    r = run_cli("diff", a, b)
    assert "17 matched, 0 changed, 1 removed, 0 added" in r.stdout and "- BatchNormalization#1" in r.stdout
