"""core.compiler.schedules.cpu_matmul on GEMVs (batch-1 dense layers, classifiers): four-vector
column tiles (padded when the columns are not a multiple), the column tiles split over the
threads when the weight is big enough for a second core's bandwidth to pay, and results equal to
onnxruntime's. Structure checks read the scheduled TIR (the vector width comes from the target,
so they hold with AVX2 and AVX-512 code)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, scheduled_through

RTOL, ATOL = 1e-3, 1e-4


def _gemv_model(depth: int, cols: int, trans_b: bool = False) -> onnx.ModelProto:
    """x[1, depth] @ W + b, then HardSwish (a classifier head's epilogue)."""
    rng = np.random.default_rng(11)
    shape = (cols, depth) if trans_b else (depth, cols)
    w = (rng.standard_normal(shape) / np.sqrt(depth)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cols)).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=int(trans_b)),
        helper.make_node("HardSwish", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gemv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def _run(scheduled, feeds, target) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()


def _gemv_kernel(scheduled):
    import tvm

    funcs = [f for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in g.name_hint]
    assert len(funcs) == 1, [g.name_hint for g in scheduled.functions]
    return funcs[0]


def _matmul_loops(func) -> list:
    """The loops around the matmul's accumulating block, outermost first (tirx.For nodes)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    return [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("matmul_update"))]


def _parallel_loops(func) -> list:
    import tvm

    return [loop for loop in _matmul_loops(func) if loop.kind == tvm.tirx.ForKind.PARALLEL]


@pytest.mark.isa
@pytest.mark.parametrize("trans_b", [False, True])
def test_big_gemv_splits_its_column_tiles_over_the_threads(target, trans_b):
    """256 x 1000 (1 MB of weight, 0.26 M multiply-adds: under the GEMM's parallel threshold): the
    columns are padded to four-vector tiles and the tile loop, around the whole reduction, runs in
    parallel; the padding never reaches the output."""
    import tvm

    from core.compiler.target import vector_lanes

    depth, cols = 256, 1000
    model = _gemv_model(depth, cols, trans_b)
    scheduled = scheduled_through(model, target)
    func = _gemv_kernel(scheduled)
    width = 4 * vector_lanes(target)
    loops = _matmul_loops(func)
    kinds = [loop.kind for loop in loops]
    assert kinds.count(tvm.tirx.ForKind.PARALLEL) == 1, func.script()
    parallel = loops[kinds.index(tvm.tirx.ForKind.PARALLEL)]
    assert int(parallel.extent) == -(-cols // width)  # one iteration per column tile
    inner = loops[kinds.index(tvm.tirx.ForKind.PARALLEL) + 1 :]
    assert any(int(loop.extent) == depth for loop in inner), "the reduction is not inside the parallel tile loop"
    assert inner[-1].kind == tvm.tirx.ForKind.VECTORIZED and int(inner[-1].extent) == width
    feeds = {"x": np.random.default_rng(12).standard_normal((1, depth)).astype(np.float32)}
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(_run(scheduled, feeds, target), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.isa
def test_small_gemv_stays_on_one_thread(target):
    """64 x 48 (12 KB of weight): waking the pool costs more than a second core saves."""
    model = _gemv_model(64, 48)
    scheduled = scheduled_through(model, target)
    assert _parallel_loops(_gemv_kernel(scheduled)) == []
    feeds = {"x": np.random.default_rng(13).standard_normal((1, 64)).astype(np.float32)}
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(_run(scheduled, feeds, target), ref, rtol=RTOL, atol=ATOL)


def test_gemv_tiles_and_the_parallel_rule():
    from core.compiler.schedules.cpu_matmul import (
        choose_matmul_tile,
        gemv_columns,
        runs_parallel,
    )

    assert gemv_columns(1000, 16) == 64  # padded to 1024: 2.4% more weight, four accumulator chains
    assert gemv_columns(1000, 8) == 32
    assert gemv_columns(48, 16) == 48  # three whole vectors, no padding
    assert gemv_columns(10, 8) is None  # padding would more than double the weight
    assert choose_matmul_tile(1, 1000, 16, 32) == (1, 64)
    assert choose_matmul_tile(1, 1000, 16, 32, pad_gemv=False) == (1, 20)  # symbolic rows: no GEMV padding
    assert runs_parallel(1, 1000, 1024)  # mobilenet_v3_small's classifier: 4 MB of weight
    assert runs_parallel(1, 1024, 576)  # its 576 -> 1024 layer: 2.3 MB
    assert not runs_parallel(1, 128, 784)  # the mlp sample's 400 KB GEMV: one thread
    assert not runs_parallel(64, 48, 64)  # a small GEMM: too few multiply-adds
    assert runs_parallel(197, 768, 768)  # a transformer's dense layer: a GEMM, parallel by work
    assert not runs_parallel(8, 1000, 64)  # 8 rows: not a GEMV, and 0.5 M multiply-adds


def _pooled_conv_model(cin: int, cout: int) -> onnx.ModelProto:
    """GlobalAveragePool then a 1x1 conv + ReLU: a squeeze-excitation conv on one pixel."""
    rng = np.random.default_rng(14)
    w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cout)).astype(np.float32)
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["p"]),
        helper.make_node("Conv", ["p", "w", "b"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "pooled_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, 1, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.isa
def test_one_pixel_conv_keeps_several_channel_blocks_in_registers(target):
    """A conv whose output is one pixel has no columns to tile: its register tile is several
    output-channel blocks (independent accumulator chains), unrolled around the vector of one block."""
    import tvm
    from tvm import s_tir

    from core.compiler.schedules.cpu_conv_nchwc import pixel_channel_blocks

    assert pixel_channel_blocks(36, 1) == 4 and pixel_channel_blocks(9, 1) == 3 and pixel_channel_blocks(7, 1) == 1
    assert pixel_channel_blocks(36, 49) == 1  # a plane has columns to tile instead
    model = _pooled_conv_model(96, 192)
    scheduled = scheduled_through(model, target)
    (func,) = [f for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "conv2d_NCHWc" in g.name_hint]
    sch = s_tir.Schedule(func)
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_sblock("conv2d_NCHWc_update"))]
    chunks = 192 // int(loops[-1].extent)  # the vectorized loop is one channel block
    assert loops[-1].kind == tvm.tirx.ForKind.VECTORIZED
    blocks = pixel_channel_blocks(chunks, 1)
    assert blocks > 1 and any(loop.kind == tvm.tirx.ForKind.UNROLLED and int(loop.extent) == blocks for loop in loops[:-1])
    feeds = {"x": np.random.default_rng(15).standard_normal((1, 96, 7, 7)).astype(np.float32)}
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(_run(scheduled, feeds, target), ref, rtol=RTOL, atol=ATOL)
