"""core.compiler.passes.layout.nchwc: the graph-level channel-blocked layout.

The pass blocks channels by the target's vector width (16 with AVX-512, 8 with AVX2: checked on
the Relax module, no code run, so on any host), converts once at the entry and exit of the
blocked region, leaves what does not fit in NCHW (grouped convs, channel counts the block does not
divide, an image's 3 channels as the input block), and every compiled model still matches
onnxruntime (compile_model's own verification, on this host's ISA)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import relax_through


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _bn(rng, prefix, channels):
    return [
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32), f"{prefix}_s"),
        numpy_helper.from_array((0.1 * rng.standard_normal(channels)).astype(np.float32), f"{prefix}_b"),
        numpy_helper.from_array((0.1 * rng.standard_normal(channels)).astype(np.float32), f"{prefix}_m"),
        numpy_helper.from_array((1 + 0.1 * rng.random(channels)).astype(np.float32), f"{prefix}_v"),
    ]


def _model(nodes, inits, x_shape, y_shape, name) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _mixed_cnn() -> onnx.ModelProto:
    """An image stem (3 input channels, stride 2), conv+BN+ReLU, a residual Sum, max and average
    pooling, an inception-style concat of a 1x1 and a strided 3x3 branch, a grouped conv,
    a 24-channel conv (16 does not divide it, 8 does), a per-channel Mul with a C x 1 x 1 scale,
    and a dense head."""
    rng = np.random.default_rng(0)
    inits = [
        _weight(rng, "w0", (32, 3, 3, 3)), *_bn(rng, "bn0", 32),
        _weight(rng, "w1", (32, 32, 3, 3)), _weight(rng, "b1", (32,)),
        _weight(rng, "wa", (16, 32, 1, 1)),
        _weight(rng, "wb", (32, 32, 3, 3)),
        _weight(rng, "wg", (48, 12, 3, 3)),  # 4 groups: stays NCHW
        _weight(rng, "w24", (24, 48, 1, 1)),
        _weight(rng, "w5", (32, 24, 3, 3)),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal((32, 1, 1))).astype(np.float32), "scale"),
        _weight(rng, "fc", (32, 10)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c0", "bn0_s", "bn0_b", "bn0_m", "bn0_v"], ["n0"]),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Sum", ["c1", "r0"], ["s1"]),
        helper.make_node("Relu", ["s1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "wa"], ["ba"], kernel_shape=[1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "wb"], ["bb"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Concat", ["ba", "bb"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "wg"], ["g"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=4),
        helper.make_node("Conv", ["g", "w24"], ["c24"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c24"], ["r24"]),
        helper.make_node("Conv", ["r24", "w5"], ["c5"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c5", "scale"], ["m5"]),
        helper.make_node("AveragePool", ["m5"], ["a5"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["a5"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    return _model(nodes, inits, [1, 3, 64, 64], [1, 10], "nchwc_mixed")


def _save(model) -> str:
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


def _conv_layouts(mod) -> list[tuple[str, str, str]]:
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d":
            found.append((str(expr.attrs.data_layout), str(expr.attrs.kernel_layout), str(expr.attrs.out_layout)))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def _transforms(mod) -> int:
    return mod["main"].script(show_meta=False).count("R.layout_transform(")


@pytest.mark.parametrize(
    "mcpu,mattr,block",
    [("znver4", None, 16), ("znver4", ["-avx512f"], 8), ("znver3", None, 8)],
)
def test_channels_are_blocked_by_the_targets_vector_width(mcpu, mattr, block):
    """Codegen-free (any host): AVX-512 blocks by 16, AVX2 by 8; what the block does not fit stays NCHW."""
    from core.compiler.target import make_target

    mod = relax_through(_mixed_cnn(), make_target("cpu", mcpu=mcpu, mattr=mattr), "ConvertLayoutNCHWc")
    layouts = _conv_layouts(mod)
    assert len(layouts) == 7
    blocked = f"NCHW{block}c"
    # the image stem: 3 input channels as the input block, output blocked
    assert layouts[0] == ("NCHW3c", f"OIHW3i{block}o", blocked)
    assert ("NCHW", "OIHW", "NCHW") in layouts  # the grouped conv
    assert sum(out == blocked for _, _, out in layouts) == (6 if block == 8 else 5)  # 24 outputs: blocked by 8 only
    # weights, biases and batch-norm constants were transformed ahead of time, not at run time
    text = mod["main"].script(show_meta=False)
    assert "layout_transform(metadata" not in text


def test_blocked_region_is_entered_and_left_once():
    """A chain of convs, BN, residual adds, pooling and concat: one transform in, one out."""
    from core.compiler.target import make_target

    rng = np.random.default_rng(3)
    inits = [_weight(rng, "w0", (16, 16, 3, 3)), *_bn(rng, "bn", 16), _weight(rng, "w1", (16, 16, 1, 1)), _weight(rng, "w2", (16, 32, 3, 3))]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m", "bn_v"], ["n0"]),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], kernel_shape=[1, 1]),
        helper.make_node("Sum", ["c1", "x"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["p", "r0"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    model = _model(nodes, inits, [1, 16, 16, 16], [1, 16, 8, 8], "chain")
    mod = relax_through(model, make_target("cpu", mcpu="znver4"), "ConvertLayoutNCHWc")
    assert all(out == "NCHW16c" for _, _, out in _conv_layouts(mod))
    assert _transforms(mod) == 2


def test_pass_is_in_the_cpu_pipeline_only():
    from core.compiler.pipeline.pass_list import default_pipeline

    cpu = [s.name for s in default_pipeline("cpu")]
    assert cpu.index("FoldWeights") < cpu.index("ConvertLayoutNCHWc") < cpu.index("LegalizeOps")
    assert "ConvertLayoutNCHWc" not in [s.name for s in default_pipeline("cuda")]


def test_layout_transform_numpy_matches_relax():
    """FoldWeights computes weight transforms with numpy: the same values relax computes."""
    import tvm
    from tvm import relax, tirx

    from core.compiler.passes.layout.nchwc import layout_transform_numpy

    w = np.random.default_rng(0).standard_normal((32, 24, 3, 3)).astype(np.float32)
    index_map = tirx.IndexMap.from_func(lambda o, i, h, k: (o // 16, i // 8, h, k, i % 8, o % 16))
    ours = layout_transform_numpy(w, index_map)
    x = relax.Var("w", relax.TensorType(shape=w.shape, dtype="float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        out = bb.emit(relax.op.layout_transform(x, index_map))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps()(bb.get())
    ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
    ref = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(w)).numpy()
    np.testing.assert_array_equal(ours, ref)
    # a map that pads (24 channels in blocks of 16) is left to TVM
    assert layout_transform_numpy(w, tirx.IndexMap.from_func(lambda o, i, h, k: (o, i // 16, h, k, i % 16))) is None


@pytest.mark.isa
@pytest.mark.slow
def test_blocked_model_matches_onnxruntime_and_uses_the_blocked_rule():
    """Compiled for this host (whatever its ISA) and verified against onnxruntime by compile_model."""
    from core.compiler.compile import compile_model

    art = compile_model(_save(_mixed_cnn()), "cpu", verify=True)
    names = list(art.kernel_lineage)
    assert any("conv2d_NCHWc" in n for n in names), names
    assert any("conv2d" in n and "NCHWc" not in n for n in names), "the grouped conv should stay NCHW"


@pytest.mark.slow
def test_avx2_code_on_this_host_matches_onnxruntime():
    """The same model with 8-channel blocks (AVX2 code runs on AVX-512 hosts too)."""
    import tvm
    from tvm import relax

    from core.compiler.target import host_cpu, make_target
    from tests.helpers import ort_run

    model = _mixed_cnn()
    target = make_target("cpu", mcpu=host_cpu(), mattr=["-avx512f"])
    mod = relax_through(model, target)
    assert "conv2d_NCHWc" in mod.script(show_meta=False)
    x = np.random.default_rng(5).standard_normal((1, 3, 64, 64)).astype(np.float32)
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    ours = vm["main"](tvm.runtime.tensor(x)).numpy()
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-4)


def _conv_then(node, inits, y_shape):
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), node]
    return _model(nodes, [_weight(rng, "w", (32, 16, 3, 3)), *inits], [1, 16, 8, 8], y_shape, "conv_then")


@pytest.mark.isa
@pytest.mark.parametrize("case", ["reduce_channels", "prelu"])
def test_a_model_with_an_op_topi_cannot_build_blocked_stays_nchw_and_compiles(case):
    """relax's layout inference blocks PRelu's select, which LegalizeOps then cannot build: such a
    model stays NCHW (as before the pass) and still matches. (A mean over the channel axis used to
    be such a case; it now compiles blocked.)"""
    from core.compiler.compile import compile_model
    from core.compiler.target import make_target

    if case == "reduce_channels":
        model = _conv_then(helper.make_node("ReduceMean", ["c"], ["y"], axes=[1], keepdims=1), [], [1, 1, 8, 8])
    else:
        slope = numpy_helper.from_array(np.full((32, 1, 1), 0.1, np.float32), "slope")
        model = _conv_then(helper.make_node("PRelu", ["c", "slope"], ["y"]), [slope], [1, 32, 8, 8])
    mod = relax_through(model, make_target("cpu", mcpu="znver4"), "ConvertLayoutNCHWc")
    if case == "reduce_channels":
        # the mean over the channel axis leaves [1, 1, 8, 8, 1], which goes back to NCHW as the
        # reshape it is (layout_nchwc.transforms_as_reshapes) rather than a transform LegalizeOps
        # could not build: the conv stays blocked
        assert _conv_layouts(mod) == [("NCHW16c", "OIHW16i16o", "NCHW16c")] and _transforms(mod) == 1
        assert mod["main"].script(show_meta=False).count("R.reshape(") == 1
    else:
        assert _conv_layouts(mod) == [("NCHW", "OIHW", "NCHW")] and _transforms(mod) == 0
    compile_model(_save(model), "cpu", verify=True)  # raises on a mismatch


@pytest.mark.isa
@pytest.mark.parametrize("bias_shape", [(1, 1, 8, 8), (1, 8, 1), (8,), (8, 1)])
def test_a_constant_varying_over_the_image_is_blocked_with_its_conv(bias_shape):
    """An Add of a constant with one channel that varies over H or W (a positional bias, a row
    scale) between two convs: repeated over the channels, it is blocked like an activation. Before,
    relax's layout inference failed on it ("Cannot broadcast from 5 to 4") and the whole model
    stayed NCHW."""
    from core.compiler.compile import compile_model
    from core.compiler.target import make_target

    rng = np.random.default_rng(7)
    bias = numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "pos")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "pos"], ["a"]),
        helper.make_node("Conv", ["a", "w2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    model = _model(nodes, [_weight(rng, "w", (32, 16, 3, 3)), bias, _weight(rng, "w2", (32, 32, 3, 3))],
                   [1, 16, 8, 8], [1, 32, 8, 8], "positional_bias")
    mod = relax_through(model, make_target("cpu", mcpu="znver4"), "ConvertLayoutNCHWc")
    assert [out for _, _, out in _conv_layouts(mod)] == ["NCHW16c", "NCHW16c"]
    assert _transforms(mod) == 2  # in once, out once: none around the Add
    compile_model(_save(model), "cpu", verify=True)  # raises on a mismatch
