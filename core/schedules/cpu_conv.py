"""CPU schedule for 2-D convolutions in NCHW (plain and grouped), with their fused epilogue.

The rule matches a `conv2d_nchw` / `group_conv2d_nchw` block as LegalizeOps writes it
(iterators n, oc, oh, ow | ic, kh, kw) and turns it into a register-blocked direct convolution:

1. the weight is packed to OIHW{VB}o (VB output channels innermost, VB = one or two vector
   registers) once at compile time, so one vector load fetches VB output channels' weights;
2. each thread computes a tile of VB output channels x T output columns in registers
   (T chosen so that T x VB/lanes accumulators + operands fit the 16 vector registers), with
   the input pixel broadcast and one FMA per register;
3. loops are n, oc/VB, oh (fused, parallel) | ow/T | ic, kh, kw | T (unrolled) | VB (vectorized);
4. the accumulator is written back once per tile with bias, activation, residual add and any
   other elementwise tail inlined (no extra pass over the output);
5. padding stays a separate vectorized copy (inlining it would put a branch in the inner loop);
   a padding-free copy is inlined away.

It does not match (returns None) when: there is no such block; shapes are symbolic; the output
channels per group are not a multiple of the vector width (depthwise convs: the generic rule
handles those); or the weight is not read as weight[oc, ic, kh, kw].
"""
from __future__ import annotations

import logging

from .cpu_common import (
    cache_write_and_inline_epilogue,
    const_int,
    iter_extents,
    iter_kinds,
    layout_free_params,
    pack_read_buffer,
    root_blocks,
    schedule_remaining_blocks,
    vector_lanes,
)

__all__ = ["Conv2dNCHW", "choose_conv_tile"]

logger = logging.getLogger(__name__)

CONV_BLOCK_NAMES = ("conv2d_nchw", "group_conv2d_nchw")
VECTOR_REGISTERS = 16  # AVX/AVX2 and NEON-sized register files; AVX-512 has 32, 16 is safe


def choose_conv_tile(out_channels_per_group: int, out_width: int, lanes: int) -> tuple[int, int] | None:
    """(VB, T): output channels per vector block and output columns per register tile.

    Maximizes FMAs per load, (VB/lanes * T) / (VB/lanes + T), among tiles whose accumulators
    plus the weight vectors and one broadcast fit in the register file, T dividing the width.
    """
    best = None
    for regs_per_row in (2, 1):
        vb = lanes * regs_per_row
        if out_channels_per_group % vb:
            continue
        max_t = (VECTOR_REGISTERS - regs_per_row - 1) // regs_per_row
        t = max(d for d in range(1, min(max_t, out_width) + 1) if out_width % d == 0)
        score = (regs_per_row * t) / (regs_per_row + t)
        if best is None or score > best[0] + 1e-9:
            best = (score, vb, t)
    return None if best is None else (best[1], best[2])


class Conv2dNCHW:
    """Register-blocked direct convolution with a prepacked weight (see module docstring)."""

    name = "cpu.Conv2dNCHW"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        conv = None
        for block in root_blocks(sch):
            if sch.get(block).name_hint in CONV_BLOCK_NAMES and iter_kinds(sch, block) == "SSSSRRR":
                conv = block
                break
        if conv is None:
            return None
        extents = iter_extents(sch, conv)
        if any(e is None for e in extents):
            return None
        _, out_channels, _, out_width, _, _, _ = extents
        stmt = sch.get(conv)
        if len(stmt.reads) != 2:
            return None
        data_region, weight_region = stmt.reads
        weight = weight_region.source
        if len(weight.shape) != 4:
            return None
        # The weight must be read as weight[oc, ic, kh, kw] with the block's own iterators.
        iters = [iv.var for iv in stmt.iter_vars]
        weight_vars = [r.min for r in weight_region.region]
        if [str(v) for v in weight_vars] != [str(iters[i]) for i in (1, 4, 5, 6)]:
            return None
        data_channels = const_int(data_region.source.shape[1])
        in_channels_per_group = const_int(weight.shape[1])
        if data_channels is None or in_channels_per_group is None:
            return None
        groups = data_channels // in_channels_per_group
        lanes = vector_lanes(target)
        tile = choose_conv_tile(out_channels // groups, out_width, lanes)
        if tile is None:
            return None
        vb, t = tile

        # A padding-free copy of the input (1x1 convs, 'valid' convs) is dead weight: inline it.
        for producer in sch.get_producers(conv):
            producer_stmt = sch.get(producer)
            if producer_stmt.writes[0].source.same_as(data_region.source):
                if [str(s) for s in producer_stmt.writes[0].source.shape] == [
                    str(s) for s in producer_stmt.reads[0].source.shape
                ]:
                    sch.compute_inline(producer)

        pack_read_buffer(
            sch,
            conv,
            1,
            lambda o, i, h, w: (o // vb, i, h, w, o % vb),
            layout_free=weight.name in layout_free_params(sch),
        )
        writeback = cache_write_and_inline_epilogue(sch, conv)

        n, oc, oh, ow, ic, kh, kw = sch.get_loops(conv)
        oc_outer, oc_inner = sch.split(oc, [None, vb])
        ow_outer, ow_inner = sch.split(ow, [None, t])
        sch.reorder(n, oc_outer, oh, ow_outer, ic, kh, kw, ow_inner, oc_inner)
        sch.reverse_compute_at(writeback, ow_outer)
        parallel = sch.fuse(n, oc_outer, oh)
        sch.parallel(parallel)
        sch.vectorize(oc_inner)
        sch.unroll(ow_inner)
        init = sch.decompose_reduction(conv, ic)
        init_loops = sch.get_loops(init)
        sch.vectorize(init_loops[-1])
        sch.unroll(init_loops[-2])
        # Write-back: the tile's [1, VB, 1, T] loops; keep the contiguous T innermost, unrolled.
        wb_loops = sch.get_loops(writeback)[2:]  # below the parallel loop and ow/T
        if wb_loops:
            sch.unroll(wb_loops[-1])
        pads = [sch.get(b).name_hint for b in sch.get_producers(conv)]
        schedule_remaining_blocks(sch, lanes, keep=tuple(pads))
        return sch
