"""core.compiler.passes.layout.nchwc: a channel-blocked conv's output flattened into tokens (a ViT's patch
embedding: NCHW{b}c -> NCHW -> Reshape -> Transpose) is one copy, not a layout_transform kernel and
a transpose kernel; a CNN's flatten before its classifier keeps its layout_transform."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import checked_model, compiled_matches_onnxruntime, kernel_names


def _patch_embedding(tokens: bool = True, channels: int = 32, image: int = 16, patch: int = 4) -> onnx.ModelProto:
    """Conv (patch x patch, stride patch; seeded random weights) -> Reshape [1, C, T] -> Transpose
    [1, T, C] (tokens), or with `tokens` False -> Reshape [1, C*T] -> MatMul (a CNN's classifier)."""
    rng = np.random.default_rng(11)
    t = (image // patch) ** 2
    inits = [
        numpy_helper.from_array((0.1 * rng.standard_normal((channels, 3, patch, patch))).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[patch, patch], strides=[patch, patch], name="patch")]
    if tokens:
        inits.append(numpy_helper.from_array(np.array([1, channels, t], np.int64), "shape"))
        nodes += [helper.make_node("Reshape", ["c", "shape"], ["f"], name="flatten"),
                  helper.make_node("Transpose", ["f"], ["y"], perm=[0, 2, 1], name="tokens")]
        out = [1, t, channels]
    else:
        inits += [numpy_helper.from_array(np.array([1, channels * t], np.int64), "shape"),
                  numpy_helper.from_array((0.05 * rng.standard_normal((channels * t, 10))).astype(np.float32), "fc")]
        nodes += [helper.make_node("Reshape", ["c", "shape"], ["f"], name="flatten"),
                  helper.make_node("MatMul", ["f", "fc"], ["y"], name="classifier")]
        out = [1, 10]
    graph = helper.make_graph(nodes, "patches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, image, image])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return checked_model(graph)



@pytest.mark.isa
def test_tokens_take_one_copy_after_the_conv():
    kernels = kernel_names(_patch_embedding())
    after = kernels[next(i for i, k in enumerate(kernels) if "conv2d" in k) + 1:]
    assert len(after) == 1 and "layout_transform" not in after[0] and "transpose" in after[0], kernels


@pytest.mark.isa
def test_a_flatten_into_a_classifier_keeps_its_layout_transform():
    kernels = kernel_names(_patch_embedding(tokens=False))
    assert any("layout_transform" in k for k in kernels[next(i for i, k in enumerate(kernels) if "conv2d" in k) + 1:]), kernels


@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("tokens", [True, False])
def test_matches_onnxruntime(tmp_path, tokens):
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    compiled_matches_onnxruntime(_patch_embedding(tokens=tokens), {"x": x}, tmp_path)
