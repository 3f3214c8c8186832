"""3x3 stride-1 convolutions by Winograd's minimal filtering, F(m x m, 3 x 3), in NCHW[x]c.

Why: a direct 3x3 conv does 9 multiply-adds per output pixel and input channel; F(2x2, 3x3)
does 16 per 2x2 output tile (2.25x fewer), F(4x4, 3x3) 36 per 4x4 tile (4x fewer), for the
price of an input transform (a pass over the input, 4x / 2.25x its size) and an output
transform. onnxruntime's MLAS has no float32 Winograd: its 3x3 convs are direct NCHWc convs,
level with ours (cpu_conv_nchwc), so this is where VGG / ResNet-style models can gain.

The pieces (the matrices A, B, G are TOPI's, `topi.nn.winograd_util`):

* `winograd_tile(call, block)` - the rule: which channel-blocked conv2d goes this way, and with
  which output tile m (None: the direct conv, core.compiler.schedules.cpu_conv_nchwc);
* `transform_weight(weight, m)` - U = G g G^T, with numpy, once at compile time: the legalized
  call receives U as a new constant, so the compiled module has no weight-transform kernel;
* `conv2d_winograd_nchwc(data, packed, ...)` - the TE compute: zero padding, the input
  transform V = B^T d B (per tile and channel, as two 1-D passes), the batched GEMM
  M[e, n] = V[e, n] U[e, n] over the alpha x alpha tile positions (alpha = m + 2), and the output
  transform Y = A^T M A written straight into the NCHW{b}c output. The transforms are written
  out with their non-zero coefficients only (a +-1 is an add or a subtract), selected by the
  tile position, which the schedule unrolls (core.compiler.schedules.cpu_winograd).
"""
from __future__ import annotations

import functools
import logging

import numpy as np

__all__ = [
    "WINOGRAD_MAX_PADDED_WORK",
    "WINOGRAD_MIN_CHANNELS",
    "WINOGRAD_MIN_IN_CHANNELS",
    "WINOGRAD_TILES",
    "conv2d_winograd_nchwc",
    "padded_work",
    "transform_matrices",
    "transform_weight",
    "winograd_shape",
    "winograd_tile",
]

logger = logging.getLogger(__name__)

# Input and output channels from which Winograd is taken; input channels from which a tile size
# is taken where not WINOGRAD_MIN_CHANNELS (F(4,3) from 16); output tiles m to try, in order of
# preference: the first whose tiles cover the output with at most WINOGRAD_MAX_PADDED_WORK of its
# area. So F(4,3) wherever 4 divides the output, F(2,3) where only 2 does. (docs/performance.md:
# Winograd rule)
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MIN_IN_CHANNELS = {4: 16}
WINOGRAD_TILES = (4, 2)
WINOGRAD_MAX_PADDED_WORK = 1.2


@functools.lru_cache(maxsize=None)
def transform_matrices(m: int):
    """(A, B, G) of F(m, 3) as float64 numpy arrays: alpha x m, alpha x alpha, alpha x 3
    (TOPI's Cook-Toom construction and interpolation points, slow in exact fractions, so computed
    once per m; docs/performance.md: transform_matrices cache). Do not modify the arrays returned."""
    from ...tvm_compat import cook_toom_matrices

    return cook_toom_matrices(m, 3)


def winograd_tile(call, block: int) -> int | None:
    """Output tile m (4 or 2) for a channel-blocked relax conv2d call, or None for the direct conv.

    Taken when, all of:
    1. the kernel is 3x3, stride 1, dilation 1, groups 1, float32, in NCHW{i}c -> NCHW{b}c;
    2. the weight is a constant (its transform is computed now, not at run time);
    3. output channels are at least WINOGRAD_MIN_CHANNELS, input channels at least that or, for
       a tile size in WINOGRAD_MIN_IN_CHANNELS, its count; the input block is `block`;
    4. m x m tiles cover the output with at most WINOGRAD_MAX_PADDED_WORK of its area (4 preferred,
       else 2; an odd side gets a last tile row whose extra outputs are dropped).
    A tuning record can choose otherwise for a conv (core.compiler.tuning.winograd_choice: applied before
    LegalizeOps, so this rule only sees the convs no record chose for)."""
    shape = winograd_shape(call, block)
    if shape is None or shape["out_channels"] < WINOGRAD_MIN_CHANNELS:
        return None
    for m in WINOGRAD_TILES:
        if shape["in_channels"] < WINOGRAD_MIN_IN_CHANNELS.get(m, WINOGRAD_MIN_CHANNELS):
            continue
        if padded_work(shape["out_h"], shape["out_w"], m) <= WINOGRAD_MAX_PADDED_WORK:
            return m
    return None


def winograd_shape(call, block: int) -> dict | None:
    """{in_channels, out_channels, out_h, out_w} of a channel-blocked relax conv2d call Winograd
    can compute (conditions 1 and 2 of `winograd_tile`), else None."""
    from ..relax_rewrite import is_const, static_shape

    attrs = call.attrs
    if int(attrs.groups) != 1 or any(int(s) != 1 for s in attrs.strides) or any(int(d) != 1 for d in attrs.dilation):
        return None
    if str(getattr(call.args[0].ty, "dtype", "")) != "float32" or not is_const(call.args[1]):
        return None
    data, weight, out = static_shape(call.args[0]), static_shape(call.args[1]), static_shape(call)
    if data is None or weight is None or out is None or len(data) != 5 or len(weight) != 6 or len(out) != 5:
        return None
    out_chunks, in_chunks, kh, kw, in_block, out_block = weight
    if (kh, kw) != (3, 3) or in_block != block or out_block != block:
        return None
    return {"in_channels": in_chunks * in_block, "out_channels": out_chunks * out_block, "out_h": out[2], "out_w": out[3]}


def padded_work(out_h: int, out_w: int, m: int) -> float:
    """The output area m x m tiles cover over the output's own: 1.0 when m divides both sides;
    an odd side is covered by one more tile row whose extra outputs are computed and dropped."""
    return (-(-out_h // m) * m) * (-(-out_w // m) * m) / (out_h * out_w)


def transform_weight(weight: np.ndarray, m: int) -> np.ndarray:
    """A blocked conv weight [OC/b, IC/i, 3, 3, i, b] (OIHW{i}i{b}o) as Winograd's U, laid out
    for the GEMM: [alpha, alpha, OC/b, IC, b] (float32, computed in float64)."""
    out_chunks, in_chunks, _, _, in_block, out_block = weight.shape
    g = weight.astype(np.float64).transpose(0, 5, 1, 4, 2, 3).reshape(out_chunks * out_block, in_chunks * in_block, 3, 3)
    _, _, G = transform_matrices(m)
    # G g G^T per (OC, IC) as batched matrix products (a three-operand einsum took 1.7 s for a
    # 512 x 512 conv's F(4,3) weight)
    u = (G @ g @ G.T).transpose(2, 3, 0, 1)  # [alpha, alpha, OC, IC]
    alpha = m + 2
    u = u.reshape(alpha, alpha, out_chunks, out_block, in_chunks * in_block).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(u, dtype=np.float32)


def _combine(coefficients, terms, dtype):
    """sum_i c_i * t_i over the non-zero c_i (+-1 as an add or a subtract)."""
    from tvm import tirx

    out = None
    for c, t in zip(coefficients, terms):
        c = float(c)
        if c == 0.0:
            continue
        if out is None:
            out = t if c == 1.0 else (-t if c == -1.0 else tirx.const(c, dtype) * t)
        elif c == 1.0:
            out = out + t
        elif c == -1.0:
            out = out - t
        else:
            out = out + tirx.const(c, dtype) * t
    return out if out is not None else tirx.const(0.0, dtype)


def _select(index, exprs):
    """exprs[index] for a loop variable `index` (folds to one expression once the loop is unrolled)."""
    from tvm import tirx

    out = exprs[-1]
    for k in range(len(exprs) - 2, -1, -1):
        out = tirx.Select(index == k, exprs[k], out)
    return out


def conv2d_winograd_nchwc(data, packed, padding, m: int, out_dtype: str = "float32"):
    """The Winograd conv as a TE compute (see the module docstring): data [n, IC/i, h, w, i],
    packed = transform_weight(...) [alpha, alpha, OC/b, IC, b], padding [top, left, bottom,
    right]; returns [n, OC/b, oh, ow, b] (the block "winograd_output")."""
    from tvm import te, topi

    A, B, _ = transform_matrices(m)
    alpha = m + 2
    batch, in_chunks, height, width, in_block = (int(d) for d in data.shape)
    _, _, out_chunks, in_channels, out_block = (int(d) for d in packed.shape)
    top, left, bottom, right = (int(p) for p in padding)
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = -(-out_h // m), -(-out_w // m)
    tiles = batch * tiles_h * tiles_w
    # the last tile reads m + 2 rows: the padded input has them, with zero rows and columns
    # below and right where m does not divide the output (those outputs are dropped)
    extra_h, extra_w = tiles_h * m - out_h, tiles_w * m - out_w
    padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom + extra_h, right + extra_w, 0], name="winograd_pad")

    def rows(n, c, th, tw, e, rb, ci):  # B^T d, down the columns of each tile
        terms = [padded[n, c, th * m + ra, tw * m + rb, ci] for ra in range(alpha)]
        return _select(e, [_combine(B[:, k], terms, out_dtype) for k in range(alpha)])

    rows_t = te.compute((batch, tiles_h, tiles_w, in_chunks, alpha, alpha, in_block),
                        lambda n, th, tw, c, e, rb, ci: rows(n, c, th, tw, e, rb, ci), name="winograd_input_rows")

    def input_tile(e, nu, p, c, ci):  # (B^T d) B, across the rows
        n, th, tw = p // (tiles_h * tiles_w), p // tiles_w % tiles_h, p % tiles_w
        terms = [rows_t[n, th, tw, c, e, rb, ci] for rb in range(alpha)]
        return _select(nu, [_combine(B[:, k], terms, out_dtype) for k in range(alpha)])

    v = te.compute((alpha, alpha, tiles, in_chunks, in_block), input_tile, name="winograd_input")
    rc = te.reduce_axis((0, in_channels), name="rc")
    mm = te.compute(
        (alpha, alpha, out_chunks, tiles, out_block),
        lambda e, nu, k, p, b: te.sum(v[e, nu, p, rc // in_block, rc % in_block] * packed[e, nu, k, rc, b], axis=[rc]),
        name="winograd_bgemm",
    )

    def cols(k, p, vh, nu, b):  # A^T M
        terms = [mm[e, nu, k, p, b] for e in range(alpha)]
        return _select(vh, [_combine(A[:, j], terms, out_dtype) for j in range(m)])

    cols_t = te.compute((out_chunks, tiles, m, alpha, out_block), cols, name="winograd_output_rows")

    def output(n, k, y, x, b):  # (A^T M) A
        p = (n * tiles_h + y // m) * tiles_w + x // m
        terms = [cols_t[k, p, y % m, nu, b] for nu in range(alpha)]
        return _select(x % m, [_combine(A[:, j], terms, out_dtype) for j in range(m)])

    return te.compute((batch, out_chunks, out_h, out_w, out_block), output, name="winograd_output")


def legalize_winograd(bb, call, m: int):
    """The call_tir of `conv2d_winograd_nchwc` for a relax conv2d call `winograd_tile` chose,
    with the weight transformed now."""
    from ..relax_rewrite import array_const

    packed = transform_weight(call.args[1].value.numpy(), m)
    out_dtype = str(call.attrs.out_dtype) if str(call.attrs.out_dtype) not in ("", "void", "None") else "float32"
    return bb.call_te(
        conv2d_winograd_nchwc,
        call.args[0],
        array_const(packed),
        [int(p) for p in call.attrs.padding],
        m,
        out_dtype,
        primfunc_name_hint=f"conv2d_winograd{m}_NCHWc",
    )
