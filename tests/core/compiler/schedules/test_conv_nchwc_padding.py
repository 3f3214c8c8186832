"""A split channel-blocked conv's padded copy, direct or Winograd, is split too
(cpu_common.split_padding_by_rows): by rows, however small, so that no serial copy by the calling
thread precedes the split conv. Structure from
the scheduled TIR for AVX-512 and AVX2 targets (codegen only), and the model against onnxruntime on
this host's ISA at its thread count (the AVX2 pass of .ci/run repeats it with 8-channel blocks)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import loops_around, scheduled_through, vm_matches_onnxruntime

RTOL, ATOL = 1e-3, 1e-4


def _conv_model(channels: int = 32, size: int = 16):
    """3x3 conv, padding 1, bias and ReLU: small_cnn's later convs (a 10 Ki-element padded copy,
    under the generic rule's cpu_common.PARALLEL_MIN_WORK, 16 Ki, for splitting a copy)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "conv3x3",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_kernel_script(target, kind: str = "conv2d") -> str:
    import tvm

    mod = scheduled_through(_conv_model(), target)
    (script,) = [f.script() for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and kind in g.name_hint]
    return script


@pytest.mark.parametrize("mcpu,mattr,chunks", [("znver4", None, 2), ("znver4", ["-avx512f"], 4), ("haswell", None, 4)])
def test_a_split_convs_padded_copy_is_split_by_rows(mcpu, mattr, chunks, monkeypatch):
    from core.compiler.passes.layout import winograd
    from core.compiler.schedules import cpu_common
    from core.compiler.target import make_target

    monkeypatch.setattr(winograd, "WINOGRAD_TILES", ())  # the 3x3 conv stays direct (not Winograd)
    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    script = _conv_kernel_script(target)
    pad, conv = loops_around(script, "data_pad"), loops_around(script, "conv2d_NCHWc_update")
    assert "T.parallel" in conv[0]  # the conv is split ...
    # ... and so is its copy: 18 padded rows x the channel chunks, a run of whole rows per thread
    assert "T.parallel" in pad[0] and f"T.int64({18 * chunks})" in pad[0] and "i2_i1" in pad[0]
    assert "T.vectorized" in pad[-1]

    monkeypatch.setattr(cpu_common, "PARALLEL_PADDING", False)  # as before: the calling thread copies
    assert not any("T.parallel" in loop for loop in loops_around(_conv_kernel_script(target), "data_pad"))


@pytest.mark.parametrize("mattr,chunks", [(None, 2), (["-avx512f"], 4)])
def test_a_winograd_convs_padded_copy_is_split_by_rows(mattr, chunks, monkeypatch):
    from core.compiler.schedules import cpu_common
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver4", mattr=mattr)
    pad = loops_around(_conv_kernel_script(target, "winograd"), "winograd_pad")  # 16x16: F(4, 3)
    assert "T.parallel" in pad[0] and f"T.int64({18 * chunks})" in pad[0] and "T.vectorized" in pad[-1]
    monkeypatch.setattr(cpu_common, "PARALLEL_PADDING", False)
    assert not any("T.parallel" in loop for loop in loops_around(_conv_kernel_script(target, "winograd"), "winograd_pad"))


@pytest.mark.isa
@pytest.mark.parametrize("winograd", [False, True])
def test_conv_with_split_padding_matches_onnxruntime(winograd, monkeypatch):
    from core.compiler.passes.layout import winograd as winograd_module
    from core.compiler.target import make_target

    if not winograd:
        monkeypatch.setattr(winograd_module, "WINOGRAD_TILES", ())
    x = np.random.default_rng(4).standard_normal((1, 32, 16, 16)).astype(np.float32)
    vm_matches_onnxruntime(_conv_model(), make_target("cpu"), x, runs=3, rtol=RTOL, atol=ATOL)  # any rows of the copy to the worker
