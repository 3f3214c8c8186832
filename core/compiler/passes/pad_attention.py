"""PadAttentionKeys: attention over a token count no vector width divides (a ViT's 197) computed
over keys padded to whole vectors, the padding masked out of the softmax.

Why: in `softmax(Q Kᵀ * s) V` the key count is the scores' row length. At 197 keys the scores
matmul's last column tile holds 5 of 16 lanes, so its write-back is predicated per element and
stays scalar (16 scalar extracts, divides and stores per tile row); the softmax pads every row to
a vector multiple in a copy of its own; and `P V` reduces over 197 keys in padded copies of both
operands. Padding the keys once, on the Relax graph, gives every one of them whole vectors:

    scores = (Q @ pad(Kᵀ, keys -> T')) * s + mask      mask = 0 on real keys, -inf on padding
    P      = softmax(scores)                            exactly 0 on the padding: exp(-inf) = 0
    out    = P @ pad(V, keys -> T')                     the zero rows add nothing

The padding copies fold into the head transposes that produce Kᵀ and V (FuseOps puts injective
ops together), the mask add into the scores matmul's write-back. Results are those of the
unpadded attention up to the order of float additions. Queries (the scores' rows) are not
padded: the matmul schedule pads rows with a uniform predicate that keeps its stores vectors
(padding them here too, and slicing the result, was no faster; docs/performance.md:
PadAttentionKeys and KEY_GROUP).

Keys are padded to whole groups of 16 (KEY_GROUP) even where a vector holds 8 (AVX2) when that
adds at most 1/16 of them: 197 keys then give 208 columns on both ISAs, where AVX2's whole vectors
(200) left the scores matmul one-vector tiles of 13 rows, a broadcast load per FMA
(docs/performance.md: PadAttentionKeys and KEY_GROUP).

Conditions, checked on each match of `matmul(softmax(x, axis=-1), V)`:

1. x is `matmul(Q, Kt)`, optionally scaled by a scalar constant (divide or multiply, either side)
   (scores or probabilities read elsewhere too are still computed unpadded for those readers);
2. static float32 shapes, rank >= 2, Kt's last axis and V's second-to-last are the key count T;
3. T is not a multiple of the target's float32 vector width (CPU targets only; 16 with AVX-512,
   8 with AVX2), or of KEY_GROUP where padding to it adds at most T/16 keys (`padded_keys`),
   and T >= 2 vectors (short rows are not worth a mask).

Anything else is left as it is (BERT's 128 and GPT-2's 64 tokens already divide).
"""
from __future__ import annotations

import logging

from .relax_rewrite import array_const, rewrite_functions

__all__ = ["pad_attention_keys", "pad_attention_keys_pass", "padded_keys"]

logger = logging.getLogger(__name__)

# Keys are padded to whole groups of 16 floats (64 bytes) even where a vector is 8 of them
# (AVX2), when that costs little: the scores matmul then takes two-vector column tiles of 6 rows
# with Kᵀ read in place, not one-vector tiles of 13 rows whose every FMA waits for a broadcast
# load of its own (vit_encoder as AVX2 code: figures in the module docstring).
KEY_GROUP = 16


def _static_shape(expr) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    dims = [getattr(d, "value", None) for d in shape.values]
    return dims if all(isinstance(d, int) for d in dims) else None


def _scalar(const) -> bool:
    return const.value.numpy().size == 1


def padded_keys(keys: int, lanes: int) -> int:
    """The key count attention is computed over: whole vectors of `lanes`, and whole groups of
    KEY_GROUP keys where that adds at most 1/16 of the keys (a ViT's 197 keys: 208 for AVX2
    too, where whole vectors would be 200)."""
    padded = -(-keys // lanes) * lanes
    group = -(-keys // KEY_GROUP) * KEY_GROUP
    if group > padded and group - keys <= keys // 16:
        padded = group
    return padded


def pad_attention_keys(mod, lanes: int):
    """`mod` with attention over a key count `lanes` does not divide padded (module docstring)."""
    import numpy as np
    from tvm import relax
    from tvm.relax.dpl import is_const, is_op, wildcard

    q, kt, v = wildcard(), wildcard(), wildcard()
    scores = is_op("relax.matmul")(q, kt)
    scale = is_const()
    divided = is_op("relax.divide")(scores, scale)
    scaled = divided | is_op("relax.multiply")(scores, scale) | is_op("relax.multiply")(scale, scores)
    probs = is_op("relax.nn.softmax")(scaled | scores)
    pattern = is_op("relax.matmul")(probs, v)

    def rewrite(expr, matches):
        q_e, kt_e, v_e, p_e = matches[q], matches[kt], matches[v], matches[probs]
        shapes = [_static_shape(e) for e in (q_e, kt_e, v_e)]
        if any(s is None or len(s) < 2 for s in shapes):
            return expr
        if any(str(getattr(e.ty, "dtype", "")) != "float32" for e in (q_e, kt_e, v_e)):
            return expr
        keys = shapes[1][-1]
        axis = int(p_e.attrs.axis)
        if keys != shapes[2][-2] or axis not in (-1, len(shapes[0]) - 1):
            return expr
        padded = padded_keys(keys, lanes)
        if padded == keys or keys < 2 * lanes:
            return expr
        extra = padded - keys
        kt_p = relax.op.nn.pad(kt_e, [0, 0] * (len(shapes[1]) - 1) + [0, extra], pad_value=0.0)
        v_p = relax.op.nn.pad(v_e, [0, 0] * (len(shapes[2]) - 2) + [0, extra, 0, 0], pad_value=0.0)
        s = relax.op.matmul(q_e, kt_p)
        c = matches.get(scale)
        if c is not None:
            if not _scalar(c):
                return expr
            s = relax.op.divide(s, c) if matches.get(divided) is not None else relax.op.multiply(s, c)
        mask = np.zeros(padded, dtype=np.float32)
        mask[keys:] = -np.inf
        s = relax.op.add(s, array_const(mask))
        return relax.op.matmul(relax.op.nn.softmax(s, axis=-1), v_p)

    return rewrite_functions(mod, pattern, rewrite)


def pad_attention_keys_pass(target):
    """PadAttentionKeys as a tvm module pass for a CPU `target` (its vector width)."""
    import tvm

    from ..target import vector_lanes

    lanes = vector_lanes(target)

    @tvm.transform.module_pass(opt_level=0, name="PadAttentionKeys")
    def _pass(mod, _ctx):
        return pad_attention_keys(mod, lanes)

    return _pass
