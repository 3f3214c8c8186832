"""An inverted-residual block with squeeze-excitation (MobileNetV3's: 1x1 expand + HardSwish,
depthwise 3x3 + HardSwish, SE with HardSigmoid, 1x1 project + residual add) whose 40 expanded
channels the 16-channel block does not divide: core.compiler.passes.layout.channel_padding pads them to 48 and
the padding runs on through the depthwise conv and the SE block, so the whole block stays in
NCHW16c (before, the 40-channel part was NCHW with a layout transform at each end). Random
weights; the numbers are checked against onnxruntime through the real compile path."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4


def _w(rng, name, shape, scale=1.0):
    return numpy_helper.from_array((scale * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _mobile_block(size: int = 14, channels: int = 16, expanded: int = 40, squeezed: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(19)
    c, e, q = channels, expanded, squeezed
    nodes = [
        helper.make_node("Conv", ["x", "w_ex", "b_ex"], ["ex"], kernel_shape=[1, 1]),
        helper.make_node("HardSwish", ["ex"], ["exa"]),
        helper.make_node("Conv", ["exa", "w_dw", "b_dw"], ["dw"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=e),
        helper.make_node("HardSwish", ["dw"], ["dwa"]),
        helper.make_node("GlobalAveragePool", ["dwa"], ["p"]),
        helper.make_node("Conv", ["p", "w_sq", "b_sq"], ["sq"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["sq"], ["sqa"]),
        helper.make_node("Conv", ["sqa", "w_se", "b_se"], ["se"], kernel_shape=[1, 1]),
        helper.make_node("HardSigmoid", ["se"], ["gate"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["dwa", "gate"], ["scaled"]),
        helper.make_node("Conv", ["scaled", "w_pr", "b_pr"], ["pr"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["pr", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mobile_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, size, size])],
        [
            _w(rng, "w_ex", (e, c, 1, 1)), _w(rng, "b_ex", (e,), 0.5),
            _w(rng, "w_dw", (e, 1, 3, 3)), _w(rng, "b_dw", (e,), 0.5),
            _w(rng, "w_sq", (q, e, 1, 1)), _w(rng, "b_sq", (q,), 0.1),
            _w(rng, "w_se", (e, q, 1, 1)), _w(rng, "b_se", (e,), 0.1),
            _w(rng, "w_pr", (c, e, 1, 1)), _w(rng, "b_pr", (c,), 0.1),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inverted_residual(size: int = 28, channels: int = 24, expanded: int = 144) -> onnx.ModelProto:
    """MobileNetV2's block on its 24-channel stage: 1x1 expand + ReLU6, depthwise 3x3 + ReLU6,
    1x1 project back to 24 channels + residual add."""
    rng = np.random.default_rng(23)
    c, e = channels, expanded
    nodes = [
        helper.make_node("Conv", ["x", "w_ex", "b_ex"], ["ex"], kernel_shape=[1, 1]),
        helper.make_node("Clip", ["ex", "lo", "hi"], ["exa"]),
        helper.make_node("Conv", ["exa", "w_dw", "b_dw"], ["dw"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=e),
        helper.make_node("Clip", ["dw", "lo", "hi"], ["dwa"]),
        helper.make_node("Conv", ["dwa", "w_pr", "b_pr"], ["pr"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["pr", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "inverted_residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, size, size])],
        [
            _w(rng, "w_ex", (e, c, 1, 1)), _w(rng, "b_ex", (e,), 0.5),
            _w(rng, "w_dw", (e, 1, 3, 3)), _w(rng, "b_dw", (e,), 0.5),
            _w(rng, "w_pr", (c, e, 1, 1)), _w(rng, "b_pr", (c,), 0.1),
            numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _convs(mod) -> list[tuple[int, int, str]]:
    """(groups, output channels, output layout) of every conv2d in main."""
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            shape = [int(v) for v in expr.args[1].ty.shape]
            found.append((int(expr.attrs.groups), shape[0] * (shape[5] if len(shape) == 6 else 1), str(expr.attrs.out_layout)))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.mark.parametrize("mattr,block,expanded", [(None, 16, 48), (["-avx512f"], 8, 40)])
def test_the_whole_block_stays_channel_blocked(mattr, block, expanded):
    """Codegen-free (any host): with 16-channel blocks the 40 expanded channels become 48 in the
    expand conv, the depthwise conv (48 groups), the SE convs and the project conv's input, and
    the only layout transforms left are the block's input and output; with 8-channel blocks
    nothing needs padding."""
    from core.compiler.target import make_target

    mod = relax_through(_mobile_block(), make_target("cpu", mcpu="znver4", mattr=mattr), "ConvertLayoutNCHWc")
    convs = _convs(mod)
    blocked = f"NCHW{block}c"
    assert all(layout == blocked for _, _, layout in convs), convs
    assert (expanded, expanded, blocked) in convs, "the depthwise conv, padded"
    assert sum(out == expanded for _, out, _ in convs) == 3, convs  # expand, depthwise, excite
    text = mod["main"].script(show_meta=False)
    assert text.count("R.layout_transform(") == 2, text
    assert "R.strided_slice(" not in text  # the padding is never sliced off inside the block


@pytest.mark.parametrize("size,project_layout", [(28, "NCHW12c"), (13, "NCHW")])
def test_a_24_channel_projection_writes_12_channel_blocks(size, project_layout):
    """Codegen-free (any host): under 16-channel blocks the project conv to 24 channels writes
    NCHW12c, what the expand conv reading it asks for, so the stage has no transform inside;
    on 13-wide rows (no register tile of 4-12 columns) it stays NCHW."""
    from core.compiler.target import make_target

    mod = relax_through(_inverted_residual(size), make_target("cpu", mcpu="znver4"), "ConvertLayoutNCHWc")
    convs = _convs(mod)
    assert convs[-1][1:] == (24, project_layout), convs
    transforms = [line for line in mod["main"].script(show_meta=False).splitlines() if "R.layout_transform(" in line]
    # the block's input in, and its output out (NCHW12c) or the 144 channels into the NCHW conv
    assert len(transforms) == 2, transforms
    assert any("R.Tensor((1, 144, " in line for line in transforms) == (project_layout == "NCHW"), transforms


@pytest.mark.isa
@pytest.mark.parametrize("block", ["se", "inverted_residual"])
def test_mobile_block_matches_onnxruntime(block):
    """Built for this host (and in CI's AVX2 pass for AVX2) and run against onnxruntime."""
    import tvm
    from tvm import relax

    from core.compiler.target import make_target

    model = _mobile_block() if block == "se" else _inverted_residual()
    channels, size = (16, 14) if block == "se" else (24, 28)
    x = np.random.default_rng(8).standard_normal((1, channels, size, size)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    target = make_target("cpu")
    mod = relax_through(model, target, "VMFinalize")
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)


def test_layout_transforms_that_move_nothing_are_reshapes():
    """NCHW{b}c <-> NCHW on a 1 x 1 map and NCHW -> NCHW1c keep every element in place; on a
    larger map, or padded, they do not."""
    from tvm import tirx

    from core.compiler.passes.layout.nchwc import is_reshape_map

    to_nchw = tirx.IndexMap.from_func(lambda n, c, h, w, b: (n, c * 16 + b, h, w))
    to_blocked = tirx.IndexMap.from_func(lambda n, c, h, w: (n, c // 16, h, w, c % 16))
    to_1c = tirx.IndexMap.from_func(lambda n, c, h, w: (n, c, h, w, c % 1))
    assert is_reshape_map([1, 4, 1, 1, 16], to_nchw)
    assert is_reshape_map([1, 64, 1, 1], to_blocked)
    assert is_reshape_map([1, 3, 8, 8], to_1c)
    assert not is_reshape_map([1, 4, 2, 2, 16], to_nchw)
    assert not is_reshape_map([1, 64, 2, 1], to_blocked)
    assert not is_reshape_map([1, 64, 1, 1], to_blocked, pad_value=0.0)
