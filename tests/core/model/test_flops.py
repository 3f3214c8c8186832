"""FLOP counts from the ONNX graph: hand-counted small cases, bound symbolic dims, a published figure."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.model.flops import count_flops
from tests.conftest import light


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_conv_grouped_conv_and_conv_transpose():
    w = np.zeros((8, 3, 3, 3), np.float32)  # 8 out channels, 3 in, 3x3
    wg = np.zeros((8, 2, 3, 3), np.float32)  # 4 groups of 2 in channels
    wt = np.zeros((8, 4, 2, 2), np.float32)  # ConvTranspose: 8 in, 4 out, 2x2
    m = _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Conv", ["c", "wg"], ["g"], group=4, pads=[1, 1, 1, 1]),
         helper.make_node("ConvTranspose", ["g", "wt"], ["y"], strides=[2, 2])],
        [_vi("x", ["n", 3, 10, 10])], [_vi("y", None)], [("w", w), ("wg", wg), ("wt", wt)])
    c = count_flops(m, dims={"n": 2})
    conv = 2 * (2 * 8 * 10 * 10) * (3 * 3 * 3)
    grouped = 2 * (2 * 8 * 10 * 10) * (2 * 3 * 3)
    transposed = 2 * (2 * 8 * 10 * 10) * (4 * 2 * 2)
    assert c.by_op == {"Conv": conv + grouped, "ConvTranspose": transposed} and c.total == conv + grouped + transposed
    assert count_flops(m).total == c.total // 2  # unbound dims count as 1


def test_matmul_batched_and_gemm_transposed():
    b = np.zeros((16, 5), np.float32)
    m = _model(
        [helper.make_node("MatMul", ["a", "b"], ["ab"]),
         helper.make_node("Gemm", ["at", "c"], ["y"], transA=1)],
        [_vi("a", [4, 7, 16]), _vi("at", [6, 3]), _vi("c", [6, 2])], [_vi("ab", None), _vi("y", None)], [("b", b)])
    c = count_flops(m)
    assert c.by_op == {"MatMul": 2 * 4 * 7 * 5 * 16, "Gemm": 2 * 3 * 2 * 6} and not c.unknown


def test_unknown_shapes_are_named_not_guessed():
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [_vi("a", None), _vi("b", None)], [_vi("y", None)])
    c = count_flops(m)
    assert c.total == 0 and len(c.unknown) == 1


@pytest.mark.parametrize("name, gflops", [("resnet50", 8.2), ("vgg19", 39.3)])
def test_light_models_match_published_counts(name, gflops):
    # ResNet-50: 4.1 G multiply-adds, VGG-19: 19.6 G (He et al. 2015; Simonyan & Zisserman 2014)
    assert count_flops(light(name)).total / 1e9 == pytest.approx(gflops, rel=0.01)
