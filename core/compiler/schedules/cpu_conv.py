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
broadcast, same accumulate-then-write-back-with-epilogue structure. Its tile is FB channels x NV
vectors (rows, or runs of the plane of a 1x1 conv taken as one row): FB channels of one group
where 8 or more fit the registers (AVX-512), else FB x NV with the fewest loads per FMA
(`multi_vector_tile`); the template search measures its other tiles (`row_candidates`).

It does not match (returns None) when: there is no such block; shapes are symbolic; neither form
has a usable tile; or the weight is not read as weight[oc, ic, kh, kw].
"""
from __future__ import annotations

import logging

from ..target import VECTOR_REGISTERS, vector_lanes, vector_registers
from .cpu_common import (
    cache_write_and_inline_epilogue,
    const_int,
    conv_runs_parallel,
    decompose_vector_init,
    find_block,
    layout_free_params,
    pack_read_buffer,
    schedule_remaining_blocks,
)

__all__ = ["Conv2dNCHW", "choose_conv_tile", "choose_width_tile", "default_row_tile", "flat_plane", "multi_vector_tile", "multiply_adds", "register_tiles", "row_candidates"]

logger = logging.getLogger(__name__)

CONV_BLOCK_NAMES = ("conv2d_nchw", "group_conv2d_nchw")


def register_tiles(
    out_channels_per_group: int, out_height: int, out_width: int, lanes: int, registers: int = VECTOR_REGISTERS
) -> list[tuple[int, int, int, int]]:
    """Every (VB, TH, T, accumulators) register tile of VB output channels (one or two vectors,
    dividing a group's channels) x TH rows x T columns (dividing the output) with 6 or more
    accumulators that fit the register file (`registers`: 32 with AVX-512) beside the weight
    vectors and one broadcast."""
    tiles = []
    for vb in (lanes, 2 * lanes):
        if out_channels_per_group % vb:
            continue
        regs = vb // lanes
        for th in (d for d in (1, 2, 3, 4, 7) if out_height % d == 0):
            for t in (d for d in range(1, registers - 1) if out_width % d == 0):
                acc = th * t * regs
                if acc >= 6 and acc + regs + 1 <= registers:
                    tiles.append((vb, th, t, acc))
    return tiles


def choose_conv_tile(out_channels_per_group: int, out_width: int, lanes: int, out_height: int = 1) -> tuple[int, int, int] | None:
    """(VB, T, TH): output channels per vector block, output columns and rows per register tile.

    8-10 accumulators (enough independent FMAs to hide their latency on two FMA pipes, with
    registers to spare), then 6-12, the most within the range, one-vector channel blocks and
    single rows preferred. Chosen from the template-tuning measurements of 113 conv shapes in the
    light models (docs/performance.md: choose_conv_tile).
    Without such a tile (narrow outputs, channel counts like 68 no full vector divides) the
    most FMA lanes per load with one row, half-width vectors allowed.
    """
    tiles = register_tiles(out_channels_per_group, out_height, out_width, lanes)
    for low, high in ((8, 10), (6, 12)):
        fitting = [tile for tile in tiles if low <= tile[3] <= high]
        if fitting:
            vb, th, t, _ = max(fitting, key=lambda x: (x[3], x[0] == lanes, -x[1]))
            return vb, t, th
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
    return None if best is None else (best[1], best[2], 1)




def multiply_adds(extents) -> int:
    total = 1
    for extent in extents:
        total *= extent
    return total


class Conv2dNCHW:
    """Register-blocked direct convolution with a prepacked weight (see module docstring)."""

    name = "cpu.Conv2dNCHW"
    # bumped whenever `candidates` changes, so tuning records from an older space are redone
    space_version = 6

    def _match(self, sch, target) -> dict | None:
        """What the rule needs to know about the function's convolution, or None (no match)."""
        found = find_block(sch, CONV_BLOCK_NAMES, "SSSSRRR")
        if found is None:
            return None
        conv, extents = found
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
        return {
            "conv": conv,
            "extents": extents,
            "data_region": data_region,
            "weight": weight,
            "groups": groups,
            "icpg": in_channels_per_group,
            "ocpg": extents[1] // groups,
            "lanes": vector_lanes(target),
        }

    def candidates(self, func, target) -> list[dict]:
        """Configs worth measuring for `func` (template tuning), the default first: register
        tiles (VB channels x TH rows x T columns) that keep 6-14 accumulators in registers
        (up to 30 with AVX-512),
        each with the input unblocked or blocked by 8/16 channels, and on AVX-512 targets a few
        256-bit (half-lane) tiles; the row-vectorized form's tiles (`row_candidates`) where no
        vector divides a group's channels; [] when the rule does not match."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return []
        lanes, ocpg, icpg = info["lanes"], info["ocpg"], info["icpg"]
        _, _, out_height, out_width, _, kh, kw = info["extents"]
        if ocpg % lanes:
            from .cpu_depthwise import DepthwiseConv2dNCHW

            if DepthwiseConv2dNCHW()._match(sch) is not None:
                return []  # scheduled by the depthwise rule (first in the default order), not this one
            data_shape = [const_int(d) for d in info["data_region"].source.shape]
            return row_candidates(info["extents"], data_shape, ocpg, lanes, vector_registers(target))
        default = choose_conv_tile(ocpg, out_width, lanes, out_height)
        if default is None:
            return []
        # most accumulators first (latency hiding), then wider rows (fewer input loads): six
        # tiles within the 16 registers every x86-64 vector ISA has, and with AVX-512's 32,
        # four of the larger tiles only that register file holds (the default stays within 16)
        tiles = register_tiles(ocpg, out_height, out_width, lanes)
        tiles.sort(key=lambda x: (-x[3], x[1]))
        tiles = tiles[:6]
        registers = vector_registers(target)
        if registers > VECTOR_REGISTERS:
            large = [x for x in register_tiles(ocpg, out_height, out_width, lanes, registers) if x[3] > VECTOR_REGISTERS - 2]
            large.sort(key=lambda x: (x[3], x[1]))  # the smallest of them first: fewest spills
            tiles += large[:4]
        blocks = [0] + [b for b in (8, 16) if icpg % b == 0 and icpg > b]
        configs = [{"vb": default[0], "t": default[1], "th": default[2], "icb": 0}]
        for vb, th, t, _ in tiles:
            for icb in blocks:
                config = {"vb": vb, "t": t, "th": th, "icb": icb}
                if config not in configs:
                    configs.append(config)
        if lanes >= 16:
            # AVX-512 targets: also 256-bit vectors (channel blocks of half the lanes, ymm code),
            # the tiles AVX2 would take; measured on the host, never assumed faster or slower
            half = [x for x in register_tiles(ocpg, out_height, out_width, lanes // 2, registers) if x[0] == lanes // 2]
            half.sort(key=lambda x: (-x[3], x[1]))
            for vb, th, t, _ in half[:4]:
                config = {"vb": vb, "t": t, "th": th, "icb": 0}
                if config not in configs:
                    configs.append(config)
        if kh * kw > 1:
            configs.append({**configs[0], "unroll_kw": True})
        return configs

    def apply(self, func, target, config: dict | None = None):
        """The scheduled function, or None when the rule does not match. `config` (one of
        `candidates`) overrides the tile the heuristics pick, as template tuning does."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return None
        conv, extents, data_region, weight = info["conv"], info["extents"], info["data_region"], info["weight"]
        lanes, oc_per_group, in_channels_per_group = info["lanes"], info["ocpg"], info["icpg"]
        out_width = extents[3]
        if config is not None and config.get("form") == "rows":
            fb, vx, nv, flat = int(config["fb"]), int(config["vx"]), int(config.get("nv", 1)), bool(config.get("flat"))
            data_shape = [const_int(d) for d in data_region.source.shape]
            if not _row_tile_fits(extents, data_shape, oc_per_group, fb, vx, nv, flat):
                raise ValueError(f"row tile {config} does not divide the convolution")
            return self._schedule_width_vectorized(sch, conv, data_region, (fb, vx, nv), lanes, extents[3] if flat else 0)
        if oc_per_group % lanes:
            # Depthwise and odd group widths (shufflenet's 34, 68 channels per group): vectors
            # along the output row instead, a few output channels unrolled.
            row_tile = default_row_tile(extents, [const_int(d) for d in data_region.source.shape], oc_per_group, lanes, vector_registers(target))
            if row_tile is not None:
                fb, vx, nv, flat = row_tile
                return self._schedule_width_vectorized(sch, conv, data_region, (fb, vx, nv), lanes, extents[3] if flat else 0)
        tile = choose_conv_tile(oc_per_group, out_width, lanes, extents[2])
        if tile is None:
            return None
        vb, t, th = tile
        icb, unroll_kw = 0, False
        if config is not None and config.get("form", "packed") == "packed":
            vb, t, th = int(config["vb"]), int(config["t"]), int(config.get("th", 1))
            icb, unroll_kw = int(config.get("icb", 0)), bool(config.get("unroll_kw", False))
            out_height = extents[2]
            if oc_per_group % vb or vb % lanes and vb != lanes // 2 or out_width % t or out_height % th:
                raise ValueError(f"tile {config} does not divide the convolution")
            if icb and (in_channels_per_group % icb or info["groups"] > 1):
                raise ValueError(f"input channel block {icb} does not divide {in_channels_per_group}")

        # A padding-free copy of the input (1x1 convs, 'valid' convs) is dead weight: inline it.
        self._inline_padding_free_copy(sch, conv, data_region)

        if icb:
            pack_read_buffer(
                sch,
                conv,
                1,
                lambda o, i, h, w: (o // vb, i // icb, h, w, i % icb, o % vb),
                layout_free=weight.name in layout_free_params(sch),
            )
            # the input, blocked by channel (NCHW{icb}c), once per call: the icb channels of a
            # pixel the inner loop broadcasts are then one cache line, not icb planes apart
            data_copy = sch.cache_read(conv, 0, "global")
            sch.transform_layout(conv, ("read", 0), lambda n, c, h, w: (n, c // icb, h, w, c % icb))
            for producer in sch.get_producers(data_copy):
                try:
                    sch.compute_inline(producer)  # the padding, folded into the copy
                except Exception:  # noqa: BLE001 - stays a separate pass
                    pass
        else:
            pack_read_buffer(
                sch,
                conv,
                1,
                lambda o, i, h, w: (o // vb, i, h, w, o % vb),
                layout_free=weight.name in layout_free_params(sch),
            )
        writeback = cache_write_and_inline_epilogue(sch, conv)
        # The accumulator tile in NHWC order: each vector of VB channels contiguous. In NCHW
        # order a vector's lanes lie T x TH floats apart and LLVM, unless it happens to promote
        # the whole tile to registers (it does for 16 x 5 floats, not for AVX-512's 32 x 5),
        # gathers and scatters every accumulator around every FMA (vinsertps / vextractps).
        sch.transform_layout(conv, ("write", 0), lambda n, c, h, w: (n, h, w, c))

        n, oc, oh, ow, ic, kh, kw = sch.get_loops(conv)
        oc_outer, oc_inner = sch.split(oc, [None, vb])
        ow_outer, ow_inner = sch.split(ow, [None, t])
        if icb:
            ic_outer, ic_inner = sch.split(ic, [None, icb])
            reduction = [ic_outer, kh, kw, ic_inner]
        else:
            reduction = [ic, kh, kw]
        if th > 1:  # a 2-D register tile: TH output rows x T columns
            oh_outer, oh_inner = sch.split(oh, [None, th])
            sch.reorder(n, oc_outer, oh_outer, ow_outer, *reduction, oh_inner, ow_inner, oc_inner)
            sch.unroll(oh_inner)
        else:
            oh_outer = oh
            sch.reorder(n, oc_outer, oh, ow_outer, *reduction, ow_inner, oc_inner)
        if unroll_kw:
            sch.unroll(reduction[-1])
        ic = reduction[0]
        sch.reverse_compute_at(writeback, ow_outer)
        parallel = sch.fuse(n, oc_outer, oh_outer)
        if conv_runs_parallel(multiply_adds(extents)):
            sch.parallel(parallel)
        sch.vectorize(oc_inner)
        sch.unroll(ow_inner)
        decompose_vector_init(sch, conv, ic, unrolled=2 if th > 1 else 1)
        # Write-back: the tile's [1, VB, TH, T] loops; the output's contiguous T columns
        # innermost, as one vector per channel and row. (Left scalar, LLVM vectorizes the
        # channel loop instead: with AVX-512 into a scatter per column, slower than the convolution.)
        wb_loops = sch.get_loops(writeback)[2:]  # below the parallel loop and ow/T
        if wb_loops:
            sch.vectorize(wb_loops[-1])
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

    def _schedule_width_vectorized(self, sch, conv, data_region, tile, lanes, flat_width: int = 0):
        """Vectors along the output row (VX columns), FB output channels unrolled, weights
        broadcast: loops n, oc/FB, oh/NV (parallel) | ow/VX | ic, kh, kw | FB | NV rows | VX.
        With `flat_width` (the row width, see `flat_plane`) the plane is one row of H x W pixels:
        loops n, oc/FB, HW/(NV x VX) (parallel) | ic | FB | NV | VX. `tile` is (FB, VX) or
        (FB, VX, NV): NV vectors of accumulators per output channel (rows, or runs of the flat
        plane), each input vector read by all FB channels, each broadcast weight by all NV vectors."""
        fb, vx = tile[0], tile[1]
        nv = tile[2] if len(tile) > 2 else 1
        self._inline_padding_free_copy(sch, conv, data_region)
        writeback = cache_write_and_inline_epilogue(sch, conv)
        macs = multiply_adds([const_int(sch.get(loop).extent) or 1 for loop in sch.get_loops(conv)])
        if flat_width:
            # the accumulator, the conv's and the write-back's iterations over pixel h * W + w: a
            # tile of VX pixels may span two rows, and each block iterates exactly its pixels
            # (split over h and w, the write-back would cover the rows' bounding box)
            sch.transform_layout(conv, ("write", 0), lambda n, c, h, w: (n, c, h * flat_width + w))
            sch.transform_block_layout(conv, lambda n, c, h, w, ic, kh, kw: (n, c, h * flat_width + w, ic, kh, kw))
            sch.transform_block_layout(writeback, lambda n, c, h, w: (n, c, h * flat_width + w))
            n, oc, pixel, ic, kh, kw = sch.get_loops(conv)
            oc_outer, oc_inner = sch.split(oc, [None, fb])
            outer, vectors, inner = sch.split(pixel, [None, nv, vx])
            sch.reorder(n, oc_outer, outer, ic, kh, kw, oc_inner, vectors, inner)
            sch.reverse_compute_at(writeback, outer)
            parallel = sch.fuse(n, oc_outer, outer)
        else:
            n, oc, oh, ow, ic, kh, kw = sch.get_loops(conv)
            oc_outer, oc_inner = sch.split(oc, [None, fb])
            oh_outer, vectors = sch.split(oh, [None, nv])
            outer, inner = sch.split(ow, [None, vx])
            sch.reorder(n, oc_outer, oh_outer, outer, ic, kh, kw, oc_inner, vectors, inner)
            sch.reverse_compute_at(writeback, outer)
            parallel = sch.fuse(n, oc_outer, oh_outer)
        if nv > 1:
            sch.unroll(vectors)
        if conv_runs_parallel(macs):
            sch.parallel(parallel)
        sch.vectorize(inner)
        sch.unroll(oc_inner)
        decompose_vector_init(sch, conv, ic)
        wb_loops = sch.get_loops(writeback)[1 if flat_width else 2:]
        if wb_loops:
            sch.vectorize(wb_loops[-1])
        pads = [sch.get(b).name_hint for b in sch.get_producers(conv)]
        schedule_remaining_blocks(sch, lanes, keep=tuple(pads))
        return sch


def choose_width_tile(
    out_channels: int, out_width: int, lanes: int, out_channels_per_group: int | None = None, registers: int = VECTOR_REGISTERS
) -> tuple[int, int] | None:
    """(FB, VX) for the row-vectorized convolution: VX the widest divisor of the output width
    up to the vector width (at least 4), FB output channels (a divisor of all of them, up to 8)
    whose accumulators fill the register file.

    A grouped conv (`out_channels_per_group` < `out_channels`; ShuffleNet's 34, 68, 136 channels
    per group) takes FB from the channels of one group instead: the largest divisor of them whose
    FB accumulators leave a register for the input row and one for the broadcast weight (17 of 34
    with AVX-512's 32 registers), so the FB rows of a tile read the same input vector; an FB of 8
    across a group boundary makes every row load its own. VX there is a full or half vector where
    one divides the row (8 of 56), before wider odd widths (14 of 56, no native vector width), if
    that is 256 bits or more (a 4-lane vector beside 7 lanes of a ymm: no). Where fewer than 8 rows
    fit (AVX2's 16 registers: 2 of 34, 4 of 68, 7 of 28) the ungrouped choice stays here;
    `multi_vector_tile` gives those convs tiles of several vectors. (docs/performance.md: Grouped
    convs: one group's channels per tile)
    """
    widths = [d for d in range(1, lanes + 1) if out_width % d == 0]
    vx = max(widths)
    if vx < 4:
        return None
    if out_channels_per_group is not None and out_channels_per_group < out_channels:
        fb = max(d for d in range(1, registers - 2) if out_channels_per_group % d == 0)
        if fb >= 8:
            vx = next((w for w in (lanes, lanes // 2) if w >= 8 and out_width % w == 0), vx)
            return fb, vx
    fb = max(d for d in range(1, 9) if out_channels % d == 0)
    return fb, vx


def default_row_tile(extents, data_shape, out_channels_per_group: int, lanes: int, registers: int = VECTOR_REGISTERS) -> tuple[int, int, int, bool] | None:
    """(FB, VX, NV, flat): the row-vectorized form's default tile (see `_schedule_width_vectorized`),
    or None when the row has no useful vector. `choose_width_tile`'s (FB, VX), over the flat plane
    where `flat_plane` says so, unless `multi_vector_tile` has a tile for the conv."""
    _, out_channels, _, out_width, _, _, _ = extents
    width_tile = choose_width_tile(out_channels, out_width, lanes, out_channels_per_group, registers)
    if width_tile is None:
        return None
    multi = multi_vector_tile(extents, data_shape, out_channels_per_group, lanes, registers)
    if multi is not None:
        return multi
    if flat_plane(extents, data_shape, out_channels_per_group, width_tile, lanes):
        return width_tile[0], lanes, 1, True
    return width_tile[0], width_tile[1], 1, False


def _row_units(extents, data_shape, lanes: int) -> tuple[int, int, bool] | None:
    """(VX, units, flat) of the row-vectorized form: the flat plane's full vectors when the conv is
    a stride-1 unpadded 1x1 conv whose row no full vector divides but whose plane one does (784 =
    98 x 8), else the widest divisor of the row up to the vector width (at least 4) and the rows."""
    _, _, out_height, out_width, _, kh, kw = extents
    if kh == kw == 1 and data_shape[2:] == [out_height, out_width] and out_width % lanes and (out_height * out_width) % lanes == 0:
        return lanes, out_height * out_width // lanes, True
    return _row_form_units(out_height, out_width, lanes)


def _row_form_units(out_height: int, out_width: int, lanes: int) -> tuple[int, int, bool] | None:
    """(VX, rows, False): the widest divisor of the row up to the vector width (at least 4)."""
    vx = max(d for d in range(1, lanes + 1) if out_width % d == 0)
    return (vx, out_height, False) if vx >= 4 else None


def multi_vector_tile(extents, data_shape, out_channels_per_group: int, lanes: int, registers: int = VECTOR_REGISTERS) -> tuple[int, int, int, bool] | None:
    """(FB, VX, NV, flat) for a grouped conv of which fewer than 8 channels of one group fit the
    register file as one-vector rows (AVX2's 16 registers: 2 of 34, 4 of 68, 7 of 28 channels):
    FB output channels (up to 8, dividing all of them) x NV vectors (rows, or runs of the flat
    plane, `_row_units`), 8-12 accumulators, with the fewest loads per multiply-add ((FB + NV) /
    (FB x NV): each input vector feeds FB channels, each broadcast weight NV vectors), the input
    vectors and one broadcast beside them in registers. None for other convs.

    Before, such a conv took FB = 8 channels x one vector of VX columns: 9 loads per 8 multiply-adds,
    and on a 28-wide row 7-lane vectors. (docs/performance.md: Grouped convs with AVX2: several
    vectors per tile)"""
    _, out_channels, _, _, _, _, _ = extents
    if out_channels_per_group >= out_channels or out_channels_per_group < 8:
        return None  # ungrouped, or (nearly) depthwise: no input vector shared by the FB channels
    if max(d for d in range(1, registers - 2) if out_channels_per_group % d == 0) >= 8:
        return None  # choose_width_tile's rows of one group
    units = _row_units(extents, data_shape, lanes)
    if units is None:
        return None
    vx, count, flat = units
    best = None
    for fb in (d for d in range(1, 9) if out_channels % d == 0):
        for nv in (d for d in range(1, count + 1) if count % d == 0):
            acc = fb * nv
            if not 8 <= acc <= 12 or acc + nv + 1 > registers:
                continue
            key = ((fb + nv) / acc, -acc, -fb)
            if best is None or key < best[0]:
                best = (key, (fb, vx, nv, flat))
    return None if best is None else best[1]


# Row-vectorized tiles a template search measures beside the default (row_candidates).
ROW_CANDIDATES = 8


def row_candidates(extents, data_shape, out_channels_per_group: int, lanes: int, registers: int = VECTOR_REGISTERS) -> list[dict]:
    """The row-vectorized form's configs for template tuning, the default (`default_row_tile`)
    first: FB output channels (dividing all of them) x NV vectors of the row form and, for a
    stride-1 unpadded 1x1 conv whose plane a full vector divides, of the flat plane, with 4 or
    more accumulators that fit the register file beside the NV input vectors and a broadcast;
    the fewest loads per multiply-add first, ROW_CANDIDATES of them. [] when the row has no
    useful vector."""
    default = default_row_tile(extents, data_shape, out_channels_per_group, lanes, registers)
    if default is None:
        return []
    _, out_channels, out_height, out_width, _, _, _ = extents

    def config(fb, vx, nv, flat):
        return {"form": "rows", "fb": fb, "vx": vx, "nv": nv, "flat": flat}

    configs = [config(*default)]
    forms = [units for units in (_row_form_units(out_height, out_width, lanes), _row_units(extents, data_shape, lanes))
             if units is not None]
    forms = list(dict.fromkeys(forms))  # the flat plane's units, where they are not the rows'
    scored = []
    for vx, count, is_flat in forms:
        for fb in (d for d in range(1, registers - 2) if out_channels % d == 0):
            for nv in (d for d in range(1, count + 1) if count % d == 0):
                acc = fb * nv
                if acc >= 4 and acc + nv + 1 <= registers:
                    scored.append(((fb + nv) / acc, -acc, config(fb, vx, nv, is_flat)))
    scored.sort(key=lambda x: x[:2])
    for *_, c in scored:
        if len(configs) > ROW_CANDIDATES:
            break
        if c not in configs:
            configs.append(c)
    return configs


def _row_tile_fits(extents, data_shape, out_channels_per_group: int, fb: int, vx: int, nv: int, flat: bool) -> bool:
    """Whether the row-vectorized tile FB channels x NV vectors of VX columns divides the conv
    (`flat`: NV x VX pixels of the plane as one row, only for a stride-1 unpadded 1x1 conv).
    FB may span a group boundary: each channel then reads its own group's input."""
    _, out_channels, out_height, out_width, _, kh, kw = extents
    if fb < 1 or vx < 1 or nv < 1 or out_channels % fb:
        return False
    if flat:
        return kh == kw == 1 and data_shape[2:] == [out_height, out_width] and (out_height * out_width) % (nv * vx) == 0
    return out_width % vx == 0 and out_height % nv == 0


def flat_plane(extents, data_shape, out_channels_per_group: int, tile: tuple[int, int], lanes: int) -> bool:
    """Whether the row-vectorized form of a grouped 1x1 conv should run over the plane as one
    row: a stride-1 unpadded 1x1 conv (the input plane is the output plane) of FB >= 8 rows of
    one group, whose row width no full vector divides (28) but whose plane one does (784 = 49 x
    16). Its vectors are then whole (16 of 16 lanes instead of 14) and one load each; a 56-wide
    row's half vector (8 columns) stays the row's. (docs/performance.md: Grouped 1x1 convs over the
    flat plane)"""
    _, out_channels, out_height, out_width, _, kh, kw = extents
    fb, vx = tile
    if out_channels_per_group >= out_channels or fb < 8 or out_channels_per_group % fb or kh != 1 or kw != 1:
        return False
    if data_shape[2:] != [out_height, out_width] or vx == lanes or (vx == lanes // 2 and vx >= 8):
        return False
    return (out_height * out_width) % lanes == 0
