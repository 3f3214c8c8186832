"""Blocked 1x1 convs over the flat plane (core.compiler.schedules.cpu_conv_nchwc): a stride-1 1x1
conv of an unpadded input whose rows have no two-block tile of 5 or more pixels (7, 13, 14, 27, 28 wide)
takes, with AVX2 code, two channel blocks x FLAT_PAIR_COLUMNS pixels of its H x W plane as one row,
the last tile's pixels past the plane predicated off; and with AVX2's 8-channel blocks, a conv with
an odd count of 16 or more blocks (SqueezeNet's 1000 classes: 125) is padded by one block so that
its tiles take blocks in pairs (core.compiler.passes.layout.channel_padding.paired_channels).

The choices are checked for named CPUs (codegen only, any host); the tiles the template search
would measure, a tail of channel blocks among them, and whole models against onnxruntime run on
this host's ISA (.ci/run runs this file again with AVX2 code)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_conv_nchwc_defaults import _conv_kernel
from tests.helpers import configs_compute_the_same, conv_tile, ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4


def _conv_model(in_channels: int, out_channels: int, size: int, kernel: int = 1, residual: bool = True, batch: int = 1):
    """Conv (with bias; a k x k kernel padded to keep the size) [+ residual add] + ReLU."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((out_channels, in_channels, kernel, kernel)) / np.sqrt(in_channels * kernel * kernel)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b")
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], pads=[pad] * 4)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, in_channels, size, size])]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "r"], ["a"]))
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, out_channels, size, size]))
    nodes.append(helper.make_node("Relu", ["a" if residual else "c"], ["y"]))
    graph = helper.make_graph(nodes, "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, out_channels, size, size])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _classifier_model(in_channels: int = 64, classes: int = 1000, size: int = 13):
    """SqueezeNet's head, narrowed: a 1x1 conv + ReLU (so that the model has a conv blocked as it is,
    as SqueezeNet has), then a 1x1 conv to 1000 classes + ReLU + global average pool + flatten."""
    rng = np.random.default_rng(1)
    w0 = numpy_helper.from_array((rng.standard_normal((in_channels, 32, 1, 1)) / np.sqrt(32)).astype(np.float32), "w0")
    w = numpy_helper.from_array((rng.standard_normal((classes, in_channels, 1, 1)) / np.sqrt(in_channels)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x0", "w0"], ["c0"], kernel_shape=[1, 1]),
            helper.make_node("Relu", ["c0"], ["x"]),
            helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["p"]),
            helper.make_node("Flatten", ["p"], ["y"]),
        ],
        "classifier",
        [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [1, 32, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])],
        [w0, w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_kernels(model, target):
    import tvm

    fused = relax_through(model, target, "DeadCodeElimination")
    return [f for g, f in fused.functions_items() if "conv2d_NCHWc" in g.name_hint and isinstance(f, tvm.tirx.PrimFunc)]


def _matches_onnxruntime(model, target, seed: int = 2):
    import tvm
    from tvm import relax

    rng = np.random.default_rng(seed)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in model.graph.input}
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(feeds[i.name]) for i in model.graph.input]).numpy()
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_flat_only_for_stride_1_1x1_convs_of_an_unpadded_input():
    from core.compiler.schedules.cpu_conv_nchwc import flat_1x1

    assert flat_1x1((1, 8, 7, 7, 8, 64, 1, 1), (1, 8, 7, 7, 8), None)
    assert not flat_1x1((1, 8, 7, 7, 8, 64, 3, 3), (1, 8, 9, 9, 8), 9)  # 3x3 reading a padded copy
    assert not flat_1x1((1, 8, 7, 7, 8, 64, 1, 1), (1, 8, 14, 14, 8), None)  # stride 2
    assert not flat_1x1((1, 8, 7, 7, 8, 64, 1, 1), (1, 8, 9, 9, 8), 9)  # a padded 1x1 conv


@pytest.mark.parametrize("mcpu,mattr,tile", [
    ("znver3", None, {"t": 5, "th": 1, "oc2": 2, "flat": True}),  # AVX2: two blocks x 5 pixels of the plane
    ("haswell", None, {"t": 5, "th": 1, "oc2": 2, "flat": True}),
    ("znver4", ["-avx512f"], {"t": 5, "th": 1, "oc2": 2, "flat": True}),
    ("znver4", None, {"t": 7, "th": 1}),  # AVX-512 on 256-bit halves: one block of the row, as before
    ("znver5", None, {"t": 7, "th": 1, "oc2": 2}),  # full-width AVX-512: 14 of 32 registers on the row
])
def test_a_7_wide_1x1_conv_takes_the_flat_plane_with_avx2_code(mcpu, mattr, tile, monkeypatch):
    """ResNet-50's last stage, narrowed: 256 -> 128 channels at 7x7 (codegen only). A 3x3 conv of the
    same size has no flat plane and keeps its row tile."""
    from core.compiler.passes.layout import winograd
    from core.compiler.schedules.cpu_conv_nchwc import FLAT_PAIR_COLUMNS, Conv2dNCHWc
    from core.compiler.target import make_target

    monkeypatch.setattr(winograd, "WINOGRAD_MIN_IN_CHANNELS", {})  # the 3x3 conv below stays direct
    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    configs = Conv2dNCHWc().candidates(_conv_kernel(_conv_model(256, 128, 7), target), target)
    assert conv_tile(configs[0]) == tile
    assert {"t": 7, "th": 1} in map(conv_tile, configs)  # the row's one-block tile stays in the template space
    assert any(c.get("flat") for c in configs)  # and so do flat tiles, on either register file
    if tile.get("flat"):
        assert FLAT_PAIR_COLUMNS == 5
        default = Conv2dNCHWc().candidates(_conv_kernel(_conv_model(64, 64, 7, kernel=3), target), target)[0]
        assert conv_tile(default) == {"t": 7, "th": 1}


@pytest.mark.parametrize("size,tile", [
    (55, {"t": 5, "th": 1, "oc2": 2}),  # SqueezeNet's first fire modules: 2 x 5 divides the row
    (28, {"t": 5, "th": 1, "oc2": 2, "flat": True}),  # 2 x 4 on the row
    (14, {"t": 5, "th": 1, "oc2": 2, "flat": True}),  # 2 rows x 2 columns
    (27, {"t": 5, "th": 1, "oc2": 2, "flat": True}),  # 2 x 3 on the row
])
def test_a_row_with_a_two_block_tile_of_5_or_more_pixels_keeps_it(size, tile):
    """With AVX2 code (codegen only), the flat plane where the rows' two-block tile has fewer
    than FLAT_PAIR_COLUMNS pixels; a row that 2 x 5 divides keeps its tile."""
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver3")
    assert conv_tile(Conv2dNCHWc().candidates(_conv_kernel(_conv_model(16, 64, size, residual=False), target), target)[0]) == tile


def test_paired_channels():
    from core.compiler.passes.layout.channel_padding import MIN_PAIRED_BLOCKS, paired_channels

    assert MIN_PAIRED_BLOCKS == 16
    assert paired_channels(1000, 8) == 1008  # 125 blocks -> 126
    assert paired_channels(136, 8) == 144  # 17 -> 18
    assert paired_channels(120, 8) is None  # 15 blocks: one more would be a sixteenth more work
    assert paired_channels(1008, 8) is None  # even already
    assert paired_channels(1000, 16) is None  # 16 does not divide 1000: padded_channels' case


@pytest.mark.parametrize("mcpu,mattr,blocks", [
    ("znver3", None, (126, 8)),  # AVX2: 1000 -> 1008, two-block tiles
    ("znver4", ["-avx512f"], (126, 8)),
    ("znver4", None, (63, 16)),  # AVX-512: 1000 -> 1008 = 63 blocks of 16, one-block tiles
])
def test_the_classifier_conv_is_padded_to_an_even_count_of_blocks_with_avx2(mcpu, mattr, blocks):
    from tvm import s_tir

    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    infos = [(f, Conv2dNCHWc()._match(s_tir.Schedule(f), target)) for f in _conv_kernels(_classifier_model(), target)]
    (func, info), = [(f, i) for f, i in infos if i["extents"][1] * i["extents"][4] > 64]  # the classifier
    assert (info["extents"][1], info["extents"][4]) == blocks
    default = Conv2dNCHWc().candidates(func, target)[0]
    assert conv_tile(default) == ({"t": 5, "th": 1, "oc2": 2, "flat": True} if blocks[1] == 8 else {"t": 13, "th": 1})


@pytest.mark.isa
def test_every_flat_candidate_computes_what_the_default_computes(monkeypatch):
    """The tiles the template search would measure for a 13x13 1x1 conv with residual add and ReLU,
    of 17 blocks of this host's lanes (no padding to 18: the odd count gives two-block tiles whose
    last second block is predicated off), flat ones among them, build for this host and give the
    default schedule's output on the same random inputs."""
    from core.compiler.passes.layout import channel_padding, winograd
    from core.compiler.target import vector_lanes
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    monkeypatch.setattr(channel_padding, "MIN_PAIRED_BLOCKS", 10**6)
    monkeypatch.setattr(winograd, "WINOGRAD_MIN_IN_CHANNELS", {})  # the 3x3 conv at the end stays direct
    target = make_target("cpu")
    lanes = vector_lanes(target)
    if lanes not in (8, 16):
        pytest.skip("this run's code is neither AVX2 nor AVX-512")
    func = _conv_kernel(_conv_model(64, 17 * lanes, 13), target)
    rule = Conv2dNCHWc()
    configs = rule.candidates(func, target)
    flat = [c for c in configs if c.get("flat")]
    assert flat and all(c.get("oc2") == 2 for c in flat)  # two of 17 blocks: the last pair's second predicated off
    configs_compute_the_same(rule, func, target, configs)
    with pytest.raises(ValueError, match="does not divide"):
        rule.apply(_conv_kernel(_conv_model(64, 64, 7, kernel=3), target), target, {"t": 5, "th": 1, "flat": True})


@pytest.mark.isa
@pytest.mark.parametrize("batch,size", [(1, 7), (1, 13), (2, 7), (1, 3), (2, 2)])
def test_flat_default_matches_onnxruntime(batch, size):
    """The default on this run's ISA (with AVX2 code, the flat plane's two-block tile with a
    predicated tail; not on a plane of fewer than two such tiles) for a 1x1 conv with bias,
    residual add and ReLU, one image or two."""
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu")
    model = _conv_model(96, 64, size, batch=batch)
    default = Conv2dNCHWc().candidates(_conv_kernel(model, target), target)[0]
    assert not (default.get("flat") and size * size < 10), default
    _matches_onnxruntime(model, target)


@pytest.mark.isa
def test_padded_classifier_matches_onnxruntime():
    """1000 classes, padded to 1008 on either ISA (63 blocks of 16, or 125 + 1 of 8) and sliced
    back after the global pool."""
    from core.compiler.target import make_target

    _matches_onnxruntime(_classifier_model(), make_target("cpu"))
