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
    decompose_vector_init,
    find_block,
    layout_free_params,
    pack_read_buffer,
    schedule_remaining_blocks,
    vector_lanes,
    vector_registers,
    VECTOR_REGISTERS,
)
from .cpu_depthwise import inline_tail

__all__ = ["Conv2dNCHW", "Conv2dNCHWc", "choose_conv_tile", "choose_width_tile", "flat_plane", "pixel_channel_blocks", "register_tiles", "strided_1x1_group"]

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
    light models (the best fixed rule tried: 1.70x from each shape's best config in geometric
    mean, where the former rule, the best lanes-per-load ratio with one row, was 2.04x).
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


# Multiply-adds below which a convolution runs on one thread (~40 us of work or less): waking the
# pool's workers, and on a busy machine waiting for one of them to be scheduled (see
# cpu_common.PARALLEL_MIN_WORK), costs more than half of it saves. (The small CNN sample, convs
# of 0.3-0.6 M multiply-adds: 0.050 ms at 1 thread, 0.045-0.064 ms at 2, 16 ms at 2 beside a
# busy process.)
CONV_PARALLEL_MIN_MACS = 1 << 20


def _multiply_adds(extents) -> int:
    total = 1
    for extent in extents:
        total *= extent
    return total


class Conv2dNCHW:
    """Register-blocked direct convolution with a prepacked weight (see module docstring)."""

    name = "cpu.Conv2dNCHW"
    # bumped whenever `candidates` changes, so tuning records from an older space are redone
    space_version = 4

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
        256-bit (half-lane) tiles; [] when the rule does not
        match or takes the row-vectorized form (which has no knobs)."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return []
        lanes, ocpg, icpg = info["lanes"], info["ocpg"], info["icpg"]
        _, _, out_height, out_width, _, kh, kw = info["extents"]
        if ocpg % lanes:
            return []
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
        _, out_channels, _, out_width, _, _, _ = extents
        if oc_per_group % lanes:
            # Depthwise and odd group widths (shufflenet's 34, 68 channels per group): vectors
            # along the output row instead, a few output channels unrolled.
            width_tile = choose_width_tile(out_channels, out_width, lanes, oc_per_group, vector_registers(target))
            if width_tile is not None:
                data_shape = [const_int(d) for d in data_region.source.shape]
                flat = flat_plane(extents, data_shape, oc_per_group, width_tile, lanes)
                if flat:
                    width_tile = (width_tile[0], lanes)
                return self._schedule_width_vectorized(sch, conv, data_region, width_tile, lanes, extents[3] if flat else 0)
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
        if _multiply_adds(extents) >= CONV_PARALLEL_MIN_MACS:
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
        broadcast: loops n, oc/FB, oh (parallel) | ow/VX | ic, kh, kw | FB | VX. With
        `flat_width` (the row width, see `flat_plane`) the plane is one row of H x W pixels:
        loops n, oc/FB, HW/VX (parallel) | ic | FB | VX."""
        fb, vx = tile
        self._inline_padding_free_copy(sch, conv, data_region)
        writeback = cache_write_and_inline_epilogue(sch, conv)
        macs = _multiply_adds([const_int(sch.get(loop).extent) or 1 for loop in sch.get_loops(conv)])
        if flat_width:
            # the accumulator, the conv's and the write-back's iterations over pixel h * W + w: a
            # tile of VX pixels may span two rows, and each block iterates exactly its pixels
            # (split over h and w, the write-back would cover the rows' bounding box)
            sch.transform_layout(conv, ("write", 0), lambda n, c, h, w: (n, c, h * flat_width + w))
            sch.transform_block_layout(conv, lambda n, c, h, w, ic, kh, kw: (n, c, h * flat_width + w, ic, kh, kw))
            sch.transform_block_layout(writeback, lambda n, c, h, w: (n, c, h * flat_width + w))
            n, oc, pixel, ic, kh, kw = sch.get_loops(conv)
            oc_outer, oc_inner = sch.split(oc, [None, fb])
            outer, inner = sch.split(pixel, [None, vx])
            sch.reorder(n, oc_outer, outer, ic, kh, kw, oc_inner, inner)
            sch.reverse_compute_at(writeback, outer)
            parallel = sch.fuse(n, oc_outer, outer)
        else:
            n, oc, oh, ow, ic, kh, kw = sch.get_loops(conv)
            oc_outer, oc_inner = sch.split(oc, [None, fb])
            outer, inner = sch.split(ow, [None, vx])
            sch.reorder(n, oc_outer, oh, outer, ic, kh, kw, oc_inner, inner)
            sch.reverse_compute_at(writeback, outer)
            parallel = sch.fuse(n, oc_outer, oh)
        if macs >= CONV_PARALLEL_MIN_MACS:
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
    that is 256 bits or more (a 4-lane vector beside 7 lanes of a ymm: no). Thread CPU time at
    1 thread, minimum of 12 alternating rounds, light ShuffleNet's grouped 1x1 convs, Zen 4
    AVX-512, load 4-7: 136 ch (34 per group) 28x28 0.106 ->
    0.078 ms, 24 -> 112 ch 56x56 0.118 -> 0.060 ms, 136 ch 14x14 and 272 ch 7x7 0.60-0.66x; the
    28- and 68-per-group convs 0.96-1.03x (noise); the whole model 0.90x (4.62 against 5.15 ms,
    min of 12 alternating blocks). Where fewer than 8 rows fit (AVX2's 16 registers: 2 of 34, 4 of
    68, 7 of 28; the 4-row tile measured 0.89-1.07x of the ungrouped one) the ungrouped choice stays.
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


def flat_plane(extents, data_shape, out_channels_per_group: int, tile: tuple[int, int], lanes: int) -> bool:
    """Whether the row-vectorized form of a grouped 1x1 conv should run over the plane as one
    row: a stride-1 unpadded 1x1 conv (the input plane is the output plane) of FB >= 8 rows of
    one group, whose row width no full vector divides (28) but whose plane one does (784 = 49 x
    16). Its vectors are then whole (16 of 16 lanes instead of 14) and one load each. Thread
    CPU time at 1 thread, light ShuffleNet's 28x28 grouped convs (136 ch, 34 per group; 112 ch),
    Zen 4 AVX-512, min of 10 alternating rounds, load 5.6: 0.84-0.89x of the 14-column tile (again with the rule itself: 0.86-0.89x, load 5.5).
    (A 56-wide row's half vector, 8 columns, measured faster than the flat plane: 1.10x.)"""
    _, out_channels, out_height, out_width, _, kh, kw = extents
    fb, vx = tile
    if out_channels_per_group >= out_channels or fb < 8 or out_channels_per_group % fb or kh != 1 or kw != 1:
        return False
    if data_shape[2:] != [out_height, out_width] or vx == lanes or (vx == lanes // 2 and vx >= 8):
        return False
    return (out_height * out_width) % lanes == 0


def pixel_channel_blocks(oc_chunks: int, out_pixels: int) -> int:
    """Output-channel blocks per register tile (OC2) of a channel-blocked conv by default: 1, or for
    a conv whose output is one pixel (a squeeze-excitation conv on the pooled [C, 1, 1], a 1x1
    classifier), the largest divisor of the blocks up to 4. With one pixel there are no columns to
    tile: one block gives one accumulator, one dependent FMA chain over all input channels
    (latency-bound at a quarter of the FMA rate: 576 -> 144 channels took 12-15 us for 83 K
    multiply-adds); four blocks give four independent chains, each broadcast input feeding four."""
    if out_pixels != 1:
        return 1
    return max(d for d in range(1, 5) if oc_chunks % d == 0)


# A strided 1x1 conv's input touched by one pass over the output (every s-th row and column) above
# which, with channel blocks outermost, each block's pass re-reads it from beyond L2 (Zen 3 has
# 512 KiB, Zen 4 1 MiB, shared with the weights and the output); and the packed weights a group
# of channel blocks may hold so they stay in L2 across the rows.
STRIDED_INPUT_PASS_BYTES = 512 << 10
CACHE_LINE_BYTES = 64
GROUP_WEIGHT_BYTES = 256 << 10


def strided_1x1_group(extents, data_shape) -> int:
    """Output-channel blocks to compute per output row (1: blocks outermost, the usual order)
    for a `conv2d_NCHWc` with loop extents (n, oc_chunks, oh, ow, oc_block, ic, kh, kw) reading
    input of shape (n, ic_chunks, H, W, ic_block).

    Only a 1x1 conv of stride >= 2 whose touched input exceeds STRIDED_INPUT_PASS_BYTES is
    grouped: the largest divisor G of its channel blocks whose packed weights fit in
    GROUP_WEIGHT_BYTES. With 8-lane blocks (AVX2) a pixel is half a cache line and a stride-2
    pass touches every line of every other row, so 64 blocks re-read ResNet-50's 56x56x256
    input 64 times from L3. In ResNet-50 at one thread (Zen 4 running AVX2 code, thread CPU
    time) its 56->28 projection took 3.06 ms grouped against 3.72, the 28->14 one 2.98 against
    3.42; with 16-lane blocks (AVX-512) only the 56->28 one is grouped, with no change in the
    model (2.0-2.1 ms against 2.7 with caches flushed between calls). Stride-1 convs stream
    their rows well enough from L3 (no gain measured), and the other strided 1x1 shapes have
    inputs that stay in L2."""
    _, chunks, out_h, out_w, oc_block, in_channels, kh, kw = extents
    if kh != 1 or kw != 1 or out_h < 2 or out_w < 2 or any(d is None for d in data_shape):
        return 1
    _, in_chunks, in_h, in_w, in_block = data_shape
    stride_h, stride_w = (in_h - 1) // (out_h - 1), (in_w - 1) // (out_w - 1)
    if stride_h < 2 or stride_w < 2:
        return 1
    pixel = in_block * 4
    touched = out_h * out_w * min(CACHE_LINE_BYTES, stride_w * pixel) * in_chunks
    if touched <= STRIDED_INPUT_PASS_BYTES:
        return 1
    chunk_weight = in_channels * oc_block * 4
    fitting = [g for g in range(1, chunks + 1) if chunks % g == 0 and g * chunk_weight <= GROUP_WEIGHT_BYTES]
    return max(fitting, default=1)


class Conv2dNCHWc:
    """Direct convolution in channel-blocked layout (core.compiler.layout_nchwc): TOPI's
    `conv2d_NCHWc` block, iterators n, oc_chunk, oh, ow, oc_block | ic, kh, kw.

    The layout already is what the NCHW rule builds per call: weights are constants in
    OIHW{b}i{b}o (packed once, by FoldWeights), the b input channels of a pixel are contiguous and
    the b output channels of a pixel are one vector, so no copy is made. Each thread computes
    TH rows x T columns x b channels in registers (`choose_conv_tile`; one row for a 1x1 conv
    whose pixel is a whole cache line, see `_default_tile`), loops
    n, oc_chunk, oh/TH (fused, parallel) | ow/T | ic/b, kh, kw, ic%b | TH, T (unrolled) | b
    (vectorized), and writes each tile back once with the fused epilogue (bias, batch-norm,
    residual add, ReLU) as whole vectors. Padding stays a separate vectorized copy.

    A strided 1x1 conv (a ResNet downsampling projection) whose input would be re-read from
    beyond L2 once per output-channel block computes groups of channel blocks per output row
    instead (`strided_1x1_group`): loops n, oc_chunk/G, oh/TH, G (fused, parallel) | ...
    """

    name = "cpu.Conv2dNCHWc"
    space_version = 4

    def _match(self, sch, target) -> dict | None:
        found = find_block(sch, ("conv2d_NCHWc",), "SSSSSRRR")
        if found is None:
            return None
        conv, extents = found
        stmt = sch.get(conv)
        if len(stmt.reads) != 2 or len(stmt.reads[0].source.shape) != 5:
            return None
        in_block = const_int(stmt.reads[0].source.shape[4])
        if in_block is None or extents[5] % in_block:
            return None
        return {"conv": conv, "extents": extents, "data_region": stmt.reads[0], "in_block": in_block, "lanes": vector_lanes(target)}

    def _default_tile(self, info) -> tuple[int, int]:
        _, _, out_height, out_width, oc_block, _, kh, kw = info["extents"]
        tile = choose_conv_tile(oc_block, out_width, info["lanes"], out_height)
        if tile is None or tile[0] != oc_block:
            # one vector of oc_block lanes per column: as many columns as leave registers spare
            t = max(d for d in range(1, min(out_width, 12) + 1) if out_width % d == 0)
            return t, 1
        if tile[2] > 1 and kh * kw == 1 and oc_block * 4 >= CACHE_LINE_BYTES:
            # A 1x1 conv whose pixel is a whole cache line (16-lane blocks, AVX-512) runs faster
            # on one row of 6 or more columns than on a 2-D tile: ResNet-50's 28x28 1x1 convs
            # with T=7 against 4 x 2 at one thread, the 128->512 one with its residual add
            # 0.86-0.89x the time in the model, 0.85x alone (caches flushed between calls); with
            # 8-lane blocks (AVX2) the 2-D tile stays faster (1.05-1.12x the time on one row).
            row = choose_conv_tile(oc_block, out_width, info["lanes"], 1)
            if row is not None and row[0] == oc_block and row[1] >= 6:
                return row[1], 1
        return tile[1], tile[2]

    def _default_config(self, info) -> dict:
        t, th = self._default_tile(info)
        oc2 = pixel_channel_blocks(info["extents"][1], info["extents"][2] * info["extents"][3])
        config = {"t": t, "th": th, **({"oc2": oc2} if oc2 > 1 else {})}
        group = strided_1x1_group(info["extents"], [const_int(d) for d in info["data_region"].source.shape])
        if group > 1:
            config["ocg"] = group
        return config

    def candidates(self, func, target) -> list[dict]:
        """Configs to measure, the default first: register tiles (T columns x TH rows of one
        channel block), tiles of two channel blocks (OC2: each broadcast input feeds two vectors,
        half the loads per FMA; what narrow outputs like 7x7 have no wide tile for), and the three
        best-ranked tiles of each with kw unrolled and with rows outermost in the parallel loop."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return []
        _, oc_chunks, out_height, out_width, oc_block, _, kh, kw = info["extents"]
        lanes, registers = info["lanes"], vector_registers(target)
        configs = [self._default_config(info)]
        if configs[0].get("oc2", 1) > 1:
            configs.append({"t": configs[0]["t"], "th": configs[0]["th"]})  # the one-block tile, measured against it
        tiles = [x for x in register_tiles(oc_block, out_height, out_width, lanes, registers) if x[0] == oc_block]
        tiles.sort(key=lambda x: (-x[3], x[1]))
        for _, th_, t_, _ in tiles[:8]:
            if {"t": t_, "th": th_} not in configs:
                configs.append({"t": t_, "th": th_})
        if oc_chunks % 2 == 0 and oc_block == lanes:
            # two vectors per column: register_tiles' two-vector tiles of a 2 x oc_block group
            pairs = [x for x in register_tiles(2 * oc_block, out_height, out_width, lanes, registers) if x[0] == 2 * oc_block]
            pairs.sort(key=lambda x: (-x[3], x[1]))
            configs += [{"t": t_, "th": th_, "oc2": 2} for _, th_, t_, _ in pairs[:4]]
        leading = configs[:1] + [c for c in configs[1:] if "oc2" not in c][:1] + [c for c in configs if "oc2" in c][:1]
        for base in leading:
            if kh * kw > 1:
                configs.append({**base, "unroll_kw": True})
            configs.append({**{k: v for k, v in base.items() if k != "ocg"}, "rows_outer": True})
        if "ocg" in configs[0]:  # the same tile without the grouping
            configs.append({k: v for k, v in configs[0].items() if k != "ocg"})
        return configs

    def apply(self, func, target, config: dict | None = None):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return None
        conv, extents, in_block, lanes = info["conv"], info["extents"], info["in_block"], info["lanes"]
        _, _, out_height, out_width, _, _, _, _ = extents
        given = config is not None
        config = config if given else self._default_config(info)
        t, th, unroll_kw = int(config["t"]), int(config.get("th", 1)), bool(config.get("unroll_kw", False))
        rows_outer, oc2, ocg = bool(config.get("rows_outer", False)), int(config.get("oc2", 1)), int(config.get("ocg", 1))
        if given and (out_width % t or out_height % th or extents[1] % oc2 or (extents[1] // oc2) % ocg or (rows_outer and ocg > 1)):
            raise ValueError(f"tile {config} does not divide the convolution")
        Conv2dNCHW._inline_padding_free_copy(sch, conv, info["data_region"])
        # SiLU / HardSwish read the conv's result twice: inlined into one reader, the tail folds
        # into the write-back instead of a second pass (16->96 ch 112x112 SiLU: 0.40x the time)
        inline_tail(sch, conv)
        writeback = cache_write_and_inline_epilogue(sch, conv)
        n, occ, oh, ow, ocb, ic, kh, kw = sch.get_loops(conv)
        ow_outer, ow_inner = sch.split(ow, [None, t])
        ic_outer, ic_inner = sch.split(ic, [None, in_block])
        oh_outer, oh_inner = sch.split(oh, [None, th]) if th > 1 else (oh, None)
        occ, oc_inner = sch.split(occ, [None, oc2]) if oc2 > 1 else (occ, None)
        occ, oc_group = sch.split(occ, [None, ocg]) if ocg > 1 else (occ, None)
        tile = [loop for loop in (oc_inner, oh_inner, ow_inner) if loop is not None]
        outer = [loop for loop in (n, occ, oh_outer, oc_group) if loop is not None]
        sch.reorder(*outer, ow_outer, ic_outer, kh, kw, ic_inner, *tile, ocb)
        for loop in tile[:-1]:  # ow_inner is unrolled below
            sch.unroll(loop)
        if unroll_kw:
            sch.unroll(kw)
        if rows_outer:  # each input row read once from cache for every output-channel block
            sch.reorder(oh_outer, occ)
            parallel = sch.fuse(n, oh_outer, occ)
        else:
            parallel = sch.fuse(*outer)
        sch.reverse_compute_at(writeback, ow_outer)
        if _multiply_adds(extents) >= CONV_PARALLEL_MIN_MACS:
            sch.parallel(parallel)
        sch.vectorize(ocb)
        sch.unroll(ow_inner)
        decompose_vector_init(sch, conv, ic_outer, unrolled=len(tile))
        wb_loops = sch.get_loops(writeback)[2:]
        if wb_loops:
            sch.vectorize(wb_loops[-1])
        pads = [sch.get(b).name_hint for b in sch.get_producers(conv)]
        schedule_remaining_blocks(sch, lanes, keep=tuple(pads))
        return sch
