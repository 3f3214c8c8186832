"""core.compiler.passes.layout.winograd and schedules.cpu_winograd: 3x3 stride-1 convs by Winograd.

Which convs take it is checked on the legalized Relax module (no code run, any host); the
numbers through the real compile path against onnxruntime, on this host's ISA."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import relax_through


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _model(nodes, inits, x_shape, y_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "winograd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _mixed() -> onnx.ModelProto:
    """A 3x3 stride-1 conv of 32 -> 32 channels (Winograd) followed by a stride-2 3x3 conv, a
    grouped 3x3 conv and a 3x3 conv to 16 channels (all three direct)."""
    rng = np.random.default_rng(0)
    inits = [_weight(rng, "w0", (32, 32, 3, 3)), _weight(rng, "b0", (32,)), _weight(rng, "w1", (32, 32, 3, 3)),
             _weight(rng, "w2", (32, 8, 3, 3)), _weight(rng, "w3", (16, 32, 3, 3))]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Conv", ["c2", "w3"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    return _model(nodes, inits, [1, 32, 16, 16], [1, 16, 8, 8])


def _prim_funcs(mod) -> dict:
    import tvm

    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.parametrize("mcpu,mattr,block", [("znver4", None, 16), ("znver4", ["-avx512f"], 8)])
def test_only_qualifying_convs_take_winograd_with_the_weight_transformed_at_compile_time(mcpu, mattr, block):
    """Codegen-free: the stride-1 32-channel conv becomes one Winograd kernel whose weight is a
    constant already in the transformed [alpha, alpha, OC/b, IC, b] layout; the stride-2,
    grouped and 16-output convs stay direct; no kernel computes a weight transform."""
    from core.compiler.target import make_target

    mod = relax_through(_mixed(), make_target("cpu", mcpu=mcpu, mattr=mattr), "FuseTIR")
    funcs = _prim_funcs(mod)
    winograd = [n for n in funcs if "winograd" in n]
    assert len(winograd) == 1 and "winograd4" in winograd[0], list(funcs)
    assert sum("conv2d" in n and "winograd" not in n for n in funcs) == 3, list(funcs)
    # the bias and ReLU are fused into it; its weight parameter is the transformed constant
    func = funcs[winograd[0]]
    assert "add" in winograd[0] and "relu" in winograd[0]
    shapes = [[int(d) for d in p.shape] for p in func.params]
    assert [6, 6, 32 // block, 32, block] in shapes, shapes
    blocks = func.script(show_meta=False)
    assert "winograd_bgemm" in blocks and "G[" not in blocks
    # the default schedule has a rule for it (not the generic fallback)
    from core.compiler.schedules import schedule_cpu_func

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    from core.compiler.schedules import with_root_block

    assert schedule_cpu_func(with_root_block(func), target)[1] == "cpu.Conv2dWinogradNCHWc"
    consts = []

    from tvm import relax

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", None) == "relax.call_tir" and "winograd" in e.args[0].name_hint:
            consts.extend(a for a in e.args[1].fields if type(a).__name__ in ("GenericConst", "Constant"))

    relax.analysis.post_order_visit(mod["main"], visit)
    shapes = [list(c.value.numpy().shape) for c in consts]
    # the transformed weight and the bias; not the 3x3 weight itself
    assert sorted(shapes) == sorted([[6, 6, 32 // block, 32, block], [1, 32 // block, 1, 1, block]]), shapes


def test_transformed_weight_reproduces_the_direct_convolution():
    """transform_weight's U with TOPI's A and B gives the direct conv's output on one tile (numpy)."""
    from core.compiler.passes.layout.winograd import transform_matrices, transform_weight

    rng = np.random.default_rng(1)
    for m in (2, 4):
        A, B, _ = transform_matrices(m)
        w = rng.standard_normal((1, 2, 3, 3, 4, 4)).astype(np.float32)  # OIHW4i4o: 8 -> 4 channels
        u = transform_weight(w, m).astype(np.float64)  # [alpha, alpha, 1, 8, 4]
        g = w.astype(np.float64).transpose(0, 5, 1, 4, 2, 3).reshape(4, 8, 3, 3)
        d = rng.standard_normal((8, m + 2, m + 2))
        v = np.einsum("ae,cab,bn->enc", B, d, B)
        y = np.einsum("ej,enk,nl->kjl", A, np.einsum("enc,enck->enk", v, u[:, :, 0]), A)
        direct = np.array([[[np.sum(g[k] * d[:, i:i + 3, j:j + 3]) for j in range(m)] for i in range(m)] for k in range(4)])
        np.testing.assert_allclose(y, direct, rtol=1e-4, atol=1e-4)


@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("size", [8, 13])
def test_winograd_convs_match_onnxruntime(size):
    """Conv+bias+ReLU then a conv with no padding, compiled for this host and compared with
    onnxruntime: at 8x8 F(4,3) (8x8, padded) then F(2,3) (8x8 -> 6x6); at 13x13, whose sides no
    tile divides, F(2,3) over 14x14 then F(4,3) over 12x12 (13 -> 11), the extra outputs dropped."""
    import tempfile
    from pathlib import Path

    import onnxruntime as ort

    from core.compiler.compile import compile_model

    rng = np.random.default_rng(2)
    inits = [_weight(rng, "w0", (32, 32, 3, 3)), _weight(rng, "b0", (32,)), _weight(rng, "w1", (48, 32, 3, 3))]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    model = _model(nodes, inits, [1, 32, size, size], [1, 48, size - 2, size - 2])
    path = Path(tempfile.mkdtemp()) / "model.onnx"
    onnx.save(model, str(path))
    art = compile_model(str(path), "cpu", verify=True)
    names = [n for n in art.kernel_lineage if "conv2d" in n]
    assert any("winograd4" in n for n in names) and any("winograd2" in n for n in names), names
    x = rng.standard_normal((1, 32, size, size)).astype(np.float32)
    ours = art.run({"x": x})[0]
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def _blocked_conv(channels: int, size: int, block: int, stride: int = 1, out_channels: int | None = None):
    """A normalized relax conv2d call in NCHW{block}c with a constant OIHW{block}i{block}o weight."""
    from tvm import relax

    out_channels = out_channels or channels
    x = relax.Var("x", relax.TensorType((1, channels // block, size, size, block), "float32"))
    w = relax.const(np.zeros((out_channels // block, channels // block, 3, 3, block, block), np.float32))
    call = relax.op.nn.conv2d(x, w, strides=stride, padding=1, data_layout=f"NCHW{block}c",
                              kernel_layout=f"OIHW{block}i{block}o", out_layout=f"NCHW{block}c")
    return relax.BlockBuilder().normalize(call)


@pytest.mark.parametrize(
    "channels,size,block,stride,tile",
    [
        (64, 56, 16, 1, 4), (512, 28, 16, 1, 4), (256, 14, 16, 1, 2),
        (64, 14, 16, 1, 2),  # 4x4 tiles would cover 16 x 16 (1.31x the outputs): 2x2 ones
        (64, 54, 16, 1, 4), (64, 27, 16, 1, 4),  # a last row of tiles covers 56 / 28 (1.08x)
        (64, 13, 16, 1, 2),  # 14 x 14 (1.16x) with 2x2 tiles; 16 x 16 is 1.51x
        (16, 56, 16, 1, None),  # too few channels
        (64, 56, 16, 2, None),  # strided
        (64, 56, 8, 1, 4), (64, 14, 8, 1, 2),  # AVX2 blocks
        (64, 7, 16, 1, None),  # 8 x 8 is 1.31x the outputs with either tile
    ],
)
def test_tile_rule(channels, size, block, stride, tile):
    from core.compiler.passes.layout.winograd import winograd_tile

    assert winograd_tile(_blocked_conv(channels, size, block, stride), block) == tile


@pytest.mark.parametrize("size,tile", [(56, 4), (55, 4), (14, None)])
def test_sixteen_input_channels_take_only_four_by_four_tiles(size, tile):
    """SqueezeNet's 16 -> 64 expand convs: F(4,3) pays from 16 input channels, F(2,3) does not."""
    from core.compiler.passes.layout.winograd import winograd_tile

    assert winograd_tile(_blocked_conv(16, size, 16, out_channels=64), 16) == tile
