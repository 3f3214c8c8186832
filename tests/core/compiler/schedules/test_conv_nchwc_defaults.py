"""The channel-blocked conv rule's defaults for ResNet-50's 1x1 convs: the grouped order of strided
1x1 convs (its downsampling projections) and the one-row tile of 1x1 convs with 16-lane blocks.
Which shapes take them, at both block widths (codegen only), and such convs with their fused bias,
residual add and ReLU through the whole pipeline against onnxruntime, on this run's ISA (the AVX2
pass of .ci/run repeats them with 8-channel blocks)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import conv_tile, ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4


@pytest.mark.parametrize(
    "lanes,in_channels,out_channels,size,kernel,expected",
    [
        (8, 256, 512, 56, 1, 32),  # AVX2, 56 -> 28: 64 blocks of 8 KiB weights, the input re-read 64 times
        (8, 512, 1024, 28, 1, 16),  # AVX2, 28 -> 14
        (8, 1024, 2048, 14, 1, 1),  # 14 -> 7: the touched input (0.4 MiB) stays in L2
        (16, 256, 512, 56, 1, 16),  # AVX-512, 56 -> 28: 32 blocks of 16 KiB
        (16, 512, 1024, 28, 1, 1),  # a 16-lane pixel is a whole cache line: half the lines of AVX2's
        (16, 128, 128, 56, 3, 1),  # 3x3 stride 2: not grouped
    ],
)
def test_which_strided_convs_are_grouped(lanes, in_channels, out_channels, size, kernel, expected):
    from core.compiler.schedules.cpu_conv_nchwc import strided_1x1_group

    out = (size - 1) // 2 + 1 if kernel == 1 else size // 2
    padded = size + 2 * (kernel // 2)
    extents = (1, out_channels // lanes, out, out, lanes, in_channels, kernel, kernel)
    assert strided_1x1_group(extents, (1, in_channels // lanes, padded, padded, lanes)) == expected
    if kernel == 1:  # the same conv at stride 1 never is
        assert strided_1x1_group((1, out_channels // lanes, size, size, lanes, in_channels, 1, 1), (1, in_channels // lanes, size, size, lanes)) == 1


def _projection_model(in_channels: int = 768, out_channels: int = 256, size: int = 28, stride: int = 2):
    """1x1 conv (stride 2: as a ResNet downsampling block ends) + residual add + ReLU."""
    rng = np.random.default_rng(0)
    out = size // stride
    w = numpy_helper.from_array((rng.standard_normal((out_channels, in_channels, 1, 1)) / np.sqrt(in_channels)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1], strides=[stride, stride]),
            helper.make_node("Add", ["c", "r"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "projection",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_channels, size, size]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, out_channels, out, out]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, out, out])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.isa
def test_grouped_strided_projection_matches_onnxruntime():
    """768 -> 256 channels, 28x28 -> 14x14: the default groups 4 of 16 blocks (AVX-512) or 8 of 32
    (AVX2) per output row; the compiled model agrees with onnxruntime."""
    from core.compiler.target import vector_lanes
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu")
    model = _projection_model()
    configs = Conv2dNCHWc().candidates(_conv_kernel(model, target), target)
    assert configs[0]["ocg"] == {16: 4, 8: 8}[vector_lanes(target)], configs[0]
    assert {k: v for k, v in configs[0].items() if k != "ocg"} in configs  # the ungrouped order stays in the space

    _check_against_onnxruntime(model, target, 768, 28, 256, 14)


def _conv_kernel(model, target):
    import tvm

    fused = relax_through(model, target, "DeadCodeElimination")
    (conv,) = [f for g, f in fused.functions_items() if "conv2d_NCHWc" in g.name_hint and isinstance(f, tvm.tirx.PrimFunc)]
    return conv


def _check_against_onnxruntime(model, target, in_channels, size, out_channels, out):
    import tvm
    from tvm import relax

    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, in_channels, size, size)).astype(np.float32), "r": rng.standard_normal((1, out_channels, out, out)).astype(np.float32)}
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(feeds[k]) for k in ("x", "r")]).numpy()
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mattr,tile,tile3x3", [
    (None, {"t": 7, "th": 1}, {"t": 4, "th": 2}),
    (["-avx512f"], {"t": 5, "th": 1, "oc2": 2, "flat": True}, {"t": 4, "th": 1, "oc2": 2}),
])
def test_1x1_convs_take_one_row_with_16_lane_blocks_only(mattr, tile, tile3x3, monkeypatch):
    """A 28x28 1x1 conv: T=7 on one row with AVX-512's 16-lane blocks (a pixel is a cache line), a
    direct 3x3 conv 4 x 2; with AVX2's 8 lanes the 3x3 conv takes 4 columns of two channel blocks,
    the 1x1 conv 5 pixels of two blocks over its flat plane (test_conv_nchwc_flat; codegen only:
    this host need not run AVX-512)."""
    from core.compiler.passes.layout import winograd
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    monkeypatch.setattr(winograd, "WINOGRAD_MIN_IN_CHANNELS", {})  # the 3x3 conv below stays direct

    target = make_target("cpu", mcpu="znver4", mattr=mattr)
    assert conv_tile(Conv2dNCHWc().candidates(_conv_kernel(_projection_model(32, 64, 28, stride=1), target), target)[0]) == tile
    conv3x3 = _conv_kernel(_conv3x3_model(), target)
    assert conv_tile(Conv2dNCHWc().candidates(conv3x3, target)[0]) == tile3x3


def _conv3x3_model():
    # (16 input channels: direct with F(2,3) only from 32 input channels, core.compiler.passes.layout.winograd)
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((64, 16, 3, 3)) * 0.05).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        "conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 28, 28])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.isa
def test_1x1_conv_with_residual_matches_onnxruntime():
    """32 -> 64 channels at 28x28 with bias, residual add and ReLU (one row of 7 with AVX-512, 5 x 2
    of the flat plane with AVX2) against onnxruntime."""
    from core.compiler.target import make_target

    _check_against_onnxruntime(_projection_model(32, 64, 28, stride=1), make_target("cpu"), 32, 28, 64, 28)


@pytest.mark.parametrize("mcpu,mattr,tile", [
    ("znver5", None, {"t": 4, "th": 2, "oc2": 2}),  # full-width AVX-512: two channel blocks, 16 accumulators
    ("znver4", None, {"t": 4, "th": 2}),  # AVX-512 on 256-bit halves: one block, as before
    ("znver5", ["-avx512f"], {"t": 4, "th": 1, "oc2": 2}),  # AVX2 code: two blocks of 8 lanes, 8 accumulators
    ("znver3", None, {"t": 4, "th": 1, "oc2": 2}),
    ("haswell", None, {"t": 4, "th": 1, "oc2": 2}),
])
def test_full_width_avx512_cpus_take_two_channel_blocks_per_tile(mcpu, mattr, tile, monkeypatch):
    """A 3x3 conv of 4 channel blocks at 28x28 (codegen only): on a CPU of FULL_WIDTH_AVX512_CPUS, and
    with AVX2 code anywhere (two 256-bit FMA units), the default tile holds two blocks (each broadcast
    input feeds two vectors); AVX-512 on 256-bit halves keeps one."""
    from core.compiler.passes.layout import winograd
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    monkeypatch.setattr(winograd, "WINOGRAD_MIN_IN_CHANNELS", {})  # the 3x3 conv stays direct
    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    configs = Conv2dNCHWc().candidates(_conv_kernel(_conv3x3_model(), target), target)
    assert conv_tile(configs[0]) == tile
    if "oc2" in tile:
        assert {"t": tile["t"], "th": tile["th"]} in configs  # the one-block tile stays in the template space


def test_pair_tile_keeps_12_to_16_accumulators_of_32_registers_and_6_to_12_of_16():
    from core.compiler.schedules.cpu_conv_nchwc import pair_tile

    assert pair_tile(56, 56, 16, 32) == (8, 1)  # 2 x 8 = 16 on one row
    assert pair_tile(14, 14, 16, 32) == (7, 1)  # 14: one row preferred over 7 rows of one column
    assert pair_tile(7, 7, 16, 32) == (7, 1)
    assert pair_tile(5, 5, 16, 32) is None  # 10 or 20 accumulators: no such tile
    # AVX2's 16 registers: 6-12 accumulators beside two weight vectors and a broadcast
    assert pair_tile(56, 56, 8, 16) == (4, 1)  # 2 x 4 = 8 on one row
    assert pair_tile(14, 14, 8, 16) == (2, 2)  # 7 columns would be 14 accumulators
    assert pair_tile(55, 55, 8, 16) == (5, 1)
    assert pair_tile(27, 27, 8, 16) == (3, 1)
    assert pair_tile(7, 7, 8, 16) is None and pair_tile(13, 13, 8, 16) is None  # these keep one block


@pytest.mark.isa
def test_two_block_tiles_match_onnxruntime(monkeypatch):
    """The two-block default run on this host (AVX2 code's default; with AVX-512, the host treated
    as a full-width AVX-512 CPU): a 3x3 conv and a 1x1 conv with bias, residual add and ReLU."""
    from core.compiler.passes.layout import winograd
    from core.compiler.schedules import cpu_conv_nchwc
    from core.compiler.target import vector_lanes
    from core.compiler.target import make_target, target_cpu

    target = make_target("cpu")
    if vector_lanes(target) not in (8, 16):
        pytest.skip("this run's code is neither AVX2 nor AVX-512")
    monkeypatch.setattr(cpu_conv_nchwc, "FULL_WIDTH_AVX512_CPUS", frozenset({target_cpu(target)["name"]}))
    monkeypatch.setattr(winograd, "WINOGRAD_MIN_IN_CHANNELS", {})
    assert cpu_conv_nchwc.Conv2dNCHWc().candidates(_conv_kernel(_conv3x3_model(), target), target)[0].get("oc2") == 2
    _check_against_onnxruntime(_projection_model(32, 64, 28, stride=1), target, 32, 28, 64, 28)
    import tvm
    from tvm import relax

    model = _conv3x3_model()
    x = np.random.default_rng(3).standard_normal((1, 16, 28, 28)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)


def _conv5x5_stride2_model():
    """ZFNet-512's second conv, narrowed: 5x5 stride 2, 53x53 -> 25x25 (a width with no 6-12 column tile)."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((64, 32, 5, 5)) * 0.03).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[5, 5], strides=[2, 2])],
        "conv5x5s2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 53, 53])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 25, 25])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("mcpu,mattr", [("znver4", None), ("znver5", None), ("znver4", ["-avx512f"]), ("znver3", None)])
def test_a_tile_of_fewer_than_six_accumulators_takes_two_channel_blocks(mcpu, mattr):
    """A 25-wide output has one-block tiles of 5 columns (5 accumulators: FMAs waiting on each
    other) or 25; with either ISA the default is two blocks of 5 columns, 10 accumulators
    (codegen only). The one-block tile stays in the template space."""
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc, pair_tile
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    configs = Conv2dNCHWc().candidates(_conv_kernel(_conv5x5_stride2_model(), target), target)
    assert conv_tile(configs[0]) == {"t": 5, "th": 1, "oc2": 2}
    assert {"t": 5, "th": 1} in configs
    assert pair_tile(25, 25, 16, 32) is None and pair_tile(25, 25, 16, 32, low=6) == (5, 1)


@pytest.mark.isa
def test_two_block_tile_of_a_narrow_output_matches_onnxruntime():
    import tvm
    from tvm import relax

    from core.compiler.target import make_target

    target = make_target("cpu")
    model = _conv5x5_stride2_model()
    x = np.random.default_rng(5).standard_normal((1, 32, 53, 53)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
