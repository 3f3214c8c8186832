"""CPU schedules for depthwise 2-D convolutions and pooling windows in NCHW, with their fused
epilogue (bias, ReLU6 / hardswish / SiLU, residual add; an average's divisor).

MobileNets and EfficientNets spend a fifth to a third of their time in depthwise convs. One has no
channel reduction to put in registers: each output is a KHxKW window of one plane times KHxKW
scalars. Two forms, chosen by `use_blocked_form`:

* row form (stride 1, rows wider than 28): loops n*c (parallel) | oh | kh, kw (unrolled) |
  ow as an unrolled run of native vectors (at most 8 per chunk): the accumulators are the row,
  every tap is one broadcast weight times one unaligned contiguous load of the padded input. The
  padded copy of the input is made per plane inside the parallel loop (still in L1/L2 when read
  KHxKW times). (A single 112-lane LLVM vector instead made LLVM build each broadcast weight lane
  by lane and spill them: docs/performance.md, BLOCKED_MAX_WIDTH and the row form's vectors.) A
  strided conv whose channels no vector divides stores the padded plane de-interleaved,
  [h][w % s][w / s], so the input of s-strided columns is contiguous again.
* channel-blocked form (rows of 28 or less, or stride > 1, when a vector, half or quarter vector
  divides the channels): the padded input copied per block of L channels into [h][w][L], the
  weight packed to [c / L][kh][kw][L] at compile time, accumulators [T columns][L] in registers,
  every tap one contiguous input vector times one weight vector, whatever the stride. A 7- or
  14-wide row would fill half a vector or less; a channel block fills all of it.

In both, the elementwise tail (even SiLU's x * sigmoid(x), which reads x twice) is inlined into
the write-back: no intermediate tensor, no second pass. `Pool2dNCHW` runs max / average pools
through the blocked form without a weight.

Dense and grouped convolutions with several channels per group are left to cpu_conv.Conv2dNCHW.
The rules return None (no match) on symbolic shapes, dilation, or a weight not read as
weight[c, 0, kh, kw].
"""
from __future__ import annotations

import logging

from .cpu_balance import balanced_row_chunks, halo_min_rows
from ..target import vector_lanes, vector_registers
from .cpu_common import (
    cache_write_and_inline_epilogue,
    const_int,
    decompose_vector_init,
    find_block,
    fit_lanes,
    is_aarch64,
    iter_kinds,
    layout_free_params,
    pack_read_buffer,
    root_blocks,
    schedule_remaining_blocks,
)

__all__ = ["DepthwiseConv2dNCHW", "Pool2dNCHW", "blocked_tile", "buffer_bytes", "depthwise_runs_parallel", "inline_tail", "row_chunk", "use_blocked_form"]

logger = logging.getLogger(__name__)

DEPTHWISE_BLOCK_NAMES = ("group_conv2d_nchw", "depthwise_conv2d_nchw", "conv2d_nchw")

# Whether a depthwise conv or pool runs in parallel: from its estimated time on one core. It does
# one multiply-add per input value loaded and tap (no channel reduction to keep in registers), so
# that time is its multiply-adds or the bytes it moves, whichever takes longer; from
# DEPTHWISE_PARALLEL_MIN_US each of two threads has several times a region's launch and join.
# (docs/performance.md: DEPTHWISE_MACS_PER_US, DEPTHWISE_BYTES_PER_US and DEPTHWISE_PARALLEL_MIN_US)
DEPTHWISE_MACS_PER_US = 24_000
DEPTHWISE_BYTES_PER_US = 20_000
DEPTHWISE_PARALLEL_MIN_US = 15


def depthwise_runs_parallel(macs: int, bytes_moved: int) -> bool:
    """Whether a depthwise conv / pool of `macs` multiply-adds (taps x outputs) that reads and
    writes `bytes_moved` bytes (its input and output) runs its planes in parallel."""
    return max(macs / DEPTHWISE_MACS_PER_US, bytes_moved / DEPTHWISE_BYTES_PER_US) >= DEPTHWISE_PARALLEL_MIN_US


def buffer_bytes(buffer) -> int:
    """Bytes of a buffer with static shape (0 when a dimension is symbolic)."""
    return _elements(buffer) * max(1, buffer.dtype.bits // 8)


# Registers of accumulators per row chunk: a row of up to this many vectors is one chunk.
MAX_ROW_VECTORS = 8


def row_chunk(out_width: int, lanes: int) -> int:
    """Output columns per vectorized chunk: the whole row when it fits MAX_ROW_VECTORS vectors
    (LLVM splits a 112-lane vector into 7 registers and a 14-lane one into one masked register),
    else the largest divisor of the row that is a multiple of the vector width and fits, else
    the largest divisor that fits."""
    limit = MAX_ROW_VECTORS * lanes
    if out_width <= limit:
        return out_width
    multiples = [d for d in range(lanes, limit + 1, lanes) if out_width % d == 0]
    if multiples:
        return max(multiples)
    return max(d for d in range(1, limit + 1) if out_width % d == 0)


# Output rows at most this wide take the channel-blocked form (when a vector divides the
# channels): a 7- or 14-wide row fills half a vector or less, a channel block fills all of it.
# Wider rows in stride 1 keep the row form; strided convs take the blocked form.
# (docs/performance.md: BLOCKED_MAX_WIDTH and the row form's vectors)
BLOCKED_MAX_WIDTH = 28


def use_blocked_form(channels: int, out_width: int, lanes: int, stride: int = 1) -> bool:
    """Whether a depthwise conv takes the channel-blocked form (see _schedule_blocked)."""
    return fit_lanes(channels, lanes) is not None and (stride > 1 or out_width <= BLOCKED_MAX_WIDTH)


def blocked_tile(out_width: int, registers: int, row_taps: int = 0) -> int:
    """Output columns per register tile of the blocked form: the widest divisor of the row
    whose accumulators leave room for the weight, the input and a spare (<= registers - 4),
    at most 14. With `row_taps` (AArch64: the kernel's width; its FMA reads no memory operand)
    the row's T + row_taps - 1 input vectors and row_taps weights are registers too."""
    limit = min(14, registers - 4)
    if row_taps:
        limit = min(limit, (registers - 2 * row_taps - 2) // 2)
    return max(d for d in range(1, limit + 1) if out_width % d == 0)


def info_weight_is_free(sch, conv) -> bool:
    """Whether the conv's weight is a constant that may be repacked at compile time."""
    return sch.get(conv).reads[1].source.name in layout_free_params(sch)


class Pool2dNCHW:
    """Max / average pooling windows (3x3 stride 2 and the like) in the channel-blocked form of
    the depthwise rule: the padded input per block of channels in [h][w][c], one vector max or
    add per tap, the average's divisor folded into the write-back. Left scalar with the padding
    inlined (a branch per tap) and strided loads, a pool was several times onnxruntime's time
    (docs/performance.md: Pools in the channel-blocked form).
    Returns None for other kernels, symbolic shapes, dilation, or channels no vector divides."""

    name = "cpu.Pool2dNCHW"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        found = find_block(sch, ("pool_max", "pool_sum"), "SSSSRR")
        if found is None:
            return None
        pool, extents = found
        stmt = sch.get(pool)
        reads = [r for r in stmt.reads if not r.source.same_as(stmt.writes[0].source)]
        if len(reads) != 1 or len(reads[0].source.shape) != 4:
            return None
        region, data = reads[0].region, reads[0].source
        iters = [iv.var for iv in stmt.iter_vars]
        row = _linear_coefficients(region[2].min, [iters[2], iters[4]])
        col = _linear_coefficients(region[3].min, [iters[3], iters[5]])
        if row is None or col is None or row[1] != 1 or col[1] != 1 or [str(r.min) for r in region[:2]] != [str(iters[0]), str(iters[1])]:
            return None
        lanes = vector_lanes(target)
        block = fit_lanes(extents[1], lanes)
        if block is None:
            return None
        pad = None
        for producer in sch.get_producers(pool):
            if sch.get(producer).writes[0].source.same_as(data) and iter_kinds(sch, producer) == "SSSS":
                pad = producer
        if pad is None:  # no padding: a copy of the input to block by channels all the same
            pad = sch.cache_read(pool, 0, "global")
        work = 1
        for extent in extents:
            work *= extent
        parallel = depthwise_runs_parallel(work, buffer_bytes(data) + buffer_bytes(stmt.writes[0].source))
        return DepthwiseConv2dNCHW._schedule_blocked(
            sch, pool, pad, extents[4] * extents[5], extents[3], parallel, block, vector_registers(target), weighted=False,
            min_rows=halo_min_rows(extents[4], row[0]), row_taps=extents[5] if is_aarch64(target) else 0,
        )


def _linear_coefficients(expr, variables) -> list[int] | None:
    """Integer coefficients of `expr` in `variables` (then the constant), or None when not linear."""
    from tvm.sym.pattern import detect_linear_equation

    try:
        coefficients = detect_linear_equation(expr, variables)
    except Exception:  # noqa: BLE001 - not an affine index
        return None
    values = [const_int(c) for c in coefficients]
    if len(values) != len(variables) + 1 or any(v is None for v in values):
        return None
    return values


class DepthwiseConv2dNCHW:
    """Row-vectorized depthwise convolution, one plane per thread (see module docstring)."""

    name = "cpu.DepthwiseConv2dNCHW"

    def _match(self, sch) -> dict | None:
        found = find_block(sch, DEPTHWISE_BLOCK_NAMES, "SSSSRRR")
        if found is None:
            return None
        conv, extents = found
        channels, in_per_group = extents[1], extents[4]
        stmt = sch.get(conv)
        if len(stmt.reads) != 2 or in_per_group != 1:
            return None
        data_region, weight_region = stmt.reads
        data, weight = data_region.source, weight_region.source
        if len(weight.shape) != 4 or len(data.shape) != 4 or const_int(data.shape[1]) != channels:
            return None  # not one input channel per output channel
        iters = [iv.var for iv in stmt.iter_vars]
        if [str(r.min) for r in weight_region.region] != [str(iters[i]) for i in (1, 4, 5, 6)]:
            return None
        # data[n, c + rc, oh * s + kh, ow * s + kw]: read the stride, refuse dilation
        row = _linear_coefficients(data_region.region[2].min, [iters[2], iters[5]])
        col = _linear_coefficients(data_region.region[3].min, [iters[3], iters[6]])
        if row is None or col is None or row[1] != 1 or col[1] != 1 or row[0] != col[0] or row[0] < 1:
            return None
        if str(data_region.region[0].min) != str(iters[0]):
            return None
        return {"conv": conv, "extents": extents, "data": data, "stride": row[0]}

    def apply(self, func, target):
        """The scheduled function, or None when `func` has no depthwise convolution."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        info = self._match(sch)
        if info is None:
            return None
        conv, data, stride = info["conv"], info["data"], info["stride"]
        _, _, _, out_w, _, kh, kw = info["extents"]
        lanes = vector_lanes(target)
        macs = 1
        for extent in info["extents"]:
            macs *= extent
        parallel = depthwise_runs_parallel(macs, buffer_bytes(data) + buffer_bytes(sch.get(conv).writes[0].source))

        pad = None
        for producer in sch.get_producers(conv):
            if sch.get(producer).writes[0].source.same_as(data) and iter_kinds(sch, producer) == "SSSS":
                pad = producer
        # SiLU (x * sigmoid(x)) and other tails that read the conv's result twice: inline the
        # intermediate blocks into their readers, so one block reads the accumulator and can be
        # folded into the write-back.
        inline_tail(sch, conv)

        if pad is not None and stride > 1 and not use_blocked_form(info["extents"][1], out_w, lanes, stride):
            padded_w = const_int(data.shape[3])
            if padded_w is not None and padded_w % stride == 0:
                s = stride
                sch.transform_layout(pad, ("write", 0), lambda n, c, h, w: (n, c, h, w % s, w // s))
                # iterate the copy in its new layout (contiguous writes)
                sch.transform_block_layout(pad, lambda n, c, h, w: (n, c, h, w % s, w // s))

        channels = info["extents"][1]
        if pad is not None and use_blocked_form(channels, out_w, lanes, stride):
            block = fit_lanes(channels, lanes)  # a full vector of channels, else a half one (72, 88, 120)
            return self._schedule_blocked(
                sch, conv, pad, kh * kw, out_w, parallel, block, vector_registers(target), min_rows=halo_min_rows(kh, stride),
                row_taps=kw if is_aarch64(target) else 0,
            )

        writeback = cache_write_and_inline_epilogue(sch, conv)
        n, c, oh, ow, rc, rh, rw = sch.get_loops(conv)
        chunk = row_chunk(out_w, lanes)
        if chunk < out_w:
            ow_outer, ow = sch.split(ow, [None, chunk])
            sch.reorder(n, c, oh, ow_outer, rc, rh, rw, ow)
            row_loop = ow_outer
        else:
            sch.reorder(n, c, oh, rc, rh, rw, ow)
            row_loop = oh
        plane = sch.fuse(n, c)
        if parallel:
            sch.parallel(plane)
        width = fit_lanes(chunk, lanes)
        if width is not None and width < chunk:
            # the row as an unrolled run of native vectors: one 112-lane LLVM vector would make
            # LLVM build every broadcast weight lane by lane (vinsertps) and spill them
            ow_vectors, ow = sch.split(ow, [None, width])
            sch.unroll(ow_vectors)
        sch.vectorize(ow)
        if kh * kw <= 49:
            sch.unroll(rh)
            sch.unroll(rw)
        init = sch.decompose_reduction(conv, rc)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.reverse_compute_at(writeback, row_loop)
        row_depth = next(i for i, loop in enumerate(sch.get_loops(writeback)) if sch.get(loop).same_as(sch.get(row_loop))) + 1
        wb_loops = sch.get_loops(writeback)
        if len(wb_loops) > row_depth:
            wb_inner = wb_loops[-1]
            if width is not None and width < chunk:  # native vectors here too (the bias broadcast)
                wb_vectors, wb_inner = sch.split(wb_inner, [None, width])
                sch.unroll(wb_vectors)
            sch.vectorize(wb_inner)
        keep = ()
        if pad is not None:
            sch.compute_at(pad, plane)
            pad_loops = sch.get_loops(pad)[1:]
            self._vectorize_copy(sch, pad_loops, lanes)
            keep = (sch.get(pad).name_hint,)  # inlined, the padding would branch on every tap
        schedule_remaining_blocks(sch, lanes, keep=keep)
        return sch

    @staticmethod
    def _schedule_blocked(sch, conv, pad, taps, out_w, parallel, lanes, registers, weighted=True, min_rows=1, row_taps=0):
        """Channels in vectors: the padded input copied per block of `lanes` channels into
        [h][w][lanes] (a transpose, once per input element), the weight packed to
        [c / lanes][kh][kw][lanes] at compile time, accumulators [T columns][lanes] in registers,
        every tap one contiguous input vector times one weight vector, any stride. Pools
        (`weighted` False) are the same without the weight.

        Parallel over channel blocks, and over chunks of output rows (of `min_rows` or more,
        cpu_balance.balanced_row_chunks) where the blocks alone split unevenly: each chunk then
        copies the padded rows it reads.

        `row_taps` (AArch64 targets: the kernel's width): NEON's FMA takes no memory operand, so
        the T + KW - 1 input vectors a row of taps reads are registers beside the T accumulators
        and the KW weights; the tile is narrowed to leave them room (`blocked_tile`), where 14
        columns spilled (docs/performance.md: ARM64 (AArch64))."""
        L = lanes
        sch.transform_layout(pad, ("write", 0), lambda n, c, h, w: (n, c // L, h, w, c % L))
        sch.transform_block_layout(pad, lambda n, c, h, w: (n, c // L, h, w, c % L))
        if weighted:
            pack_read_buffer(
                sch, conv, 1, lambda c, i, h, w: (c // L, i, h, w, c % L), layout_free=info_weight_is_free(sch, conv)
            )
        writeback = cache_write_and_inline_epilogue(sch, conv)
        sch.transform_layout(conv, ("write", 0), lambda n, c, h, w: (n, h, w, c))
        t = blocked_tile(out_w, registers, row_taps)
        n, c, oh, ow, *reduction = sch.get_loops(conv)
        rc, rw = reduction[0], reduction[-1]
        cb, ci = sch.split(c, [None, L])
        owo, owi = sch.split(ow, [None, t])
        sch.reorder(n, cb, oh, owo, *reduction, owi, ci)
        outer = [n, cb]
        if parallel:
            blocks = const_int(sch.get(n).extent) * const_int(sch.get(cb).extent)
            chunks = balanced_row_chunks(blocks, const_int(sch.get(oh).extent), min_rows)
            if chunks > 1:
                outer.append(sch.split(oh, [chunks, None])[0])
        plane = sch.fuse(*outer)
        if parallel:  # depthwise_runs_parallel's verdict
            sch.parallel(plane)
        sch.vectorize(ci)
        sch.unroll(owi)
        if taps <= 49:
            sch.unroll(rw)
        decompose_vector_init(sch, conv, rc, unrolled=1)
        sch.reverse_compute_at(writeback, owo)
        wb_loops = sch.get_loops(writeback)
        sch.vectorize(wb_loops[-1])
        sch.compute_at(pad, plane)
        pad_loops = sch.get_loops(pad)
        sch.vectorize(pad_loops[-1])
        schedule_remaining_blocks(sch, lanes, keep=(sch.get(pad).name_hint,))
        return sch

    @staticmethod
    def _vectorize_copy(sch, loops, lanes: int) -> None:
        """The per-plane padded copy: vectorize its innermost loop when a vector divides it."""
        if not loops:
            return
        extent = const_int(sch.get(loops[-1]).extent)
        if extent is None:
            return
        width = next((w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and extent % w == 0), None)
        if width is None:
            width = extent if extent <= 4 * lanes else None
        if width is None:
            return
        inner = loops[-1]
        if extent > width:
            _, inner = sch.split(inner, [None, width])
        sch.vectorize(inner)



def inline_tail(sch, conv) -> None:
    """Inline the elementwise blocks downstream of `conv` into their readers (SiLU's
    x * sigmoid(x) reads the conv's result twice), so that one block reads the accumulator and
    can be folded into the write-back; the padding and other input-side copies and the output
    block stay.

    A block read by a broadcast stays too: a squeeze-excitation's excitation (1x1 conv on the
    pooled [C, 1, 1], bias, sigmoid, then times the [C, H, W] features) inlined into the multiply
    computed its sigmoid H x W times per channel instead of once (docs/performance.md: Broadcast
    readers stay out of the conv); kept, it folds into the conv's write-back on [C, 1, 1] and the
    multiply is a plain vector product."""
    conv_name = sch.get(conv).name_hint
    for block in root_blocks(sch):
        stmt = sch.get(block)
        if stmt.name_hint == conv_name or "R" in iter_kinds(sch, block):
            continue
        if not any(r.source.same_as(sch.get(conv).writes[0].source) for r in stmt.reads) and not sch.get_producers(block):
            continue  # the padding and other input-side copies stay
        if not sch.get_consumers(block):
            continue  # the output block
        if any(_elements(sch.get(c).writes[0].source) > _elements(stmt.writes[0].source) for c in sch.get_consumers(block)):
            continue  # read by a broadcast: computed once here, not once per element there
        if _downstream(sch, conv, block):
            try:
                sch.compute_inline(block)
            except Exception:  # not inlinable: stays a separate pass
                logger.debug("depthwise tail block %s not inlined", stmt.name_hint, exc_info=True)


def _elements(buffer) -> int:
    """Elements of `buffer` (0 when a dimension is symbolic: never treated as the larger)."""
    count = 1
    for dim in buffer.shape:
        value = const_int(dim)
        if value is None:
            return 0
        count *= value
    return count


def _downstream(sch, conv, block) -> bool:
    """True when `block` reads (transitively) what the conv writes."""
    conv_name = sch.get(conv).name_hint
    seen, todo = set(), [block]
    while todo:
        b = todo.pop()
        for p in sch.get_producers(b):
            name = sch.get(p).name_hint
            if name == conv_name:
                return True
            if name not in seen:
                seen.add(name)
                todo.append(p)
    return False
