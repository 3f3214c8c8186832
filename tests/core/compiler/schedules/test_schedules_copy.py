"""Data movement on the CPU (cpu_copy.DataMovement): channel shuffles, attention-head splits and key
transposes are rebuilt as one copy with simplified indices, compute what onnxruntime computes, and
copy by vectors of the target's width (codegen only: any x86-64 host); a transpose no vector width
fits is left to the generic rule."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_schedules import _compile_and_run, _fused, _rules_used
from tests.helpers import ort_run


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def _copy_model(in_shape, steps, out_shape) -> object:
    """x -> (Reshape | Transpose)* -> y; `steps` as ("reshape", shape) / ("transpose", perm)."""
    nodes, inits, last = [], [], "x"
    for k, (kind, arg) in enumerate(steps):
        out = f"s{k}"
        if kind == "reshape":
            inits.append(numpy_helper.from_array(np.array(arg, np.int64), f"shape{k}"))
            nodes.append(helper.make_node("Reshape", [last, f"shape{k}"], [out]))
        else:
            nodes.append(helper.make_node("Transpose", [last], [out], perm=list(arg)))
        last = out
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(
        nodes,
        "copy",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _shuffle_model(channels=240, groups=3, side=28):
    shape = (1, channels, side, side)
    steps = [("reshape", (1, groups, channels // groups, side, side)), ("transpose", (0, 2, 1, 3, 4)), ("reshape", shape)]
    return _copy_model(shape, steps, shape)


def _heads_model(tokens=197, heads=3, size=64):
    steps = [("reshape", (1, tokens, heads, size)), ("transpose", (0, 2, 1, 3))]
    return _copy_model((1, tokens, heads * size), steps, (1, heads, tokens, size))


def _check(model, target, expected_rule: str):
    mod = _fused(model)
    used = _rules_used(mod, target)
    copies = [rule for name, rule in used.items() if "transpose" in name or "reshape" in name]
    assert copies and all(rule == expected_rule for rule in copies), used
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(11).standard_normal(shape).astype(np.float32)}
    scheduled, ours = _compile_and_run(mod, feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_array_equal(ours, ref)  # a copy: bit for bit
    if expected_rule == "cpu.DataMovement":
        assert "T.vectorized" in scheduled.script()


@pytest.mark.isa
@pytest.mark.parametrize("channels,groups,side", [(240, 3, 28), (116, 2, 7), (24, 4, 5)])
def test_channel_shuffle_is_one_vector_copy_and_matches_onnxruntime(target, channels, groups, side):
    """Planes of 784, 49 and 25 floats: whole vectors, a scalar tail, and a plane shorter than a vector."""
    _check(_shuffle_model(channels, groups, side), target, "cpu.DataMovement")


@pytest.mark.isa
def test_attention_heads_split_matches_onnxruntime(target):
    _check(_heads_model(), target, "cpu.DataMovement")


@pytest.mark.isa
@pytest.mark.parametrize("tokens,heads,size", [(128, 4, 64), (197, 3, 64), (50, 2, 20)])
def test_keys_transposed_for_attention_match_onnxruntime(target, tokens, heads, size):
    """[tokens, heads x size] -> [heads, size, tokens]: vectors along the tokens (128), along the
    head size where no width divides the tokens (197 with 64, 50 with 20)."""
    steps = [("reshape", (1, tokens, heads, size)), ("transpose", (0, 2, 3, 1))]
    _check(_copy_model((1, tokens, heads * size), steps, (1, heads, size, tokens)), target, "cpu.DataMovement")


@pytest.mark.isa
@pytest.mark.parametrize("tokens,heads,size,padded", [(197, 3, 64, 208), (37, 2, 16, 48)])
def test_keys_transposed_and_padded_for_attention_match_onnxruntime(target, tokens, heads, size, padded):
    """The keys as core.compiler.passes.pad_attention pads them ([tokens, heads x size] -> [heads, size,
    padded tokens], zeros after the last token): a tiled transpose whose tiles below the padding
    are a loop of their own (no condition in their vectors), bit for bit onnxruntime's."""
    steps = [("reshape", (1, tokens, heads, size)), ("transpose", (0, 2, 3, 1))]
    model = _copy_model((1, tokens, heads * size), steps, (1, heads, size, tokens))
    graph = model.graph
    pads = numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 0, padded - tokens], np.int64), "pads")
    graph.initializer.append(pads)
    identity = graph.node[-1]
    graph.node.insert(len(graph.node) - 1, helper.make_node("Pad", [identity.input[0], "pads"], ["padded"]))
    identity.input[0] = "padded"
    graph.output[0].type.tensor_type.shape.dim[-1].dim_value = padded
    mod = _fused(model)
    used = _rules_used(mod, target)
    assert list(used.values()) == ["cpu.DataMovement"], used
    feeds = {"x": np.random.default_rng(3).standard_normal((1, tokens, heads * size)).astype(np.float32)}
    scheduled, ours = _compile_and_run(mod, feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_array_equal(ours, ref)
    assert scheduled.script().count("_partition") == 2, "whole tiles and the padded rest: two loops"


@pytest.mark.isa
def test_a_transpose_no_vector_fits_is_left_to_the_generic_rule(target):
    model = _copy_model((1, 3, 7, 5), [("transpose", (0, 1, 3, 2))], (1, 3, 5, 7))
    _check(model, target, "cpu.Generic")


def test_contiguous_tail_counts_the_axes_read_in_order():
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer

    from core.compiler.schedules.cpu_copy import contiguous_tail

    b, h, s, d = (tirx.Var(n, "int64") for n in "bhsd")
    i64 = lambda v: tirx.IntImm("int64", v)
    # heads split: out[b, h, s, d] = in[b, s, h * 64 + d]
    assert contiguous_tail([1, 3, 197, 64], [1, 197, 192], [b, s, h * i64(64) + d], [b, h, s, d], Analyzer()) == 1
    # shuffle: out[0, c, y, x] = in[0, c % 3 * 80 + c // 3, y, x]
    perm = tirx.floormod(h, i64(3)) * i64(80) + tirx.floordiv(h, i64(3))
    assert contiguous_tail([1, 240, 28, 28], [1, 240, 28, 28], [i64(0), perm, s, d], [b, h, s, d], Analyzer()) == 2
    # a transpose moves the innermost axis
    assert contiguous_tail([3, 64, 50], [3, 50, 64], [b, d, s], [b, s, d], Analyzer()) == 0


@pytest.mark.parametrize("mcpu,register", [("znver4", "%zmm"), ("znver3", "%ymm")])
def test_shuffle_copies_by_vectors_of_the_target_width(mcpu, register):
    """Codegen only (any x86-64 host): the shuffle moves whole vectors of the target's width; the
    generic schedule of the same kernel was scalar (every index a chain of divisions)."""
    import tvm

    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu)
    (func,) = [f for _, f in _fused(_shuffle_model()).functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled, rule = schedule_cpu_func(func, target)
    assert rule == "cpu.DataMovement"
    lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target)
    asm = "\n".join(m.inspect_source("asm") for m in [lib.mod, *lib.mod.imports] if m.kind == "llvm")
    moves = re.findall(r"\bvmov\w*\s+[^\n]*" + re.escape(register), asm)
    assert len(moves) >= 4, f"no {register} moves in the shuffle"
    assert "vgather" not in asm


@pytest.mark.isa
@pytest.mark.parametrize("shape,index_map,expected", [
    ((1, 3, 40, 48), lambda n, c, h, w: (n, c // 3, h, w, c % 3), lambda x: x.reshape(1, 1, 3, 40, 48).transpose(0, 1, 3, 4, 2)),
    ((1, 2, 5, 5, 16), lambda n, co, h, w, ci: (n, co * 16 + ci, h, w), lambda x: x.transpose(0, 1, 4, 2, 3).reshape(1, 32, 5, 5)),
])
def test_layout_transforms_in_scatter_form_are_tiled_and_exact(target, shape, index_map, expected):
    """TVM writes layout_transform with loops over the input and a computed store index (an
    image into NCHW3c, a blocked result back to NCHW): tiled as a transpose, the same values."""
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_cpu_func

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=shape, dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.layout_transform(x, index_map=index_map))
        bb.emit_func_output(out)
    mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                    relax.transform.FuseOps(), relax.transform.FuseTIR()])(bb.get())
    (func,) = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled, rule = schedule_cpu_func(func, target)
    assert rule == "cpu.DataMovement"
    assert "T.vectorized" in scheduled.script()
    lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target)
    data = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    ref = expected(data)
    result = tvm.runtime.tensor(np.zeros(ref.shape, np.float32))
    lib["main"](tvm.runtime.tensor(data), result)
    np.testing.assert_array_equal(result.numpy(), ref)
