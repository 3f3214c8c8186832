"""CPU schedule for depthwise 2-D convolutions in channel-blocked layout (NCHW{b}c), with their
fused epilogue (bias, ReLU6 / hardswish / SiLU, residual add).

core.compiler.passes.layout.nchwc gives a depthwise conv whose channels the block divides the layout of
the dense convs around it and legalizes it as `depthwise_conv2d_nchwc`: a padded copy
("pad_temp") and the block "depthwise_conv2d_NCHWc", iterators n, C/b, oh, ow, b | kh, kw.
In that layout the b channels of a pixel are one vector and the weight is [C/b][kh][kw][b]
already (OIHW1i{b}o, folded once by FoldWeights): no per-call transpose as in cpu_depthwise's NCHW
channel-blocked form, no weight packing. Each thread computes TH rows x T columns x b channels in
registers; every tap is one weight vector times TH x T contiguous input vectors, any stride:

    n, C/b, oh/TH (fused, parallel) | ow/T | kh, kw | TH, T (unrolled) | b (vectorized)

and the tile is written back once with the elementwise tail inlined (SiLU's x * sigmoid(x),
which reads x twice, too). The padding is read in place ("inline": the conv reads the input
itself, zero outside it; at stride 2, and for 3x3 kernels on 14- or 7-wide rows or with
AVX-512: see INLINE_PADDING_MAX_TAPS), or a
padded copy is made per channel block inside the parallel loop ("plane": still in cache when
read kh x kw times) or as a pass of its own before the conv ("root": the conv then parallel
over rows too, for layers with one or two channel blocks). Without a copy the conv is parallel
over channel blocks and rows together; from ROWS_FIRST_MIN_ROWS rows, over bands of rows first
(n, band, C/b | rows of the band ...), so each thread reads what its own core wrote.

Knobs (template tuning, `candidates`): T, TH, where the padding is made, unrolling kw, and bands
of rows or channel blocks first.
Returns None (no match) for other blocks or symbolic shapes.
"""
from __future__ import annotations

import logging

from ..target import vector_lanes, vector_registers
from .cpu_common import (
    PARALLEL_MIN_WORK,
    cache_write_and_inline_epilogue,
    const_int,
    decompose_vector_init,
    find_block,
    iter_kinds,
    root_blocks,
    schedule_remaining_blocks,
)
from .cpu_depthwise import buffer_bytes, depthwise_runs_parallel, inline_tail

__all__ = ["DepthwiseConv2dNCHWc", "GlobalPoolNCHWc", "default_depthwise_tile", "depthwise_tiles"]

logger = logging.getLogger(__name__)

# Output columns of a register tile at most: beyond 14 the weight and input vectors and a spare
# no longer fit beside the accumulators in AVX2's 16 registers (with b = the vector width).
MAX_TILE_COLUMNS = 14


def depthwise_tiles(out_height: int, out_width: int, block: int, lanes: int, registers: int) -> list[tuple[int, int]]:
    """Every (T, TH) register tile, T columns x TH rows (dividing the output, TH 1 or 2) whose
    accumulators (T x TH x vectors per block) leave 3 registers for the weight, an input
    vector and a spare, widest first."""
    per = max(1, block // lanes)
    tiles = []
    for th in (1, 2):
        if out_height % th:
            continue
        for t in range(1, min(out_width, MAX_TILE_COLUMNS * 2) + 1):
            if out_width % t == 0 and t * th * per <= registers - 3:
                tiles.append((t, th))
    tiles.sort(key=lambda x: (-x[0] * x[1], x[1]))
    return tiles


# Output columns of the default tile at most: 7-8 accumulators are enough independent FMAs for
# the two FMA pipes, with fewer live registers than 14. (docs/performance.md: DEFAULT_TILE_COLUMNS)
DEFAULT_TILE_COLUMNS = 8


def default_depthwise_tile(out_height: int, out_width: int, block: int, lanes: int, registers: int) -> tuple[int, int]:
    """(T, TH): the widest single-row tile of at most DEFAULT_TILE_COLUMNS columns that divides
    the row, else of at most MAX_TILE_COLUMNS, and two rows when a row still gives fewer than 4
    accumulators (a 13-wide map divides only by 13 and 1... a 2-wide one by 2)."""
    fitting = depthwise_tiles(out_height, out_width, block, lanes, registers)
    t, th = 1, 1
    for limit in (DEFAULT_TILE_COLUMNS, MAX_TILE_COLUMNS):
        single = [tile for tile in fitting if tile[1] == 1 and tile[0] <= limit]
        if single and single[0][0] >= 4:
            return single[0]
        if single and single[0][0] > t:
            t = single[0][0]
    double = [tile for tile in fitting if tile[1] == 2 and tile[0] <= MAX_TILE_COLUMNS and tile[0] * 2 > t]
    if double:
        return double[0]
    return t, th


# Where the padding is read in place (an if-then-else per tap, the conv reading the input
# itself) rather than copied first: at stride 2 always; at stride 1 for kernels of at most these
# taps on rows at most this wide, or any width with AVX-512 (32 registers). The copy wrote and
# re-read the whole padded input (4x the output at stride 2) for a kernel that does 9 or 25 FMAs
# an output vector. (docs/performance.md: INLINE_PADDING_MAX_TAPS and INLINE_PADDING_MAX_WIDTH)
INLINE_PADDING_MAX_TAPS = 9
INLINE_PADDING_MAX_WIDTH = 14

# Output rows (of TH-row tiles) from which a depthwise conv without a per-plane copy is split over
# bands of rows first (n, band, C/b | rows of the band: `row_bands`), so that each thread reads
# the rows its own core wrote (see cpu_conv_nchwc.ROWS_FIRST_MAX_WEIGHT_BYTES, the convs around
# it); smaller maps would get bands of one or two rows. Within a band each channel block's rows are
# still walked in order. (docs/performance.md: ROWS_FIRST_MIN_ROWS)
ROWS_FIRST_MIN_ROWS = 28
ROWS_FIRST = True  # (benchmarks/parallel.py --mode split's variant chunks-first sets it False)


def row_bands(rows: int) -> int:
    """Bands to cut `rows` tile rows into for a rows-first split: the smallest divisor from 4
    (1: channel blocks first, under ROWS_FIRST_MIN_ROWS rows)."""
    if not ROWS_FIRST or rows < ROWS_FIRST_MIN_ROWS:
        return 1
    return next(d for d in range(4, rows + 1) if rows % d == 0)


def _stride(stmt, extents) -> int:
    """The conv's stride along the width, from the padded input's width, the output's and the
    kernel's: (out_w - 1) * stride + kw <= padded width < out_w * stride + kw."""
    _, _, _, out_w, _, _, kw = extents
    padded = const_int(stmt.reads[0].source.shape[3])
    if padded is None or out_w < 2:
        return 1
    return max(1, (padded - kw) // (out_w - 1))


class DepthwiseConv2dNCHWc:
    """Register-tiled depthwise convolution in NCHW{b}c (see module docstring)."""

    name = "cpu.DepthwiseConv2dNCHWc"
    # bumped whenever `candidates` changes, so tuning records from an older space are redone
    space_version = 3

    def _match(self, sch, target) -> dict | None:
        found = find_block(sch, ("depthwise_conv2d_NCHWc",), "SSSSSRR")
        if found is None:
            return None
        conv, extents = found
        stmt = sch.get(conv)
        if len(stmt.reads) != 2 or len(stmt.reads[0].source.shape) != 5 or len(stmt.reads[1].source.shape) != 6:
            return None
        pad = None
        for producer in sch.get_producers(conv):
            if sch.get(producer).writes[0].source.same_as(stmt.reads[0].source):
                pad = producer
        macs = 1
        for extent in extents:
            macs *= extent
        moved = buffer_bytes(stmt.reads[0].source) + buffer_bytes(stmt.writes[0].source)
        return {"conv": conv, "extents": extents, "pad": pad, "stride": _stride(stmt, extents), "macs": macs, "bytes": moved,
                "lanes": vector_lanes(target), "registers": vector_registers(target)}

    def _default(self, info) -> dict:
        n, chunks, out_h, out_w, block, kh, kw = info["extents"]
        t, th = default_depthwise_tile(out_h, out_w, block, info["lanes"], info["registers"])
        bands = row_bands(out_h // th)
        if info["pad"] is None:
            return {"t": t, "th": th, "pad": "none", "bands": bands}
        narrow = out_w <= INLINE_PADDING_MAX_WIDTH or info["registers"] >= 32
        if info["stride"] > 1 or (kh * kw <= INLINE_PADDING_MAX_TAPS and narrow):
            return {"t": t, "th": th, "pad": "inline", "bands": bands}
        # the padded copy inside the parallel loop when there are channel blocks enough to share
        # among the cores; else a pass of its own, and the conv parallel over rows as well
        if n * chunks >= 2:
            return {"t": t, "th": th, "pad": "plane", "bands": 1}
        return {"t": t, "th": th, "pad": "root", "bands": bands}

    def candidates(self, func, target) -> list[dict]:
        """Configs to measure (template tuning), the default first: the register tiles of
        `depthwise_tiles` (at most 6, widest first), the other padding placement, and kw left
        rolled (the default unrolls it)."""
        from tvm import s_tir

        info = self._match(s_tir.Schedule(func), target)
        if info is None:
            return []
        _, _, out_h, out_w, block, _, kw = info["extents"]
        default = self._default(info)
        configs = [default]
        for t, th in depthwise_tiles(out_h, out_w, block, info["lanes"], info["registers"])[:6]:
            config = {**default, "t": t, "th": th, "bands": 1 if default["bands"] == 1 else row_bands(out_h // th)}
            if config not in configs:
                configs.append(config)
        if info["pad"] is not None:
            for other in ("inline", "plane", "root"):
                if other != default["pad"]:
                    bands = 1 if other == "plane" else row_bands(out_h // default["th"])
                    configs.append({**default, "pad": other, "bands": bands})
        if kw > 1:
            configs.append({**default, "unroll_kw": False})
        if default["bands"] > 1:  # channel blocks first
            configs.append({**default, "bands": 1})
        return configs

    def apply(self, func, target, config: dict | None = None):
        """The scheduled function, or None when `func` has no blocked depthwise conv. `config`
        (one of `candidates`) overrides the defaults, as template tuning does."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch, target)
        if info is None:
            return None
        conv, pad = info["conv"], info["pad"]
        _, _, out_h, out_w, block, kh, kw = info["extents"]
        config = {**self._default(info), **(config or {})}
        t, th, pad_at, bands = int(config["t"]), int(config["th"]), config["pad"], int(config.get("bands", 1))
        unroll_kw = bool(config.get("unroll_kw", kh * kw <= 49))
        if out_w % t or out_h % th:
            raise ValueError(f"tile {config} does not divide the {out_h}x{out_w} output")
        if pad_at == "inline" and pad is not None:
            sch.compute_inline(pad)  # the conv reads the input itself, zero outside it
            pad, pad_at = None, "none"
        if (pad is None) != (pad_at == "none"):
            raise ValueError(f"padding placement {pad_at!r} does not fit this convolution")
        if bands < 1 or (out_h // th) % bands or (bands > 1 and pad_at == "plane"):
            raise ValueError(f"{bands} bands of rows do not fit this convolution (tile {t}x{th}, padding {pad_at!r})")

        inline_tail(sch, conv)
        # the tile on the stack (cpu_common.ACCUMULATOR_SCOPE), except beside a padded copy per
        # plane, where it runs slower (docs/performance.md: ACCUMULATOR_SCOPE)
        writeback = cache_write_and_inline_epilogue(sch, conv, "local" if pad_at == "plane" else None)
        n, chunk, oh, ow, b, rh, rw = sch.get_loops(conv)
        owo, owi = sch.split(ow, [None, t])
        if th > 1:
            oho, ohi = sch.split(oh, [None, th])
            sch.reorder(n, chunk, oho, owo, rh, rw, ohi, owi, b)
            sch.unroll(ohi)
        else:
            oho = oh
            sch.reorder(n, chunk, oho, owo, rh, rw, owi, b)
        sch.reverse_compute_at(writeback, owo)
        parallel_work = depthwise_runs_parallel(info["macs"], info["bytes"])
        if pad_at == "plane":
            plane = sch.fuse(n, chunk)
            if parallel_work:
                sch.parallel(plane)
            sch.compute_at(pad, plane)
            pad_loops = sch.get_loops(pad)
            sch.vectorize(pad_loops[-1])
        else:
            if bands > 1:  # each thread a band of rows of every channel block (ROWS_FIRST_MIN_ROWS)
                band, oho = sch.split(oho, [bands, None])
                sch.reorder(band, chunk)
                rows = sch.fuse(n, band, chunk)
            else:
                rows = sch.fuse(n, chunk, oho)
            if parallel_work:
                sch.parallel(rows)
        sch.vectorize(b)
        sch.unroll(owi)
        if unroll_kw:
            sch.unroll(rw)
        decompose_vector_init(sch, conv, rh, unrolled=2 if th > 1 else 1)
        wb_loops = sch.get_loops(writeback)
        sch.vectorize(wb_loops[-1])
        keep = (sch.get(pad).name_hint,) if pad is not None else ()
        # the padding as a pass of its own ("root") is scheduled here with the other blocks
        schedule_remaining_blocks(sch, block, keep=keep)
        return sch


class GlobalPoolNCHWc:
    """Global average / max pooling (a squeeze-excitation's squeeze, a classifier's pool) in
    NCHW{b}c: the reduction over h, w of [n, C/b, h, w, b] into [n, C/b, 1, 1, b]. Left to the
    generic rule it ran one scalar accumulation per channel, b floats apart (docs/performance.md:
    Global pools in NCHWc); here the b channels are one vector accumulated in a register
    over the plane (contiguous loads), the divisor folded into the write-back, parallel over
    channel blocks. Returns None for any other reduction."""

    name = "cpu.GlobalPoolNCHWc"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        pool = None
        for block in root_blocks(sch):
            if iter_kinds(sch, block) == "SSSSSRR":
                pool = block
                break
        if pool is None:
            return None
        stmt = sch.get(pool)
        extents = [const_int(iv.dom.extent) for iv in stmt.iter_vars]
        if any(e is None for e in extents) or extents[2] != 1 or extents[3] != 1:
            return None
        reads = [r for r in stmt.reads if not r.source.same_as(stmt.writes[0].source)]
        if len(reads) != 1 or len(reads[0].source.shape) != 5:
            return None
        iters = [iv.var for iv in stmt.iter_vars]
        region = [str(r.min) for r in reads[0].region]
        if region != [str(iters[i]) for i in (0, 1, 5, 6, 4)] or any(int(r.extent) != 1 for r in reads[0].region):
            return None  # not data[n, c, kh, kw, b]
        block = extents[4]
        writeback = cache_write_and_inline_epilogue(sch, pool)
        n, chunk, one_h, one_w, b, rh, rw = sch.get_loops(pool)
        sch.reorder(n, chunk, one_h, one_w, rh, rw, b)
        outer = sch.fuse(n, chunk, one_h, one_w)
        work = 1
        for extent in extents:
            work *= extent
        if work >= PARALLEL_MIN_WORK and extents[0] * extents[1] > 1:
            sch.parallel(outer)
        sch.vectorize(b)
        init = sch.decompose_reduction(pool, rh)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.reverse_compute_at(writeback, outer)
        sch.vectorize(sch.get_loops(writeback)[-1])
        schedule_remaining_blocks(sch, block)
        return sch
