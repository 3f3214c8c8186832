"""The transformers' parallel kernels split evenly over two threads: TVM gives each of T threads
ceil(n / T) iterations of a parallel loop of extent n (codegen_cpu's parallel launch), and every
iteration of a matmul's fused batch x row-tile x column-tile loop does the same work (padded
rows and columns included), so an odd extent leaves one thread an extra tile to wait for. ViT's
197 tokens, BERT's 128 and GPT-2's 64, AVX-512 and AVX2 tiles; schedules only (any host)."""
from __future__ import annotations

import re

import pytest

from core.model.architectures.transformers import bert_encoder, gpt2_blocks, vit_encoder
from tests.core.compiler.test_schedules import _fused

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
