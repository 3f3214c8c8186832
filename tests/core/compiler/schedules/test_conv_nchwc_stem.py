"""The channel-blocked conv rule on an image stem (3 input channels, NCHW3c, 3x3 stride 2, padded):
the conv reads its input in place, zero outside it, instead of a scalar padded copy first
(cpu_conv_nchwc.reads_padding_in_place). Which shapes take it (codegen only, both block widths),
and a stem with its HardSwish against onnxruntime on this run's ISA (the AVX2 pass of .ci/run
repeats it with 8-channel blocks)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4


@pytest.mark.parametrize(
    "lanes,in_block,out_channels,kernel,size,stride,expected",
    [
        (16, 3, 16, 3, 224, 2, True),  # mobilenet_v3_small's stem
        (16, 3, 32, 3, 224, 2, True),  # mobilenet_v2's, efficientnet_b0's
        (8, 3, 32, 3, 224, 2, True),  # the same with AVX2's 8-channel blocks
        (16, 3, 64, 3, 224, 1, False),  # VGG's stride-1 stem: the copy is shared by 4 blocks and 9 taps
        (16, 3, 64, 7, 224, 2, False),  # ResNet's 7x7 stem
        (16, 3, 64, 3, 224, 2, False),  # 64 outputs
        (16, 16, 16, 3, 56, 2, False),  # a full input block: its copy is vectorized
    ],
)
def test_which_convs_read_their_padding_in_place(lanes, in_block, out_channels, kernel, size, stride, expected):
    from core.compiler.schedules.cpu_conv_nchwc import reads_padding_in_place

    pad = kernel // 2
    out = (size + 2 * pad - kernel) // stride + 1
    extents = (1, out_channels // lanes, out, out, lanes, in_block, kernel, kernel)
    assert reads_padding_in_place(extents, in_block, lanes, size + 2 * pad) is expected
    assert reads_padding_in_place(extents, in_block, lanes, None) is False  # nothing to pad


def _stem_model(size: int = 32, out_channels: int = 16):
    """3 -> out_channels 3x3 stride 2 conv with bias, then HardSwish (mobilenet_v3_small's stem, smaller)."""
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array((rng.standard_normal((out_channels, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(out_channels) * 0.5).astype(np.float32), "b")
    out = size // 2
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
            helper.make_node("HardSwish", ["c"], ["y"]),
        ],
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, out, out])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_kernel(model, target):
    import tvm

    fused = relax_through(model, target, "DeadCodeElimination")
    (conv,) = [f for g, f in fused.functions_items() if "conv2d_NCHWc" in g.name_hint and isinstance(f, tvm.tirx.PrimFunc)]
    return conv


@pytest.mark.parametrize("mattr,rows", [(None, 2), (["-avx512f"], 1)])
def test_stem_reads_its_padding_in_place(mattr, rows):
    """Codegen only (any host): the default config reads in place, two rows a tile with AVX-512's
    32 registers, one with AVX2's 16; the scheduled kernel has no padded buffer; tuning also
    measures the copy."""
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver4", mattr=mattr)
    func = _conv_kernel(_stem_model(), target)
    assert any("pad" in b.name_hint for b in _blocks(func))
    candidates = Conv2dNCHWc().candidates(func, target)
    assert candidates[0]["inline_pad"] is True and candidates[0]["th"] == rows, candidates[0]
    assert any("inline_pad" not in c for c in candidates)
    scheduled = Conv2dNCHWc().apply(func, target)
    assert not any("pad" in b.name_hint for b in _blocks(scheduled.mod["main"]))


def _blocks(func):
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    found, todo = [], [sch.get_sblock("root")]
    while todo:
        block = todo.pop()
        found.append(sch.get(block))
        todo.extend(sch.get_child_blocks(block))
    return found


@pytest.mark.isa
def test_stem_matches_onnxruntime():
    """The border outputs read zeros where the window leaves the image."""
    import tvm
    from tvm import relax

    from core.compiler.target import make_target

    model, target = _stem_model(), make_target("cpu")
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)
