"""CPU schedule for 2-D convolutions in channel-blocked layout (NCHW[x]c, core.compiler.passes.layout.nchwc):
`Conv2dNCHWc`, register tiles of rows x columns x one vector of output channels, no copies, the
epilogue fused into the write-back; with the choices only it makes (one-pixel outputs, strided 1x1
convs grouped by channel blocks). Split from cpu_conv.py (the NCHW rule and the tile helpers both
use), which had reached the project's file-size limit.
"""
from __future__ import annotations

import logging

from ..target import vector_lanes, vector_registers
from .cpu_common import (
    cache_write_and_inline_epilogue,
    const_int,
    conv_runs_parallel,
    decompose_vector_init,
    find_block,
    is_aarch64,
    schedule_remaining_blocks,
    split_padding_by_rows,
)
from .cpu_conv import Conv2dNCHW, choose_conv_tile, multiply_adds, register_tiles
from .cpu_depthwise import inline_tail

__all__ = [
    "FLAT_PAIR_COLUMNS", "FULL_WIDTH_AVX512_CPUS", "MIN_ACCUMULATORS", "MIN_TAIL_CHUNKS", "Conv2dNCHWc", "flat_1x1", "full_width_avx512",
    "pair_tile", "pixel_channel_blocks", "reads_padding_in_place", "strided_1x1_group",
]

logger = logging.getLogger(__name__)


# CPUs (LLVM names) that execute AVX-512 FMAs on full-width units, two a cycle: there a tile of one
# channel block leaves the FMA units half idle, and two channel blocks per tile (12-16 accumulators,
# each broadcast feeding two vectors) are the default. CPUs that run AVX-512 on 256-bit halves keep
# one block. AVX2 code (8 lanes, 16 registers) takes two blocks on every CPU (two 256-bit FMAs a
# cycle since Haswell and Zen 2; 6-12 accumulators, pair_tile). (docs/performance.md:
# FULL_WIDTH_AVX512_CPUS and AVX2_TWO_BLOCKS)
FULL_WIDTH_AVX512_CPUS = frozenset({"znver5"})
# Accumulators below which a one-block tile leaves the FMAs waiting on each other, whatever the ISA:
# an output whose width has no divisor tile of 6 or more (25: 5 columns, rows not divisible) takes
# a tile of two channel blocks of 6 or more accumulators where one exists (pair_tile from 6).
# (docs/performance.md: MIN_ACCUMULATORS)
MIN_ACCUMULATORS = 6
AVX2_TWO_BLOCKS = True  # (benchmarks/parallel.py --mode split's variant one-block sets it False)
# Columns of the two-block tile a stride-1 unpadded 1x1 conv takes over its flat plane (its H x W
# pixels as one row, `flat_1x1`) with 16 registers, where its rows have no two-block tile of as
# many pixels (7, 13, 14, 27, 28 or 56 wide); the last tile's pixels past the plane are predicated
# off. (docs/performance.md: FLAT_PAIR_COLUMNS and MIN_TAIL_CHUNKS)
FLAT_PAIR_COLUMNS = 5
# Channel blocks from which an odd count has two-block tiles among the template search's
# candidates, the last tile's second block predicated off. Not a default (LLVM may keep that test
# inside the reduction loop): the layout pass pads such a conv by one block instead
# (channel_padding.paired_channels). (docs/performance.md: FLAT_PAIR_COLUMNS and MIN_TAIL_CHUNKS)
MIN_TAIL_CHUNKS = 16


def full_width_avx512(target) -> bool:
    """Whether `target` is a CPU of FULL_WIDTH_AVX512_CPUS with AVX-512 on."""
    from ..target import target_cpu

    try:
        return vector_lanes(target) == 16 and target_cpu(target)["name"] in FULL_WIDTH_AVX512_CPUS
    except Exception:  # noqa: BLE001 - a target without an x86 CPU
        return False


def pair_tile(out_height: int, out_width: int, oc_block: int, registers: int, low: int | None = None) -> tuple[int, int] | None:
    """(T, TH) of a register tile of two channel blocks (two vectors per pixel) with 12-16
    accumulators of AVX-512's 32 registers or 6-12 of AVX2's 16 (from `low` when given), the most
    of them, one row preferred; None when the output has no such tile."""
    low, high = (low or 12, 16) if registers >= 32 else (low or 6, 12)
    pairs = [x for x in register_tiles(2 * oc_block, out_height, out_width, oc_block, registers)
             if x[0] == 2 * oc_block and low <= x[3] <= high]
    if not pairs:
        return None
    _, th, t, _ = max(pairs, key=lambda x: (x[3], -x[1]))
    return t, th


def pixel_channel_blocks(oc_chunks: int, out_pixels: int) -> int:
    """Output-channel blocks per register tile (OC2) of a channel-blocked conv by default: 1, or for
    a conv whose output is one pixel (a squeeze-excitation conv on the pooled [C, 1, 1], a 1x1
    classifier), the largest divisor of the blocks up to 4. With one pixel there are no columns to
    tile: one block gives one accumulator, one dependent FMA chain over all input channels
    (latency-bound at a quarter of the FMA rate); four blocks give four independent chains, each
    broadcast input feeding four. (docs/performance.md: One-pixel outputs)"""
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
# Packed weights up to which a conv's parallel loop takes rows first (n, oh/TH, oc_chunk): split by
# channel blocks, each thread read the whole input, half of it written by the other core; split by
# rows, a thread reads the rows its own core wrote (the convs around it and their padded copies are
# split by rows too; depthwise convs from cpu_depthwise_nchwc.ROWS_FIRST_MIN_ROWS rows). Pools and
# concatenations stay split by channel blocks. Each thread streams all the weights, so only weights
# that stay in L2 beside the rows (larger ones: LARGE_WEIGHT_BANDS). (docs/performance.md:
# ROWS_FIRST_MAX_WEIGHT_BYTES and ROWS_FIRST)
ROWS_FIRST_MAX_WEIGHT_BYTES = 256 << 10
ROWS_FIRST = True  # (benchmarks/parallel.py --mode split's variant chunks-first sets it False)
# A conv with larger weights is split over this many bands of rows first (n, band, oc_chunk | the
# band's rows ...), where they divide its rows: each thread streams the weights once per band and
# reads mostly rows its own core wrote. (docs/performance.md: LARGE_WEIGHT_BANDS)
LARGE_WEIGHT_BANDS = 2


def weight_bytes(extents) -> int:
    """Bytes of a float32 conv2d_NCHWc's weights, from its iterators n, oc_chunk, oh, ow,
    oc_block | ic, kh, kw."""
    _, chunks, _, _, oc_block, ic, kh, kw = extents
    return chunks * oc_block * ic * kh * kw * 4


def strided_1x1_group(extents, data_shape) -> int:
    """Output-channel blocks to compute per output row (1: blocks outermost, the usual order)
    for a `conv2d_NCHWc` with loop extents (n, oc_chunks, oh, ow, oc_block, ic, kh, kw) reading
    input of shape (n, ic_chunks, H, W, ic_block).

    Only a 1x1 conv of stride >= 2 whose touched input exceeds STRIDED_INPUT_PASS_BYTES is
    grouped: the largest divisor G of its channel blocks whose packed weights fit in
    GROUP_WEIGHT_BYTES. With 8-lane blocks (AVX2) a pixel is half a cache line and a stride-2
    pass touches every line of every other row, so 64 blocks re-read ResNet-50's 56x56x256
    input 64 times from L3. With 16-lane blocks (AVX-512) only ResNet-50's 56->28 one is grouped.
    Stride-1 convs stream their rows well enough from L3, and the other strided 1x1 shapes have
    inputs that stay in L2. (docs/performance.md: Strided 1x1 convs grouped by channel blocks)"""
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


# Kernel taps, and output channels, up to which a strided conv with a narrow input block reads
# its padding in place
INLINE_PADDING_MAX_TAPS = 9
INLINE_PADDING_MAX_CHANNELS = 32


def flat_1x1(extents, data_shape, padded: int | None) -> bool:
    """Whether a `conv2d_NCHWc` (loop extents n, oc_chunks, oh, ow, oc_block, ic, kh, kw) reading
    input of shape (n, ic_chunks, H, W, ic_block) is a stride-1 1x1 conv of an unpadded input:
    pixel h * W + w of its output reads only pixel h * W + w of its input, so its register tiles
    may run over the plane as one row of H x W pixels (config "flat")."""
    _, _, out_h, out_w, _, _, kh, kw = extents
    return kh == kw == 1 and padded is None and list(data_shape[2:4]) == [out_h, out_w]


def reads_padding_in_place(extents, in_block: int, lanes: int, padded_width: int | None) -> bool:
    """Whether a `conv2d_NCHWc` (loop extents n, oc_chunks, oh, ow, oc_block, ic, kh, kw) whose
    input is a padded copy `padded_width` wide (None: no padding) reads its input in place, a
    select on the position per load, instead of copying it padded first: an image stem, input
    blocks narrower than a vector (NCHW3c), stride 2 or more, at most INLINE_PADDING_MAX_TAPS
    taps and INLINE_PADDING_MAX_CHANNELS outputs. Its padded copy is a pass of scalar selects
    (3 floats a pixel, no vector fits) over an input such a conv reads only a few times.
    Not a stride-1 stem (each load's select repeated for every channel block and tap) nor a 7x7
    one (too many taps a pixel). (docs/performance.md: Image stems read their padding in place)"""
    _, chunks, _, out_w, oc_block, _, kh, kw = extents
    if padded_width is None or in_block >= lanes or kh * kw > INLINE_PADDING_MAX_TAPS or out_w < 2:
        return False
    stride = (padded_width - kw) // (out_w - 1)
    return stride >= 2 and chunks * oc_block <= INLINE_PADDING_MAX_CHANNELS


class Conv2dNCHWc:
    """Direct convolution in channel-blocked layout (core.compiler.passes.layout.nchwc): TOPI's
    `conv2d_NCHWc` block, iterators n, oc_chunk, oh, ow, oc_block | ic, kh, kw.

    The layout already is what the NCHW rule builds per call: weights are constants in
    OIHW{b}i{b}o (packed once, by FoldWeights), the b input channels of a pixel are contiguous and
    the b output channels of a pixel are one vector, so no copy is made. Each thread computes
    TH rows x T columns x b channels in registers (`choose_conv_tile`; one row for a 1x1 conv
    whose pixel is a whole cache line, see `_default_tile`), loops
    n, oc_chunk, oh/TH (fused, parallel) | ow/T | ic/b, kh, kw, ic%b | TH, T (unrolled) | b
    (vectorized; n, oh/TH, oc_chunk when its weights are small, ROWS_FIRST_MAX_WEIGHT_BYTES:
    each thread then reads the rows its own core wrote; else n, two bands of rows, oc_chunk where
    they divide the rows, LARGE_WEIGHT_BANDS), and writes each tile back once with the fused
    epilogue (bias, batch-norm, residual add, ReLU) as whole vectors. Padding stays a separate
    vectorized copy, except for an image stem's narrow input blocks (`reads_padding_in_place`).

    A strided 1x1 conv (a ResNet downsampling projection) whose input would be re-read from
    beyond L2 once per output-channel block computes groups of channel blocks per output row
    instead (`strided_1x1_group`): loops n, oc_chunk/G, oh/TH, G (fused, parallel) | ...
    """

    name = "cpu.Conv2dNCHWc"
    space_version = 8

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
        padded = any(sch.get(p).writes[0].source.same_as(stmt.reads[0].source) and len(sch.get(p).reads) == 1
                     and [str(x) for x in sch.get(p).writes[0].source.shape] != [str(x) for x in sch.get(p).reads[0].source.shape]
                     for p in sch.get_producers(conv))
        padded = const_int(stmt.reads[0].source.shape[3]) if padded else None  # the padded copy's width
        flat = flat_1x1(extents, [const_int(d) for d in stmt.reads[0].source.shape], padded)
        return {"conv": conv, "extents": extents, "data_region": stmt.reads[0], "in_block": in_block, "lanes": vector_lanes(target),
                "registers": vector_registers(target), "padded": padded, "full_width": full_width_avx512(target), "flat": flat,
                "aarch64": is_aarch64(target)}

    def _default_tile(self, info) -> tuple[int, int]:
        _, _, out_height, out_width, oc_block, _, kh, kw = info["extents"]
        tile = choose_conv_tile(oc_block, out_width, info["lanes"], out_height)
        if tile is None or tile[0] != oc_block:
            # one vector of oc_block lanes per column: as many columns as leave registers spare
            t = max(d for d in range(1, min(out_width, 12) + 1) if out_width % d == 0)
            return t, 1
        if tile[2] > 1 and kh * kw == 1 and oc_block * 4 >= CACHE_LINE_BYTES:
            # A 1x1 conv whose pixel is a whole cache line (16-lane blocks, AVX-512) runs faster
            # on one row of 6 or more columns than on a 2-D tile; with 8-lane blocks (AVX2) the
            # 2-D tile stays faster. (docs/performance.md: 1x1 convs on one row)
            row = choose_conv_tile(oc_block, out_width, info["lanes"], 1)
            if row is not None and row[0] == oc_block and row[1] >= 6:
                return row[1], 1
        return tile[1], tile[2]

    def _default_config(self, info) -> dict:
        t, th = self._default_tile(info)
        _, chunks, out_height, out_width, oc_block = info["extents"][:5]
        oc2 = pixel_channel_blocks(chunks, out_height * out_width)
        two_fma_units = info["full_width"] or (AVX2_TWO_BLOCKS and info["lanes"] == 8)  # (see FULL_WIDTH_AVX512_CPUS)
        flat = False
        if info["aarch64"] and info["in_block"] < info["lanes"] and oc2 == 1 and chunks % 2 == 0 and oc_block == info["lanes"]:
            # AArch64 image stem (NCHW3c): every input is a register of its own (no FMA reads memory)
            # and a strided row of T columns reads 2T + 1 of them per tap row; 4 columns of two
            # channel blocks (8 accumulators, 6 weight vectors) fit v0-v31 where 8 x 1 spilled
            # under Cortex-A76's scheduling (docs/performance.md: ARM64 (AArch64))
            t, th, oc2 = max(d for d in range(1, 5) if out_width % d == 0), 1, 2
        elif oc2 == 1 and chunks % 2 == 0 and oc_block == info["lanes"]:
            # two blocks where the FMA units are two, or where one block's tile has too few
            # independent FMAs to hide their latency (see MIN_ACCUMULATORS)
            few = t * th < MIN_ACCUMULATORS
            pair = None
            if two_fma_units or few:
                pair = pair_tile(out_height, out_width, oc_block, info["registers"], low=MIN_ACCUMULATORS if few else None)
                flat_ok = info["flat"] and info["registers"] < 32 and out_height * out_width >= 2 * FLAT_PAIR_COLUMNS
                if two_fma_units and flat_ok and (pair is None or pair[0] * pair[1] < FLAT_PAIR_COLUMNS):
                    pair, flat = (FLAT_PAIR_COLUMNS, 1), True  # (see FLAT_PAIR_COLUMNS)
            if pair is not None:
                (t, th), oc2 = pair, 2
        config = {"t": t, "th": th, **({"oc2": oc2} if oc2 > 1 else {}), **({"flat": True} if flat else {})}
        # (AArch64: the stem copies its padding; read in place, the selects' branches split the
        # tile's loop and LLVM spilled it, with one row or two)
        if reads_padding_in_place(info["extents"], info["in_block"], info["lanes"], info["padded"]) and not info["aarch64"]:
            config["inline_pad"] = True
            if th == 1 and out_height % 2 == 0 and 2 * t * oc2 * (oc_block // info["lanes"]) <= info["registers"] // 2:
                config["th"] = 2  # two rows share the tile's weight vectors (AVX-512's 32 registers only)
        group = strided_1x1_group(info["extents"], [const_int(d) for d in info["data_region"].source.shape])
        while group > 1 and -(-chunks // oc2) % group:
            group -= 1  # a group of tiles: a divisor of the tiles along the channels
        if group > 1:
            config["ocg"] = group
        if ROWS_FIRST and not flat and group == 1:  # rows first, or in bands (ROWS_FIRST_MAX_WEIGHT_BYTES)
            if weight_bytes(info["extents"]) <= ROWS_FIRST_MAX_WEIGHT_BYTES:
                config["rows_outer"] = True
            elif LARGE_WEIGHT_BANDS > 1 and (out_height // config["th"]) % LARGE_WEIGHT_BANDS == 0:
                config["bands"] = LARGE_WEIGHT_BANDS
        return config

    def candidates(self, func, target) -> list[dict]:
        """Configs to measure, the default first: register tiles (T columns x TH rows of one
        channel block), tiles of two channel blocks (OC2: each broadcast input feeds two vectors,
        half the loads per FMA; what narrow outputs like 7x7 have no wide tile for), and the three
        best-ranked tiles of each with kw unrolled, with channel blocks outermost in the parallel
        loop and with rows outermost."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return []
        _, oc_chunks, out_height, out_width, oc_block, _, kh, kw = info["extents"]
        lanes, registers = info["lanes"], vector_registers(target)
        configs = [self._default_config(info)]
        if configs[0].get("oc2", 1) > 1:  # the one-block tile, measured against it (the row's, for a flat default)
            t_, th_ = self._default_tile(info) if configs[0].get("flat") else (configs[0]["t"], configs[0]["th"])
            configs.append({"t": t_, "th": th_})
        tiles = [x for x in register_tiles(oc_block, out_height, out_width, lanes, registers) if x[0] == oc_block]
        tiles.sort(key=lambda x: (-x[3], x[1]))
        for _, th_, t_, _ in tiles[:8]:
            if {"t": t_, "th": th_} not in configs:
                configs.append({"t": t_, "th": th_})
        if (oc_chunks % 2 == 0 or oc_chunks >= MIN_TAIL_CHUNKS) and oc_block == lanes:
            # two vectors per column: register_tiles' two-vector tiles of a 2 x oc_block group
            pairs = [x for x in register_tiles(2 * oc_block, out_height, out_width, lanes, registers) if x[0] == 2 * oc_block]
            pairs.sort(key=lambda x: (-x[3], x[1]))
            configs += [{"t": t_, "th": th_, "oc2": 2} for _, th_, t_, _ in pairs[:4]]
            if info["flat"]:  # and over the flat plane, the last tile's pixels predicated off
                widths = (3, 4, 5) if registers < 32 else (6, 7, 8)
                configs += [{"t": w, "th": 1, "oc2": 2, "flat": True} for w in widths if w < out_height * out_width]
        leading = configs[:1] + [c for c in configs[1:] if "oc2" not in c][:1] + [c for c in configs if "oc2" in c][:1]
        for base in leading:
            if kh * kw > 1:
                configs.append({**base, "unroll_kw": True})
            if base.get("rows_outer") or base.get("bands"):  # and channel blocks first
                configs.append({k: v for k, v in base.items() if k not in ("rows_outer", "bands")})
            if not base.get("flat") and not base.get("rows_outer"):  # (a flat tile has no rows)
                configs.append({**{k: v for k, v in base.items() if k not in ("ocg", "bands")}, "rows_outer": True})
        if "ocg" in configs[0]:  # the same tile without the grouping
            configs.append({k: v for k, v in configs[0].items() if k != "ocg"})
        if configs[0].get("inline_pad"):  # every tile reading in place, and the default copying
            configs = [configs[0]] + [{**c, "inline_pad": True} for c in configs[1:] if {**c, "inline_pad": True} != configs[0]]
            configs.append({k: v for k, v in configs[0].items() if k != "inline_pad"})
        unique = []  # (a two-block default is among the two-block tiles too)
        for config in configs:
            if config not in unique:
                unique.append(config)
        return unique

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
        bands = int(config.get("bands", 1))
        flat = bool(config.get("flat", False))
        # (an odd count of channel blocks, or a flat plane that T does not divide: the last tile
        # computes what it can, the rest predicated off)
        columns_wrong = (th != 1 or rows_outer or not info["flat"] or t > out_height * out_width) if flat else (out_width % t or out_height % th)
        bands_wrong = bands > 1 and (flat or rows_outer or ocg > 1 or (out_height // th) % bands)
        if given and (columns_wrong or bands_wrong or oc2 > extents[1] or -(-extents[1] // oc2) % ocg or (rows_outer and ocg > 1)):
            raise ValueError(f"tile {config} does not divide the convolution")
        Conv2dNCHW._inline_padding_free_copy(sch, conv, info["data_region"])
        if config.get("inline_pad"):  # the conv reads the input itself, zero outside it
            for producer in sch.get_producers(conv):
                if sch.get(producer).writes[0].source.same_as(info["data_region"].source):
                    sch.compute_inline(producer)
        # SiLU / HardSwish read the conv's result twice: inlined into one reader, the tail folds
        # into the write-back instead of a second pass (16->96 ch 112x112 SiLU: 0.40x the time)
        inline_tail(sch, conv)
        writeback = cache_write_and_inline_epilogue(sch, conv)
        if flat:  # the accumulator and both blocks' iterations over pixel h * W + w (see flat_1x1)
            sch.transform_layout(conv, ("write", 0), lambda n, c, h, w, b: (n, c, h * out_width + w, b))
            sch.transform_block_layout(conv, lambda n, c, h, w, b, ic, kh, kw: (n, c, h * out_width + w, b, ic, kh, kw))
            sch.transform_block_layout(writeback, lambda n, c, h, w, b: (n, c, h * out_width + w, b))
            n, occ, ow, ocb, ic, kh, kw = sch.get_loops(conv)
            oh_outer = oh_inner = None
        else:
            n, occ, oh, ow, ocb, ic, kh, kw = sch.get_loops(conv)
            oh_outer, oh_inner = sch.split(oh, [None, th]) if th > 1 else (oh, None)
        ow_outer, ow_inner = sch.split(ow, [None, t])
        ic_outer, ic_inner = sch.split(ic, [None, in_block])
        occ, oc_inner = sch.split(occ, [None, oc2]) if oc2 > 1 else (occ, None)
        occ, oc_group = sch.split(occ, [None, ocg]) if ocg > 1 else (occ, None)
        tile = [loop for loop in (oc_inner, oh_inner, ow_inner) if loop is not None]
        outer = [loop for loop in (n, occ, oh_outer, oc_group) if loop is not None]
        sch.reorder(*outer, ow_outer, ic_outer, kh, kw, ic_inner, *tile, ocb)
        if info["aarch64"] and not unroll_kw:
            # AArch64: NEON's FMA takes no memory operand, so each input is a register of its own;
            # with the input channel outside kw, the inputs a strided conv's columns share across
            # kw (2c + 2 = 2(c + 1) + 0) stay live for one channel, not for all four, and the
            # tile fits v0-v31 (docs/performance.md: ARM64 (AArch64))
            sch.reorder(ic_inner, kw)
        for loop in tile[:-1]:  # ow_inner is unrolled below
            sch.unroll(loop)
        if unroll_kw:
            sch.unroll(kw)
        if flat:  # the plane's tiles in the parallel loop too (few channel blocks, many cores)
            sch.reverse_compute_at(writeback, ow_outer)
            parallel = sch.fuse(*outer, ow_outer)
        else:
            if rows_outer:  # each input row read once from cache for every output-channel block
                sch.reorder(oh_outer, occ)
                parallel = sch.fuse(n, oh_outer, occ)
            elif bands > 1:  # (LARGE_WEIGHT_BANDS)
                band, oh_outer = sch.split(oh_outer, [bands, None])
                sch.reorder(band, occ)
                parallel = sch.fuse(n, band, occ)
            else:
                parallel = sch.fuse(*outer)
            sch.reverse_compute_at(writeback, ow_outer)
        split = conv_runs_parallel(multiply_adds(extents))
        if split:
            sch.parallel(parallel)
        sch.vectorize(ocb)
        sch.unroll(ow_inner)
        decompose_vector_init(sch, conv, ic_outer, unrolled=len(tile))
        wb_loops = sch.get_loops(writeback)[2:]
        if wb_loops:
            sch.vectorize(wb_loops[-1])
        producers = sch.get_producers(conv)
        pads = [sch.get(b).name_hint for b in producers]
        if split:  # its padded copy too, by rows, however small (else the generic rule below)
            for block in producers:
                if sch.get(block).writes[0].source.same_as(info["data_region"].source):
                    split_padding_by_rows(sch, block, lanes)
        schedule_remaining_blocks(sch, lanes, keep=tuple(pads))
        return sch
