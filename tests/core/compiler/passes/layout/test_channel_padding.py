"""core.compiler.passes.layout.channel_padding: convs whose output channels the NCHW{b}c block does not divide.

Such a conv (SqueezeNet's 1000-channel classifier) is padded to the next multiple of the block and
blocked; the padding is sliced off where the tensor leaves the blocked region, after the ReLU,
per-channel scale, pooling that treat channels one by one, before anything that mixes them
(flatten + softmax, a conv). The padded lanes carry non-zero values (the bias is padded with its
last channel's value), so a slice in the wrong place would change the outputs: the compiled
models are checked against onnxruntime (on this host's ISA; .ci/run runs this file again with
AVX2 code)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import relax_through


def _weight(rng, name, shape, scale=None):
    scale = scale if scale is not None else 1 / np.sqrt(np.prod(shape[1:]))
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _padded_model() -> onnx.ModelProto:
    """A 16-channel conv, then three heads on it: 1000 channels (1x1, bias, ReLU, per-channel Mul,
    max pool, global average pool, flatten, softmax), 300 channels (3x3, ReLU, per-channel Div,
    global pool, flatten), 18 channels (too few to pad) and 300 channels again (3x3, ReLU, then a
    1x1 conv back to 16 channels that reads all of them, global pool, flatten)."""
    rng = np.random.default_rng(11)
    inits = [
        _weight(rng, "w0", (16, 8, 3, 3)),
        _weight(rng, "wa", (1000, 16, 1, 1)), _weight(rng, "ba", (1000,), 0.5),
        numpy_helper.from_array((1 + 0.2 * rng.standard_normal((1000, 1, 1))).astype(np.float32), "sa"),
        _weight(rng, "wb", (300, 16, 3, 3)), _weight(rng, "bb", (300,), 0.5),
        numpy_helper.from_array((1 + 0.1 * rng.random((300, 1, 1))).astype(np.float32), "db"),
        _weight(rng, "we", (18, 16, 3, 3)),
        _weight(rng, "wc", (300, 16, 3, 3)), _weight(rng, "bc", (300,), 0.5),
        _weight(rng, "wd", (16, 300, 1, 1)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "wa", "ba"], ["ca"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["ca"], ["ra"]),
        helper.make_node("Mul", ["ra", "sa"], ["ma"]),
        helper.make_node("MaxPool", ["ma"], ["pa"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["pa"], ["ga"]),
        helper.make_node("Flatten", ["ga"], ["fa"]),
        helper.make_node("Softmax", ["fa"], ["ya"], axis=1),
        helper.make_node("Conv", ["r0", "wb", "bb"], ["cb"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["cb"], ["rb"]),
        helper.make_node("Div", ["rb", "db"], ["qb"]),
        helper.make_node("GlobalAveragePool", ["qb"], ["gb"]),
        helper.make_node("Flatten", ["gb"], ["yb"]),
        helper.make_node("Conv", ["r0", "we"], ["ce"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["ce"], ["ge"]),
        helper.make_node("Flatten", ["ge"], ["ye"]),
        helper.make_node("Conv", ["r0", "wc", "bc"], ["cc"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["cc"], ["rc"]),
        helper.make_node("Conv", ["rc", "wd"], ["cd"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["cd"], ["gd"]),
        helper.make_node("Flatten", ["gd"], ["yd"]),
    ]
    graph = helper.make_graph(
        nodes, "padded_heads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 14, 14])],
        [helper.make_tensor_value_info("ya", TensorProto.FLOAT, [1, 1000]),
         helper.make_tensor_value_info("yb", TensorProto.FLOAT, [1, 300]),
         helper.make_tensor_value_info("ye", TensorProto.FLOAT, [1, 18]),
         helper.make_tensor_value_info("yd", TensorProto.FLOAT, [1, 16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _convs(mod) -> list[tuple[int, str]]:
    """(output channels of the weight, output layout) of every conv2d."""
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            shape = [int(v) for v in expr.args[1].ty.shape]
            blocks = shape[5] if len(shape) == 6 else 1
            found.append((shape[0] * blocks, str(expr.attrs.out_layout)))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def _weight_shapes(mod) -> list[tuple[int, ...]]:
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            found.append(tuple(int(v) for v in expr.args[1].ty.shape))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def test_padded_channels():
    from core.compiler.passes.layout.channel_padding import padded_channels

    assert padded_channels(1000, 16) == 1008
    assert padded_channels(1000, 8) is None  # 8 divides 1000
    assert padded_channels(300, 16) == 304 and padded_channels(300, 8) == 304
    assert padded_channels(136, 16) == 144
    # fewer than 8 blocks: padded by at most a fifth (the mobile models' 40 / 72 / 88 / 120 channels)
    assert padded_channels(120, 16) == 128 and padded_channels(40, 16) == 48 and padded_channels(72, 16) == 80
    assert padded_channels(24, 16) is None and padded_channels(18, 8) is None and padded_channels(20, 16) is None
    assert padded_channels(64, 16) is None


@pytest.mark.parametrize("mattr,block", [(None, 16), (["-avx512f"], 8)])
def test_odd_output_channels_are_padded_and_blocked(mattr, block):
    """Codegen-free (any host): 1000 -> 1008 under 16-channel blocks, and under 8-channel blocks too
    (8 divides 1000 into 125 blocks: one more for two-block tiles, paired_channels), 300 -> 304
    under both; 18 stays NCHW. The slices that drop the padding come after the channel-wise ops,
    once the tensor is back in NCHW (1 x C x 1 x 1 after the global pool); the 1x1 conv reading a
    padded head reads all 304 channels, its weight zero-padded."""
    from core.compiler.target import make_target

    mod = relax_through(_padded_model(), make_target("cpu", mcpu="znver4", mattr=mattr), "ConvertLayoutNCHWc")
    convs = _convs(mod)
    blocked = f"NCHW{block}c"
    assert (1008, blocked) in convs
    assert convs.count((304, blocked)) == 2
    assert (18, "NCHW") in convs
    assert (16, blocked) in convs
    assert (16 // block, 304 // block, 1, 1, block, block) in _weight_shapes(mod), "the 1x1 conv reads 304 channels"
    text = mod["main"].script(show_meta=False)
    slices = [line for line in text.splitlines() if "R.strided_slice(" in line]
    assert len(slices) == 2, slices
    assert all(", 1, 1), dtype" in line for line in slices), slices


@pytest.mark.isa
@pytest.mark.slow
def test_padded_model_matches_onnxruntime():
    """Compiled for this host and verified against onnxruntime by compile_model (it raises on a
    mismatch); the padded convs run as the blocked kernel, attributed to their ONNX nodes."""
    import tempfile
    from pathlib import Path

    from core.compiler.compile import compile_model

    path = Path(tempfile.mkdtemp()) / "padded.onnx"
    onnx.save(_padded_model(), str(path))
    art = compile_model(str(path), "cpu", verify=True)
    convs = {name: nodes for name, nodes in art.kernel_lineage.items() if "conv2d_NCHWc" in name}
    assert len(convs) >= 3, list(art.kernel_lineage)
    # the padded convs keep their ONNX nodes (lineage follows binding names): bench puts their time on the graph
    assert all(convs.values()), convs
