"""CPU schedule for reductions along rows: softmax, layer norm (the op and its ReduceMean / Sub / Pow /
Sqrt / Div decomposition), means over the last axis, with whatever elementwise work is fused around them.

Matches a function whose reductions all run over the innermost axis of a row-major tensor and
whose output is computed row by row from them (softmax: max, exp-sum, normalize; layer norm: sum,
sum of squared deviations, scale and shift). The generic rule leaves such a function as three or
four passes over the whole tensor, each reduction a scalar loop with one dependent add or max per
element. Here:

1. elementwise blocks are inlined (a softmax's scaled input, a layer norm's mean) so each row is
   read from the input and nothing is written but the output;
2. one loop over rows (parallel from ROWS_PARALLEL_MIN_BYTES of input; softmax from
   PARALLEL_MIN_WORK elements) holds everything: each row's
   reductions, then its output, while the row is in L1;
3. each reduction accumulates vector-wide (rfactor: ROW_ACCUMULATORS vectors of partial sums,
   folded at the end of the row to one vector, then 4 lanes, then one: independent chains
   of adds, not one), the output loop is vectorized, a partial last vector is a scalar tail
   loop (never a gather). A row length no vector width divides keeps scalar reductions: TVM
   0.27's compute_at drops the predicate of a split reduction, and rfactor / vectorize refuse a
   predicated block;
4. except for softmax, by far the commonest such row (attention: 197 tokens in a ViT): a plain
   softmax function is rewritten (`_softmax_func`) over rows padded with -inf to whole vectors,
   which adds nothing to max or sum, with exp computed once into the row and the output as exp
   times 1/sum; every reduction is then vector-wide, and each row's vector of partials is folded
   4 lanes wide before the last lane-by-lane steps;
5. vector width from the target (core.compiler.target.vector_lanes), not from the host compiling.

Symbolic rows (a batch, a sequence) are taken, in parallel; the row length must be static. Not
matched (None): a reduction over another axis, a symbolic row length, several outputs.
"""
from __future__ import annotations

import logging

from ..target import vector_lanes
from .cpu_common import (
    PARALLEL_MIN_WORK,
    const_int,
    fit_lanes,
    iter_extents,
    iter_kinds,
    root_blocks,
)

__all__ = ["RowReduction"]

logger = logging.getLogger(__name__)

# A softmax row's vector of partial maxima / sums is folded this many lanes wide first (one
# 128-bit vector), then lane by lane: 4 + 3 dependent steps per row instead of 15.
# (docs/performance.md: FOLD_LANES)
FOLD_LANES = 4

# A layer norm's (or mean's) row is reduced into this many vectors of partial sums, then folded to
# one vector, then FOLD_LANES lanes wide, then lane by lane. With one vector of partials each of
# the two reductions was one chain of dependent adds (12 with AVX-512 over a ViT's 192 values, 24
# with AVX2) and a 15-step scalar fold, and the row waited on them. (docs/performance.md:
# ROW_ACCUMULATORS)
ROW_ACCUMULATORS = 4

# A layer norm's (or mean's) rows run in parallel from this many bytes of input. TVM gives thread
# t of T the rows [t * ceil(rows / T), ...): the halves the matmul before it wrote, each on its
# own core (its fused row-tile x column-tile loop splits at the middle row tile, or within that
# tile when the tile count is odd), so each core reads what it wrote. (docs/performance.md:
# ROWS_PARALLEL_MIN_BYTES)
ROWS_PARALLEL_MIN_BYTES = 128 << 10


def _fold_widths(width: int, vec: int | None) -> list[int]:
    """The widths a row's reduction is folded through, widest first: ROW_ACCUMULATORS vectors of
    partial results (fewer when they do not divide the row), one vector, FOLD_LANES lanes; []
    for a row of fewer than two vectors (or none dividing it), which reduces lane by lane."""
    if not vec or width < 2 * vec:
        return []
    count = next(n for n in (ROW_ACCUMULATORS, 2, 1) if n == 1 or (width % (n * vec) == 0 and width >= 2 * n * vec))
    widths = [count * vec, vec] if count > 1 else [vec]
    return widths + [FOLD_LANES] if vec > FOLD_LANES else widths


def _element_bytes(sch, block) -> int:
    """Bytes per element of what `block` writes (float32: 4)."""
    return max(1, sch.get(block).writes[0].source.dtype.bits // 8)


def _product(values) -> int | None:
    """The product of extents (None when one is symbolic)."""
    total = 1
    for v in values:
        if v is None:
            return None
        total *= v
    return total


def _same_extents(sch, block, out) -> bool:
    """Whether a reduction's spatial iterators are the output block's rows axis by axis (for
    symbolic rows the products cannot be compared): as many, with structurally equal extents."""
    import tvm_ffi  # TVM 0.27 keeps structural_equal in tvm_ffi

    ours = [iv.dom.extent for iv in sch.get(block).iter_vars[:-1]]
    theirs = [iv.dom.extent for iv in sch.get(out).iter_vars[:-1]]
    return len(ours) == len(theirs) and all(tvm_ffi.structural_equal(a, b) for a, b in zip(ours, theirs))


class RowReduction:
    """Row-parallel, vector-accumulated reductions over the innermost axis (see module docstring)."""

    name = "cpu.RowReduction"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        softmax = _softmax_func(sch, func, vector_lanes(target))
        if softmax is not None:
            return self._schedule_softmax(s_tir.Schedule(softmax), vector_lanes(target))
        blocks = root_blocks(sch)
        if len(sch.get_output_blocks(sch.get_sblock("root"))) != 1:
            return None
        out = blocks[-1]
        out_kinds = iter_kinds(sch, out)
        out_ext = iter_extents(sch, out)
        # the row length must be static; the rows may be symbolic (a batch, a sequence: None)
        if "R" in out_kinds or "O" in out_kinds or len(out_ext) < 2 or out_ext[-1] is None:
            return None
        if len(sch.get_loops(out)) != len(out_ext):
            return None
        width = out_ext[-1]
        reductions = [b for b in blocks if "R" in iter_kinds(sch, b)]
        if not reductions or not all(self._row_reduction(sch, b, out, width) for b in reductions):
            return None
        lanes = vector_lanes(target)
        # 1. elementwise blocks into their consumers
        for block in blocks[:-1]:
            if "R" in iter_kinds(sch, block):
                continue
            try:
                sch.compute_inline(block)
            except Exception:  # noqa: BLE001 - e.g. a producer read through an index computation
                return None
        # 2. vector-wide partial results (rfactor), while the blocks are still at the root; a
        # row length no vector width divides (a ViT's 197 tokens) keeps scalar reductions (the
        # split's predicate would not survive compute_at in TVM 0.27, and rfactor and vectorize
        # refuse a predicated block)
        vec = fit_lanes(width, lanes)
        names = [sch.get(block).name_hint for block in reductions]
        partials = []
        for fold in _fold_widths(width, vec):
            partials += [self._rfactor(sch, sch.get_sblock(name), fold) for name in names]
        # 3. one loop over rows holds each row's reductions and its output (the row stays in L1)
        loops = sch.get_loops(out)
        row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        for block in reversed(root_blocks(sch)[:-1]):
            sch.compute_at(block, row, preserve_unit_loops=True)
        # one symbolic row axis counts as 1 (a batch: 1 in the common deployment); two (batch x
        # sequence in a transformer) as many rows, in parallel (docs/performance.md: symbolic rows in parallel)
        known = _product([e for e in out_ext[:-1] if e is not None])
        symbolic = sum(e is None for e in out_ext[:-1])
        if symbolic >= 2 or known > 1 and known * width * _element_bytes(sch, out) >= ROWS_PARALLEL_MIN_BYTES:
            sch.parallel(row)  # before decompose_reduction: it checks every block under the loop
        for rf in partials:
            # rfactor made the lane its first iterator and compute_at kept that order (under the
            # row loop: lane, unit row loops, reduction): the reduction goes outside the lane
            loops = sch.get_loops(rf)
            k_inner, k_outer = loops[1], loops[-1]
            sch.reorder(k_outer, k_inner)
            sch.vectorize(k_inner)  # while the block is still a reduction block with its init
            init = sch.decompose_reduction(rf, k_outer)
            sch.vectorize(sch.get_loops(init)[-1])
        # 4. the output row, vectorized; a partial last vector is a scalar tail loop, not a gather
        col = sch.get_loops(out)[-1]
        if vec:
            _, inner = sch.split(col, [None, vec])
            sch.vectorize(inner)
        elif width > lanes:
            main, _tail = sch.loop_partition(col, [width // lanes * lanes, None])
            _, inner = sch.split(main, [None, lanes])
            sch.vectorize(inner)
        return sch

    def _schedule_softmax(self, sch, lanes: int):
        """The schedule of `_softmax_func`'s function, per row (one parallel loop over rows): the
        padded copy (vector part and a scalar tail), the max and the exp-sum as vector partials
        over whole vectors, exp stored once, the output as exp times the sum's reciprocal."""
        blocks = root_blocks(sch)
        names = [sch.get(b).name_hint for b in blocks]
        out = blocks[-1]
        rows = _product(iter_extents(sch, out)[:-1])
        width = iter_extents(sch, out)[-1]
        folds = ("T_softmax_maxelem", "T_softmax_expsum")
        partials = [self._rfactor(sch, sch.get_sblock(name), lanes) for name in folds]
        if lanes > FOLD_LANES:
            # each row's vector of partials folded FOLD_LANES at a time, not lane by lane: left to
            # itself the fold is 16 dependent scalar adds (or maxes) per row, ~10 % of a ViT softmax
            partials += [self._rfactor(sch, sch.get_sblock(name), FOLD_LANES) for name in folds]
        loops = sch.get_loops(out)
        row = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        for block in reversed(root_blocks(sch)[:-1]):
            sch.compute_at(block, row, preserve_unit_loops=True)
        if rows > 1 and rows * width >= PARALLEL_MIN_WORK:
            sch.parallel(row)
        for rf in partials:
            loops = sch.get_loops(rf)
            k_inner, k_outer = loops[1], loops[-1]
            sch.reorder(k_outer, k_inner)
            sch.vectorize(k_inner)
            init = sch.decompose_reduction(rf, k_outer)
            sch.vectorize(sch.get_loops(init)[-1])
        for name in ("T_softmax_padded", "T_softmax_exp", "T_softmax_norm"):
            if name not in names:
                continue
            col = sch.get_loops(sch.get_sblock(name))[-1]
            extent = const_int(sch.get(col).extent)
            if extent % lanes:
                col, _tail = sch.loop_partition(col, [extent // lanes * lanes, None])
            _, inner = sch.split(col, [None, lanes])
            sch.vectorize(inner)
        return sch

    @staticmethod
    def _rfactor(sch, block, vec: int):
        """Split the reduction into one vector of partial results (the returned block) and the
        fold of that vector at the end of the row."""
        k = sch.get_loops(block)[-1]
        _k_outer, k_inner = sch.split(k, [None, vec])
        return sch.rfactor(k_inner, factor_axis=len(iter_kinds(sch, block)) - 1)

    @staticmethod
    def _row_reduction(sch, block, out, width: int) -> bool:
        """One reduction iterator, last, of extent `width`, over the innermost index of what it
        reads; its spatial iterators cover the same rows as the output block `out`'s (where
        symbolic: the same extents, axis by axis)."""
        kinds, ext = iter_kinds(sch, block), iter_extents(sch, block)
        if not kinds.endswith("R") or kinds.count("R") != 1 or "O" in kinds or ext[-1] is None:
            return False
        if ext[-1] != width:
            return False
        row_extents = iter_extents(sch, out)[:-1]
        if None in row_extents or None in ext[:-1]:
            if not _same_extents(sch, block, out):
                return False
        elif _product(ext[:-1]) != _product(row_extents):
            return False
        stmt = sch.get(block)
        k = stmt.iter_vars[-1].var
        for region in stmt.reads:
            last = region.region[-1].min if region.region else None
            if last is not None and last.same_as(k):
                return True
        return False


def _softmax_func(sch, func, lanes: int):
    """A LegalizeOps softmax over the last axis, rewritten for the schedule above: rows padded to
    whole vectors with -inf when the vector width does not divide them (a ViT's 197 tokens;
    exp(-inf) = 0 adds nothing to the sum), so max and sum reduce whole vectors with no
    predicate; exp computed once into a row buffer; the output as exp times 1/sum. None for
    anything else (a softmax with fused producers takes the general path)."""
    from tvm import te, tirx

    names = sorted(sch.get(b).name_hint for b in root_blocks(sch))
    if names not in (["T_softmax_exp", "T_softmax_expsum", "T_softmax_maxelem", "T_softmax_norm"],
                     ["T_softmax_expsum", "T_softmax_maxelem", "T_softmax_norm"]):
        return None
    if len(func.params) != 2:
        return None
    src, dst = func.params
    shape = [const_int(d) for d in src.shape]
    if any(d is None for d in shape) or str(src.dtype) != "float32" or [const_int(d) for d in dst.shape] != shape:
        return None
    width = shape[-1]
    if not RowReduction._row_reduction(sch, sch.get_sblock("T_softmax_maxelem"), sch.get_sblock("T_softmax_norm"), width):
        return None  # a softmax over another axis
    if width < 2 * lanes:
        return None
    padded_width = -(-width // lanes) * lanes
    dtype, index_dtype = "float32", str(src.shape[-1].ty.dtype)

    def extent(n):
        return tirx.IntImm(index_dtype, n)

    x = te.placeholder(src.shape, dtype, name=str(src.name))
    pad_shape = [*src.shape[:-1], extent(padded_width)]
    if padded_width != width:
        neg_inf = tirx.const(float("-inf"), dtype)
        xp = te.compute(pad_shape, lambda *i: tirx.if_then_else(i[-1] < width, x[i], neg_inf), name="T_softmax_padded")
    else:
        xp = x
    k = te.reduce_axis((extent(0), extent(padded_width)), name="k")
    mx = te.compute(src.shape[:-1], lambda *i: te.max(xp[(*i, k)], axis=k), name="T_softmax_maxelem")
    e = te.compute(pad_shape, lambda *i: tirx.exp(xp[i] - mx[i[:-1]]), name="T_softmax_exp")
    k2 = te.reduce_axis((extent(0), extent(padded_width)), name="k")
    es = te.compute(src.shape[:-1], lambda *i: te.sum(e[(*i, k2)], axis=k2), name="T_softmax_expsum")
    one = tirx.const(1.0, dtype)
    out = te.compute(src.shape, lambda *i: e[i] * (one / es[i[:-1]]), name="T_softmax_norm")
    # the caller passes the same two buffers; the function keeps its attributes (and stays
    # private: create_prim_func names it "main")
    new = te.create_prim_func([x, out]).without_attr("global_symbol")
    for key, value in (func.attrs or {}).items():
        new = new.with_attr(key, value)
    return new
