"""`inspect`: the summary and its command line."""
from __future__ import annotations

import json

import pytest

from core import load_model
from core.model.summary import format_summary, summarize
from tests.conftest import LIGHT_MODELS, light, sample
from tests.helpers import run_cli

# node count, Conv count, parameter count per light model (onnx wheel)
EXPECTED = {
    "light_resnet50.onnx": (415, 53, 25_610_154),
    "light_densenet121.onnx": (1746, 121, 8_146_152),
    "light_squeezenet.onnx": (105, 26, 1_235_496),
    "light_vgg19.onnx": (82, 16, 143_667_242),
    "light_bvlc_alexnet.onnx": (40, 5, 60_965_226),
}


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_summary_of_light_models(name):
    s = summarize(load_model(light(name.removeprefix("light_").removesuffix(".onnx"))))
    assert s["nodes"] == sum(s["ops"].values())
    assert s["inputs"][0]["shape"] == [1, 3, 224, 224] and s["inputs"][0]["dtype"] == "float32"
    assert s["opset"] == 9 and s["producer"] == "onnx-caffe2"
    assert 4 * s["params"]["count"] <= s["params"]["bytes"] < 4.01 * s["params"]["count"]  # float32, plus a few int64 shapes
    if name in EXPECTED:
        nodes, convs, params = EXPECTED[name]
        assert (s["nodes"], s["ops"]["Conv"], s["params"]["count"]) == (nodes, convs, params)


def test_summary_of_sample_with_symbolic_batch():
    s = summarize(load_model(sample("mlp")))
    assert s["inputs"] == [{"name": "input", "shape": ["batch", 784], "dtype": "float32"}]
    assert s["ops"] == {"Add": 3, "MatMul": 3, "Relu": 2}
    assert s["params"]["count"] == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    text = format_summary(s)
    assert "[batch, 784]" in text and "MatMul" in text


def test_inspect_json_on_the_command_line():
    r = run_cli("inspect", light("resnet50"), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert {"nodes", "ops", "inputs", "outputs", "params", "opset"} <= set(s)
    assert s["nodes"] == 415 and s["ops"]["Conv"] == 53
    assert s["outputs"] == [{"name": "gpu_0/softmax_1", "shape": [1, 1000], "dtype": "float32"}]
    assert set(s["params"]) >= {"count", "bytes"}


def test_inspect_does_not_import_tvm_or_qt():
    code = (
        "import sys, io, contextlib, main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main.main(['inspect', {str(sample('small_cnn'))!r}])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('tvm', 'PySide6', 'onnxruntime')]\n"
        "print(rc, heavy)\n"
    )
    import subprocess
    import sys

    from tests.helpers import ROOT

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert r.stdout.strip() == "0 []", r.stdout + r.stderr


def _chain(n: int, path):
    """n Relu nodes in a row (benchmarks/big_graph.py's model): no shapes but the input's and output's."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu_{i}") for i in range(n)]
    g = helper.make_graph(nodes, f"chain_{n}", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 16])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("path", [light(n.removeprefix("light_").removesuffix(".onnx")) for n in LIGHT_MODELS]
                         + [sample(n) for n in ("mlp", "small_cnn", "tiny_transformer", "mm_relu")], ids=lambda p: p.stem)
def test_summary_of_the_file_is_the_summary_of_the_loaded_graph(path):
    from core.model.summary import summarize_file

    assert summarize_file(path) == summarize(load_model(path))


def test_summary_of_the_file_matches_on_odd_declarations(tmp_path):
    """Undefined and missing declared types, an initializer that is also an input, a weight made
    by a constant node, a Constant and a random node: the protobuf summary reads them as the Graph does."""
    import onnx
    from onnx import TensorProto, helper

    from core.model.summary import summarize_file

    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [4])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
             helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", TensorProto.FLOAT, [4], [0.5] * 4)),
             helper.make_node("RandomUniform", [], ["r"], shape=[4]),
             helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Mul", ["a", "ones"], ["b"]),
             helper.make_node("Sub", ["b", "c"], ["d"]), helper.make_node("Add", ["d", "r"], ["y"]),
             helper.make_node("Identity", ["y"], ["z"])]
    g = helper.make_graph(nodes, "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
                                         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, [4]), helper.make_tensor_value_info("z", TensorProto.FLOAT, ["m"])],
                          [w, shape])
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    s = summarize(load_model(path))
    assert summarize_file(path) == s
    assert s["params"]["tensors"] == 3 and s["outputs"][0]["dtype"] == "undefined"


def test_a_20k_chain_inspects_with_every_shape_known(tmp_path):
    """Big graphs through `inspect` (issue 16): the command reads the protobuf only, and shape
    inference reaches every value (the loaded Graph: all 20,001 tensors typed)."""
    path = _chain(20_000, tmp_path / "chain.onnx")
    r = run_cli("inspect", path, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["nodes"] == 20_000 and s["ops"] == {"Relu": 20_000} and s["shape_problems"] == []
    assert s["outputs"] == [{"name": "t20000", "shape": [1, 16], "dtype": "float32"}]
    g = load_model(path)
    assert all(v.shape == (1, 16) and v.dtype == "float32" for v in g.values)


def test_inspect_does_not_build_the_onnx_ir_model():
    code = (
        "import sys, io, contextlib, main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main.main(['inspect', {str(sample('small_cnn'))!r}])\n"
        "print(rc, [m for m in sys.modules if m.split('.')[0] in ('onnx_ir', 'sympy')])\n"
    )
    import subprocess
    import sys

    from tests.helpers import ROOT

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=60, check=False)
    assert r.stdout.strip() == "0 []", r.stdout + r.stderr
