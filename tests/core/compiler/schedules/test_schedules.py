"""core.compiler.schedules' CPU rules: each form of conv, matmul, pooling and the fallback compiles,
is really scheduled (parallel loops, vectors), and computes what onnxruntime computes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run

RTOL, ATOL = 1e-3, 1e-4


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _cnn_model() -> onnx.ModelProto:
    """Every conv form the rules know, pooling with padding, and two dense layers."""
    rng = np.random.default_rng(0)
    inits = [
        _weight(rng, "w_full", (16, 8, 3, 3)),  # packed-weight conv, 2-vector channel blocks (2.7 M multiply-adds: parallel)
        _weight(rng, "b_full", (16,)),
        _weight(rng, "w_dw", (16, 1, 3, 3)),  # depthwise, stride 2: row-vectorized form
        _weight(rng, "w_grp", (24, 8, 1, 1)),  # 2 groups of 12 channels: no full vector divides 12
        _weight(rng, "fc1", (24, 16)),
        _weight(rng, "fc1_b", (16,)),
        _weight(rng, "fc2", (10, 16)),  # 10 outputs: not a vector multiple -> a padded tile
        _weight(rng, "fc2_b", (10,)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_full", "b_full"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w_dw"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], group=16),
        helper.make_node("Conv", ["c2", "w_grp"], ["c3"], kernel_shape=[1, 1], group=2),
        helper.make_node("MaxPool", ["c3"], ["p1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc1", "fc1_b"], ["h"]),
        helper.make_node("Relu", ["h"], ["hr"]),
        helper.make_node("Gemm", ["hr", "fc2", "fc2_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "schedule_forms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 48, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _attention_model() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [_weight(rng, "w", (32, 24)), _weight(rng, "b", (24,))]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Softmax", ["a"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "batched_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 24])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _fused(model):
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(model, keep_params_in_input=False)
    return tvm.transform.Sequential(
        [
            relax.transform.DecomposeOpsForInference(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
    )(mod)


def _compile_and_run(mod, feeds, target):
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_pass

    with target:
        scheduled = schedule_pass(target)(mod)
    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()])
    return scheduled, out.numpy()


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def _rules_used(mod, target) -> dict[str, str]:
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_cpu_func

    mod = relax.transform.AttachAttrLayoutFreeBuffers()(mod)
    used = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            _, rule = schedule_cpu_func(func, target)
            used[gvar.name_hint] = rule
    return used


@pytest.mark.isa
@pytest.mark.slow
def test_conv_pool_dense_forms_match_onnxruntime(target):
    model = _cnn_model()
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 8, 48, 48)).astype(np.float32)}
    mod = _fused(model)
    used = _rules_used(mod, target)
    conv_funcs = [name for name in used if "conv2d" in name]
    # the depthwise conv has its own rule (core.compiler.schedules.cpu_depthwise)
    assert sorted(used[name] for name in conv_funcs) == ["cpu.Conv2dNCHW", "cpu.Conv2dNCHW", "cpu.DepthwiseConv2dNCHW"], used
    assert any(rule == "cpu.Matmul" for name, rule in used.items() if "matmul" in name), used
    assert all(rule is not None for rule in used.values()), used

    scheduled, ours = _compile_and_run(mod, feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
    # the weights were repacked ahead of time: kernels take the packed weight, no packing at run time
    names = [gvar.name_hint for gvar in scheduled.functions]
    assert any(name.endswith("_prepacked") for name in names), names
    assert "_weight_prepack" not in scheduled["main"].script(), "weights are packed at run time"
    text = scheduled.script()
    assert "T.parallel" in text and "T.vectorized" in text


@pytest.mark.isa
@pytest.mark.slow
def test_batched_matmul_softmax_matches_onnxruntime(target):
    model = _attention_model()
    feeds = {"x": np.random.default_rng(3).standard_normal((2, 16, 32)).astype(np.float32)}
    mod = _fused(model)
    used = _rules_used(mod, target)
    assert any(rule == "cpu.Matmul" for rule in used.values()), used
    _, ours = _compile_and_run(mod, feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)


def _matmul_model(rows: int, depth: int, cols: int) -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    inits = [_weight(rng, "w", (depth, cols)), _weight(rng, "b", (cols,))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "odd_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, cols])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.isa
@pytest.mark.slow
def test_matmul_with_prime_rows_and_columns_is_padded_and_matches_onnxruntime(target):
    """197 x 197 (a ViT's attention scores): no vector and no row tile divides, so the operands are
    padded to whole tiles; the padding must never reach the output (bias + relu epilogue)."""
    model = _matmul_model(197, 40, 197)
    mod = _fused(model)
    used = _rules_used(mod, target)
    assert list(used.values()) == ["cpu.Matmul"], used
    feeds = {"x": np.random.default_rng(6).standard_normal((1, 197, 40)).astype(np.float32)}
    scheduled, ours = _compile_and_run(mod, feeds, target)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)
    assert "T.vectorized" in scheduled.script()


def test_a_failing_rule_falls_back_to_the_next(target, caplog):
    import tvm

    from core.compiler.schedules import cpu_rules, schedule_cpu_func

    class Broken:
        name = "test.Broken"

        def apply(self, func, target):
            raise RuntimeError("rule bug")

    mod = _fused(_attention_model())
    func = next(f for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    scheduled, rule = schedule_cpu_func(func, target, [Broken(), *cpu_rules()])
    assert scheduled is not None and rule != "test.Broken"
    assert "rule bug" in caplog.text
    assert schedule_cpu_func(func, target, [Broken()]) == (None, None)


def test_tile_choices_fit_the_register_file():
    from core.compiler.schedules.cpu_conv import choose_conv_tile, choose_width_tile
    from core.compiler.schedules.cpu_matmul import choose_matmul_tile

    for channels, height, width in [(64, 55, 55), (16, 56, 56), (1000, 13, 13), (256, 7, 7), (512, 14, 14), (68, 14, 14), (128, 27, 27)]:
        vb, t, th = choose_conv_tile(channels, width, 8, height)
        assert channels % vb == 0 and width % t == 0 and height % th == 0
        regs = max(1, vb // 8)
        assert regs * th * t + regs + 1 <= 16  # accumulators + weight vectors + broadcast
    assert choose_conv_tile(128, 27, 8, 27) == (8, 9, 1)  # 9 accumulators, not 16x3's 6
    assert choose_conv_tile(256, 14, 8, 14) == (16, 2, 2)  # a 2x2 pixel tile of 2 vectors
    assert choose_conv_tile(1, 14, 8) is None  # depthwise: no channel vector at all...
    assert choose_width_tile(136, 28, 8) == (8, 7)  # ...so vectors run along the row
    assert choose_width_tile(16, 13, 8) is None  # a prime width leaves no useful row vector
    assert choose_matmul_tile(1, 4096, 8) == (1, 32)
    assert choose_matmul_tile(16, 24, 8) == (8, 8)  # 24 columns: one vector per row, 8 rows
    assert choose_matmul_tile(1, 10, 8) == (1, 8)  # no vector divides 10: one padded vector
    assert choose_matmul_tile(16, 24, 16, 32) == (8, 24)  # AVX-512: 24 columns = one and a half vectors
    for rows, cols, lanes, registers in [(197, 197, 16, 32), (197, 64, 8, 16), (37, 13, 8, 16), (2, 24, 16, 32), (1, 1000, 16, 32)]:
        ti, vb = choose_matmul_tile(rows, cols, lanes, registers)
        regs = -(-vb // lanes)
        assert ti * regs + regs + 1 <= registers, (rows, cols, ti, vb)
        # whole tiles, one padded vector, or a one-row GEMV's four vectors padded by at most 1/16
        assert vb % 4 == 0 and (cols % vb == 0 or vb == lanes or rows == 1 and -cols % vb <= cols // 16), (rows, cols, ti, vb)
        assert rows % ti == 0 or ti >= (registers - regs - 1) // regs // 2  # padded rows: a full tile


def _symbolic_batch_gelu_model() -> onnx.ModelProto:
    """A dense layer over a symbolic batch with a GELU tail (x read twice by the tail)."""
    rng = np.random.default_rng(4)
    inits = [_weight(rng, "w", (32, 64)), _weight(rng, "b", (64,))]
    half, one, root2 = (numpy_helper.from_array(np.array(v, np.float32), n) for v, n in [(0.5, "half"), (1.0, "one"), (np.sqrt(2.0), "root2")])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Div", ["a", "root2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["a", "e1"], ["p"]),
        helper.make_node("Mul", ["p", "half"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "symbolic_gelu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 64])],
        [*inits, half, one, root2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.isa
@pytest.mark.slow
def test_symbolic_batch_dense_with_gelu_tail_matches_onnxruntime(target):
    model = _symbolic_batch_gelu_model()
    mod = _fused(model)
    used = _rules_used(mod, target)
    # a symbolic batch no longer sends dense layers to the generic fallback
    assert any(rule == "cpu.Matmul" for name, rule in used.items() if "matmul" in name), used
    for batch in (1, 3):
        feeds = {"x": np.random.default_rng(batch).standard_normal((batch, 16, 32)).astype(np.float32)}
        _, ours = _compile_and_run(mod, feeds, target)
        (ref,) = ort_run(model, feeds)
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)


def _conv_relu_model() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits = [_weight(rng, "w", (32, 16, 3, 3)), _weight(rng, "b", (32,))]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 20, 20])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _kernel_assembly(model, target, name_part: str) -> str:
    """The assembly of one kernel as the compile pipeline schedules it (weights prepacked ahead of
    time, so the packing copy is not part of it); built only, never run."""
    import tvm

    from core.compiler.schedules import schedule_pass

    with target:
        scheduled = schedule_pass(target)(_fused(model))
    (func,) = [f for g, f in scheduled.functions_items() if name_part in g.name_hint and isinstance(f, tvm.tirx.PrimFunc)]
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    return "\n".join(m.inspect_source("asm") for m in [lib.mod, *lib.mod.imports] if m.kind == "llvm")


def _basic_blocks(asm: str) -> list[str]:
    import re

    return re.split(r"\n\.?\w+:", asm)


@pytest.mark.parametrize("mcpu,mattr,wide", [("znver4", None, True), ("znver4", ["-avx512f"], False), ("znver3", None, False)])
def test_conv_code_fits_each_isa(mcpu, mattr, wide):
    """Codegen only (runs on any x86-64 host, whatever ISA it has): the conv's accumulators stay
    in vector registers of the target's width. With AVX-512 the tile once stayed in memory and
    LLVM gathered/scattered its lanes around every FMA (vinsertps/vextractps), and wrote the
    result back with a scatter per column."""
    import re

    from core.compiler.target import make_target

    asm = _kernel_assembly(_conv_relu_model(), make_target("cpu", mcpu=mcpu, mattr=mattr), "conv2d")
    fmas = re.findall(r"vfmadd\w+\s+([^\n]*)", asm)
    assert len(fmas) >= 8, "no vector FMAs in the convolution"
    zmm_fmas = sum("%zmm" in operands for operands in fmas)
    if wide:
        assert zmm_fmas >= len(fmas) // 2, f"AVX-512 target, but {zmm_fmas} of {len(fmas)} FMAs use zmm"
    else:
        assert "%zmm" not in asm
    for block in _basic_blocks(asm):
        if "vfmadd" in block:
            assert not re.search(r"\bv(?:insert|extract)ps\b", block), "accumulator lanes assembled one by one:\n" + block
    assert "vscatter" not in asm and "vgather" not in asm


@pytest.mark.isa
def test_pooling_and_sum_run_in_parallel_and_match_onnxruntime(target):
    """Window reductions (max pooling, ONNX Sum's stack+sum) big enough to pay for a second
    thread get a parallel loop: `parallel` has to come before the reduction is decomposed, or
    TVM refuses the loop and the kernel stays on one thread (ResNet-50's pooling and residual
    sums did). The shapes are ResNet-50's stem pool: smaller pools (under ~1 M window steps)
    run on one thread by design (core.compiler.schedules.cpu_depthwise)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 112, 112])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64, 56, 56])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["p", "z"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "pool_sum", [x, z], [y]), opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(9)
    feeds = {"x": rng.standard_normal((1, 64, 112, 112)).astype(np.float32), "z": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)}
    scheduled, ours = _compile_and_run(_fused(model), feeds, target)
    import tvm

    kernels = {g.name_hint: f for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    pools = [f for name, f in kernels.items() if "pool" in name]
    sums = [f for name, f in kernels.items() if "sum" in name]
    assert pools and sums, list(kernels)
    for func in pools + sums:
        assert "T.parallel" in func.script()
    np.testing.assert_allclose(ours, ort_run(model, feeds)[0], rtol=RTOL, atol=ATOL)
