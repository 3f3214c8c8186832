"""FuseLRN: ONNX's LocalResponseNormalization as one kernel in the model's own layout.

Why: relax's ONNX importer writes LRN as seven ops, x / (bias + alpha * avg_pool3d(x^2))^beta,
the window sum over channels an avg_pool3d over a 5-D view. ConvertLayoutNCHWc then has to
convert x^2 from NCHW{b}c to NCHW for the pool and the denominator back for the divide, and
FuseOps leaves six kernels: the square, the two layout copies, the pool, the power (a libm
`powf` call per element) and the divide - six passes over the activation; in zfnet512 its two LRNs
took more than any conv but two (docs/performance.md: FuseLRN). AlexNet and Inception v1
(GoogLeNet) have two each.

After this pass an LRN is one call_tir (`lrn_nchwc` / `lrn_nchw`, scheduled by
core.compiler.schedules.cpu_lrn.LRN): per pixel, the squares of its C channels go into a
scratch row with zero blocks either side (one image row's at a time, in L2), and each vector
of b output channels sums `size` unaligned loads of that row: x is read from memory once and y
written once.
beta = 0.75 (every model above) is r * sqrt(r), r = 1 / sqrt(d): two vector square roots and a
divide instead of a libm call per lane; any other beta is d^-beta with TVM's pow.

The kernel is bound by its square roots and divide, not by memory (docs/performance.md: FuseLRN).

Runs after ConvertLayoutNCHWc, on the graph as that pass left it. Conditions, each checked:

1. divide(x, d) where d is power(add(multiply(s, alpha), bias), beta), alpha, bias and beta
   scalar constants, and s is reshape(avg_pool3d(reshape(t))) with t = multiply(x, x), or its
   layout_transform from x's NCHW{b}c to NCHW (and d transformed back for the divide);
2. the pool is the importer's: pool_size (size, 1, 1), strides and dilation 1, padding
   (size-1)//2 before and the rest after on the channel axis only, count_include_pad, NCDHW;
3. x is float32, static, NCHW (4-D) or NCHW{b}c (5-D) with the transforms being exactly the
   channel blocking of its shape (checked by moving indices through them).

Anything else is left as it is. Results are those of the seven ops up to float rounding: the
window sum is added in another order and x * d^-beta replaces x / d^beta (tests against
onnxruntime in tests/core/compiler/passes/test_lrn.py).
"""
from __future__ import annotations

import logging

from .relax_rewrite import is_const, static_shape

__all__ = ["fuse_lrn", "fuse_lrn_pass", "lrn_nchw", "lrn_nchwc"]

logger = logging.getLogger(__name__)

OPAQUE_PATTERN = 8  # relax's OpPatternKind kOpaque


def _patterns():
    from tvm.relax.dpl import is_op, wildcard

    x = wildcard()
    square = is_op("relax.multiply")(x, x)
    to_nchw = is_op("relax.layout_transform")(square)
    pool = is_op("relax.nn.avg_pool3d")(is_op("relax.reshape")(to_nchw | square, wildcard()))
    window = is_op("relax.reshape")(pool, wildcard())
    alpha, bias, beta = wildcard(), wildcard(), wildcard()
    power = is_op("relax.power")(is_op("relax.add")(is_op("relax.multiply")(window, alpha), bias), beta)
    back = is_op("relax.layout_transform")(power)
    out = is_op("relax.divide")(x, back | power)
    return out, {"x": x, "pool": pool, "alpha": alpha, "bias": bias, "beta": beta, "to_nchw": to_nchw, "back": back}


def _scalar(expr) -> float | None:
    if not is_const(expr):
        return None
    value = expr.value.numpy()
    return float(value.reshape(-1)[0]) if value.size == 1 and str(value.dtype) == "float32" else None


def _importer_pool(pool) -> int | None:
    """The window size of an avg_pool3d as relax's LRN importer writes it, else None."""
    attrs = pool.attrs
    size = [int(v) for v in attrs.pool_size]
    padding = [int(v) for v in attrs.padding]
    if len(size) != 3 or size[1:] != [1, 1] or size[0] < 1:
        return None
    before = (size[0] - 1) // 2
    if padding != [before, 0, 0, size[0] - 1 - before, 0, 0]:
        return None
    if [int(v) for v in attrs.strides] != [1, 1, 1] or [int(v) for v in attrs.dilation] != [1, 1, 1]:
        return None
    if not bool(attrs.count_include_pad) or bool(attrs.ceil_mode) or str(attrs.layout) != "NCDHW":
        return None
    return size[0]


def _blocks_channels(transform, shape: list[int], to_nchw: bool) -> bool:
    """Whether layout_transform `transform` is NCHW{b}c -> NCHW (`to_nchw`) or back for the
    blocked `shape` [n, C/b, h, w, b]: indices moved through it on a small tensor of that block."""
    import numpy as np

    from .layout.nchwc import layout_transform_numpy

    if transform.attrs.pad_value is not None:
        return False
    n, chunks, _, _, block = shape
    blocked = np.arange(n * chunks * 2 * 2 * block).reshape(n, chunks, 2, 2, block)
    plain = blocked.transpose(0, 1, 4, 2, 3).reshape(n, chunks * block, 2, 2)
    source, expected = (blocked, plain) if to_nchw else (plain, blocked)
    moved = layout_transform_numpy(source, transform.attrs.index_map)
    return moved is not None and moved.shape == expected.shape and bool((moved == expected).all())


def _lrn_call(bb, x, matches, parts):
    """The call_tir of one LRN kernel of `x` for a match, or None when a condition fails."""
    shape = static_shape(x)
    if shape is None or str(getattr(x.ty, "dtype", "")) != "float32" or len(shape) not in (4, 5):
        return None
    size = _importer_pool(matches[parts["pool"]])
    alpha, bias, beta = (_scalar(matches[parts[k]]) for k in ("alpha", "bias", "beta"))
    if size is None or alpha is None or bias is None or beta is None:
        return None
    transforms = [matches.get(parts["to_nchw"]), matches.get(parts["back"])]
    if len(shape) == 5:
        if any(t is None for t in transforms) or not (_blocks_channels(transforms[0], shape, True) and _blocks_channels(transforms[1], shape, False)):
            return None
        compute, name = lrn_nchwc, "lrn_nchwc"
    elif any(t is not None for t in transforms):
        return None
    else:
        compute, name = lrn_nchw, "lrn_nchw"
    # the importer's pool divides by the window size (count_include_pad): alpha / size a square.
    # Opaque to FuseOps (AnnotateTIROpPattern would call it a broadcast, and a conv's fused
    # epilogue could take it in): it stays the one kernel schedules.cpu_lrn knows.
    return bb.call_te(compute, x, size, alpha / size, bias, beta, primfunc_name_hint=name,
                      primfunc_attrs={"op_pattern": OPAQUE_PATTERN})


def _inverse_power(d, beta: float):
    """d ** -beta; for beta = 0.75 as r * sqrt(r), r = 1 / sqrt(d): vector square roots and a
    divide. (Not tirx.rsqrt: TVM scalarizes a vectorized loop holding it for AVX2 targets, 8
    lanes; docs/performance.md: FuseLRN.)"""
    from tvm import tirx

    if beta in (0.5, 0.75):
        r = tirx.const(1.0, "float32") / tirx.sqrt(d)
        return r if beta == 0.5 else r * tirx.sqrt(r)
    return tirx.power(d, tirx.const(-beta, "float32"))


def _scale(window_sum, scale: float, bias: float, beta: float):
    from tvm import tirx

    return _inverse_power(tirx.const(bias, "float32") + tirx.const(scale, "float32") * window_sum, beta)


def lrn_nchwc(x, size: int, scale: float, bias: float, beta: float):
    """LRN of x [n, C/b, h, w, b] across its C channels as a TE compute: y = x * (bias + scale *
    sum of squares over `size` channels)^-beta (scale = ONNX's alpha / size).

    Two stages: "lrn_square" [n, h, w, J], a pixel's squared channels in one row with whole
    zero blocks before and after (J = C + enough blocks for the window's reach, clamped reads
    where the zeros are), and "lrn_nchwc" [n, C/b, h, w, b] summing `size` consecutive entries
    of that row, contiguous for b consecutive channels."""
    from tvm import te, tirx

    n, chunks, height, width, block = (int(v) for v in x.shape)
    before = (size - 1) // 2
    pad_blocks = -(-max(before, size - 1 - before) // block)  # zero blocks on each side
    row = (chunks + 2 * pad_blocks) * block

    def square(i, y, w, j):
        # both sides of a Select are evaluated: the zero blocks read a real block (modulo the
        # blocks), never before or after x. (A clamp would be simplified away under the Select's
        # condition.)
        value = x[i, (j // block + chunks - pad_blocks) % chunks, y, w, j % block]
        inside = tirx.all(j >= pad_blocks * block, j < (chunks + pad_blocks) * block)
        return tirx.Select(inside, value * value, tirx.const(0.0, "float32"))

    squares = te.compute((n, height, width, row), square, name="lrn_square")

    def out(i, c, y, w, b):
        start = (c + pad_blocks) * block + b - before
        total = squares[i, y, w, start]
        for k in range(1, size):
            total = total + squares[i, y, w, start + k]
        return x[i, c, y, w, b] * _scale(total, scale, bias, beta)

    return te.compute(x.shape, out, name="lrn_nchwc")


def lrn_nchw(x, size: int, scale: float, bias: float, beta: float):
    """LRN of x [n, C, h, w] across C as a TE compute (block "lrn_nchw"): each output row sums
    the squares of the same row in `size` neighbouring channel planes, zero beyond the ends."""
    from tvm import te, tirx

    _, channels, _, _ = (int(v) for v in x.shape)
    before = (size - 1) // 2

    def out(i, c, y, w):
        total = None
        for k in range(size):
            ch = c + (k - before)
            value = x[i, (ch + channels) % channels, y, w]  # a real plane also where ch is out of range
            term = tirx.Select(tirx.all(ch >= 0, ch < channels), value * value, tirx.const(0.0, "float32"))
            total = term if total is None else total + term
        return x[i, c, y, w] * _scale(total, scale, bias, beta)

    return te.compute(x.shape, out, name="lrn_nchw")


def fuse_lrn(mod):
    """`mod` with every LRN the importer wrote out (see the module docstring) as one kernel;
    `mod` itself, unchanged, when it has none."""
    from tvm import relax

    pattern, parts = _patterns()

    @relax.expr_functor.mutator
    class FuseLRN(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.var2val = {}
            self.fused = 0

        def visit_call_(self, call):
            new = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.divide":
                return new
            matches = pattern.extract_matched_expr(call, self.var2val)
            if not matches:
                return new
            # x as the divide reads it: its variable (the match may hold the value bound to it)
            lrn = _lrn_call(self.builder_, new.args[0], matches, parts)
            if lrn is None:
                return new
            self.fused += 1
            return lrn

    functions = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, relax.Function)]
    mutator = FuseLRN(mod)
    for gv, func in functions:
        mutator.var2val = relax.analysis.get_var2val(func)
        mutator.builder_.update_func(gv, mutator.visit_expr(func))
    if not mutator.fused:
        return mod
    logger.debug("FuseLRN: %d LRN kernels", mutator.fused)
    return relax.transform.DeadCodeElimination()(mutator.builder_.get())


def fuse_lrn_pass(target=None):
    """FuseLRN as a tvm module pass (the pipeline's factory signature)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="FuseLRN")
    def _pass(mod, _ctx):
        return fuse_lrn(mod)

    return _pass
