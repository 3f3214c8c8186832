"""Even parallel splits (core.compiler.schedules.cpu_balance): a depthwise conv or pool in NCHW
whose few channel blocks would split unevenly over the threads (TVM gives each of T threads
ceil(n/T) of a parallel loop's n iterations) is parallel over chunks of output rows as well. Structure checks on
scheduled TIR for named CPUs (AVX-512 and AVX2, nothing runs), and the re-scheduled kernels built
for this host against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through, scheduled_through

RTOL, ATOL = 1e-4, 1e-4


def _w(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _model(nodes, x_shape, y_shape, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "balance",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _max_pool() -> onnx.ModelProto:
    """Light ShuffleNet's first pool: 24 channels (3 blocks of 8), 3x3 stride 2, 112 -> 56."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return _model([node], [1, 24, 112, 112], [1, 24, 56, 56])


def _depthwise_nchw() -> onnx.ModelProto:
    """A depthwise conv left in NCHW: 48 channels (3 blocks of 16 with AVX-512, 6 of 8 with
    AVX2), 3x3 stride 2, 112 -> 56."""
    rng = np.random.default_rng(5)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4, group=48)
    return _model([node], [1, 48, 112, 112], [1, 48, 56, 56], [_w(rng, "w", (48, 1, 3, 3)), _w(rng, "b", (48,))])


MODELS = {"max_pool": (_max_pool, "max_pool2d", 24), "depthwise": (_depthwise_nchw, "conv2d", 48)}


def test_split_imbalance_is_the_longest_task_against_an_even_share():
    from core.compiler.schedules.cpu_balance import split_imbalance

    assert split_imbalance(3, 2) == pytest.approx(4 / 3)  # 2:1
    assert split_imbalance(7, 2) == pytest.approx(8 / 7)  # 4:3
    assert split_imbalance(12, 2) == split_imbalance(12, 4) == 1.0
    assert split_imbalance(1, 2) == 2.0  # one task, the other thread idle
    assert split_imbalance(14, 4) == pytest.approx(4 / 3.5)


def test_the_fewest_row_chunks_that_split_evenly_at_2_threads():
    from core.compiler.schedules.cpu_balance import (
        balanced_row_chunks,
        halo_min_rows,
        split_imbalance,
    )

    assert (halo_min_rows(3, 2), halo_min_rows(3, 1), halo_min_rows(5, 1), halo_min_rows(2, 2)) == (12, 48, 96, 4)
    assert balanced_row_chunks(3, 56, 12) == 2  # 6 iterations: 3:3
    assert balanced_row_chunks(3, 56, 4) == 2  # the fewest chunks that split evenly at 2 threads
    assert balanced_row_chunks(7, 28, 12) == 2  # 14: 7:7
    assert balanced_row_chunks(15, 28, 4) == 2  # 30: 15:15
    assert balanced_row_chunks(16, 28, 1) == 1  # even already
    assert balanced_row_chunks(27, 28, 1) == 1  # 14:13: close enough
    assert balanced_row_chunks(7, 28, 16) == 1  # no chunk of 16 rows or more to add
    assert balanced_row_chunks(13, 13, 1) == 13  # a prime row count: the rows one by one
    assert balanced_row_chunks(5, 12, 1) == 2  # 10: even at 2 threads, 3:3:2:2 at 4 (5 alone: 2:1:1:1)
    assert split_imbalance(10, 4) < split_imbalance(5, 4)


@pytest.mark.parametrize("cpu", ["znver4", "znver3"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_few_channel_blocks_share_the_parallel_loop_with_row_chunks(cpu, name):
    """Codegen only: the kernel's one parallel loop covers the channel blocks (a multiple of
    them) in an even number of iterations, and splits no worse at 4 threads than they alone."""
    import tvm

    from benchmarks.parallel import kernel_splits
    from core.compiler.schedules.cpu_balance import split_imbalance
    from core.compiler.target import vector_lanes
    from core.compiler.target import make_target

    build, kernel_name, channels = MODELS[name]
    target = make_target("cpu", mcpu=cpu)
    mod = scheduled_through(build(), target)
    funcs = [(g.name_hint, f) for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and kernel_name in g.name_hint]
    assert len(funcs) == 1, [g.name_hint for g in mod.functions]
    regions = kernel_splits(funcs[0][1], funcs[0][0]).regions
    assert len(regions) == 1, funcs[0][1].script()
    extent = regions[0].extent
    block = 8 if name == "max_pool" else vector_lanes(target)
    assert extent % (channels // block) == 0, extent
    assert split_imbalance(extent, 2) == 1.0, extent
    assert split_imbalance(extent, 4) <= split_imbalance(channels // block, 4), extent  # never worse at 4


@pytest.mark.isa
@pytest.mark.parametrize("name", sorted(MODELS))
def test_row_chunked_kernels_match_onnxruntime(name):
    """Built for this host (and in CI's AVX2 pass for AVX2), at 1 and 2 threads: every chunk
    copies the padded rows it reads, the rows at a chunk's edge too."""
    import tvm
    from tvm import relax

    from core.compiler.runtime.threads import runtime_threads
    from core.compiler.target import make_target

    model = MODELS[name][0]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    target = make_target("cpu")
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    for threads in (1, 2):
        with runtime_threads(threads):
            np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)
