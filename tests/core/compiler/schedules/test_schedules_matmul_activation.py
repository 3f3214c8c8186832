"""core.compiler.schedules.cpu_matmul on matmuls whose right operand is an activation (mm_relu,
attention's probs x V): a row-major B of cache size is read in place by the register tile (no
packing copy at every call), a big one keeps the packed copy, and results equal
numpy's / onnxruntime's through the real schedule and build. Structure checks read the scheduled
TIR, so they hold with AVX2 and AVX-512 code."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.helpers import ort_run, scheduled_through

RTOL, ATOL = 1e-4, 1e-4


def _two_input_matmul(a_shape, b_shape) -> onnx.ModelProto:
    """Relu(A @ B) with both operands model inputs."""
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    cols = b_shape[-1]
    graph = helper.make_graph(
        nodes,
        "mm_relu",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape)),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*a_shape[:-1], cols])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def _matmul_blocks(scheduled) -> list[str]:
    """Names of the blocks in the one matmul kernel."""
    import tvm

    funcs = [f for g, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in g.name_hint]
    assert len(funcs) == 1, [g.name_hint for g in scheduled.functions]
    return [name for name in re.findall(r'T\.sblock\("([^"]+)"', funcs[0].script()) if name != "root"]


def _run(scheduled, feeds, target) -> np.ndarray:
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()


def _feeds(a_shape, b_shape, seed):
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}


@pytest.mark.isa
@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((128, 128), (128, 128)), ((37, 200), (200, 24)), ((3, 37, 200), (3, 200, 24))],
    ids=["128x128x128", "37x200x24", "batched-3x37x200x24"],
)
def test_activation_b_is_read_in_place_and_matches(target, a_shape, b_shape):
    model = _two_input_matmul(a_shape, b_shape)
    scheduled = scheduled_through(model, target)
    blocks = _matmul_blocks(scheduled)
    # only the accumulation (init, update) and the fused relu write-back: no copy of B
    assert len(blocks) == 3 and not any("global" in b for b in blocks), blocks
    feeds = _feeds(a_shape, b_shape, 7)
    ours = _run(scheduled, feeds, target)
    np.testing.assert_allclose(ours, np.maximum(feeds["a"] @ feeds["b"], 0), rtol=RTOL, atol=ATOL)
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=ATOL)


def test_big_activation_b_keeps_the_packed_copy(target):
    from core.compiler.schedules import cpu_matmul

    big_depth = cpu_matmul.ACTIVATION_B_IN_PLACE_MAX_BYTES // (4 * 256) + 16
    big = _matmul_blocks(scheduled_through(_two_input_matmul((32, big_depth), (big_depth, 256)), target))
    assert len(big) == 4 and any("global" in b for b in big), big


def test_in_place_tiles_are_taller_when_the_padding_is_small():
    from core.compiler.schedules.cpu_matmul import in_place_tile_rows

    assert in_place_tile_rows(128, 4, 16, 8, 16) == 6  # AVX2: 128 rows -> 22 tiles of 6 (132)
    assert in_place_tile_rows(128, 8, 32, 16, 32) == 13  # AVX-512: 10 tiles of 13 (130)
    assert in_place_tile_rows(128, 8, 64, 16, 32) == 8  # four vectors a row: 6 rows at most, 8 kept
    assert in_place_tile_rows(20, 4, 16, 8, 16) == 5  # 5 divides 20
    assert in_place_tile_rows(17, 1, 16, 8, 16) == 6  # 18 rows: one padded row is within 1/16
    assert in_place_tile_rows(13, 1, 16, 8, 16) == 1  # a prime under 16: no padding allowed, no divisor
