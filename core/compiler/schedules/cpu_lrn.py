"""CPU schedule for the LRN kernels core.compiler.passes.lrn (the FuseLRN pass) writes: `LRN`.

Blocked (`lrn_nchwc`): loops n, h (fused, parallel when the work pays) | "lrn_square" for the
row: w | blocks | b (vectorized) | then w | C/b | b (vectorized). The squares of one image row
(W x (C + zero blocks) floats: 56 KiB for zfnet512's 109 x 96 channels) are written and read
back while in L2, so the kernel's traffic to memory is x read once and y written once; each
output vector sums `size` unaligned vector loads of its pixel's squares. (A scratch per pixel
would be a stack array only under 1 KiB, 256 channels do not fit, and a heap workspace per pixel
costs more than the squares: core.compiler.schedules.cpu_common.ACCUMULATOR_SCOPE.)

Plain NCHW (`lrn_nchw`, an LRN between NCHW ops: AlexNet's second, before its grouped conv):
one elementwise-shaped block, scheduled as any (cpu_common.schedule_injective): rows vectorized,
the `size` planes' rows read in place.
"""
from __future__ import annotations

import logging

from ..target import vector_lanes
from .cpu_common import (
    PARALLEL_MIN_WORK,
    const_int,
    root_blocks,
    schedule_injective,
)

__all__ = ["LRN"]

logger = logging.getLogger(__name__)


class LRN:
    """The local response normalization kernels of core.compiler.passes.lrn."""

    name = "cpu.LRN"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        blocks = {sch.get(b).name_hint: b for b in root_blocks(sch)}
        lanes = vector_lanes(target)
        if set(blocks) == {"lrn_nchw"}:
            schedule_injective(sch, blocks["lrn_nchw"], lanes)
            return sch
        if set(blocks) != {"lrn_square", "lrn_nchwc"}:
            return None
        out, squares = blocks["lrn_nchwc"], blocks["lrn_square"]
        n, chunks, height, width, block = sch.get_loops(out)
        extents = [const_int(sch.get(loop).extent) for loop in (n, chunks, height, width, block)]
        if any(e is None for e in extents):
            return None
        sch.reorder(n, height, width, chunks, block)
        i, y, _, row = sch.get_loops(squares)  # row: a pixel's squares, zero blocks included
        _, lane = sch.split(row, [None, extents[4]])
        # one loop over image rows for both stages: each row's squares computed whole (a
        # compute_at would compute only the span read, which starts mid-block and turns every
        # vector of x into a gather)
        rows = sch.merge(sch.fuse(i, y), sch.fuse(n, height))
        sch.vectorize(lane)
        sch.vectorize(block)
        work = 1
        for e in extents:
            work *= e
        if work >= PARALLEL_MIN_WORK and extents[0] * extents[2] >= 2:
            sch.parallel(rows)
        return sch
