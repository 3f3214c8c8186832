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
