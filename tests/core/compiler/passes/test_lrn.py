"""core.compiler.passes.lrn (FuseLRN) and its schedule (schedules.cpu_lrn): an LRN becomes one kernel in
the model's own layout. ISA-sensitive (the channel block is the target's vector width): in
.ci/run's AVX2 pass."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through


def _model(channels: int = 32, height: int = 9, width: int = 7, size: int = 5, beta: float = 0.75,
           groups: int = 1) -> onnx.ModelProto:
    """Conv 3x3 (16 -> channels, random weights) -> Relu -> LRN -> Conv 1x1, AlexNet's order:
    the LRN between two convs, blocked when the convs are (groups 1), NCHW when the conv
    before it is grouped (AlexNet's second LRN)."""
    rng = np.random.default_rng(7)
    w1 = numpy_helper.from_array((0.3 * rng.standard_normal((channels, 16 // groups, 3, 3))).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((0.1 * rng.standard_normal((16, channels, 1, 1))).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], group=groups, name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("LRN", ["r"], ["n"], size=size, alpha=1e-3, beta=beta, bias=1.5, name="lrn"),
        helper.make_node("Conv", ["n", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(nodes, "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, height, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, height, width])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _main_text(model, last: str = "FuseLRN") -> str:
    from core.compiler.target import make_target

    return relax_through(model, make_target("cpu"), last)["main"].script(show_meta=False)


@pytest.mark.isa
@pytest.mark.parametrize("groups, kernel", [(1, "lrn_nchwc"), (2, "lrn_nchw")])
def test_lrn_is_one_kernel_without_layout_copies(groups, kernel):
    """Seven ops, the avg_pool3d and (blocked) the two layout transforms around it, become one call."""
    before = _main_text(_model(groups=groups), "ConvertLayoutNCHWc")
    text = _main_text(_model(groups=groups))
    assert "R.nn.avg_pool3d" in before and "R.power" in before
    for gone in ("R.nn.avg_pool3d", "R.power", "R.divide", "R.multiply"):
        assert gone not in text, gone
    assert text.count(f"R.call_tir({kernel},") == 1, text
    if groups == 1:
        assert "R.layout_transform" in before.split("R.nn.avg_pool3d")[0].split("R.nn.relu")[1]
        between = text.split("R.nn.relu")[1].split("R.nn.conv2d")[0]
        assert "R.layout_transform" not in between  # the blocked region is not left for the LRN


@pytest.mark.isa
@pytest.mark.parametrize("kwargs", [
    {},
    {"channels": 96, "height": 13, "width": 11},  # AlexNet's channels: windows across six blocks
    {"channels": 48, "size": 3, "height": 5, "width": 6},
    {"channels": 32, "size": 7, "beta": 0.6},  # a wider window than a quarter block, TVM's pow
    {"channels": 32, "groups": 2},  # NCHW
])
def test_fused_lrn_matches_onnxruntime(tmp_path, kwargs):
    from core.compiler.compile import compile_model

    model = _model(**kwargs)
    path = tmp_path / "lrn.onnx"
    onnx.save(model, str(path))
    artifact = compile_model(str(path), "cpu", verify=False)
    x = (3 * np.random.default_rng(1).standard_normal((1, 16, kwargs.get("height", 9), kwargs.get("width", 7)))).astype(np.float32)
    ours = artifact.run({"x": x})[0]
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.isa
def test_lrn_kernel_is_vectorized_and_reads_whole_blocks():
    """The schedule rule takes the kernel (not the catch-all), and every vector of x the squares
    read is one block: the squares' row is computed whole, not from the middle of a block."""
    from tvm import te

    from core.compiler.passes.lrn import lrn_nchwc
    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import vector_lanes
    from core.compiler.target import make_target

    target = make_target("cpu")
    block = vector_lanes(target)
    x = te.placeholder((1, 96 // block, 13, 11, block), "float32", name="x")
    func = te.create_prim_func([x, lrn_nchwc(x, 5, 1e-3 / 5, 1.5, 0.75)])
    scheduled, rule = schedule_cpu_func(func, target)
    assert rule == "cpu.LRN"
    text = scheduled.script()
    assert text.count("T.vectorized") == 2 and "T.where" not in text
    assert f"sblock_alloc_buffer((1, 13, 11, {96 + 2 * block}))" in text



def _lrn_numpy(x, size, alpha, bias, beta):
    """ONNX's LRN of an NCHW array, as its reference implementation writes it."""
    squares = np.zeros_like(x)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + size // 2)
        squares[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * squares) ** beta


@pytest.mark.isa
def test_parallel_rows_match_numpy():
    """A map large enough to split its rows over two threads (each with its own squares row)."""
    import tvm
    from tvm import te

    from core.compiler.passes.lrn import lrn_nchwc
    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import vector_lanes
    from core.compiler.runtime.threads import runtime_threads
    from core.compiler.target import make_target

    target = make_target("cpu")
    block = vector_lanes(target)
    shape = (1, 96 // block, 27, 27, block)
    x = te.placeholder(shape, "float32", name="x")
    scheduled, _ = schedule_cpu_func(te.create_prim_func([x, lrn_nchwc(x, 5, 1e-4 / 5, 1.0, 0.75)]), target)
    assert "T.parallel" in scheduled.script()
    kernel = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
    data = (4 * np.random.default_rng(2).standard_normal(shape)).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    with runtime_threads(2):
        kernel(tvm.runtime.tensor(data), out)
    plain = data.transpose(0, 1, 4, 2, 3).reshape(1, 96, 27, 27)
    ref = _lrn_numpy(plain.astype(np.float64), 5, 1e-4, 1.0, 0.75)
    np.testing.assert_allclose(out.numpy().transpose(0, 1, 4, 2, 3).reshape(1, 96, 27, 27), ref, rtol=2e-6, atol=1e-6)

def test_lrn_in_the_lowering_steps():
    """FuseLRN is a step of its own in the CPU pipeline (after the layout pass), not on GPUs."""
    from core.compiler.pipeline.pass_list import PASSES, default_pipeline

    names = [s.name for s in default_pipeline("cpu")]
    assert names.index("FuseLRN") == names.index("ConvertLayoutNCHWc") + 1
    assert PASSES["FuseLRN"].level == "graph"
    assert "FuseLRN" not in [s.name for s in default_pipeline("cuda")]


def test_lrn_lowering_stage_shows_the_change():
    from core.compiler.lowering import lower
    from core.model.onnx_io import load_model_bytes

    graph = load_model_bytes(_model().SerializeToString(), "lrn.onnx")
    stages = lower(graph, "cpu", target_code=False)
    stage = next(s for s in stages if s.name == "FuseLRN")
    assert stage.changed and "lrn_nchw" in stage.text and "R.nn.avg_pool3d" not in stage.text


def test_other_pools_and_powers_are_left_alone():
    """A 3-D average pool over another axis, or without the importer's padding, is no LRN."""
    from core.compiler.passes.lrn import fuse_lrn
    from core.compiler.target import make_target

    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1, 8, 5, 5] x) => (float[1, 8, 5, 5] y)
    <float a = {0.001}, float b = {1.0}, float p = {0.75}, int64[5] s5 = {1, 1, 8, 5, 5}, int64[4] s4 = {1, 8, 5, 5}>
    {
        sq = Mul(x, x)
        e = Reshape(sq, s5)
        pooled = AveragePool <kernel_shape = [1, 3, 1], pads = [0, 1, 0, 0, 1, 0]> (e)
        s = Reshape(pooled, s4)
        m = Mul(s, a)
        d = Add(m, b)
        q = Pow(d, p)
        y = Div(x, q)
    }
    """
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    mod = relax_through(model, make_target("cpu"), "ConvertLayoutNCHWc")
    assert fuse_lrn(mod).same_as(mod)


@pytest.mark.isa
def test_alexnet_through_both_lrns_matches_onnxruntime(tmp_path):
    """The light AlexNet up to the pool after its second LRN: one LRN blocked (after the 3 -> 96
    conv), one in NCHW (after the grouped conv), each one kernel that lineage names it by."""
    from core.compiler.compile import compile_model
    from tests.conftest import light
    from tests.helpers import random_feeds

    model = onnx.load(str(light("bvlc_alexnet")))
    lrns = [n for n in model.graph.node if n.op_type == "LRN"]
    assert len(lrns) == 2
    model = onnx.shape_inference.infer_shapes(model)
    pool = next(n for n in model.graph.node if lrns[1].output[0] in n.input)
    cut = onnx.utils.Extractor(model).extract_model([model.graph.input[0].name], [pool.output[0]])
    cut.ir_version = max(cut.ir_version, 4)  # its initializers are no longer graph inputs
    path = tmp_path / "alexnet_lrn.onnx"
    onnx.save(cut, str(path))
    artifact = compile_model(str(path), "cpu", verify=False)
    lrn_kernels = sorted(k for k in artifact.kernel_lineage if k.startswith("lrn_"))
    assert len(lrn_kernels) == 2 and any(k.startswith("lrn_nchwc") for k in lrn_kernels), artifact.kernel_lineage
    assert {name for k in lrn_kernels for name in artifact.kernel_lineage[k]} == {n.name for n in lrns}
    feeds = random_feeds(cut)
    (ref,) = ort_run(cut, feeds)
    (ours,) = artifact.run(feeds)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
