"""Depthwise convs and squeeze-excitation blocks in channel-blocked layout (core.compiler.passes.layout.nchwc's
depthwise path, core.compiler.schedules.cpu_depthwise_nchwc): inverted-residual blocks as mobile
networks write them (1x1 expand, depthwise 3x3 / 5x5 stride 1 / 2, ReLU6 as Clip, SiLU, HardSwish,
squeeze-excitation with a HardSigmoid or Sigmoid gate, 1x1 project, residual add) stay blocked end
to end, every config of the rule's template space computes the same, and results match
onnxruntime with 8-channel blocks (AVX2 code, runs on any x86-64 host with AVX2) and on this host;
the 16-channel (AVX-512) code is checked by codegen only."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4


def _w(rng, name, shape, scale=1.0):
    return numpy_helper.from_array((scale * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _mobile_block_model(act: str = "relu6", se: str | None = "hardsigmoid", size: int = 14, channels: int = 16, hidden: int = 48) -> onnx.ModelProto:
    """stem 1x1 conv -> [expand 1x1, act, depthwise 3x3, act, SE, project 1x1, + residual]
    -> depthwise 5x5 stride 2, act -> 1x1 -> GlobalAveragePool -> Flatten (the head leaves the
    blocked layout). `act`: relu6 (Clip with constant bounds), silu, hardswish."""
    rng = np.random.default_rng(11)
    c, h = channels, hidden
    squeeze = 12  # neither 8 nor 16 divides it: the squeeze conv's output on a 1x1 map
    inits = [
        _w(rng, "w_stem", (c, 8, 1, 1)), _w(rng, "b_stem", (c,), 0.1),
        _w(rng, "w_exp", (h, c, 1, 1)), _w(rng, "b_exp", (h,), 0.1),
        _w(rng, "w_dw", (h, 1, 3, 3)), _w(rng, "b_dw", (h,), 0.1),
        _w(rng, "w_sq", (squeeze, h, 1, 1)), _w(rng, "b_sq", (squeeze,), 0.1),
        _w(rng, "w_ex", (h, squeeze, 1, 1)), _w(rng, "b_ex", (h,), 0.1),
        _w(rng, "w_proj", (c, h, 1, 1)), _w(rng, "b_proj", (c,), 0.1),
        _w(rng, "w_dw2", (c, 1, 5, 5)), _w(rng, "b_dw2", (c,), 0.1),
        _w(rng, "w_out", (32, c, 1, 1)),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w_stem", "b_stem"], ["s"], kernel_shape=[1, 1])]

    def activate(name):
        if act == "relu6":
            nodes.append(helper.make_node("Clip", [name, "lo", "hi"], [name + "_a"]))
        elif act == "silu":
            nodes.extend([helper.make_node("Sigmoid", [name], [name + "_g"]), helper.make_node("Mul", [name, name + "_g"], [name + "_a"])])
        else:
            nodes.append(helper.make_node("HardSwish", [name], [name + "_a"]))
        return name + "_a"

    nodes.append(helper.make_node("Conv", ["s", "w_exp", "b_exp"], ["e"], kernel_shape=[1, 1]))
    e = activate("e")
    nodes.append(helper.make_node("Conv", [e, "w_dw", "b_dw"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=h))
    d = activate("d")
    if se:
        nodes += [
            helper.make_node("GlobalAveragePool", [d], ["p"]),
            helper.make_node("Conv", ["p", "w_sq", "b_sq"], ["q"], kernel_shape=[1, 1]),
            helper.make_node("Relu", ["q"], ["qr"]),
            helper.make_node("Conv", ["qr", "w_ex", "b_ex"], ["g"], kernel_shape=[1, 1]),
            helper.make_node("HardSigmoid", ["g"], ["gs"]) if se == "hardsigmoid" else helper.make_node("Sigmoid", ["g"], ["gs"]),
            helper.make_node("Mul", [d, "gs"], ["dse"]),
        ]
        d = "dse"
    nodes += [
        helper.make_node("Conv", [d, "w_proj", "b_proj"], ["pr"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["pr", "s"], ["r"]),
        helper.make_node("Conv", ["r", "w_dw2", "b_dw2"], ["d2"], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[2, 2], group=c),
    ]
    d2 = activate("d2")
    nodes += [
        helper.make_node("Conv", [d2, "w_out"], ["o"], kernel_shape=[1, 1]),
        helper.make_node("GlobalAveragePool", ["o"], ["op"]),
        helper.make_node("Flatten", ["op"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "mobile_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _save(model) -> str:
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


def _avx2_target():
    """8-channel blocks: AVX2 code (runs on AVX-512 hosts too)."""
    from core.compiler.target import host_cpu, make_target

    return make_target("cpu", mcpu=host_cpu(), mattr=["-avx512f"])


def _conv_layouts(mod) -> list[tuple[int, str]]:
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            found.append((int(expr.attrs.groups), str(expr.attrs.out_layout)))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


@pytest.mark.parametrize("mcpu,mattr,block", [("znver4", None, 16), ("znver4", ["-avx512f"], 8), ("znver3", None, 8)])
@pytest.mark.parametrize("act,se", [("relu6", "hardsigmoid"), ("hardswish", "hardsigmoid"), ("silu", "sigmoid")])
def test_mobile_block_is_blocked_end_to_end(mcpu, mattr, block, act, se):
    """Codegen-free (any host): every conv, the depthwise ones and the squeeze conv with its 12
    outputs included, takes the blocked layout; the only layout transform is the model's
    input (entering; the pooled head leaves as a reshape): none around Clip, HardSwish's / 6,
    the SE gate's broadcast multiply."""
    from core.compiler.target import make_target

    mod = relax_through(_mobile_block_model(act, se), make_target("cpu", mcpu=mcpu, mattr=mattr), "ConvertLayoutNCHWc")
    layouts = _conv_layouts(mod)
    assert len(layouts) == 8
    assert [g for g, _ in layouts].count(1) == 6
    for groups, out_layout in layouts:
        assert re.fullmatch(r"NCHW(\d+)c", out_layout), layouts
        if groups > 1:
            assert out_layout == f"NCHW{block}c"
    # the squeeze conv: 12 outputs on a 1x1 map, blocked by the widest divisor within the block
    assert (1, f"NCHW{12 if block == 16 else 6}c") in layouts
    text = mod["main"].script(show_meta=False)
    # the pooled head leaves as a reshape (a view: NCHW{b}c of a 1x1 map is NCHW's memory order)
    assert text.count("R.layout_transform(") == 1, text
    assert re.search(r"R\.reshape\(op, R\.shape\(\[1, 32, 1, 1\]\)\)", text), text


def test_depthwise_alone_stays_nchw():
    """A model of depthwise convs alone has no dense conv to anchor a blocked region: it keeps
    cpu_depthwise's NCHW rule (which blocks channels inside each kernel) and no transforms."""
    from core.compiler.target import make_target

    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=32)],
        "dw_alone",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])],
        [_w(rng, "w", (32, 1, 3, 3))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = relax_through(model, make_target("cpu", mcpu="znver4"), "ConvertLayoutNCHWc")
    assert _conv_layouts(mod) == [(32, "NCHW")]
    assert "layout_transform" not in mod["main"].script(show_meta=False)


def _rules_used(mod, target) -> dict[str, str]:
    import tvm

    from core.compiler.schedules import schedule_cpu_func, with_root_block

    used = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            _, rule = schedule_cpu_func(with_root_block(func), target)
            used[gvar.name_hint] = rule
    return used


def _run_pipeline(model, target, x):
    import tvm
    from tvm import relax

    mod = relax_through(model, target, "VMFinalize")
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("act,se", [("relu6", "hardsigmoid"), ("silu", "sigmoid")])
def test_blocked_mobile_block_matches_onnxruntime_avx2(act, se):
    """8-channel blocks (AVX2 code, runs on any host with AVX2), the whole pipeline, against onnxruntime;
    the depthwise kernels are this rule's."""
    model = _mobile_block_model(act, se)
    target = _avx2_target()
    fused = relax_through(model, target, "DeadCodeElimination")
    used = _rules_used(fused, target)
    dw = {name: rule for name, rule in used.items() if "depthwise_conv2d_NCHWc" in name}
    assert len(dw) == 2 and set(dw.values()) == {"cpu.DepthwiseConv2dNCHWc"}, used
    pools = {name: rule for name, rule in used.items() if name.startswith("mean")}
    assert pools and set(pools.values()) == {"cpu.GlobalPoolNCHWc"}, used  # the SE squeeze's and the head's
    x = np.random.default_rng(4).standard_normal((1, 8, 14, 14)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(_run_pipeline(model, target, x), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("size", [10, 56])
def test_blocked_mobile_block_matches_onnxruntime_on_this_host(size):
    """The same for this host's own ISA (16-channel blocks on AVX-512 hosts), HardSwish + HardSigmoid;
    at 56x56 the depthwise convs split bands of rows first, and the 1x1 convs rows first."""
    from core.compiler.target import make_target

    model = _mobile_block_model("hardswish", "hardsigmoid", size=size)
    x = np.random.default_rng(5).standard_normal((1, 8, size, size)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(_run_pipeline(model, make_target("cpu"), x), ref, rtol=RTOL, atol=ATOL)


def _depthwise_kernel(target, size=14, channels=32, k=3, stride=1, act="silu"):
    """The fused depthwise kernel (conv + bias + act) of a 1x1 -> depthwise -> 1x1 model, as the
    pipeline hands it to the schedule rules."""
    rng = np.random.default_rng(9)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["a", "w1", "b1"], ["d"], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride], group=channels),
    ]
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", ["d"], ["g"]), helper.make_node("Mul", ["d", "g"], ["da"])]
    else:
        nodes.append(helper.make_node("Relu", ["d"], ["da"]))
    nodes.append(helper.make_node("Conv", ["da", "w2"], ["y"], kernel_shape=[1, 1]))
    out = (size + 2 * (k // 2) - k) // stride + 1
    graph = helper.make_graph(
        nodes, "dw_kernel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, out, out])],
        [_w(rng, "w0", (channels, 16, 1, 1)), _w(rng, "w1", (channels, 1, k, k)), _w(rng, "b1", (channels,), 0.1), _w(rng, "w2", (16, channels, 1, 1))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = relax_through(model, target, "DeadCodeElimination")
    import tvm

    (func,) = [f for g, f in mod.functions_items() if "depthwise_conv2d_NCHWc" in g.name_hint and isinstance(f, tvm.tirx.PrimFunc)]
    return func


@pytest.mark.parametrize("size,k,stride", [(14, 3, 1), (14, 5, 2), (7, 3, 1), (56, 3, 2)])
def test_every_config_of_the_template_space_computes_the_same(size, k, stride):
    """Each of the rule's candidates (tiles, padding placement, kw unrolling, bands of rows or
    channel blocks first) builds and gives the default's result on the same inputs (8-channel
    blocks: runs on any AVX2 host)."""
    import tvm

    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc

    target = _avx2_target()
    func = _depthwise_kernel(target, size=size, k=k, stride=stride)
    rule = DepthwiseConv2dNCHWc()
    configs = rule.candidates(func, target)
    assert len(configs) >= 4 and len({str(c) for c in configs}) == len(configs)
    assert {c["pad"] for c in configs} == {"inline", "plane", "root"}
    rng = np.random.default_rng(1)
    args = [np.asarray(rng.standard_normal([int(s) for s in p.shape]), dtype=str(p.dtype)) for p in func.params]
    results = []
    for config in configs:
        sch = rule.apply(func, target, config)
        lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target)
        tensors = [tvm.runtime.tensor(a.copy()) for a in args]
        lib["main"](*tensors)
        results.append(tensors[-1].numpy())
    for config, result in zip(configs[1:], results[1:]):
        np.testing.assert_allclose(result, results[0], rtol=1e-5, atol=1e-6, err_msg=str(config))
    with pytest.raises(ValueError):
        rule.apply(func, target, {**configs[0], "t": size + 1})


@pytest.mark.parametrize(
    "size,k,stride,pad", [(14, 3, 1, "inline"), (28, 3, 2, "inline"), (14, 5, 2, "inline"), (15, 3, 2, "inline"), (14, 5, 1, "plane"), (28, 3, 1, "plane")]
)
def test_default_reads_the_padding_in_place_at_stride_2_and_for_small_3x3(size, k, stride, pad):
    """The padded copy is left out (the conv reads its input, zero outside it) at stride 2 and
    for 3x3 kernels on rows of 14 or less; a 5x5 stride-1 conv and (AVX2 code) a 3x3 one on wider
    rows keep the copy. The stride is read from the kernel's shapes."""
    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc

    target = _avx2_target()
    func = _depthwise_kernel(target, size=size, k=k, stride=stride)
    rule = DepthwiseConv2dNCHWc()
    assert rule.candidates(func, target)[0]["pad"] == pad
    text = rule.apply(func, target).mod["main"].script()
    assert ('sblock("pad_temp")' in text) == (pad != "inline")


@pytest.mark.parametrize("size,k,pad", [(28, 3, "inline"), (56, 3, "inline"), (14, 5, "plane")])
def test_avx512_reads_the_padding_of_any_3x3_in_place(size, k, pad):
    """Codegen-free: with AVX-512's 32 registers a 3x3 stride-1 conv on wide rows reads its
    padding in place too; a 5x5 one keeps the copy."""
    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver4")
    func = _depthwise_kernel(target, size=size, k=k, stride=1)
    assert DepthwiseConv2dNCHWc().candidates(func, target)[0]["pad"] == pad


def test_the_rule_is_a_template_for_tuning():
    """core.compiler.tuning.tune searches the rule's space (its record is keyed by the rule's name)."""
    from core.compiler.tuning.db import _template_rule

    assert _template_rule("cpu.DepthwiseConv2dNCHWc") is not None


def test_avx512_depthwise_code_uses_zmm_fmas():
    """Codegen only (any x86-64 host): with 16-channel blocks each tap is one zmm FMA of a weight
    vector and a contiguous input vector, no gathers, no per-lane inserts."""
    import tvm

    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver4")
    func = _depthwise_kernel(target, size=14, k=3, stride=1, act="relu")
    sch = DepthwiseConv2dNCHWc().apply(func, target)
    assert sch is not None
    lib = tvm.compile(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target)
    asm = "\n".join(m.inspect_source("asm") for m in [lib.mod, *lib.mod.imports] if m.kind == "llvm")
    fmas = re.findall(r"vfmadd\w+\s+[^\n]*zmm", asm)
    assert len(fmas) >= 9 * 7, len(fmas)  # 3x3 taps x a 7-column tile at least
    assert "vgather" not in asm and "vinsertps" not in asm


@pytest.mark.parametrize(
    "data,weight,groups,block,expected",
    [
        ((1, 48, 1, 1), (12, 48, 1, 1), 1, 16, ["NCHW16c", "OIHW16i12o", "NCHW12c"]),  # SE squeeze: odd output block
        ((1, 48, 1, 1), (12, 48, 1, 1), 1, 8, ["NCHW8c", "OIHW8i6o", "NCHW6c"]),
        ((1, 12, 1, 1), (24, 12, 1, 1), 1, 16, None),  # SE excite to 24: its output gates a 24-channel tensor
        ((1, 48, 7, 7), (12, 48, 1, 1), 1, 16, ["NCHW16c", "OIHW16i12o", "NCHW12c"]),  # a narrow projection (12 of 16)
        ((1, 48, 13, 13), (12, 48, 1, 1), 1, 16, None),  # ... on 13-wide rows: no register tile of 4-12 columns
        ((1, 48, 7, 7), (8, 48, 1, 1), 1, 16, None),  # 8 of 16: too narrow a block
        ((1, 48, 14, 14), (48, 1, 3, 3), 48, 16, ["NCHW16c", "OIHW1i16o", "NCHW16c"]),  # depthwise
        ((1, 24, 14, 14), (24, 1, 3, 3), 24, 16, None),  # depthwise, 16 does not divide 24
        ((1, 24, 14, 14), (24, 1, 3, 3), 24, 8, ["NCHW8c", "OIHW1i8o", "NCHW8c"]),
        ((1, 48, 14, 14), (48, 12, 3, 3), 4, 16, None),  # grouped, not depthwise
    ],
)
def test_conv_layouts(data, weight, groups, block, expected):
    from tvm import relax

    from core.compiler.passes.layout.nchwc import conv_layouts

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(data, "float32"))
    w = relax.Var("w", relax.TensorType(weight, "float32"))
    with bb.function("main", [x, w]):
        call = bb.normalize(relax.op.nn.conv2d(x, w, groups=groups, padding=[weight[2] // 2] * 4))
        bb.emit_func_output(bb.emit(call))
    layouts = conv_layouts(call, block)
    assert (layouts or {}).get("relax.nn.conv2d") == expected


@pytest.mark.parametrize(
    "name,mcpu,mattr,nchw_dense,nchw_depthwise,transforms",
    [
        # under 16c the 24-channel convs write NCHW12c and the 40/72/88/120-channel parts are
        # padded (channel_padding); the one transform left is the image's (the head: a reshape)
        ("mobilenet_v2", "znver4", None, 0, 0, 1),
        ("efficientnet_b0", "znver4", None, 0, 0, 1),
        ("mobilenet_v3_small", "znver4", None, 0, 0, 1),
        ("mobilenet_v3_small", "znver4", ["-avx512f"], 0, 0, 1),  # 8c: all of it
    ],
)
def test_mobile_architectures_are_blocked(name, mcpu, mattr, nchw_dense, nchw_depthwise, transforms):
    """Codegen-free (any host): the mobile architectures after ConvertLayoutNCHWc. Before the depthwise
    path every depthwise conv stayed NCHW (mobilenet_v2: 36 layout transforms at 16c) and
    mobilenet_v3_small stayed NCHW as a whole (HardSwish's scalar / 6 made 1 x 1 x 1 x 1:
    'Cannot broadcast from 5 to 4')."""
    from core.compiler.target import make_target
    from benchmarks.architectures import ARCHITECTURES

    mod = relax_through(ARCHITECTURES[name](), make_target("cpu", mcpu=mcpu, mattr=mattr), "ConvertLayoutNCHWc")
    layouts = _conv_layouts(mod)
    assert sum(g == 1 and out == "NCHW" for g, out in layouts) == nchw_dense
    assert sum(g > 1 and out == "NCHW" for g, out in layouts) == nchw_depthwise
    assert mod["main"].script(show_meta=False).count("R.layout_transform(") == transforms


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_in_blocked_layout_match_onnxruntime(pool):
    """A global pool of a blocked tensor (the SE squeeze, a classifier's pool) is the
    GlobalPoolNCHWc rule's, average and max alike, and matches onnxruntime (8c: any AVX2 host)."""
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c"], kernel_shape=[1, 1]),
        helper.make_node(pool, ["c"], ["p"]),
        helper.make_node("Conv", ["p", "w1"], ["q"], kernel_shape=[1, 1]),
        helper.make_node("Flatten", ["q"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 13, 11])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [_w(rng, "w0", (32, 8, 1, 1)), _w(rng, "w1", (16, 32, 1, 1))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    target = _avx2_target()
    used = _rules_used(relax_through(model, target, "DeadCodeElimination"), target)
    assert "cpu.GlobalPoolNCHWc" in used.values(), used
    x = np.random.default_rng(3).standard_normal((1, 8, 13, 11)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(_run_pipeline(model, target, x), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("act", ["silu", "hardswish"])
def test_blocked_conv_folds_a_tail_that_reads_it_twice(act):
    """The 1x1 expand conv of a mobile block in NCHW{b}c: SiLU's x * sigmoid(x) and HardSwish's
    x * clip(x + 3) / 6 read the conv's result twice; they are folded into the conv's write-back
    (no second pass over the output; it was 2.5x the time of the 16->96 channel 112x112 SiLU conv)."""
    import tvm

    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc

    target = _avx2_target()
    mod = relax_through(_mobile_block_model(act, None), target, "DeadCodeElimination")
    (func,) = [
        f for g, f in mod.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc) and g.name_hint.startswith("fused_conv2d_NCHWc") and "multiply" in g.name_hint
    ]
    text = Conv2dNCHWc().apply(func, target).mod["main"].script()
    assert 'sblock("T_multiply' not in text and 'sblock("compute' not in text, text
