"""benchmarks.architectures.mobile: MobileNetV2, MobileNetV3-small and EfficientNet-B0 as torch.onnx
writes them (opset 17, batch norms folded into biased Convs), with torchvision's exact structure
(its parameter counts) and names, built fast, and run by onnxruntime."""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest

from benchmarks.architectures import ARCHITECTURES
from benchmarks.architectures.mobile import MOBILE, make_divisible

# torchvision's parameter counts (eval mode, with BatchNorm: weight and bias per channel). Folding
# a batch norm into its conv leaves one bias per channel instead of two.
TORCHVISION_PARAMS = {"mobilenet_v2": 3_504_872, "mobilenet_v3_small": 2_542_856, "efficientnet_b0": 5_288_548}


@pytest.fixture(scope="module", params=sorted(MOBILE))
def built(request):
    start = time.perf_counter()
    model = MOBILE[request.param]()
    return request.param, model, time.perf_counter() - start


def test_registered_and_fast(built):
    name, model, seconds = built
    assert ARCHITECTURES[name] is MOBILE[name]
    assert seconds < 2.0, f"{name} took {seconds:.1f} s to build"
    assert model.opset_import[0].version == 17
    onnx.checker.check_model(model)


def test_torchvision_structure(built):
    name, model, _ = built
    params = {t.name: int(np.prod(t.dims)) for t in model.graph.initializer if len(t.dims) > 0}
    folded = sum(n for key, n in params.items() if key.endswith(".bias") and ".fc" not in key and "classifier" not in key)
    assert sum(params.values()) + folded == TORCHVISION_PARAMS[name]
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert all(len(n.input) == 3 for n in convs), "every Conv carries its folded batch norm as a bias"
    assert not any(n.op_type == "BatchNormalization" for n in model.graph.node)
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in convs]
    assert sum(g > 1 for g in groups) >= 10, "depthwise convs"
    ops = {n.op_type for n in model.graph.node}
    expected = {"mobilenet_v2": {"Clip"}, "mobilenet_v3_small": {"HardSwish", "HardSigmoid", "GlobalAveragePool", "Mul"}, "efficientnet_b0": {"Sigmoid", "Mul", "GlobalAveragePool"}}
    assert expected[name] <= ops
    assert all(n.name.startswith("/") and n.name.endswith("/" + n.op_type) for n in model.graph.node)
    assert convs[0].name == "/features/features.0/features.0.0/Conv"


def test_runs_in_onnxruntime(built):
    from tests.helpers import ort_run

    name, model, _ = built
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (y,) = ort_run(model, {"input": x})
    assert y.shape == (1, 1000) and np.all(np.isfinite(y)) and float(np.std(y)) > 1e-3, name


def test_make_divisible_as_torchvision():
    assert [make_divisible(v) for v in (16 // 4, 96 // 4, 240 // 4, 576 // 4)] == [8, 24, 64, 144]
