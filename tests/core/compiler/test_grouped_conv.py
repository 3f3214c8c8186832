"""Grouped convs whose channels per group no vector divides (ShuffleNet's 34, 68, 136): the NCHW
rule's row-vectorized form takes its output-channel tile from one group's channels, so the rows of
a tile share one input vector (core.compiler.schedules.cpu_conv.choose_width_tile), and runs an
unpadded 1x1 conv whose row no vector divides over its plane as one row (`flat_plane`).

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
    """24 -> 136 channels 1x1 in 4 groups (6 in, 34 out each) on a 12x12 plane (no vector divides
    the row, one divides the plane: the flat form with AVX-512), a 3x3 grouped conv (34 per group)
    and a grouped 1x1 conv, each with a residual add, a strided 3x3 conv in 2 groups of 68, a 1x1
    conv in 4 groups of 7 outputs (the ungrouped tile), biases and ReLUs fused."""
    rng = np.random.default_rng(5)
    inits = [
        _weight(rng, "w1", (136, 6, 1, 1)), _weight(rng, "b1", (136,)),
        _weight(rng, "w2", (136, 34, 3, 3)), _weight(rng, "b2", (136,)),
        _weight(rng, "w5", (136, 34, 1, 1)), _weight(rng, "b5", (136,)),
        _weight(rng, "w3", (136, 68, 3, 3)),
        _weight(rng, "w4", (28, 34, 1, 1)), _weight(rng, "b4", (28,)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[1, 1], group=4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w5", "b5"], ["c5"], kernel_shape=[1, 1], group=4),
        helper.make_node("Add", ["c5", "r2"], ["a5"]),
        helper.make_node("Relu", ["a5"], ["r5"]),
        helper.make_node("Conv", ["r5", "w3"], ["c3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=2),
        helper.make_node("Conv", ["c3", "w4", "b4"], ["y"], kernel_shape=[1, 1], group=4),
    ]
    graph = helper.make_graph(
        nodes, "grouped_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 28, 6, 6])],
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


def test_flat_plane_only_for_unpadded_1x1_convs_with_an_odd_row():
    from core.compiler.schedules.cpu_conv import flat_plane

    extents = (1, 136, 28, 28, 34, 1, 1)  # n, oc, oh, ow | ic, kh, kw
    assert flat_plane(extents, [1, 136, 28, 28], 34, (17, 14), 16)  # 784 = 49 x 16
    assert not flat_plane(extents, [1, 136, 30, 30], 34, (17, 14), 16)  # padded (or strided)
    assert not flat_plane((1, 136, 28, 28, 34, 3, 3), [1, 136, 30, 30], 34, (17, 14), 16)  # 3x3
    assert not flat_plane((1, 112, 56, 56, 6, 1, 1), [1, 24, 56, 56], 28, (28, 8), 16)  # half a vector divides 56
    assert not flat_plane((1, 272, 14, 14, 68, 1, 1), [1, 272, 14, 14], 68, (17, 14), 16)  # 196: no vector divides it
    assert not flat_plane(extents, [1, 136, 28, 28], 34, (8, 7), 8)  # AVX2's ungrouped tile (8 rows across groups)
    assert not flat_plane((1, 16, 28, 28, 16, 1, 1), [1, 16, 28, 28], 16, (8, 14), 16)  # not grouped


@pytest.mark.isa
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
    assert len(rules) == 5 and set(rules.values()) == {"cpu.Conv2dNCHW"}, rules

    x = np.random.default_rng(6).standard_normal((1, 24, 12, 12)).astype(np.float32)
    vm = compile_model(str(path), "cpu", verify=False).vm()
    import tvm

    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(ours, ort_run(model, {"x": x})[0], rtol=1e-3, atol=1e-4)
