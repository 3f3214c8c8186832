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

Depthwise convs and groups whose channel count no vector divides take a second form: vectors
along the output row (the input is contiguous there), a few output channels unrolled, weights
broadcast, same accumulate-then-write-back-with-epilogue structure.

It does not match (returns None) when: there is no such block; shapes are symbolic; neither form
has a usable tile; or the weight is not read as weight[oc, ic, kh, kw].
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

__all__ = ["Conv2dNCHW", "choose_conv_tile", "choose_width_tile"]

logger = logging.getLogger(__name__)

CONV_BLOCK_NAMES = ("conv2d_nchw", "group_conv2d_nchw")
VECTOR_REGISTERS = 16  # AVX/AVX2 and NEON-sized register files; AVX-512 has 32, 16 is safe


def choose_conv_tile(out_channels_per_group: int, out_width: int, lanes: int) -> tuple[int, int] | None:
    """(VB, T): output channels per vector block and output columns per register tile.

    Maximizes useful FMA lanes per load, (VB/lanes * T) / (registers per row + T), among tiles
    whose accumulators plus the weight vectors and one broadcast fit in the register file, with
    VB dividing the channels of a group and T dividing the width. A half-width vector (VB =
    lanes/2) is the fallback for channel counts like 68 that no full vector divides.
    """
    best = None
    for vb in (2 * lanes, lanes, lanes // 2):
        if vb < 2 or out_channels_per_group % vb:
            continue
        regs_per_row = max(1, vb // lanes)
        max_t = (VECTOR_REGISTERS - regs_per_row - 1) // regs_per_row
        t = max(d for d in range(1, min(max_t, out_width) + 1) if out_width % d == 0)
        score = (vb / lanes * t) / (regs_per_row + t)
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
        oc_per_group = out_channels // groups
        if oc_per_group % lanes:
            # Depthwise and odd group widths (shufflenet's 34, 68 channels per group): vectors
            # along the output row instead, a few output channels unrolled.
            width_tile = choose_width_tile(out_channels, out_width, lanes)
            if width_tile is not None:
                return self._schedule_width_vectorized(sch, conv, data_region, width_tile, lanes)
        tile = choose_conv_tile(oc_per_group, out_width, lanes)
        if tile is None:
            return None
        vb, t = tile

        # A padding-free copy of the input (1x1 convs, 'valid' convs) is dead weight: inline it.
        self._inline_padding_free_copy(sch, conv, data_region)

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

    @staticmethod
    def _inline_padding_free_copy(sch, conv, data_region) -> None:
        for producer in sch.get_producers(conv):
            producer_stmt = sch.get(producer)
            if producer_stmt.writes[0].source.same_as(data_region.source) and [
                str(x) for x in producer_stmt.writes[0].source.shape
            ] == [str(x) for x in producer_stmt.reads[0].source.shape]:
                sch.compute_inline(producer)

    def _schedule_width_vectorized(self, sch, conv, data_region, tile, lanes):
        """Vectors along the output row (VX columns), FB output channels unrolled, weights
        broadcast: loops n, oc/FB, oh (parallel) | ow/VX | ic, kh, kw | FB | VX."""
        fb, vx = tile
        self._inline_padding_free_copy(sch, conv, data_region)
        writeback = cache_write_and_inline_epilogue(sch, conv)
        n, oc, oh, ow, ic, kh, kw = sch.get_loops(conv)
        oc_outer, oc_inner = sch.split(oc, [None, fb])
        ow_outer, ow_inner = sch.split(ow, [None, vx])
        sch.reorder(n, oc_outer, oh, ow_outer, ic, kh, kw, oc_inner, ow_inner)
        sch.reverse_compute_at(writeback, ow_outer)
        sch.parallel(sch.fuse(n, oc_outer, oh))
        sch.vectorize(ow_inner)
        sch.unroll(oc_inner)
        init = sch.decompose_reduction(conv, ic)
        init_loops = sch.get_loops(init)
        sch.vectorize(init_loops[-1])
        wb_loops = sch.get_loops(writeback)[2:]
        if wb_loops:
            sch.vectorize(wb_loops[-1])
        pads = [sch.get(b).name_hint for b in sch.get_producers(conv)]
        schedule_remaining_blocks(sch, lanes, keep=tuple(pads))
        return sch


def choose_width_tile(out_channels: int, out_width: int, lanes: int) -> tuple[int, int] | None:
    """(FB, VX) for the row-vectorized convolution: VX the widest divisor of the output width
    up to the vector width (at least 4), FB output channels (a divisor of all of them, up to 8)
    whose accumulators fill the register file."""
    vx = max(d for d in range(1, lanes + 1) if out_width % d == 0)
    if vx < 4:
        return None
    fb = max(d for d in range(1, 9) if out_channels % d == 0)
    return fb, vx
