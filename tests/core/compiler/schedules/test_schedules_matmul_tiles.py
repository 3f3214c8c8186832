"""GEMM register tiles hold enough accumulators to hide the FMA latency (cpu_matmul's
MIN_GEMM_ACCUMULATORS): AVX2 code for BERT's 128 and GPT-2's 64 tokens takes 6-row tiles of two
vectors (rows padded to whole tiles) instead of the 4-row divisor's 8 accumulators, and a GPT-2
block built that way matches onnxruntime. AVX2 code runs on every x86-64 host of this project."""
from __future__ import annotations

import re

import numpy as np
import pytest

from benchmarks.architectures.transformers import gpt2_blocks
from tests.helpers import random_feeds


def test_gemm_tiles_keep_twelve_accumulators_where_padding_is_small():
    from core.compiler.schedules.cpu_matmul import (
        MIN_GEMM_ACCUMULATORS,
        choose_matmul_tile,
    )

    assert MIN_GEMM_ACCUMULATORS == 12
    # AVX2 (8 lanes, 16 registers): 2 vectors a row, 6 rows at most
    assert choose_matmul_tile(64, 1024, 8, 16) == (6, 16)  # 66 rows computed, not 16 tiles of 4
    assert choose_matmul_tile(128, 256, 8, 16) == (6, 16)  # 132 rows
    assert choose_matmul_tile(8, 128, 8, 16) == (4, 16)  # 12 rows would pad half of them: 4 + 4
    assert choose_matmul_tile(50, 128, 8, 16) == (5, 16)  # 54 rows would pad more than 1/16
    assert choose_matmul_tile(16, 24, 8, 16) == (8, 8)  # one vector a row: 8 rows divide 16
    # AVX-512 (16 lanes, 32 registers): 8 rows x 2 vectors are 16 accumulators already
    assert choose_matmul_tile(128, 256, 16, 32) == (8, 32)
    assert choose_matmul_tile(64, 768, 16, 32) == (8, 32)
    for rows in range(2, 300):
        for lanes, registers in ((8, 16), (16, 32)):
            ti, vb = choose_matmul_tile(rows, 4 * lanes, lanes, registers)
            regs = vb // lanes
            assert ti * regs + regs + 1 <= registers, (rows, lanes, ti)
            padded = -rows % ti
            if ti * regs < MIN_GEMM_ACCUMULATORS and ti < rows:
                # fewer accumulators only where no taller tile pads at most 1/16 of the rows
                most = (registers - regs - 1) // regs
                assert all(t * regs < MIN_GEMM_ACCUMULATORS or -rows % t > rows // 16
                           for t in range(ti + 1, min(most, rows) + 1)), (rows, lanes, ti)
            assert padded == 0 or padded <= rows // 16 or rows > (registers - regs - 1) // regs, (rows, lanes, ti)


@pytest.mark.slow
def test_gpt2_block_with_avx2_six_row_tiles_matches_onnxruntime():
    """64 tokens as AVX2 code: the dense matmuls (QKV, projection, MLP with tanh GELU) take 6-row
    tiles with A's last row read again for the 2 padded rows, and the block's output matches
    onnxruntime's."""
    import tvm

    from core.compiler.compile import compile_model
    from core.compiler.check.reference import ort_run
    from core.compiler.target import make_target
    from core.model.onnx_io import load_model_bytes
    from tests.helpers import scheduled_through

    model = gpt2_blocks(layers=1, hidden=32, heads=2, seq=64)
    scheduled = scheduled_through(model, make_target("cpu", mattr="-avx512f"))
    dense = [f.script() for g, f in scheduled.functions_items()
             if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in g.name_hint and "prepacked" in g.name_hint]
    assert len(dense) >= 3, "the dense layers take packed weights"
    for text in dense:
        assert "T.unroll(T.int64(6))" in text and re.search(r"T\.min\(v_\w+, T\.int64\(63\)\)", text), text[:2000]
    art = compile_model(load_model_bytes(model.SerializeToString(), "gpt2.onnx"), "cpu", cpu_features="-avx512f")
    assert art.manifest.verification.checked
    feeds = random_feeds(model, seed=7)
    for ours, ref in zip(art.run(feeds), ort_run(model.SerializeToString(), feeds)):
        np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-4)
