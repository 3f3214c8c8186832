"""CPU schedule for max / average pooling windows in channel-blocked layout (NCHW{b}c).

Inside a blocked region (core.compiler.passes.layout.nchwc) the pools between convolutions take the
blocked layout too: TOPI's `pool2d` on [n, C/b, h, w, b] writes a block "pool_max" or
"pool_sum" (iterators n, c, oh, ow, b | kh, kw), an average pool divides in a block after it,
and a padded pool first copies its input into "pad_temp". Left to the generic rule, each output
pixel was accumulated in memory, the padding was a pass of its own and the b lanes were left to
LLVM, well behind onnxruntime (docs/performance.md: Blocked pools).

Here, as the convolution rules do: T output columns x b channels are accumulated in vector
registers over the window (loops n, c, oh (fused, parallel) | ow/T | kh, kw | T (unrolled) | b
(vectorized)), the padding is read in place (a select on the window's position, no copy) and the
average's divisor is applied in the write-back. Returns None for any other function (global
pools: cpu_depthwise_nchwc.GlobalPoolNCHWc).
"""
from __future__ import annotations

import logging

from ..target import vector_lanes
from .cpu_common import (
    PARALLEL_MIN_WORK,
    cache_write_and_inline_epilogue,
    const_int,
    decompose_vector_init,
    iter_kinds,
    root_blocks,
    schedule_remaining_blocks,
)

__all__ = ["POOL_COLUMNS", "PoolNCHWc"]

logger = logging.getLogger(__name__)

# output columns accumulated at once: enough independent vector max/add chains to hide their
# latency, few enough registers for any x86-64 vector ISA
POOL_COLUMNS = 8


class PoolNCHWc:
    """Max / average pooling windows in NCHW{b}c (see module docstring)."""

    name = "cpu.PoolNCHWc"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        pool = self._match(sch)
        if pool is None:
            return None
        extents = [const_int(iv.dom.extent) for iv in sch.get(pool).iter_vars]
        # the padding, read in place: a select on the window position instead of a pass over memory
        for producer in sch.get_producers(pool):
            if sch.get(producer).name_hint.startswith("pad"):
                try:
                    sch.compute_inline(producer)
                except Exception:  # noqa: BLE001 - stays a pass of its own
                    logger.debug("padding of %s left as a copy", sch.get(pool).name_hint)
        writeback = cache_write_and_inline_epilogue(sch, pool)
        n, chunk, oh, ow, b, kh, kw = sch.get_loops(pool)
        columns = max(d for d in range(1, POOL_COLUMNS + 1) if extents[3] % d == 0)
        ow_outer, ow_inner = sch.split(ow, [None, columns])
        sch.reorder(n, chunk, oh, ow_outer, kh, kw, ow_inner, b)
        outer = sch.fuse(n, chunk, oh)
        work = 1
        for extent in extents:
            work *= extent
        if work >= PARALLEL_MIN_WORK and extents[0] * extents[1] * extents[2] > 1:
            sch.parallel(outer)
        sch.unroll(ow_inner)
        sch.vectorize(b)
        decompose_vector_init(sch, pool, kh, unrolled=1)
        sch.reverse_compute_at(writeback, ow_outer)
        sch.vectorize(sch.get_loops(writeback)[-1])
        schedule_remaining_blocks(sch, vector_lanes(target))
        return sch

    @staticmethod
    def _match(sch):
        """The pool block: named pool_max / pool_sum, iterators SSSSSRR with static extents, a
        window (not a whole plane) over one 5-D input read at [.., .., .., .., b], b >= 4."""
        for block in root_blocks(sch):
            stmt = sch.get(block)
            if stmt.name_hint not in ("pool_max", "pool_sum") or iter_kinds(sch, block) != "SSSSSRR":
                continue
            extents = [const_int(iv.dom.extent) for iv in stmt.iter_vars]
            if any(e is None for e in extents) or extents[2] * extents[3] == 1 or extents[4] < 4:
                return None
            reads = [r for r in stmt.reads if not r.source.same_as(stmt.writes[0].source)]
            if len(reads) != 1 or len(reads[0].source.shape) != 5:
                return None
            if str(reads[0].region[4].min) != str(stmt.iter_vars[4].var) or int(reads[0].region[4].extent) != 1:
                return None
            return block
        return None
