"""Grouped convs whose channels per group no vector divides (ShuffleNet's 34, 68, 136): the NCHW
rule's row-vectorized form takes its output-channel tile from one group's channels, so the rows of
a tile share one input vector (core.compiler.schedules.cpu_conv.choose_width_tile), and runs an
unpadded 1x1 conv whose row no vector divides over its plane as one row (`flat_plane`). Where
fewer than 8 channels of a group fit (AVX2: 34, 68 per group), a tile of channels x several
vectors (`multi_vector_tile`); the template search measures the form's other tiles
(`row_candidates`).

The tile choice is checked for both register files (any host); the compiled model, its convs
scheduled by that form, and every tile the search would measure, are checked against onnxruntime
or the default on this host's ISA (.ci/run runs this file again with AVX2 code)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import configs_compute_the_same, ort_run


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


def test_avx2_grouped_tile_takes_channels_by_several_vectors():
    """Where fewer than 8 channels of a group fit AVX2's 16 registers as one-vector rows, the
    default tile is FB channels x NV vectors with the fewest loads per multiply-add: 4 x 2 of the
    flat plane (784 = 98 x 8) at 28x28, 4 channels x 2 rows of 7 at 14x14 and 4 x 2 rows of 8 at
    56x56. AVX-512's tiles (8 or more channels of one group) and depthwise-like and ungrouped
    convs keep theirs."""
    from core.compiler.schedules.cpu_conv import default_row_tile, multi_vector_tile

    assert default_row_tile((1, 136, 28, 28, 34, 1, 1), [1, 136, 28, 28], 34, 8, 16) == (4, 8, 2, True)
    assert default_row_tile((1, 272, 14, 14, 68, 1, 1), [1, 272, 14, 14], 68, 8, 16) == (4, 7, 2, False)
    assert default_row_tile((1, 112, 56, 56, 6, 1, 1), [1, 24, 56, 56], 28, 8, 16) == (4, 8, 2, False)
    assert default_row_tile((1, 136, 28, 28, 34, 3, 3), [1, 136, 30, 30], 34, 8, 16) == (4, 7, 2, False)  # padded: rows
    # AVX-512: the rows of one group, as before
    assert default_row_tile((1, 136, 28, 28, 34, 1, 1), [1, 136, 28, 28], 34, 16, 32) == (17, 16, 1, True)
    assert default_row_tile((1, 272, 14, 14, 68, 1, 1), [1, 272, 14, 14], 68, 16, 32) == (17, 14, 1, False)
    assert default_row_tile((1, 112, 56, 56, 6, 1, 1), [1, 24, 56, 56], 28, 16, 32) == (28, 8, 1, False)
    # not grouped, 7 channels a group, depthwise: no shared input vector, the one-vector tile
    assert multi_vector_tile((1, 20, 28, 28, 20, 1, 1), [1, 20, 28, 28], 20, 8, 16) is None
    assert multi_vector_tile((1, 28, 6, 6, 34, 1, 1), [1, 136, 6, 6], 7, 8, 16) is None
    assert multi_vector_tile((1, 136, 28, 28, 1, 3, 3), [1, 136, 30, 30], 1, 8, 16) is None
    for extents, shape, per_group in [((1, 136, 28, 28, 34, 1, 1), [1, 136, 28, 28], 34), ((1, 272, 14, 14, 68, 1, 1), [1, 272, 14, 14], 68)]:
        fb, _, nv, _ = multi_vector_tile(extents, shape, per_group, 8, 16)
        assert 8 <= fb * nv <= 12 and fb * nv + nv + 1 <= 16 and extents[1] % fb == 0


def test_row_candidates_start_with_the_default_and_fit_the_registers():
    from core.compiler.schedules.cpu_conv import (
        ROW_CANDIDATES,
        default_row_tile,
        row_candidates,
    )

    for extents, shape, per_group, lanes, registers in [
        ((1, 136, 28, 28, 34, 1, 1), [1, 136, 28, 28], 34, 8, 16),
        ((1, 136, 28, 28, 34, 1, 1), [1, 136, 28, 28], 34, 16, 32),
        ((1, 272, 14, 14, 68, 1, 1), [1, 272, 14, 14], 68, 8, 16),
    ]:
        configs = row_candidates(extents, shape, per_group, lanes, registers)
        assert (configs[0]["fb"], configs[0]["vx"], configs[0]["nv"], configs[0]["flat"]) == default_row_tile(extents, shape, per_group, lanes, registers)
        assert 3 <= len(configs) <= ROW_CANDIDATES + 1 and len({tuple(sorted(c.items())) for c in configs}) == len(configs)
        for c in configs:
            assert c["form"] == "rows" and extents[1] % c["fb"] == 0 and c["vx"] <= lanes
            assert c["fb"] * c["nv"] + c["nv"] + 1 <= registers
            units = extents[2] * extents[3] // c["vx"] if c["flat"] else extents[2]
            assert units % c["nv"] == 0
    # the flat plane's tiles only where the plane is the input's (an unpadded 1x1 conv)
    padded = row_candidates((1, 136, 28, 28, 34, 3, 3), [1, 136, 30, 30], 34, 8, 16)
    assert padded and not any(c["flat"] for c in padded)


@pytest.mark.isa
def test_every_row_candidate_computes_what_the_default_computes():
    """Each tile the template search would measure for the model's grouped convs (the 1x1 conv on
    a 12x12 plane, with flat-plane tiles; the padded 3x3 one, rows only) builds for this host and
    gives the default schedule's output on the same random inputs; the first is the default."""
    import tvm_ffi

    from core.compiler.schedules import default_schedule
    from core.compiler.schedules.cpu_conv import Conv2dNCHW
    from core.compiler.target import make_target

    target = make_target("cpu")
    funcs = _grouped_kernels(target)
    rule = Conv2dNCHW()
    checked = 0
    for func in funcs:
        configs = rule.candidates(func, target)
        assert configs and all(c["form"] == "rows" for c in configs)
        default, _ = default_schedule(func, target)
        first = rule.apply(func, target, configs[0]).mod["main"]
        assert tvm_ffi.structural_equal(first.without_attr("tirx.is_scheduled"), default.without_attr("tirx.is_scheduled"))
        checked += configs_compute_the_same(rule, func, target, configs)
    assert checked >= 6


@pytest.mark.slow
@pytest.mark.parametrize("mattr", [None, ["-avx512f"]])
def test_row_candidates_only_for_kernels_this_rule_schedules(mattr):
    """Codegen-free (any host), light ShuffleNet for Zen 4 and as AVX2 code: the NCHW rule offers
    configs to the template search only for kernels it schedules by default (its grouped 1x1 convs,
    the stem), never for the depthwise convs the depthwise rule schedules, whose block it also
    matches; a config measured against another rule's default would be no comparison."""
    import os

    import onnx as _onnx

    from core.compiler.manual.session import list_kernels
    from core.compiler.schedules import default_schedule
    from core.compiler.schedules.cpu_conv import Conv2dNCHW
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver4", mattr=mattr)
    path = os.path.join(os.path.dirname(_onnx.__file__), "backend/test/data/light/light_shufflenet.onnx")
    rule = Conv2dNCHW()
    offered, depthwise = 0, 0
    for kernel in list_kernels(path, target):
        _, by = default_schedule(kernel.func, target)
        depthwise += by == "cpu.DepthwiseConv2dNCHW"
        if rule.candidates(kernel.func, target):
            offered += 1
            assert by == rule.name, (kernel.name, by)
    assert offered >= 5 and depthwise >= 3


def _grouped_kernels(target):
    """The unscheduled PrimFuncs of the grouped model's 24 -> 136 1x1 conv (12x12, unpadded) and
    its padded 3x3 conv of 34 channels a group."""
    import tempfile
    from pathlib import Path

    from core.compiler.manual.session import list_kernels

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "grouped.onnx"
        onnx.save(_grouped_model(), str(path))
        kernels = list_kernels(str(path), target)
    by_shape = {}
    for k in kernels:
        text = k.func.script()
        if "group_conv2d_nchw" in text and "T.int64(136), T.int64(12), T.int64(12)" in text:
            by_shape.setdefault("3x3" if "T.int64(3), T.int64(3)" in text else "1x1", k.func)
    return [by_shape["1x1"], by_shape["3x3"]]


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
    from core.compiler.manual.session import list_kernels
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
