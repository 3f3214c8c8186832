"""core.compiler.schedules.cpu_depthwise and the plane reductions of cpu_generic: depthwise convs in both forms (row vectors,
channel blocks), odd sizes, strides 1/2, asymmetric padding, the epilogues mobile networks fuse
(SiLU, hardswish, ReLU6, residual add), pools and squeeze-excitation blocks, all against
onnxruntime; the code each ISA gets."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_schedules import _fused, _kernel_assembly
from tests.helpers import ort_run

RTOL, ATOL = 1e-3, 1e-4

# (channels, size, kernel, stride, pads, activation, residual, dilation): each a kernel of its own
CASES = [
    (6, 37, 3, 1, [1, 1, 1, 1], "silu", False, 1),  # row form (no vector divides 6), odd width
    (6, 38, 3, 2, [1, 1, 1, 1], "relu6", False, 1),  # row form, stride 2, even padded width: de-interleaved
    (6, 37, 5, 2, [2, 2, 2, 2], "hardswish", False, 1),  # row form, stride 2, odd padded width: strided loads
    (6, 40, 3, 1, [1, 1, 1, 1], "relu", True, 1),  # row form, residual add in the write-back
    (32, 9, 5, 1, [2, 2, 2, 2], "silu", False, 1),  # channel blocks, 9-wide rows
    (48, 30, 3, 2, [1, 1, 1, 1], "relu6", False, 1),  # channel blocks, stride 2
    (24, 14, 3, 1, [1, 1, 1, 1], "hardswish", True, 1),  # half-vector blocks with AVX-512 (24 = 8 x 3)
    (16, 17, 3, 2, [0, 0, 1, 1], "silu", False, 1),  # asymmetric ("same") padding, odd size
    (16, 12, 3, 1, [2, 2, 2, 2], "relu", False, 2),  # dilation: not this rule's (the generic conv rule)
]


def _depthwise_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    nodes, inits, inputs, outputs = [], [], [], []
    for i, (c, size, k, stride, pads, act, residual, dilation) in enumerate(CASES):
        x, y = f"x{i}", f"y{i}"
        inits.append(numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) / k).astype(np.float32), f"w{i}"))
        inits.append(numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), f"b{i}"))
        conv = f"conv{i}"
        nodes.append(
            helper.make_node(
                "Conv", [x, f"w{i}", f"b{i}"], [conv], group=c, kernel_shape=[k, k], pads=pads, strides=[stride, stride], dilations=[dilation, dilation]
            )
        )
        out = conv
        if act == "silu":
            nodes += [helper.make_node("Sigmoid", [conv], [f"s{i}"]), helper.make_node("Mul", [conv, f"s{i}"], [f"a{i}"])]
        elif act == "relu6":
            inits += [numpy_helper.from_array(np.array(0, np.float32), f"lo{i}"), numpy_helper.from_array(np.array(6, np.float32), f"hi{i}")]
            nodes.append(helper.make_node("Clip", [conv, f"lo{i}", f"hi{i}"], [f"a{i}"]))
        elif act == "hardswish":
            nodes.append(helper.make_node("HardSwish", [conv], [f"a{i}"]))
        else:
            nodes.append(helper.make_node("Relu", [conv], [f"a{i}"]))
        out = f"a{i}"
        if residual:
            nodes.append(helper.make_node("Add", [out, x], [f"r{i}"]))
            out = f"r{i}"
        nodes.append(helper.make_node("Identity", [out], [y]))
        inputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, size, size]))
        outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "depthwise_forms", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


@pytest.mark.isa
@pytest.mark.slow
def test_depthwise_forms_match_onnxruntime(target):
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_cpu_func, schedule_pass

    model = _depthwise_model()
    rng = np.random.default_rng(8)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32) for vi in model.graph.input}
    mod = _fused(model)
    used = {}
    for gvar, func in relax.transform.AttachAttrLayoutFreeBuffers()(mod).functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and "conv2d" in gvar.name_hint:
            used[gvar.name_hint] = schedule_cpu_func(func, target)[1]
    assert sorted(used.values()).count("cpu.DepthwiseConv2dNCHW") == len(CASES) - 1, used  # all but the dilated one

    with target:
        scheduled = schedule_pass(target)(mod)
    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    refs = ort_run(model, feeds)
    assert len(refs) == len(CASES)
    for case, got, ref in zip(CASES, ours, refs):
        np.testing.assert_allclose(got.numpy(), ref, rtol=RTOL, atol=ATOL, err_msg=str(case))


def test_form_and_tile_choices():
    from core.compiler.schedules.cpu_depthwise import (
        blocked_tile,
        row_chunk,
        use_blocked_form,
    )

    # small rows and strided convs: channel blocks, when a vector (or half, or a quarter) divides the channels
    assert use_blocked_form(1152, 7, 16) and use_blocked_form(96, 56, 16, stride=2) and use_blocked_form(72, 28, 16)
    assert not use_blocked_form(32, 112, 16) and not use_blocked_form(6, 7, 16)
    # a row in one chunk up to 8 vectors; longer rows in vector-multiple pieces
    assert row_chunk(112, 16) == 112 and row_chunk(112, 8) == 56 and row_chunk(300, 16) == 100
    # accumulator tiles fit the register file: 14 columns with AVX-512's 32 registers, 7 with 16
    assert blocked_tile(14, 32) == 14 and blocked_tile(14, 16) == 7 and blocked_tile(28, 16) == 7 and blocked_tile(7, 16) == 7


def _silu_depthwise_model(channels: int, size: int, stride: int) -> onnx.ModelProto:
    rng = np.random.default_rng(9)
    inits = [
        numpy_helper.from_array((rng.standard_normal((channels, 1, 3, 3)) / 3).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal(channels) * 0.1).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=channels, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
    ]
    out = (size - 1) // stride + 1
    graph = helper.make_graph(
        nodes,
        "dw_silu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, out, out])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("mcpu,mattr,wide", [("znver4", None, True), ("znver4", ["-avx512f"], False), ("znver3", None, False)])
@pytest.mark.parametrize("channels,size,stride", [(64, 14, 1), (16, 64, 1)])
def test_depthwise_code_fits_each_isa(mcpu, mattr, wide, channels, size, stride):
    """Codegen only (any x86-64 host): both forms use vector FMAs of the target's width, and the
    SiLU tail is vector arithmetic, not one libm expf call per lane."""
    from core.compiler.target import make_target

    asm = _kernel_assembly(_silu_depthwise_model(channels, size, stride), make_target("cpu", mcpu=mcpu, mattr=mattr), "conv2d")
    fmas = re.findall(r"vfmadd\w+\s+([^\n]*)", asm)
    assert len(fmas) >= 9, "no vector FMAs in the depthwise convolution"
    if wide:
        assert sum("%zmm" in operands for operands in fmas) >= len(fmas) // 2
    else:
        assert "%zmm" not in asm
    assert "expf" not in asm, "sigmoid calls libm's expf"


PLANES = [(8, 112, 112, "GlobalAveragePool"), (24, 14, 14, "GlobalAveragePool"), (40, 7, 7, "GlobalAveragePool"), (6, 9, 13, "GlobalMaxPool"), (5, 3, 3, "GlobalAveragePool")]


def _pool_model() -> onnx.ModelProto:
    """Squeeze-excitation squeezes (global average, max) on planes of several row lengths."""
    nodes, inputs, outputs = [], [], []
    for i, (c, h, w, op) in enumerate(PLANES):
        nodes.append(helper.make_node(op, [f"x{i}"], [f"y{i}"]))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, h, w]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, c, 1, 1]))
    graph = helper.make_graph(nodes, "plane_reductions", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.isa
@pytest.mark.slow
def test_plane_reductions_vectorized_and_match_onnxruntime(target):
    """Global pools: vector partial sums per row piece (rfactor), then the lanes summed."""
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_pass
    from core.compiler.schedules.cpu_generic import plane_reduction_width

    assert plane_reduction_width(112, 16) == 16 and plane_reduction_width(56, 16) == 14 and plane_reduction_width(7, 16) == 7
    assert plane_reduction_width(3, 16) is None and plane_reduction_width(13, 8) is None
    model = _pool_model()
    rng = np.random.default_rng(10)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32) for vi in model.graph.input}
    with target:
        scheduled = schedule_pass(target)(_fused(model))
    reductions = [f.script() for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    from core.compiler.target import vector_lanes

    # rows of 112, 14, 7 always; 13 with AVX-512's 16 lanes (a 13-lane vector), not with AVX2's 8; 3 never
    expected = sum(plane_reduction_width(w, vector_lanes(target)) is not None for _, _, w, _ in PLANES)
    assert sum("_rf" in text and "T.vectorized" in text for text in reductions) == expected >= 3
    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    for got, ref in zip(ours, ort_run(model, feeds)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-5)


POOL_CASES = [
    ("MaxPool", 24, 31, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # odd size
    ("AveragePool", 32, 28, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # divisor excludes the padding
    ("AveragePool", 16, 15, dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("MaxPool", 8, 20, dict(kernel_shape=[2, 2], strides=[2, 2])),  # no padding: the input copied to channel blocks
    ("AveragePool", 12, 17, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),  # 12 channels: 4-lane blocks
    ("MaxPool", 6, 9, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # 6: no vector divides, not this rule's
]


@pytest.mark.isa
@pytest.mark.slow
def test_pools_match_onnxruntime(target):
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_cpu_func, schedule_pass

    nodes, inputs, outputs = [], [], []
    for i, (op, c, size, attrs) in enumerate(POOL_CASES):
        nodes.append(helper.make_node(op, [f"x{i}"], [f"y{i}"], **attrs))
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, size, size]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    model = helper.make_model(helper.make_graph(nodes, "pools", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    rng = np.random.default_rng(11)
    feeds = {vi.name: rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32) for vi in model.graph.input}
    mod = _fused(model)
    rules = [schedule_cpu_func(f, target)[1] for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert rules.count("cpu.Pool2dNCHW") == len(POOL_CASES) - 1, rules
    with target:
        scheduled = schedule_pass(target)(mod)
    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    ours = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    for case, got, ref in zip(POOL_CASES, ours, ort_run(model, feeds)):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=str(case))


@pytest.mark.isa
@pytest.mark.slow
def test_squeeze_excitation_block_matches_onnxruntime(target):
    """GlobalAveragePool -> 1x1 conv -> Relu -> 1x1 conv -> HardSigmoid -> Mul on a 7x7 plane:
    the gate's broadcast multiply over 7-wide rows is vectorized whole (no vector width divides 7)."""
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_pass

    rng = np.random.default_rng(12)
    c, squeeze = 48, 16
    inits = [
        numpy_helper.from_array((rng.standard_normal((squeeze, c, 1, 1)) / np.sqrt(c)).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(squeeze) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((c, squeeze, 1, 1)) / 4).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Conv", ["g", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r"]),
        helper.make_node("Conv", ["r", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("HardSigmoid", ["c2"], ["s"], alpha=1.0 / 6, beta=0.5),
        helper.make_node("Mul", ["s", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 7, 7])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 7, 7])], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.standard_normal((1, c, 7, 7)).astype(np.float32)}
    with target:
        scheduled = schedule_pass(target)(_fused(model))
    texts = {g.name_hint: f.script() for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    (gate,) = [text for name, text in texts.items() if "multiply" in name]
    assert "T.vectorized(T.int64(7))" in gate, gate
    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(feeds["x"])).numpy()
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
