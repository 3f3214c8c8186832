"""`--dim NAME=N` of compile, bench and rewrite: a name that is not one of the model's symbolic
dims is refused with exit status 2 in one sentence that names it and lists the model's dims, and
before anything is compiled (its value would otherwise be ignored, the dim checked at 1)."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from tests.helpers import run_cli


def _relu(path, batch):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def batched(tmp_path):
    """A one-Relu model whose input has the symbolic dim 'batch'."""
    return _relu(tmp_path / "batched.onnx", "batch")


@pytest.fixture
def static(tmp_path):
    return _relu(tmp_path / "static.onnx", 1)


def _command(name, model, tmp_path):
    """The command line of `name` on `model`, writing (if it writes) under tmp_path/out."""
    out = tmp_path / "out"
    return {
        "compile": ("compile", model, "-o", out),
        "bench": ("bench", model, "--runs", "1"),
        "rewrite": ("rewrite", model, "--rules", "fold-constants", "-o", out, "--verify"),
    }[name], out


@pytest.mark.parametrize("command", ["compile", "bench", "rewrite"])
def test_misspelt_dim_is_refused_before_compiling(command, batched, tmp_path):
    args, out = _command(command, batched, tmp_path)
    r = run_cli(*args, "--dim", "bach=4")
    assert r.returncode == 2, r.stderr
    assert "The model has no symbolic dim 'bach' (its symbolic dims are batch)." in r.stderr
    assert r.stderr.count("\n") == 1  # one sentence, nothing compiled or reported before it
    assert not out.exists()


@pytest.mark.parametrize("command", ["compile", "bench", "rewrite"])
def test_a_model_without_symbolic_dims_says_it_has_none(command, static, tmp_path):
    args, out = _command(command, static, tmp_path)
    r = run_cli(*args, "--dim", "batch=4")
    assert r.returncode == 2, r.stderr
    assert "The model has no symbolic dim 'batch' (it has none)." in r.stderr
    assert not out.exists()


def test_a_dim_the_model_has_is_taken(batched, tmp_path):
    out = tmp_path / "out.onnx"
    r = run_cli("rewrite", batched, "--rules", "fold-constants", "-o", out, "--verify", "--dim", "batch=3")
    assert r.returncode == 0, r.stderr
    assert out.exists()


def test_an_artifact_names_its_dims_as_the_model_does():
    """bench ARTIFACT_DIR checks --dim against the artifact's inputs (TensorSpecs)."""
    from types import SimpleNamespace

    from cli.compile_cmd import parse_dims
    from core.compiler.runtime.artifact import TensorSpec
    from core.errors import WorkbenchError

    art = SimpleNamespace(inputs=[TensorSpec("x", ("batch", 4, "seq"), "float32"), TensorSpec("m", ("seq",), "int64")])
    assert parse_dims(["seq=8", "batch=2"], art) == {"seq": 8, "batch": 2}
    with pytest.raises(WorkbenchError, match=r"no symbolic dim 'bach' \(its symbolic dims are batch, seq\)\."):
        parse_dims(["bach=2"], art)
