"""CPU schedule for the Winograd 3x3 conv (core.compiler.passes.layout.winograd): `Conv2dWinogradNCHWc`.

The kernel, as legalized and fused (bias / batch-norm / ReLU / residual add after it):
  winograd_pad -> winograd_input_rows -> winograd_input -> winograd_bgemm
  -> winograd_output_rows -> winograd_output -> (epilogue)
scheduled as three parallel passes:
* input transform: per (tile, input-channel block), B^T d B of the alpha x alpha x i patch in
  registers (the rows pass computed at that point, the tile positions unrolled so each
  coefficient is a constant and the zero ones vanish, the channels a vector), written to
  V [alpha, alpha, tiles, IC];
* batched GEMM: for each tile position, V [tiles, IC] x U [IC, OC] with U a constant
  [alpha, alpha, OC/b, IC, b]: register tiles of P tiles x OC2 vectors of b output channels,
  like the matmul rule (a broadcast V value feeds OC2 FMAs), accumulated over IC; where P does not
  divide the tiles, the last partial tile is a loop and a block of its own;
* output transform: per output tile, A^T M A for a vector of b output channels, the
  epilogue folded into the write.
The padding is a parallel copy before the input transform (split by rows, however small:
cpu_common.split_padding_by_rows), or, with FOLD_PAD or the template
search's config {"fold_pad": True}, read in the input transform (the pad block inlined: a bounds
check per load of the unrolled tile, no copy); a conv with no padding has nothing to copy.
"""
from __future__ import annotations

import logging

from ..target import vector_lanes, vector_registers
from .cpu_common import (
    ACCUMULATOR_SCOPE,
    const_int,
    decompose_vector_init,
    find_block,
    inline_epilogue,
    schedule_injective,
    split_padding_by_rows,
)

__all__ = ["PAIR_TAIL_TILES", "Conv2dWinogradNCHWc", "gemm_tile", "max_accumulators"]

logger = logging.getLogger(__name__)


# At most half the vector registers as accumulators: more spilled. (docs/performance.md:
# max_accumulators)
# Whether the padding is read in the input transform (the pad block inlined: a bounds check on
# every load of the unrolled tile) rather than copied first. Not the default: it measured level
# within the noise, some kernels slower; the template search measures both per kernel
# ({"fold_pad": True}, Conv2dWinogradNCHWc.candidates). (docs/performance.md: FOLD_PAD)
FOLD_PAD = False


def max_accumulators(registers: int) -> int:
    return registers // 2


# Tiles per GEMM register tile of two channel vectors, with AVX2's 16 registers, where no divisor
# of the tile count gives two vectors a tile (7 x 7 = 49 tiles: 7 x 2 would spill, so one vector of
# 7 tiles): P tiles, the last partial tile a loop of its own (Conv2dWinogradNCHWc.apply).
# (docs/performance.md: PAIR_TAIL_TILES)
PAIR_TAIL_TILES = 5


def gemm_tile(tiles: int, out_chunks: int, registers: int) -> tuple[int, int]:
    """(P, OC2): output tiles x channel-block vectors per register tile of the batched GEMM,
    the most accumulators, at most `max_accumulators`, that leave OC2 weight vectors and a
    broadcast spare (P divides the tile count, OC2 the channel blocks); with 16 registers, where
    that leaves one vector a tile and the channel blocks pair, PAIR_TAIL_TILES x 2 instead."""
    best = (1, 1)
    for oc2 in (2, 1):
        if out_chunks % oc2:
            continue
        for p in range(1, 17):
            if tiles % p or p * oc2 + oc2 + 1 > registers or p * oc2 > max_accumulators(registers):
                continue
            if p * oc2 > best[0] * best[1]:
                best = (p, oc2)
    if best[1] == 1 and out_chunks % 2 == 0 and registers < 32 and tiles > PAIR_TAIL_TILES:
        return PAIR_TAIL_TILES, 2
    return best


class Conv2dWinogradNCHWc:
    """The Winograd conv's blocks (see the module docstring), found by the GEMM block
    "winograd_bgemm" (iterators e, nu, oc_chunk, tile, oc_block | ic)."""

    name = "cpu.Conv2dWinogradNCHWc"
    space_version = 2

    def candidates(self, func, target) -> list[dict]:
        """Configs for the template search (core.compiler.tuning.tune), the default first: the GEMM's
        register tiles (P tiles x OC2 channel vectors) with the most accumulators under
        max_accumulators, two over it, and the default with the padding as a separate copy."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        found = find_block(sch, ("winograd_bgemm",), "SSSSSR")
        if found is None:
            return []
        _, _, out_chunks, tiles, _, _ = found[1]
        registers = vector_registers(target)
        p_tile, oc2 = gemm_tile(tiles, out_chunks, registers)
        configs = [{"p": p_tile, "oc2": oc2}]
        for wide in (1, 2):
            if out_chunks % wide:
                continue
            sizes = sorted((p for p in range(1, 17) if tiles % p == 0 and p * wide + wide + 1 <= registers),
                           key=lambda p: -p * wide)
            under = [p for p in sizes if p * wide <= max_accumulators(registers)]
            over = [p for p in sizes if p * wide > max_accumulators(registers)]
            # and two vectors of a few tiles more or less than PAIR_TAIL_TILES, the last tile partial
            most = max(max_accumulators(registers), 2 * PAIR_TAIL_TILES)
            tails = [p for p in (4, 5, 6, 7, 8) if wide == 2 and tiles % p and p < tiles and 2 * p <= most]
            for p in under[:3] + over[-2:] + tails[:3]:
                if {"p": p, "oc2": wide} not in configs:
                    configs.append({"p": p, "oc2": wide})
        pads = [b for b in sch.get_child_blocks(sch.get_sblock("root")) if sch.get(b).name_hint == "winograd_pad"]
        if pads and not _pads_nothing(sch, pads[0]):
            configs.append({**configs[0], "fold_pad": not FOLD_PAD})
        return configs

    def apply(self, func, target, config: dict | None = None):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        found = find_block(sch, ("winograd_bgemm",), "SSSSSR")
        if found is None:
            return None
        gemm, extents = found
        _, _, out_chunks, tiles, _, _ = extents
        names = {sch.get(b).name_hint: b for b in sch.get_child_blocks(sch.get_sblock("root"))}
        needed = ("winograd_input_rows", "winograd_input", "winograd_output_rows", "winograd_output")
        if any(n not in names for n in needed):
            return None
        lanes = vector_lanes(target)
        config = config or {}
        p_tile, oc2 = gemm_tile(tiles, out_chunks, vector_registers(target))
        p_tile, oc2 = int(config.get("p", p_tile)), int(config.get("oc2", oc2))
        if p_tile > tiles or out_chunks % oc2:
            raise ValueError(f"tile {config} does not divide the Winograd GEMM")

        # input transform: per (tile, channel block) the rows pass at that point, all unrolled
        rows, inp = names["winograd_input_rows"], names["winograd_input"]
        if "winograd_pad" in names:
            pad = names["winograd_pad"]
            if _pads_nothing(sch, pad) or config.get("fold_pad", FOLD_PAD):
                sch.compute_inline(pad)
            elif not split_padding_by_rows(sch, pad, lanes):  # the input transform below is split: by rows too
                schedule_injective(sch, pad, lanes)
        e, nu, p, c, ci = sch.get_loops(inp)
        sch.reorder(p, c, e, nu, ci)
        sch.compute_at(rows, c)
        for loop in sch.get_loops(rows)[2:-1]:
            sch.unroll(loop)
        sch.vectorize(sch.get_loops(rows)[-1])
        sch.unroll(e)
        sch.unroll(nu)
        sch.vectorize(ci)
        sch.parallel(sch.fuse(p, c))

        # batched GEMM: register tiles of p_tile tiles x oc2 channel vectors over IC; the tile as a
        # stack array (cpu_common.ACCUMULATOR_SCOPE), not a workspace allocation per parallel task
        # (docs/performance.md: Winograd GEMM tile on the stack)
        e, nu, k, p, b, rc = sch.get_loops(gemm)
        k_outer, k_inner = sch.split(k, [None, oc2])
        p_outer, p_inner = sch.split(p, [None, p_tile])
        sch.reorder(e, nu, k_outer, p_outer, rc, k_inner, p_inner, b)
        if tiles % p_tile:
            # P does not divide the tiles: the last tile is a loop and a GEMM block of its own
            # (loop_partition), so the full tiles' loop has no test of the tile index in it
            outer = sch.fuse(e, nu, k_outer)
            parts = sch.loop_partition(p_outer, [tiles // p_tile])
            gemms = [(sch.get_child_blocks(part)[0], part) for part in parts]
        else:
            outer = sch.fuse(e, nu, k_outer, p_outer)
            gemms = [(gemm, outer)]
        sch.parallel(outer)
        for block, at in gemms:
            acc = sch.cache_write(block, 0, ACCUMULATOR_SCOPE)
            sch.reverse_compute_at(acc, at)
            *_, rc, k_inner, p_inner, b = sch.get_loops(block)
            sch.unroll(k_inner)
            sch.unroll(p_inner)
            sch.vectorize(b)
            sch.vectorize(sch.get_loops(acc)[-1])
            decompose_vector_init(sch, block, rc, unrolled=2)

        # output transform: per output tile, columns pass at that point, epilogue in the write
        cols, out = names["winograd_output_rows"], names["winograd_output"]
        inline_epilogue(sch, out)
        n, k, y, x, b = sch.get_loops(out)
        m = const_int(sch.get(cols).iter_vars[2].dom.extent)
        y_outer, y_inner = sch.split(y, [None, m])
        x_outer, x_inner = sch.split(x, [None, m])
        sch.reorder(n, k, y_outer, x_outer, y_inner, x_inner, b)
        sch.compute_at(cols, x_outer)
        for loop in sch.get_loops(cols)[4:-1]:
            sch.unroll(loop)
        sch.vectorize(sch.get_loops(cols)[-1])
        sch.unroll(y_inner)
        sch.unroll(x_inner)
        sch.vectorize(b)
        sch.parallel(sch.fuse(n, k, y_outer))
        return sch


def _pads_nothing(sch, pad) -> bool:
    """Whether the padding block copies its input unchanged (a conv with no padding)."""
    stmt = sch.get(pad)
    src, dst = stmt.reads[0].source, stmt.writes[0].source
    return [const_int(d) for d in src.shape] == [const_int(d) for d in dst.shape]
