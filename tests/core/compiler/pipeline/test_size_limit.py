"""Lowering and compiling refuse models over the node limit at once, in one sentence."""
from __future__ import annotations

import pytest

from core import load_model
from core.compiler.pipeline.size_limit import DEFAULT_MAX_NODES, ModelTooBigError, check_size, max_nodes
from tests.conftest import sample
from tests.helpers import run_cli


def test_limit_from_environment(monkeypatch):
    monkeypatch.delenv("MLCWB_MAX_NODES", raising=False)
    assert max_nodes("lowering") == DEFAULT_MAX_NODES["lowering"] == 60_000
    assert max_nodes("compiling") == DEFAULT_MAX_NODES["compiling"] == 60_000
    monkeypatch.setenv("MLCWB_MAX_NODES", "0")
    assert max_nodes() == 0
    check_size(load_model(sample("mlp")), "lowering")  # no limit: nothing raised
    monkeypatch.setenv("MLCWB_MAX_NODES", "lots")
    assert max_nodes("lowering") == 60_000


def test_lower_and_compile_refuse_before_any_tvm_work(monkeypatch):
    from core.compiler.compile import compile_model
    from core.compiler.lowering import lower

    g = load_model(sample("mlp"))
    monkeypatch.setenv("MLCWB_MAX_NODES", "3")
    with pytest.raises(ModelTooBigError, match=r"mlp.onnx has 8 nodes; lowering is limited to 3 .*MLCWB_MAX_NODES=8"):
        lower(g, "cpu")
    with pytest.raises(ModelTooBigError, match="compiling is limited to 3"):
        compile_model(g, "cpu")


def test_cli_exit_2_with_one_sentence(tmp_path):
    import os

    env_before = os.environ.get("MLCWB_MAX_NODES")
    os.environ["MLCWB_MAX_NODES"] = "2"
    try:
        r = run_cli("lower", sample("mlp"))
    finally:
        if env_before is None:
            del os.environ["MLCWB_MAX_NODES"]
        else:
            os.environ["MLCWB_MAX_NODES"] = env_before
    assert r.returncode == 2 and "has 8 nodes; lowering is limited to 2" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
