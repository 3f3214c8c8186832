"""The catch-all CPU rule: every kernel without a dedicated rule (pooling, depthwise convs, means,
softmax, layer-norm arithmetic, concatenation, reshapes, transposes).

Without it these kernels run single-threaded and scalar; with it, elementwise producers are
inlined into their consumers, spatial loops are spread over the cores, and the innermost loop is
vectorized to the host's width (see cpu_common.schedule_injective / schedule_reduction).

Plane reductions (global average / max pooling: a 4-D tensor reduced over its two trailing
axes, the squeeze of every squeeze-excitation block) get vector partial sums first: left
scalar, the 12,544 additions of a 112x112 plane are one dependent chain (four cycles each).
"""
from __future__ import annotations

import logging

from ..target import vector_lanes
from .cpu_common import PARALLEL_MIN_WORK, const_int, iter_kinds, root_blocks, schedule_remaining_blocks

__all__ = ["Generic", "plane_reduction_width", "schedule_plane_reduction"]

logger = logging.getLogger(__name__)


def plane_reduction_width(row: int, lanes: int) -> int | None:
    """Lanes of the partial sums for planes with rows of `row` elements: the vector width when it
    divides the row, else the widest divisor from the vector width down to 4 (56 -> 14 with
    AVX-512, 7 -> 7), else None (a row this short or prime stays scalar)."""
    for width in range(min(lanes, row), 3, -1):
        if row % width == 0:
            return width
    return None


def schedule_plane_reduction(sch, block, lanes: int) -> bool:
    """Vector partial sums (rfactor over a piece of each row) for a reduction of a 4-D input over
    its two trailing axes; channels in parallel when the work pays. True when done."""
    kinds = iter_kinds(sch, block)
    if kinds != "SSSSRR":
        return False
    loops = sch.get_loops(block)
    if len(loops) != 6:
        return False
    stmt = sch.get(block)
    out = stmt.writes[0].source
    sources = [r for r in stmt.reads if not r.source.same_as(out)]
    if len(sources) != 1 or len(sources[0].source.shape) != 4:
        return False
    region = sources[0].region
    iters = [iv.var for iv in stmt.iter_vars]
    if [str(r.min) for r in region[2:]] != [str(iters[4]), str(iters[5])]:
        return False
    extents = [const_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return False
    width = plane_reduction_width(extents[5], lanes)
    if width is None:
        return False
    work = 1
    for e in extents:
        work *= e
    _, row_inner = sch.split(loops[5], [None, width])
    partial = sch.rfactor(row_inner, factor_axis=4)
    # (decompose_reduction first would make TVM refuse the vectorize: the init stays inside)
    sch.vectorize(sch.get_loops(partial)[-1])
    channels = sch.fuse(*sch.get_loops(partial)[:4])
    # each channel's lane sums right after its partial sums
    sch.reverse_compute_at(block, channels)
    if work >= PARALLEL_MIN_WORK and extents[0] * extents[1] >= 2:
        sch.parallel(channels)
    return True


class Generic:
    """Parallelize + vectorize whatever is there; always applies."""

    name = "cpu.Generic"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        lanes = vector_lanes(target)
        for block in root_blocks(sch):
            if "R" in iter_kinds(sch, block):
                try:
                    schedule_plane_reduction(sch, block, lanes)
                except Exception as exc:  # noqa: BLE001 - the generic reduction schedule instead
                    logger.debug("plane reduction not scheduled: %s", exc)
                    sch = s_tir.Schedule(func)
                    break
        schedule_remaining_blocks(sch, lanes)
        return sch
