"""Transformer kernels on the CPU: vectorizable exp/erf/tanh/pow (cpu_math) and the row-reduction rule
(cpu_rows: softmax, layer norm op and decomposed) compute what onnxruntime computes, odd row
lengths included, and the code has no libm call per lane (codegen only: any x86-64 host)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_schedules import (
    _compile_and_run,
    _fused,
    _kernel_assembly,
    _rules_used,
)
from tests.helpers import ort_run

RTOL, ATOL = 1e-3, 1e-4


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def _elementwise(fn, n: int, target):
    """Build B = fn(A) over n floats, vectorized to the target's width; (module, assembly)."""
    import tvm
    from tvm import s_tir, te

    from core.compiler.backend import fast_math as cpu_math

    cpu_math.install()
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: fn(a[i]), name="B")
    sch = s_tir.Schedule(te.create_prim_func([a, b]))
    (loop,) = sch.get_loops(sch.get_sblock("B"))
    _, inner = sch.split(loop, [None, 16])
    sch.vectorize(inner)
    lib = tvm.compile(sch.mod, target=target)
    return lib, lib.mod.inspect_source("asm")


def _special(x: np.ndarray, fn) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.array([fn(float(v)) if np.isfinite(v) else np.nan for v in x])


@pytest.mark.isa
@pytest.mark.parametrize("name", ["exp", "erf", "tanh"])
def test_fast_math_is_accurate_everywhere_and_keeps_special_values(name, target):
    import tvm
    from tvm import tirx

    x = np.concatenate([np.linspace(-100, 100, 20001), np.linspace(-6, 6, 20001),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.7, 88.72, 88.8, -87.5, -86.9, 1e-5, -3e-4]]).astype(np.float32)
    x = np.pad(x, (0, -len(x) % 16))
    lib, asm = _elementwise(getattr(tirx, name), len(x), target)
    libm = {c for c in re.findall(r"call\w*\s+(\w+)", asm) if c.rstrip("f") in ("exp", "erf", "tanh", "expf", "erff", "tanhf")}
    assert not libm, f"{name} still calls {libm}"
    out = tvm.runtime.tensor(np.zeros_like(x))
    lib["main"](tvm.runtime.tensor(x), out)
    y = out.numpy().astype(np.float64)
    ref = {"exp": np.exp(x.astype(np.float64)), "erf": _special(x, math.erf), "tanh": np.tanh(x.astype(np.float64))}[name]
    if name == "erf":
        ref[np.isposinf(x)], ref[np.isneginf(x)] = 1.0, -1.0
    ref = np.where(ref > np.finfo(np.float32).max, np.inf, ref)
    assert np.array_equal(np.isnan(y), np.isnan(ref))
    inf = np.isinf(ref)
    assert np.array_equal(y[inf], ref[inf])
    normal = np.isfinite(ref) & (np.abs(ref) > 1e-37)
    rel = np.abs(y[normal] - ref[normal]) / np.abs(ref[normal])
    assert rel.max() < 1e-6, f"{name}: max relative error {rel.max():.2e} at {x[normal][rel.argmax()]}"
    finite = np.isfinite(ref)
    if name != "exp":
        assert np.abs(y[finite] - ref[finite]).max() < 1e-6
    else:  # below float32's normal range the result may flush to 0
        tiny = finite & (ref <= 1e-37)
        assert np.abs(y[tiny] - ref[tiny]).max() < 1e-37


@pytest.mark.isa
def test_fast_sigmoid_is_onnxruntimes_logistic_within_its_error(target):
    """Sigmoid as Eigen's rational logistic (cpu_math.fast_sigmoid): within 3e-7 of the exact
    value over the line, in [0, 1], 1 and 0 at +-inf, NaN kept; and within two ulps of what
    onnxruntime computes (its MLAS kernel has the same approximation)."""
    import tvm
    from onnx import TensorProto, helper
    from tvm import tirx

    x = np.concatenate([np.linspace(-100, 100, 20001), np.linspace(-20, 20, 40001),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, 18.0, -18.0, 1e-5, -3e-4]]).astype(np.float32)
    x = np.pad(x, (0, -len(x) % 16))
    lib, asm = _elementwise(tirx.sigmoid, len(x), target)
    assert "exp" not in {c.rstrip("f") for c in re.findall(r"call\w*\s+(\w+)", asm)}
    out = tvm.runtime.tensor(np.zeros_like(x))
    lib["main"](tvm.runtime.tensor(x), out)
    y = out.numpy()
    with np.errstate(over="ignore"):
        ref = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert np.array_equal(np.isnan(y), np.isnan(x))
    finite = ~np.isnan(x)
    assert np.abs(y[finite] - ref[finite]).max() < 3e-7
    assert y[finite].min() >= 0.0 and y[finite].max() <= 1.0
    assert y[np.isposinf(x)].tolist() == [1.0] and y[np.isneginf(x)].tolist() == [0.0]
    # the rational form's tail, as onnxruntime's: exactly 0 from -20 down (1 / (1 + exp(20)) would
    # be 2.1e-9, a normal float32), so a fall back to the exp form fails here
    assert (y[(x <= -20) & finite] == 0.0).all()
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["y"])], "sigmoid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(x)])],
    ), opset_imports=[helper.make_opsetid("", 17)])
    (theirs,) = ort_run(model, {"x": x})
    assert np.abs(y[finite] - theirs[finite]).max() <= 2.4e-7  # two float32 ulps at 1.0: FMA rounding


@pytest.mark.isa
def test_constant_powers_are_multiplications(target):
    from tvm import tirx

    for exponent in (2.0, 3.0):
        _, asm = _elementwise(lambda v, e=exponent: tirx.pow(v, tirx.const(e, "float32")), 64, target)
        assert "powf" not in asm
    _, asm = _elementwise(lambda v: tirx.pow(v, tirx.const(2.5, "float32")), 64, target)
    assert "powf" in asm  # any other exponent keeps libm


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "rows", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _check(model, feeds, target, rule="cpu.RowReduction"):
    mod = _fused(model)
    used = _rules_used(mod, target)
    assert rule is None or rule in used.values(), used
    _, ours = _compile_and_run(mod, feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
    return used


# row lengths: vector multiples (one fused loop per row), a ViT's odd 197-like lengths (padded
# with -inf to whole vectors), shorter than a vector, and a half-vector multiple
@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("width", [64, 37, 24, 7, 40])
def test_softmax_rows_match_onnxruntime(width, target):
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_vi("x", [2, 3, width])], [_vi("y", [2, 3, width])])
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((2, 3, width)) * 4).astype(np.float32)
    x[0, 1, : width // 2] = np.finfo(np.float32).min  # a masked half row, as attention masks write it
    _check(model, {"x": x}, target)


@pytest.mark.isa
@pytest.mark.slow
def test_softmax_over_another_axis_is_not_taken_for_a_row_softmax(target):
    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [_vi("x", [2, 40, 48])], [_vi("y", [2, 40, 48])])
    x = (np.random.default_rng(2).standard_normal((2, 40, 48)) * 3).astype(np.float32)
    _check(model, {"x": x}, target, rule=None)


@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("width", [48, 40, 19, 96, 256])
def test_layer_norm_op_and_decomposed_match_onnxruntime(width, target):
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(width)).astype(np.float32), "g"),
             numpy_helper.from_array((0.1 * rng.standard_normal(width)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    x = (rng.standard_normal((1, 33, width)) * 3 + 1).astype(np.float32)
    op = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                [_vi("x", [1, 33, width])], [_vi("y", [1, 33, width])], inits)
    _check(op, {"x": x}, target)
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n"]),
        helper.make_node("Mul", ["n", "g"], ["ng"]),
        helper.make_node("Add", ["ng", "b"], ["y"]),
    ]
    used = _check(_model(nodes, [_vi("x", [1, 33, width])], [_vi("y", [1, 33, width])], inits), {"x": x}, target)
    assert sum(rule == "cpu.RowReduction" for rule in used.values()) >= 2, used  # mean and variance kernels


@pytest.mark.isa
@pytest.mark.slow
def test_layer_norm_over_parallel_rows_matches_onnxruntime(target):
    """A ViT's 197 x 192 layer norm (148 KB: its rows run in parallel, cpu_rows.ROWS_PARALLEL_MIN_BYTES)."""
    import tvm

    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(192)).astype(np.float32), "g"),
             numpy_helper.from_array((0.1 * rng.standard_normal(192)).astype(np.float32), "b")]
    model = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                   [_vi("x", [1, 197, 192])], [_vi("y", [1, 197, 192])], inits)
    x = (rng.standard_normal((1, 197, 192)) * 3 + 1).astype(np.float32)
    scheduled, ours = _compile_and_run(_fused(model), {"x": x}, target)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
    (text,) = [f.script() for _, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert "T.parallel(T.int64(197))" in text


@pytest.mark.slow
@pytest.mark.parametrize("width", [37, 24, 64])
def test_softmax_with_8_lane_vectors_matches_onnxruntime(width):
    """The AVX2 (8-lane) variant of the rule's choices (other paddings, other tails), run for real:
    haswell code runs on any AVX2 or AVX-512 host."""
    from core.compiler.target import make_target

    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_vi("x", [2, 3, width])], [_vi("y", [2, 3, width])])
    x = (np.random.default_rng(width).standard_normal((2, 3, width)) * 4).astype(np.float32)
    _check(model, {"x": x}, make_target("cpu", mcpu="haswell"))


def test_row_kernels_are_vectorized_for_each_isa():
    """Codegen only: the softmax's reductions and output use the target's vector registers, for
    a vector-multiple row and for a ViT-like odd one, and compute exp without libm."""
    from core.compiler.target import make_target

    for width in (64, 37):
        model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_vi("x", [4, 8, width])], [_vi("y", [4, 8, width])])
        for mcpu, mattr, reg in (("znver4", None, "%zmm"), ("znver3", None, "%ymm")):
            asm = _kernel_assembly(model, make_target("cpu", mcpu=mcpu, mattr=mattr), "softmax")
            assert re.search(rf"vmaxps\s+[^\n]*{reg}", asm), f"no vector max ({mcpu}, width {width})"
            assert re.search(rf"vaddps\s+[^\n]*{reg}", asm), f"no vector sum ({mcpu}, width {width})"
            assert "expf" not in asm and "vgather" not in asm and "vscatter" not in asm


@pytest.mark.isa
@pytest.mark.slow
def test_dense_with_erf_gelu_is_one_pass_and_matches_onnxruntime(target):
    """GELU reads the biased matmul result twice; the whole tail is folded into the matmul's
    write-back (no second pass over the output), and the result matches onnxruntime."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array((rng.standard_normal((48, 80)) / 7).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(80) / 10).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["b", "m"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["g"]),
        helper.make_node("Mul", ["g", "half"], ["y"]),
    ]
    model = _model(nodes, [_vi("x", [1, 37, 48])], [_vi("y", [1, 37, 80])], inits)
    x = rng.standard_normal((1, 37, 48)).astype(np.float32)
    scheduled, ours = _compile_and_run(_fused(model), {"x": x}, target)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
    import tvm

    (text,) = [f.script() for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "erf" in g.name_hint]
    nests = re.split(r"\n    for ", text)  # the function body's top-level loop nests
    (matmul_nest,) = [n for n in nests if '"matmul_update"' in n]
    assert "T.erf" in matmul_nest and sum("T.erf" in n for n in nests) == 1, "the GELU tail is a separate pass"


def test_padded_row_tiles_pad_the_fewest_rows():
    """A ViT's 197 tokens (prime): the tile height wastes 1 row (18 x 11), not 13 (15 x 14)."""
    from core.compiler.schedules.cpu_matmul import choose_matmul_tile

    assert choose_matmul_tile(197, 768, 16, 32) == (11, 32)
    assert choose_matmul_tile(197, 197, 16, 32) == (22, 16)  # attention scores: 9 x 22 = 198
    assert choose_matmul_tile(197, 64, 8, 16) == (6, 16)  # AVX2, 2 vectors a row: 6 rows at most, 33 x 6 = 198
    assert choose_matmul_tile(128, 256, 16, 32) == (8, 32)  # a divisor that fills the registers stays


@pytest.mark.parametrize("mcpu", ["znver4", "znver3"])
def test_softmax_folds_each_rows_partials_four_lanes_wide(mcpu):
    """Schedule only (any host): a row's vector of partial maxima and sums (16 lanes with AVX-512,
    8 with AVX2) is folded 4 lanes wide before the lane-by-lane steps, not as one chain of 15."""
    import tvm

    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.schedules.cpu_rows import FOLD_LANES
    from core.compiler.target import make_target

    model = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_vi("x", [3, 197, 197])], [_vi("y", [3, 197, 197])])
    (func,) = [f for _, f in _fused(model).functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled, rule = schedule_cpu_func(func, make_target("cpu", mcpu=mcpu))
    assert rule == "cpu.RowReduction"
    script = scheduled.script()
    assert script.count(f"T.vectorized(T.int64({FOLD_LANES}))") >= 2, "max and sum folds"


@pytest.mark.parametrize(("mcpu", "lanes"), [("znver4", 16), ("znver3", 8)])
def test_layer_norm_rows_reduce_into_several_vector_chains(mcpu, lanes):
    """Schedule only (any host): a layer norm's two reductions over a ViT's 192-wide rows each
    accumulate ROW_ACCUMULATORS independent vectors of partial sums (not one chain of dependent
    adds), folded to one vector and then FOLD_LANES wide."""
    import tvm

    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.schedules.cpu_rows import FOLD_LANES, ROW_ACCUMULATORS
    from core.compiler.target import make_target

    inits = [numpy_helper.from_array(np.ones(192, np.float32), "g"), numpy_helper.from_array(np.zeros(192, np.float32), "b")]
    model = _model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
                   [_vi("x", [1, 197, 192])], [_vi("y", [1, 197, 192])], inits)
    (func,) = [f for _, f in _fused(model).functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled, rule = schedule_cpu_func(func, make_target("cpu", mcpu=mcpu))
    assert rule == "cpu.RowReduction"
    script = scheduled.script()
    for width in (ROW_ACCUMULATORS * lanes, lanes, FOLD_LANES):
        # each width's partials: initialized and accumulated as vectors, for the sum and the variance
        assert script.count(f"T.vectorized(T.int64({width}))") >= 4, f"no {width}-wide partials ({mcpu})"


@pytest.mark.isa
def test_padded_rows_read_the_activation_clamped_not_a_zero_filled_copy(target):
    """Rows no tile divides (a ViT's 197 tokens) are padded to whole tiles; the GEMM reads A's
    last row again for the padded rows (`A[min(i, rows - 1), k]`) instead of a zero-filled copy
    of A made at every call, and the padded rows stay out of the result."""
    import tvm
    from tvm import s_tir, te

    from core.compiler.target import vector_lanes, vector_registers
    from core.compiler.schedules.cpu_matmul import Matmul, choose_matmul_tile

    rows, depth, cols = 197, 40, 48
    ti, _ = choose_matmul_tile(rows, cols, vector_lanes(target), vector_registers(target))
    assert rows % ti, "the shape must need padded rows on this target"
    a = te.placeholder((1, rows, depth), name="A")
    w = te.placeholder((depth, cols), name="W")
    k = te.reduce_axis((0, depth), name="k")
    c = te.compute((1, rows, cols), lambda b, i, j: te.sum(a[b, i, k] * w[k, j], axis=k), name="matmul")
    sch = Matmul().apply(te.create_prim_func([a, w, c]), target)
    text = sch.mod["main"].script()
    assert "A_pad" not in text and f"T.min(v_i, {rows - 1})" in text
    assert "if_then_else" not in text
    assert isinstance(sch, s_tir.Schedule)
    x = np.random.default_rng(3).standard_normal((1, rows, depth)).astype(np.float32)
    y = np.random.default_rng(4).standard_normal((depth, cols)).astype(np.float32)
    out = tvm.runtime.tensor(np.full((1, rows, cols), np.nan, np.float32))
    tvm.compile(sch.mod, target=target)(tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x @ y, rtol=RTOL, atol=ATOL)


@pytest.mark.isa
def test_attention_with_odd_token_count_matches_onnxruntime(target):
    """Both operands activations (scores x values, batched over heads), 37 rows: the padded
    row tile reads A clamped; the result matches onnxruntime."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("MatMul", ["p", "v"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model = _model(nodes, [_vi("p", [1, 3, 37, 40]), _vi("v", [1, 3, 40, 32])], [_vi("y", [1, 3, 37, 32])])
    feeds = {"p": rng.standard_normal((1, 3, 37, 40)).astype(np.float32),
             "v": rng.standard_normal((1, 3, 40, 32)).astype(np.float32)}
    scheduled, ours = _compile_and_run(_fused(model), feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
    import tvm

    (text,) = [f.script() for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in g.name_hint]
    assert "T.min(" in text and "_pad = T.sblock_alloc_buffer" not in text
