"""The transformers' parallel kernels split evenly over two threads: TVM gives each of T threads
ceil(n / T) iterations of a parallel loop of extent n (codegen_cpu's parallel launch), and every
iteration of a matmul's fused batch x row-tile x column-tile loop does the same work (padded
rows and columns included), so an odd extent leaves one thread an extra tile to wait for. ViT's
197 tokens, BERT's 128 and GPT-2's 64, AVX-512 and AVX2 tiles; schedules only (any host)."""
from __future__ import annotations

import re

import pytest

from benchmarks.architectures.transformers import bert_encoder, gpt2_blocks, vit_encoder
from tests.core.compiler.schedules.test_schedules import _fused

MODELS = {
    "vit": lambda: vit_encoder(layers=1),
    "bert": lambda: bert_encoder(layers=1),
    "gpt2": lambda: gpt2_blocks(layers=1),
}


def _parallel_extents(model, mcpu: str) -> dict[str, list[int]]:
    """Kernel name -> the extents of its parallel loops, as the CPU rules schedule it for `mcpu`."""
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu)
    mod = relax.transform.AttachAttrLayoutFreeBuffers()(_fused(model))
    extents = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            scheduled, _ = schedule_cpu_func(func, target)
            if scheduled is not None:
                found = re.findall(r"in T\.parallel\(T\.int64\((\d+)\)\)", scheduled.script())
                extents[gvar.name_hint] = [int(n) for n in found]
    return extents


@pytest.mark.slow
@pytest.mark.parametrize("mcpu", ["znver4", "znver3"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_transformer_matmuls_split_evenly_over_two_threads(name, mcpu):
    extents = _parallel_extents(MODELS[name](), mcpu)
    matmuls = {kernel: found for kernel, found in extents.items() if "matmul" in kernel and found}
    assert matmuls, extents  # the projections and the MLP run in parallel
    for kernel, found in matmuls.items():
        for n in found:
            # the thread with ceil(n / 2) iterations against a perfect half: within 1 %
            assert -(-n // 2) <= n / 2 * 1.01, f"{kernel}: a parallel loop of {n} iterations ({mcpu})"


def _residual_layer_norm(tokens: int, hidden: int):
    """x @ W + x -> LayerNormalization: a transformer's output projection and the norm after it."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / 16).astype(np.float32), "w"),
             numpy_helper.from_array(np.ones(hidden, np.float32), "g"), numpy_helper.from_array(np.zeros(hidden, np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "x"], ["r"]),
             helper.make_node("LayerNormalization", ["r", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    shape = [1, tokens, hidden]
    graph = helper.make_graph(nodes, "residual_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(("mcpu", "lanes", "registers"), [("znver4", 16, 32), ("znver3", 8, 16)])
def test_layer_norm_rows_split_as_the_matmul_before_it_wrote_them(mcpu, lanes, registers):
    """From 128 KiB (cpu_rows.ROWS_PARALLEL_MIN_BYTES) a layer norm's rows run in parallel, and the
    rows thread 0 normalizes are, within one register tile, the rows thread 0 of the matmul before
    it wrote (ViT's 197 tokens: 99 of them); a GPT-2-sized one (64 x 256, 64 KiB) stays on one thread."""
    from core.compiler.schedules.cpu_matmul import choose_matmul_tile

    extents = _parallel_extents(_residual_layer_norm(197, 192), mcpu)
    (norm,) = [found for kernel, found in extents.items() if "layer_norm" in kernel]
    (matmul,) = [found for kernel, found in extents.items() if "matmul" in kernel]
    assert norm == [197], extents
    ti, vb = choose_matmul_tile(197, 192, lanes, registers)
    row_tiles, col_tiles = -(-197 // ti), 192 // vb
    assert matmul == [row_tiles * col_tiles], (extents, ti, vb)  # batch x row tiles x column tiles, rows outer
    matmul_rows = -(-matmul[0] // 2) / col_tiles * ti  # thread 0's share, in rows (a part tile when odd)
    assert abs(matmul_rows - -(-197 // 2)) <= ti, (matmul_rows, ti)
    small = _parallel_extents(_residual_layer_norm(64, 256), mcpu)
    assert not [found for kernel, found in small.items() if "layer_norm" in kernel and found], small
