"""CPU schedule for pure data movement: reshape / transpose chains (ShuffleNet's channel shuffle, a
transformer's split of attention heads, the keys transposed for Q x K^T).

LegalizeOps writes `reshape -> transpose -> reshape` as three copies; inlined into one, each
output element reads the input at an index made of every reshape's divisions and remainders
(`((w // 28 + h) // 28 + c) % 4 * 34 + ...`). LLVM keeps those divisions per element and, as
the vector loads are not provably contiguous, assembles each vector lane by lane: ShuffleNet's
channel shuffle at 28x28 and 56x56 copied at ~5 GB/s, where a plain copy of the same planes
runs at L2 speed.

The rule:

1. inlines the copies into one block whose value is a single read of one input;
2. simplifies that read's indices with the iterators' ranges (`w // 28` is 0 for w < 28), and
   rebuilds the function from them (`te.compute`), so nothing but the real permutation is left;
3. finds the trailing output axes the input holds contiguously too (the output's (h, w) is the
   input's (h, w): a 784-float plane per channel of the shuffle; an attention head's 64 values
   are 64 consecutive values of the hidden axis), fuses them into one loop,
   vectorizes it at the target's width (a scalar tail when the width does not divide it) and
   spreads the loops outside over the cores when the copy is large;
4. a transpose (the innermost axis moves: keys [tokens, heads x 64] -> [heads, 64, tokens]) is
   tiled 16 x 16 over the output's innermost axis and the axis the input's innermost follows,
   vectorized along whichever of the two a vector width divides. The generic schedule read
   BERT's keys with a vector gather whose every lane computed `((h * 64 + d) // 256 + t) % 128`;
5. a copy in scatter form (TVM's layout_transform: loops over the input, the store index
   computed) is tiled the same way: an image into NCHW3c went from one strided store per
   element to vectors along the image rows;
6. a transpose zero-padded along the axis it writes (the keys core.compiler.passes.pad_attention pads,
   197 -> 208 tokens) reads under the padding's condition only (`t % 197` is t there) and
   keeps that condition out of the vectors of the whole tiles below the padding.

Not matched (None): reductions, a value that is not one read (concatenation: several inputs;
elementwise arithmetic) or one padded read, another padded copy (no faster), symbolic shapes, a transpose neither of whose two axes a vector width
divides, an input innermost index that follows no single output axis (a layout change to
NCHW[x]c): the generic rule takes those.
"""
from __future__ import annotations

import logging

from ..target import vector_lanes
from .cpu_common import (
    PARALLEL_MIN_WORK,
    const_int,
    fit_lanes,
    iter_kinds,
    root_blocks,
)

__all__ = ["DataMovement", "contiguous_tail"]

logger = logging.getLogger(__name__)


def contiguous_tail(out_shape, in_shape, indices, out_vars, analyzer) -> int:
    """How many trailing output axes are read contiguously: the largest t for which the input's
    flat offset moves with the output's last t iterators exactly as the output's flat offset
    does (heads split off a hidden axis: out[b, h, s, d] = in[b, s, h * 64 + d], t = 1; a
    shuffle's plane: out[0, c, y, x] = in[0, perm(c), y, x], t = 2)."""
    from tvm import tirx

    def flat(idx, shape):
        offset, stride = 0, 1
        for index, extent in zip(reversed(list(idx)), reversed(list(shape))):
            offset = offset + index * stride
            stride *= extent if isinstance(extent, int) else const_int(extent)
        return offset

    in_flat = flat(indices, in_shape)
    best = 0
    for t in range(1, len(out_vars) + 1):
        tail_vars = out_vars[-t:]
        zero = {id(v): (v, tirx.IntImm(str(v.ty), 0)) for v in tail_vars}
        out_tail = flat(tail_vars, out_shape[-t:])
        rest = _substitute(in_flat, zero) if _substitutable(in_flat) else None
        if rest is None:
            break
        diff = analyzer.simplify(in_flat - rest - out_tail)
        if not (isinstance(diff, tirx.IntImm) and int(diff.value) == 0):
            break
        best = t
    return best


class DataMovement:
    """One simplified copy: contiguous tail vectorized, outer loops parallel (module docstring)."""

    name = "cpu.DataMovement"

    def apply(self, func, target):
        from tvm import s_tir

        rebuilt = _simplified_copy(func)
        if rebuilt is None:
            return _scatter_transpose(func, vector_lanes(target))
        new_func, tail, unit, padded = rebuilt
        sch = s_tir.Schedule(new_func)
        last = len(sch.get_loops(root_blocks(sch)[0])) - 1
        if padded:
            # only a transpose padded along the axis it writes contiguously (the keys of a ViT's
            # attention, 197 -> 208 tokens) is taken; other padded copies were no faster than the
            # generic schedule (docs/performance.md: Padded transposes)
            if tail or list(padded) != [last]:
                return None
            return _schedule_transpose(sch, unit, last, vector_lanes(target), padded[last])
        if tail == 0:
            return _schedule_transpose(sch, unit, last, vector_lanes(target))
        (block,) = root_blocks(sch)
        loops = sch.get_loops(block)
        extents = [const_int(sch.get(loop).extent) for loop in loops]
        total = 1
        for e in extents:
            total *= e
        lanes = vector_lanes(target)
        row = sch.fuse(*loops[len(loops) - tail:]) if tail > 1 else loops[-1]
        length = 1
        for e in extents[len(loops) - tail:]:
            length *= e
        outer = list(loops[: len(loops) - tail])
        if length >= lanes:
            if length % lanes:
                row, _tail = sch.loop_partition(row, [length // lanes * lanes, None])
            row_outer, inner = sch.split(row, [None, lanes])
            sch.vectorize(inner)
        else:
            row_outer = None
        if total >= PARALLEL_MIN_WORK:
            if outer:
                sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
            elif row_outer is not None:
                sch.parallel(row_outer)
        return sch


TRANSPOSE_TILE = 16  # a 16 x 16 float tile: 1 KiB read and written while in L1


def _schedule_transpose(sch, read_axis: int, write_axis: int, lanes: int, written: int | None = None):
    """Tiles of the loop that walks the output contiguously (`write_axis`) and the one that walks
    the input contiguously (`read_axis`), so each tile's reads and writes stay in L1. The vector
    runs along the write axis when a vector width divides it (a contiguous store, a strided load
    per lane: BERT's keys, 128 tokens), else along the read axis (a contiguous load, a strided
    store: a ViT's 197 tokens); None when neither divides.

    `written`: the write axis holds that many values and zero padding after them (a ViT's keys
    padded to 208): the tiles wholly below it are a loop of their own, whose vectors read with no
    condition; the condition stays in the last tiles only, where TVM computes it lane by lane."""
    (block,) = root_blocks(sch)
    loops = sch.get_loops(block)
    extents = [const_int(sch.get(loop).extent) for loop in loops]
    w_width, r_width = fit_lanes(extents[write_axis], lanes), fit_lanes(extents[read_axis], lanes)
    if w_width is None and r_width is None:
        return None
    # the unvectorized side of the tile: TRANSPOSE_TILE, or the whole axis when shorter (an
    # image's 3 channels)
    r_outer, r_inner = sch.split(loops[read_axis], [None, min(TRANSPOSE_TILE, extents[read_axis]) if w_width else r_width])
    w_outer, w_inner = sch.split(loops[write_axis], [None, w_width or min(TRANSPOSE_TILE, extents[write_axis])])
    others = [loop for k, loop in enumerate(loops) if k not in (read_axis, write_axis)]
    tiles = [r_outer, w_outer] if read_axis < write_axis else [w_outer, r_outer]
    if w_width:
        sch.reorder(*others, *tiles, r_inner, w_inner)
        sch.vectorize(w_inner)
    else:
        sch.reorder(*others, *tiles, w_inner, r_inner)
        sch.vectorize(r_inner)
    total = 1
    for e in extents:
        total *= e
    whole = written // w_width if written is not None and w_width else 0
    if whole and whole * w_width < extents[write_axis]:
        # the vector tiles below the padding, then the rest (vit_encoder's keys, 3 x 64 x 208;
        # docs/performance.md: Padded transposes)
        outer = others if read_axis > write_axis else [*others, r_outer]
        if total >= PARALLEL_MIN_WORK and outer:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        sch.loop_partition(w_outer, [whole, None])
        return sch
    if total >= PARALLEL_MIN_WORK:
        sch.parallel(sch.fuse(*others, *tiles))
    return sch


def _scatter_transpose(func, lanes: int):
    """A copy written in scatter form, as TVM's layout_transform writes it (the loops walk the
    input, the store computes where each element goes: out[c // 16 * 16 + c % 16, h, w] =
    in[c // 16, h, w, c % 16]), scheduled as a transpose; None for anything else."""
    from tvm import s_tir, tirx
    from tvm.ir import TensorLoad
    from tvm.sym.analyzer import Analyzer

    sch = s_tir.Schedule(func)
    blocks = root_blocks(sch)
    if len(blocks) != 1 or iter_kinds(sch, blocks[0]).replace("S", ""):
        return None
    stmt = sch.get(blocks[0])
    store, load = stmt.body, getattr(stmt.body, "value", None)
    if not isinstance(store, tirx.BufferStore) or not isinstance(load, TensorLoad):
        return None
    iters = [iv.var for iv in stmt.iter_vars]
    if len(load.indices) != len(iters) or not all(i.same_as(v) for i, v in zip(load.indices, iters)):
        return None
    if len(sch.get_loops(blocks[0])) != len(iters) or any(const_int(iv.dom.extent) is None for iv in stmt.iter_vars):
        return None
    analyzer = Analyzer()
    for iv in stmt.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    write_axis = _unit_axis(analyzer.simplify(store.indices[-1]), iters, analyzer)
    if write_axis is None or write_axis == len(iters) - 1:
        return None  # contiguous on both sides: the generic schedule vectorizes it as it is
    return _schedule_transpose(sch, len(iters) - 1, write_axis, lanes)


def _simplified_copy(func):
    """(the function rebuilt as one copy with simplified indices, the length of its contiguous
    tail, for a transpose (tail 0) the output axis the input's innermost axis follows, and for a
    padded copy (`_padding`) {output axis: values before its padding}), or None when `func` is
    not a single-input copy this rule improves."""
    from tvm import s_tir, te, tirx
    from tvm.ir import TensorLoad
    from tvm.sym.analyzer import Analyzer

    sch = s_tir.Schedule(func)
    blocks = root_blocks(sch)
    if not blocks or any(iter_kinds(sch, b).replace("S", "") for b in blocks):
        return None
    if len(sch.get_output_blocks(sch.get_sblock("root"))) != 1:
        return None
    for block in blocks[:-1]:
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 - not a pure copy chain
            return None
    (block,) = root_blocks(sch)
    stmt = sch.get(block)
    store, load = stmt.body, getattr(stmt.body, "value", None)
    padding = _padding(load)
    if padding is not None:
        bounds, load, fill = padding
    if not isinstance(store, tirx.BufferStore) or not isinstance(load, TensorLoad):
        return None
    params = list(func.params)
    out_buf, src_buf = store.buffer, load.source
    if not out_buf.same_as(params[-1]) or not any(src_buf.same_as(p) for p in params[:-1]):
        return None
    iters = [iv.var for iv in stmt.iter_vars]
    if len(store.indices) != len(iters) or not all(i.same_as(v) for i, v in zip(store.indices, iters)):
        return None
    shapes = [[const_int(d) for d in b.shape] for b in (out_buf, src_buf)]
    if any(d is None for shape in shapes for d in shape):
        return None
    analyzer = Analyzer()
    for iv in stmt.iter_vars:
        analyzer.bind(iv.var, iv.dom)
    if padding is None:
        indices = [analyzer.simplify(i) for i in load.indices]
    else:
        # simplified where the value is read (`t % 197` is t there): if_then_else reads only there
        with analyzer.constraint_scope(_conjunction([var < n for var, n in bounds])):
            indices = [analyzer.simplify(i) for i in load.indices]
    if any(not _substitutable(i) for i in indices):
        return None
    tail = contiguous_tail(out_buf.shape, src_buf.shape, indices, iters, analyzer)
    unit = None
    if tail == 0:
        unit = _unit_axis(indices[-1], iters, analyzer)
        if unit is None or unit == len(iters) - 1:
            return None  # the input's innermost axis follows no single output axis

    placeholders = [te.placeholder(p.shape, p.dtype, name=str(p.name)) for p in params[:-1]]
    src = placeholders[next(k for k, p in enumerate(params[:-1]) if src_buf.same_as(p))]

    def value(*axes):
        mapping = {id(v): (v, a) for v, a in zip(iters, axes)}
        read = src[tuple(_substitute(i, mapping) for i in indices)]
        if padding is None:
            return read
        return tirx.if_then_else(_conjunction([_substitute(var, mapping) < n for var, n in bounds]), read, fill)

    out = te.compute(out_buf.shape, value, name=str(stmt.name_hint))
    new = te.create_prim_func([*placeholders, out]).without_attr("global_symbol")
    for key, val in (func.attrs or {}).items():
        new = new.with_attr(key, val)
    # output axis -> how many values it holds before its padding
    padded = {k: n for k, v in enumerate(iters) for var, n in (bounds if padding is not None else []) if v.same_as(var)}
    return new, tail, unit, padded


def _padding(value):
    """([(iterator, n)...], the load, the fill value) for a padded copy, `if_then_else(0 <= t and
    t < n, load, fill)` as PadInput writes it (zero padding at the end of an axis: a ViT's 197
    attention keys padded to 208); None for anything else."""
    from tvm import tirx
    from tvm.ir import Call, Op, TensorLoad

    if not isinstance(value, Call) or not value.op.same_as(Op.get("prim.if_then_else")):
        return None
    cond, load, fill = value.args
    if not isinstance(load, TensorLoad) or not isinstance(fill, tirx.FloatImm):
        return None
    bounds, pending = [], [cond]
    while pending:
        term = pending.pop()
        if isinstance(term, tirx.And):
            pending += [term.a, term.b]
        elif isinstance(term, tirx.LE) and const_int(term.a) == 0 and isinstance(term.b, tirx.Var):
            continue  # 0 <= t: every iterator starts at 0
        elif isinstance(term, tirx.LT) and isinstance(term.a, tirx.Var) and const_int(term.b) is not None:
            bounds.append((term.a, const_int(term.b)))
        else:
            return None
    return (bounds, load, fill) if bounds and all(n >= 1 for _, n in bounds) else None


def _conjunction(terms):
    from tvm import tirx

    cond = terms[0]
    for term in terms[1:]:
        cond = tirx.And(cond, term)
    return cond


_BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
           "FloorDiv": None, "FloorMod": None, "Min": None, "Max": None}


def _substitutable(expr) -> bool:
    """True when `expr` is integer arithmetic `_substitute` can rebuild (TVM 0.27's Python API
    has no expression substitution)."""
    from tvm import tirx

    if isinstance(expr, (tirx.IntImm, tirx.Var)):
        return True
    if type(expr).__name__ in _BINARY:
        return _substitutable(expr.a) and _substitutable(expr.b)
    return False


def _substitute(expr, mapping):
    """`expr` with each iterator variable replaced by its new axis (mapping: id -> (var, axis))."""
    from tvm import tirx

    if isinstance(expr, tirx.Var):
        for var, axis in mapping.values():
            if var.same_as(expr):
                return axis
        return expr
    if isinstance(expr, tirx.IntImm):
        return expr
    a, b = _substitute(expr.a, mapping), _substitute(expr.b, mapping)
    kind = type(expr).__name__
    op = _BINARY[kind] or {"FloorDiv": tirx.floordiv, "FloorMod": tirx.floormod, "Min": tirx.min, "Max": tirx.max}[kind]
    return op(a, b)


def _unit_axis(index, iters, analyzer) -> int | None:
    """The position of the iterator that moves `index` by exactly one, or None."""
    from tvm import tirx

    if not _substitutable(index):
        return None
    for position, var in enumerate(iters):
        rest = _substitute(index, {id(var): (var, tirx.IntImm(str(var.ty), 0))})
        diff = analyzer.simplify(index - rest)
        if diff.same_as(var):
            return position
    return None
