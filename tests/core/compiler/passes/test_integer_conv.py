"""IntegerConv (core.compiler.passes.integer_conv): a QDQ model's quantized convs become int8 VNNI
kernels on CPUs that have VNNI, computing what onnxruntime's fused QLinearConv computes; other
targets and convs the kernel does not cover keep the float path."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from core.compiler.passes.integer_conv import has_vnni, integer_conv, integer_conv_kernel, integer_dense_kernel, pack_weight
from core.compiler.target import host_lacks, make_target
from tests.core.compiler.qdq_models import fp32_cnn, fp32_linear, fp32_wide_cnn, qlinear_ops, quantize_qdq
from tests.helpers import relax_through

def needs_vnni(test):
    """compile builds for this host's CPU (as MLCWB_CPU_FEATURES masks it: CI's AVX2 rerun): the int8
    kernels where that target has VNNI, and this machine must run them."""
    return pytest.mark.isa(pytest.mark.skipif(bool(host_lacks(["avx512vnni"])) or not has_vnni(make_target("cpu")),
                                              reason="this CPU (or the one compile builds for) has no AVX-512 VNNI")(test))


ZEN4, ZEN3 = "znver4", "znver3"  # AVX-512 VNNI / AVX2 only


def _reference(x, w, corr, mult, strides, pads, x_zp, y_zp, y_dtype):
    """The module docstring's arithmetic in numpy: int64 sums, float32 requantization."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (xp.shape[2] - kh) // strides[0] + 1, (xp.shape[3] - kw) // strides[1] + 1
    acc = np.zeros((n, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
            acc += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.int64))
    shift = 128 if x.dtype == np.int8 else 0  # corr = bias - (x_zp + shift) * sum(w)
    bias = corr.astype(np.int64) + (x_zp + shift) * w.astype(np.int64).sum(axis=(1, 2, 3))
    v = np.round((acc + bias[None, :, None, None]).astype(np.float32) * mult[None, :, None, None]) + y_zp
    lo, hi = (0, 255) if y_dtype == "uint8" else (-128, 127)
    return np.clip(v, lo, hi).astype(y_dtype)


@pytest.mark.parametrize("case", [
    # (x shape, x dtype, out channels, kernel, strides, pads (t, l, b, r), x zp, y zp, y dtype)
    ((1, 3, 17, 17), "uint8", 16, (3, 3), (2, 2), (1, 0, 2, 1), 7, 3, "uint8"),
    ((2, 8, 6, 9), "uint8", 32, (1, 1), (1, 1), (0, 0, 0, 0), 128, 0, "uint8"),
    ((1, 20, 7, 7), "int8", 16, (3, 3), (1, 1), (1, 1, 1, 1), -5, -2, "int8"),
    ((1, 4, 5, 29), "uint8", 16, (3, 5), (1, 2), (0, 2, 0, 2), 0, 10, "uint8"),  # a prime output width
    ((1, 3, 20, 20), "uint8", 32, (7, 7), (2, 2), (3, 3, 3, 3), 5, 1, "uint8"),  # a stem: two output blocks a tile
])
def test_kernel_matches_integer_arithmetic(case):
    import tvm

    shape, x_dtype, o, kernel, strides, pads, x_zp, y_zp, y_dtype = case
    rng = np.random.default_rng(0)
    lo, hi = (0, 256) if x_dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, shape).astype(x_dtype)
    w = rng.integers(-127, 128, (o, shape[1], *kernel)).astype(np.int8)
    corr = rng.integers(-5000, 5000, o).astype(np.int32)
    mult = (rng.uniform(0.5, 2.0, o) / (shape[1] * kernel[0] * kernel[1] * 60)).astype(np.float32)
    func = integer_conv_kernel(shape, x_dtype, o, kernel, strides, pads, x_zp, y_zp, y_dtype)
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=make_target("cpu", mcpu=ZEN4))
    asm = "\n".join(m.inspect_source("asm") for m in [lib.mod, *lib.mod.imports] if m.kind == "llvm")
    assert asm.count("vpdpbusd") >= 2  # the tile's dot products, whatever this host is
    if host_lacks(["avx512vnni"]):
        pytest.skip("built for VNNI; this CPU cannot run it")
    want = _reference(x, w, corr, mult, strides, pads, x_zp, y_zp, y_dtype)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in (x, pack_weight(w), corr, mult, np.zeros(want.shape, y_dtype))]
    lib["main"](*args)
    np.testing.assert_array_equal(args[-1].numpy(), want)


@pytest.mark.parametrize("case", [
    # (rows, depth, a dtype, cols, a zp, y zp, y dtype): uint8 rows read in place; int8 or a depth
    # no multiple of 4 copied first
    (24, 64, "uint8", 32, 9, 4, "uint8"),
    (7, 30, "uint8", 16, 0, 0, "uint8"),
    (10, 48, "int8", 48, -3, -7, "int8"),
])
def test_dense_kernel_matches_integer_arithmetic(case):
    import tvm

    rows, depth, a_dtype, cols, a_zp, y_zp, y_dtype = case
    rng = np.random.default_rng(1)
    lo, hi = (0, 256) if a_dtype == "uint8" else (-128, 128)
    a = rng.integers(lo, hi, (rows, depth)).astype(a_dtype)
    w = rng.integers(-127, 128, (cols, depth)).astype(np.int8)  # output columns first
    corr = rng.integers(-5000, 5000, cols).astype(np.int32)
    mult = (rng.uniform(0.5, 2.0, cols) / (depth * 60)).astype(np.float32)
    func = integer_dense_kernel(rows, depth, a_dtype, cols, a_zp, y_zp, y_dtype)
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=make_target("cpu", mcpu=ZEN4))
    if host_lacks(["avx512vnni"]):
        pytest.skip("built for VNNI; this CPU cannot run it")
    # a matmul is a 1x1 conv of one row of pixels: the conv's reference
    want = _reference(a.T[None, :, None, :], w[:, :, None, None], corr, mult, (1, 1), (0, 0, 0, 0), a_zp, y_zp, y_dtype)[0, :, 0, :].T
    packed = pack_weight(w[:, :, None, None]).reshape(cols // 16, -1, 16, 4)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(v, dev) for v in (a, packed, corr, mult, np.zeros((rows, cols), y_dtype))]
    lib["main"](*args)
    np.testing.assert_array_equal(args[-1].numpy(), want)


def _kernels(mod) -> list[str]:
    return sorted(gv.name_hint for gv, f in mod.functions_items() if gv.name_hint.startswith("integer_"))


def _convs(mod) -> int:
    return mod["main"].script().count("R.nn.conv2d(")


@pytest.fixture(scope="module")
def wide_qdq():
    return quantize_qdq(fp32_wide_cnn())


def test_pass_takes_each_quantized_conv_on_a_vnni_cpu_only(wide_qdq):
    after = relax_through(wide_qdq, make_target("cpu", mcpu=ZEN4), last="IntegerConv")
    assert len(_kernels(after)) == 3 and _convs(after) == 0
    assert "metadata" in after["main"].script()  # the packed weights are constants of the call
    # the max pool between two quantized convs pools the integers (the same scale on both sides)
    pools = [b for blk in after["main"].body.blocks for b in blk.bindings if "max_pool2d" in str(getattr(b.value, "op", ""))]
    assert len(pools) == 1 and pools[0].var.ty.dtype == "uint8" and pools[0].var.name == "p1"
    avx2 = relax_through(wide_qdq, make_target("cpu", mcpu=ZEN3), last="IntegerConv")
    assert _kernels(avx2) == [] and _convs(avx2) == 3
    assert not has_vnni(make_target("cpu", triple="aarch64-linux-gnu", mcpu="cortex-a76"))


def test_pass_leaves_convs_it_cannot_compute():
    mod = relax_through(quantize_qdq(fp32_cnn()), make_target("cpu", mcpu=ZEN3), last="CanonicalizeBindings")
    assert integer_conv(mod, make_target("cpu", mcpu=ZEN3)).same_as(mod)  # no VNNI: nothing changes
    # a weight zero point: (x - x_zp) * (w - w_zp) no longer fits the kernel's int8 weights
    model = quantize_qdq(fp32_wide_cnn())
    for init in model.graph.initializer:
        if init.name.endswith("weight_zero_point") or init.name.startswith("w") and "zero_point" in init.name:
            init.CopyFrom(onnx.numpy_helper.from_array(np.ones(onnx.numpy_helper.to_array(init).shape, np.int8), init.name))
    mod = relax_through(model, make_target("cpu", mcpu=ZEN4), last="IntegerConv")
    assert _kernels(mod) == [] and _convs(mod) == 3


def _ort(model, feeds, optimized: bool):
    opts = ort.SessionOptions()
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@needs_vnni
@pytest.mark.parametrize("activations", ["uint8", "int8"])
def test_compiled_model_computes_onnxruntimes_fused_kernels(tmp_path, activations):
    """Through compile (its own check included): the same integers as onnxruntime's QLinearConv."""
    from core.compiler.compile import compile_model

    model = quantize_qdq(fp32_wide_cnn(seed=1), seed=1, activations=activations)
    path = tmp_path / "wide_qdq.onnx"
    onnx.save(model, path)
    art = compile_model(str(path), "cpu")
    kernels = {k: v for k, v in art.kernel_lineage.items() if k.startswith("integer_conv")}
    assert len(kernels) == 3
    # each kernel's time lands on its Conv, the Conv's DequantizeLinear inputs and its QuantizeLinear
    assert {"conv1", "conv2", "conv3"} <= {label for labels in kernels.values() for label in labels}
    assert all(any(l.endswith("_QuantizeLinear") for l in labels) and any(l.endswith("_DequantizeLinear") for l in labels)
               for labels in kernels.values())
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((2, 3, 15, 15)).astype(np.float32) * 2
        ours = art.run({"input": x})[0]
        np.testing.assert_array_equal(ours, _ort(model, {"input": x}, optimized=True))


@needs_vnni
def test_quantized_matmul_and_gemm_run_as_integer_kernels(tmp_path):
    """A 3-D MatMul (its rows viewed as one matrix) and a Gemm with transB and a bias: onnxruntime's integers."""
    from core.compiler.compile import compile_model

    model = quantize_qdq(fp32_linear())
    after = relax_through(model, make_target("cpu", mcpu=ZEN4), last="IntegerConv")
    assert len(_kernels(after)) == 2 and "R.matmul(" not in after["main"].script()
    path = tmp_path / "linear_qdq.onnx"
    onnx.save(model, path)
    art = compile_model(str(path), "cpu")
    kernels = {k: v for k, v in art.kernel_lineage.items() if k.startswith("integer_matmul")}
    assert {"mm1", "gemm"} <= {label for labels in kernels.values() for label in labels}
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 8, 64)).astype(np.float32) * 2
        np.testing.assert_array_equal(art.run({"x": x})[0], _ort(model, {"x": x}, optimized=True))


def test_the_pass_runs_before_the_weights_are_folded_on_cpus_only():
    from core.compiler.pipeline.pass_list import default_pipeline

    names = [s.name for s in default_pipeline(make_target("cpu"))]
    # FoldWeights would turn DequantizeLinear(int8 weight) into a float constant
    assert names.index("CanonicalizeBindings") < names.index("IntegerConv") < names.index("FoldWeights")
    assert "IntegerConv" not in [s.name for s in default_pipeline("cuda")]


def test_sums_that_could_leave_int32_keep_the_float_path():
    """A depth of 66,000: 255 * 128 * 66,000 > 2^31, so int32 sums could wrap; onnxruntime's int32 would too."""
    from onnx import TensorProto, helper, numpy_helper

    def model(depth: int) -> onnx.ModelProto:
        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array(np.array(0.02, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z"),
                 numpy_helper.from_array(rng.integers(-127, 128, (depth, 16)).astype(np.int8), "w"),
                 numpy_helper.from_array(np.full(16, 0.001, np.float32), "ws"), numpy_helper.from_array(np.zeros(16, np.int8), "wz")]
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
                 helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1), helper.make_node("MatMul", ["xd", "wd"], ["m"]),
                 helper.make_node("QuantizeLinear", ["m", "s", "z"], ["mq"]), helper.make_node("DequantizeLinear", ["mq", "s", "z"], ["y"])]
        graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, depth])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    zen4 = make_target("cpu", mcpu=ZEN4)
    assert len(_kernels(relax_through(model(64), zen4, last="IntegerConv"))) == 1
    assert _kernels(relax_through(model(66_000), zen4, last="IntegerConv")) == []


@needs_vnni
def test_channels_short_of_a_lane_block_are_padded_and_cut_off(tmp_path):
    """8 and 4 output channels: kernels over 16, the extra channels sliced off, onnxruntime's integers."""
    from core.compiler.compile import compile_model

    model = quantize_qdq(fp32_cnn())
    after = relax_through(model, make_target("cpu", mcpu=ZEN4), last="IntegerConv")
    assert len(_kernels(after)) == 2 and after["main"].script().count("R.strided_slice(") == 2
    path = tmp_path / "cnn_qdq.onnx"
    onnx.save(model, path)
    art = compile_model(str(path), "cpu")
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)
        np.testing.assert_array_equal(art.run({"input": x})[0], _ort(model, {"input": x}, optimized=True))


@pytest.mark.isa
def test_compile_for_this_host_takes_the_path_its_cpu_allows():
    """On CI's AVX2 rerun (AVX-512 masked off) the same model keeps the float path; else the int8 one."""
    after = relax_through(quantize_qdq(fp32_wide_cnn()), make_target("cpu"), last="IntegerConv")
    assert len(_kernels(after)) == (3 if has_vnni(make_target("cpu")) else 0)


@needs_vnni
def test_qlinear_conv_and_matmul_run_as_integer_kernels(tmp_path):
    """ONNX's QLinearConv and QLinearMatMul on uint8 model inputs (read in place at 16 bytes): the same
    kernels, onnxruntime's integers, each kernel's time on its node."""
    from core.compiler.compile import compile_model

    path = tmp_path / "qlinear.onnx"
    onnx.save(qlinear_ops(), path)
    art = compile_model(str(path), "cpu")
    kernels = {k: v for k, v in art.kernel_lineage.items() if k.startswith("integer_")}
    assert sorted(label for labels in kernels.values() for label in labels) == ["qconv", "qmatmul"]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for seed in range(3):
        rng = np.random.default_rng(seed)
        feeds = {"x": rng.integers(0, 256, (1, 8, 10, 10)).astype(np.uint8), "a": rng.integers(0, 256, (6, 32)).astype(np.uint8)}
        for ours, theirs in zip(art.run(feeds), session.run(None, feeds)):
            np.testing.assert_array_equal(ours, theirs)
