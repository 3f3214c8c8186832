"""Split kernels take rows first, so that each thread reads what its own core wrote the kernel
before: a channel-blocked conv whose weights stay in L2 (cpu_conv_nchwc.ROWS_FIRST_MAX_WEIGHT_BYTES),
one with larger weights over two bands of rows (LARGE_WEIGHT_BANDS), and a depthwise conv from 28
output rows (cpu_depthwise_nchwc.ROWS_FIRST_MIN_ROWS, bands of rows of every channel block).
Structure from the scheduled TIR for AVX-512 and AVX2 targets (codegen only); both convs against
onnxruntime on this host's ISA; the depthwise template space is checked in test_depthwise_nchwc.py
(and a mobile block with bands against onnxruntime there)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_depthwise_nchwc import _depthwise_kernel
from tests.helpers import loops_around, scheduled_through, vm_matches_onnxruntime


def _two_convs_model():
    """Two 3x3 convs on 16x16: 32 -> 32 (36 KiB of weights) and 32 -> 512 (576 KiB)."""
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal((512, 32, 3, 3)) / 17).astype(np.float32), "w2"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Conv", ["r", "w2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        ],
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512, 16, 16])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _parallel_loops(target) -> dict[int, str]:
    """The loop around each conv's update block, by the conv's output channels."""
    import tvm

    loops = {}
    for gv, func in scheduled_through(_two_convs_model(), target).functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and "conv2d_NCHWc" in gv.name_hint:
            weight = func.params[1].shape  # [O/b, I/b, kh, kw, b, b]
            loops[int(weight[0]) * int(weight[5])] = loops_around(func.script(), "conv2d_NCHWc_update")[0]
    return loops


@pytest.mark.parametrize("mcpu,mattr", [("znver4", None), ("znver4", ["-avx512f"]), ("haswell", None)])
def test_convs_split_rows_first_and_large_weights_two_bands_of_rows(mcpu, mattr, monkeypatch):
    from core.compiler.passes.layout import winograd
    from core.compiler.schedules import cpu_conv_nchwc
    from core.compiler.target import make_target

    monkeypatch.setattr(winograd, "WINOGRAD_TILES", ())  # the 3x3 convs stay direct
    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    loops = _parallel_loops(target)
    assert all("T.parallel" in loop for loop in loops.values()), loops
    # (oc_chunk_0: tiles of two channel blocks; 32 tiles of 512 channels either way)
    # 36 KiB of weights: a row a task, 16 rows x 2 tiles of channels
    assert re.search(r"for n_oh_oc_chunk(_0)?_fused in T.parallel\(T.int64\(32\)\)", loops[32]), loops
    # 576 KiB: two bands of 8 rows x 32 tiles, the band's rows inside
    assert re.search(r"for n_oh_0_oc_chunk(_0)?_fused in T.parallel\(T.int64\(64\)\)", loops[512]), loops

    monkeypatch.setattr(cpu_conv_nchwc, "LARGE_WEIGHT_BANDS", 1)  # as before: channel blocks first
    loops = _parallel_loops(target)
    assert re.search(r"for n_oc_chunk(_0)?_oh", loops[512]) and re.search(r"for n_oh_oc_chunk", loops[32]), loops
    monkeypatch.setattr(cpu_conv_nchwc, "ROWS_FIRST", False)  # both
    assert re.search(r"for n_oc_chunk(_0)?_oh", _parallel_loops(target)[32])


@pytest.mark.isa
def test_convs_split_by_rows_and_bands_match_onnxruntime(monkeypatch):
    from core.compiler.passes.layout import winograd
    from core.compiler.target import make_target

    monkeypatch.setattr(winograd, "WINOGRAD_TILES", ())
    x = np.random.default_rng(6).standard_normal((1, 32, 16, 16)).astype(np.float32)
    vm_matches_onnxruntime(_two_convs_model(), make_target("cpu"), x, runs=3)


@pytest.mark.parametrize("size,stride,bands", [(56, 1, 4), (56, 2, 4), (28, 1, 4), (14, 1, 1), (7, 1, 1)])
@pytest.mark.parametrize("mcpu,mattr", [("znver4", None), ("znver4", ["-avx512f"])])
def test_depthwise_convs_split_bands_of_rows_first_from_28_rows(size, stride, bands, mcpu, mattr, monkeypatch):
    from core.compiler.schedules import cpu_depthwise_nchwc
    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    func = _depthwise_kernel(target, size=size, channels=64, stride=stride)
    rule = DepthwiseConv2dNCHWc()
    default = rule.candidates(func, target)[0]
    chunks = 64 // int(func.params[0].shape[4])
    if default["pad"] == "plane":  # (AVX2 code's rows over 14 wide: a padded copy per channel block)
        assert default["bands"] == 1 and mattr and stride == 1
        return
    assert default["bands"] == bands
    outer = loops_around(rule.apply(func, target).mod["main"].script(), "depthwise_conv2d_NCHWc_update")[0]
    if bands > 1:  # band, channel block | the band's rows, each block's in order
        assert "T.parallel" in outer and f"T.int64({bands * chunks})" in outer and "n_y_0_c_fused" in outer, outer
        assert {"bands": 1, **{k: v for k, v in default.items() if k != "bands"}} in rule.candidates(func, target)
    else:
        assert "n_c_y_fused" in outer, outer
    monkeypatch.setattr(cpu_depthwise_nchwc, "ROWS_FIRST", False)
    assert rule.candidates(func, target)[0]["bands"] == 1
    with pytest.raises(ValueError):
        rule.apply(func, target, {**default, "bands": 5 if size != 7 else 2})
