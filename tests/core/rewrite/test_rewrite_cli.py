"""`rules` and `rewrite` on the command line: JSON shapes, per-rule reports, exit codes."""
from __future__ import annotations

import json

import onnx
import pytest

from core import load_model
from tests.conftest import sample
from tests.helpers import run_cli


def test_rules_json_lists_every_rule():
    r = run_cli("rules", "--json")
    assert r.returncode == 0, r.stderr
    rules = json.loads(r.stdout)["rules"]
    assert {x["id"] for x in rules} >= {"fold-constants", "fold-conv-bn", "fuse-gelu", "collapse-reshapes"}
    assert all(set(x) == {"id", "description", "family", "source"} for x in rules)
    assert len(rules) >= 25 and {x["source"] for x in rules} == {"workbench", "onnxscript"}
    plain = run_cli("rules")
    assert plain.returncode == 0 and "fuse-layernorm" in plain.stdout


def test_rewrite_verify_json(tmp_path):
    out = tmp_path / "tt.onnx"
    r = run_cli("rewrite", sample("tiny_transformer"), "--rules", "fuse-layernorm,fuse-gelu", "-o", out, "--verify", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    ln, gelu = report["rules"]
    assert ln["rule"] == "fuse-layernorm" and ln["matches"] == 2 and ln["nodes_before"] == 42 and ln["nodes_after"] == 26
    assert ln["verified"] is True and ln["max_abs_error"] < 1e-4
    assert gelu["matches"] == 1 and gelu["nodes_after"] == 22
    g = load_model(out)
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert [n.op_type for n in g.nodes].count("LayerNormalization") == 2


def test_rewrite_unknown_rule_and_bad_model_exit_2(tmp_path):
    r = run_cli("rewrite", sample("mlp"), "--rules", "fold-conv-bn,fuse-everything", "-o", tmp_path / "x.onnx")
    assert r.returncode == 2 and "unknown rule 'fuse-everything'" in r.stderr
    assert not (tmp_path / "x.onnx").exists()
    r = run_cli("rewrite", tmp_path / "missing.onnx", "--rules", "fold-conv-bn", "-o", tmp_path / "x.onnx")
    assert r.returncode == 2 and "missing.onnx" in r.stderr


def test_failed_verification_exits_2_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import rewrites
    from cli import run_cli as run_in_process
    from tests.core.rewrite.test_rewrite import BrokenGemm

    monkeypatch.setitem(rewrites.RULES, "broken-gemm", BrokenGemm())
    out = tmp_path / "x.onnx"
    code = run_in_process(["rewrite", str(sample("mlp")), "--rules", "broken-gemm", "-o", str(out), "--verify"])
    assert code == 2
    assert "broken-gemm is refused" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_rewrites_from_the_command_line_reach_the_compiled_manifest(tmp_path):
    out = tmp_path / "folded.onnx"
    r = run_cli("rewrite", sample("small_cnn"), "--rules", "fold-conv-bn", "-o", out)
    assert r.returncode == 0, r.stderr
    assert load_model(out).applied_rewrites == ["fold-conv-bn (4 matches)"]
    r = run_cli("compile", out, "-o", tmp_path / "art", "--no-verify", "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["rewrites"] == ["fold-conv-bn (4 matches)"]
