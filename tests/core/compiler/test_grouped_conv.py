"""Grouped convs whose channels per group no vector divides (ShuffleNet's 34, 68, 136): the NCHW
rule's row-vectorized form takes its output-channel tile from one group's channels, so the rows of
a tile share one input vector (core.compiler.schedules.cpu_conv.choose_width_tile).

The tile choice is checked for both register files (any host); the compiled model, its convs
scheduled by that form, is checked against onnxruntime on this host's ISA (.ci/run runs this file
again with AVX2 code, where 34 channels per group keep the ungrouped tile)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _grouped_model() -> onnx.ModelProto:
    """24 -> 136 channels 1x1 in 4 groups (6 in, 34 out each; 16 columns), a 3x3 grouped conv
    (34 per group) with a residual add, a strided 3x3 conv in 2 groups of 68, a 1x1 conv in
    4 groups of 7 outputs (8 columns: the ungrouped tile), biases and ReLUs fused."""
    rng = np.random.default_rng(5)
    inits = [
        _weight(rng, "w1", (136, 6, 1, 1)), _weight(rng, "b1", (136,)),
        _weight(rng, "w2", (136, 34, 3, 3)), _weight(rng, "b2", (136,)),
        _weight(rng, "w3", (136, 68, 3, 3)),
        _weight(rng, "w4", (28, 34, 1, 1)), _weight(rng, "b4", (28,)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1], group=4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=2),
        helper.make_node("Conv", ["c3", "w4", "b4"], ["y"], kernel_shape=[1, 1], group=4),
    ]
    graph = helper.make_graph(
        nodes, "grouped_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 28, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_grouped_width_tile_takes_one_groups_channels():
    from core.compiler.schedules.cpu_conv import choose_width_tile

    # AVX-512 (16 lanes, 32 registers): the largest divisor of a group's channels that fits
    assert choose_width_tile(136, 28, 16, 34, 32) == (17, 14)
    assert choose_width_tile(272, 14, 16, 68, 32) == (17, 14)
    assert choose_width_tile(544, 7, 16, 136, 32) == (17, 7)
    assert choose_width_tile(112, 56, 16, 28, 32) == (28, 8)  # half a vector divides 56: before 14
    # AVX2 (8 lanes, 16 registers): 136 per group -> 8 rows; fewer than 8 fit (2 of 34, 4 of 68): the ungrouped tile
    assert choose_width_tile(544, 7, 8, 136, 16) == (8, 7)
    assert choose_width_tile(544, 56, 8, 136, 16) == (8, 8)
    assert choose_width_tile(272, 14, 8, 68, 16) == choose_width_tile(272, 14, 8) == (8, 7)
    assert choose_width_tile(136, 28, 8, 34, 16) == choose_width_tile(136, 28, 8) == (8, 7)
    for out_channels, width, lanes, per_group, registers in [(136, 28, 16, 34, 32), (112, 56, 16, 28, 32), (544, 7, 8, 136, 16)]:
        fb, vx = choose_width_tile(out_channels, width, lanes, per_group, registers)
        assert per_group % fb == 0 and width % vx == 0 and vx <= lanes
        assert fb + 2 <= registers  # accumulators + the input row + a broadcast weight


@pytest.mark.slow
def test_grouped_convs_match_onnxruntime(tmp_path):
    """The model's grouped convs are scheduled by the NCHW rule (no dense conv: the model stays
    NCHW), and the compiled model computes what onnxruntime computes."""
    from core.compiler.compile import compile_model
    from core.compiler.schedule_session import list_kernels
    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import make_target

    model = _grouped_model()
    path = tmp_path / "grouped.onnx"
    onnx.save(model, str(path))
    target = make_target("cpu")
    rules = {k.name: schedule_cpu_func(k.func, target)[1] for k in list_kernels(str(path), target) if "conv2d" in k.name}
    assert len(rules) == 4 and set(rules.values()) == {"cpu.Conv2dNCHW"}, rules

    x = np.random.default_rng(6).standard_normal((1, 24, 16, 16)).astype(np.float32)
    vm = compile_model(str(path), "cpu", verify=False).vm()
    import tvm

    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(ours, ort_run(model, {"x": x})[0], rtol=1e-3, atol=1e-4)
