"""Converters for the ops 2026 exporters write that TVM 0.27's ONNX frontend cannot convert.

Each converter follows the ONNX reference implementation (`onnx/reference/ops/op_*.py`) step by
step in Relax ops, and is checked against the onnx wheel's node conformance cases
(`tests/core/compiler/frontend/test_modern_ops.py`, `benchmarks/conformance.py`):

1. `Attention` (opset 23-25): 3-D and 4-D inputs, grouped-query heads, scale, softcap, float and
   bool masks (shorter than the keys: padded), `is_causal` aligned bottom-right, past key/value
   (present outputs), `nonpad_kv_seqlen`, sliding windows, `qk_matmul_output_mode` 0-3 and
   `softmax_precision`; fully masked rows give 0, as ONNX specifies. TVM maps `Attention` to
   Microsoft's contrib op and refuses every ONNX one.
2. `RotaryEmbedding` (opset 23): 3-D and 4-D inputs, position ids, interleaved halves, partial
   rotation (`rotary_embedding_dim`).
3. `RMSNormalization` (opset 23): any `axis` (TVM's rms_norm fails to compile when the scale
   covers more than the last axis).
4. `Reduce*` with the axes given at run time (opset 13/18; see `modern_reduce`).
5. `Resize` with sizes given at run time, and `axes` (see `modern_resize`).

Importing this module registers them with `core.compiler.frontend.registry.register_converter`;
it loads after `converters`, so for the same op type these win. A variant that cannot be
converted faithfully raises a one-sentence error naming the op (the importer names the node).
"""
from __future__ import annotations

import logging

from .modern_reduce import REDUCE_OPS
from .modern_resize import RESIZE_OPS

__all__ = ["MODERN_OPS"]

logger = logging.getLogger(__name__)

# ONNX TensorProto element types softmax_precision may name -> Relax dtypes
_PRECISION = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _build() -> dict[str, type]:
    import numpy as np
    import tvm
    import tvm.sym
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from ...errors import UnsupportedOpError

    def dtype_of(expr) -> str:
        return str(getattr(getattr(expr, "ty", None), "dtype", "") or "")

    def static_shape(expr, op: str, what: str) -> list[int]:
        shape = getattr(getattr(expr, "ty", None), "shape", None)
        try:
            return [int(d) for d in shape]
        except (TypeError, ValueError):
            raise UnsupportedOpError(f"{op} with a {what} of unknown or symbolic shape is not supported; give the model fixed input sizes.",
                                     op_type=op) from None

    def dims(expr, op: str, what: str) -> list:
        """The shape with its static sizes as ints and symbolic ones as they are (a known rank)."""
        shape = getattr(getattr(expr, "ty", None), "shape", None)
        if shape is None:
            raise UnsupportedOpError(f"{op} with a {what} of unknown rank is not supported.", op_type=op)
        return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape]

    def const(value, dt: str):
        return relax.const(np.array(value, dtype="float32" if dt == "bfloat16" else dt), dt)

    def present(inputs, k: int):
        return inputs[k] if len(inputs) > k and inputs[k] is not None else None

    class Attention(fe.OnnxOpConverter):
        """ONNX's Attention (opset 23+), after onnx/reference/ops/op_attention.py. Microsoft's
        contrib Attention (the same op type, with `num_heads`) stays with TVM's converter."""

        @classmethod
        def get_converter(cls, opset):
            contrib = fe.Attention.get_converter(opset)

            def convert(bb, inputs, attr, params):
                if "num_heads" in attr or opset < 23:
                    return contrib(bb, inputs, attr, params)
                return cls._impl_v23(bb, inputs, attr, params)

            return convert

        @classmethod
        def _impl_v23(cls, bb, inputs, attr, params):
            q, k, v = inputs[0], inputs[1], inputs[2]
            mask, past_k, past_v, nonpad = (present(inputs, i) for i in (3, 4, 5, 6))
            n_out = int(attr.get("tvm_custom", {}).get("num_outputs", 1))
            dt = dtype_of(q)
            rank = len(dims(q, "Attention", "query"))  # batch and sequence lengths may be symbolic
            q_heads = attr.get("q_num_heads")
            kv_heads = attr.get("kv_num_heads")
            if (past_k is None) != (past_v is None):
                raise UnsupportedOpError("Attention with only one of past_key and past_value is not supported.", op_type="Attention")
            if nonpad is not None and past_k is not None:
                raise UnsupportedOpError("Attention with both nonpad_kv_seqlen and a past cache is invalid ONNX.", op_type="Attention")
            if rank == 3:
                if not q_heads or not kv_heads:
                    raise UnsupportedOpError("Attention on 3-D inputs needs q_num_heads and kv_num_heads.", op_type="Attention")
                q = cls._heads(bb, q, int(q_heads))
                k = cls._heads(bb, k, int(kv_heads))
                v = cls._heads(bb, v, int(kv_heads))
            elif rank != 4:
                raise UnsupportedOpError(f"Attention on {rank}-D inputs is not supported (ONNX allows 3-D and 4-D).", op_type="Attention")
            batch, n_q, q_len, head = dims(q, "Attention", "query")
            if not isinstance(n_q, int) or not isinstance(head, int):
                raise UnsupportedOpError("Attention with a symbolic number of heads or head size is not supported.", op_type="Attention")
            scale = attr.get("scale")
            scale = 1.0 / np.sqrt(head) if scale is None else float(scale)
            root = const(np.float32(np.sqrt(scale)), dt)  # ONNX scales Q and K by sqrt(scale) each
            if past_k is not None:
                k = bb.normalize(relax.op.concat([past_k, k], axis=2))
                v = bb.normalize(relax.op.concat([past_v, v], axis=2))
            present_k, present_v = k, v
            _b, n_kv, kv_len, _h = dims(k, "Attention", "key")
            symbolic = not isinstance(q_len, int) or not isinstance(kv_len, int)
            if symbolic and (past_k is not None or nonpad is not None or int(attr.get("left_window_size", -1)) >= 0
                             or int(attr.get("right_window_size", -1)) >= 0):
                raise UnsupportedOpError("Attention with a past cache, nonpad_kv_seqlen or a window needs fixed sequence lengths; "
                                         "give the model fixed input sizes.", op_type="Attention")
            if not isinstance(n_kv, int):
                raise UnsupportedOpError("Attention with a symbolic number of key/value heads is not supported.", op_type="Attention")
            past_len = static_shape(past_k, "Attention", "past key")[2] if past_k is not None else 0
            bias = cls._bias(bb, mask, nonpad, attr, dt, batch, q_len, kv_len, past_len)
            if n_q != n_kv:
                if n_q % n_kv:
                    raise UnsupportedOpError(f"Attention with {n_q} query heads and {n_kv} key/value heads is not supported (not a multiple).",
                                             op_type="Attention")
                k = relax.op.repeat(k, n_q // n_kv, axis=1)
                v = relax.op.repeat(v, n_q // n_kv, axis=1)
            qk = bb.normalize(relax.op.matmul(relax.op.multiply(q, root),
                                              relax.op.permute_dims(relax.op.multiply(k, root), [0, 1, 3, 2])))
            softcap = float(attr.get("softcap", 0.0) or 0.0)
            if softcap > 0:
                cap = const(softcap, dt)
                qk = bb.normalize(relax.op.multiply(relax.op.tanh(relax.op.divide(qk, cap)), cap))
            mode = int(attr.get("qk_matmul_output_mode", 0))
            logits = qk if bias is None else bb.normalize(relax.op.add(qk, bias))
            qk_out = logits if mode == 2 else qk
            precision = attr.get("softmax_precision")
            sdt = _PRECISION.get(int(precision)) if precision is not None else dt
            if sdt is None:
                raise UnsupportedOpError(f"Attention with softmax_precision {precision} is not supported.", op_type="Attention")
            probs = cls._softmax(bb, logits if sdt == dt else relax.op.astype(logits, sdt), sdt)
            if bias is not None:
                # a row whose bias is all -inf attends nothing: 0, decided on the bias (not the logits)
                allowed = relax.op.astype(relax.op.not_equal(bias, const(-np.inf, dt)), "float32")
                masked = relax.op.equal(relax.op.max(allowed, axis=-1, keepdims=True), relax.const(0.0, "float32"))
                probs = bb.normalize(relax.op.where(masked, const(0.0, sdt), probs))
            if mode == 3:
                qk_out = probs
            if sdt != dt:
                probs = relax.op.astype(probs, dt)
            y = bb.normalize(relax.op.matmul(probs, v))
            if rank == 3:
                y = relax.op.reshape(bb.normalize(relax.op.permute_dims(y, [0, 2, 1, 3])), [batch, q_len, -1])
            outs = [y, present_k, present_v]
            if n_out >= 4:
                outs.append(qk_out if dtype_of(qk_out) == dt else relax.op.astype(qk_out, dt))
            return relax.Tuple(outs[: max(n_out, 1)]) if n_out > 1 else y

        @staticmethod
        def _heads(bb, x, heads: int):
            b, s, hidden = dims(x, "Attention", "3-D input")
            if not isinstance(hidden, int):
                raise UnsupportedOpError("Attention on 3-D inputs of a symbolic hidden size is not supported.", op_type="Attention")
            if hidden % heads:
                raise UnsupportedOpError(f"Attention with a hidden size {hidden} not divisible by {heads} heads is invalid.", op_type="Attention")
            return bb.normalize(relax.op.permute_dims(bb.normalize(relax.op.reshape(x, [b, s, heads, hidden // heads])), [0, 2, 1, 3]))

        @staticmethod
        def _softmax(bb, x, dt):
            """The reference's softmax: an all -inf row gives 0, not NaN."""
            top = relax.op.max(x, axis=-1, keepdims=True)
            top = relax.op.where(relax.op.equal(top, const(-np.inf, dt)), const(0.0, dt), top)
            e = bb.normalize(relax.op.exp(relax.op.subtract(x, top)))
            s = relax.op.sum(e, axis=-1, keepdims=True)
            s = relax.op.where(relax.op.equal(s, const(0.0, dt)), const(1.0, dt), s)
            return bb.normalize(relax.op.divide(e, s))

        @staticmethod
        def _bias(bb, mask, nonpad, attr, dt, batch, q_len, kv_len, past_len):
            """The additive bias (0 or -inf where masked) of the mask, causality, window and padding,
            or None when nothing masks; broadcastable to (batch, heads, q_len, kv_len)."""
            zero, ninf = const(0.0, dt), const(-np.inf, dt)
            causal = bool(attr.get("is_causal", 0))
            left, right = int(attr.get("left_window_size", -1)), int(attr.get("right_window_size", -1))
            window = left >= 0 or right >= 0
            bias = None
            if mask is not None:
                if dtype_of(mask) == "bool":
                    mask = relax.op.where(mask, zero, ninf)
                elif dtype_of(mask) != dt:
                    mask = relax.op.astype(mask, dt)
                mask = bb.normalize(mask)
                m_shape = dims(mask, "Attention", "mask")
                if isinstance(kv_len, int) and isinstance(m_shape[-1], int):
                    pad = kv_len - m_shape[-1]
                elif tvm.sym.Analyzer().can_prove_equal(kv_len, m_shape[-1]):
                    pad = 0
                else:
                    raise UnsupportedOpError("Attention with a mask whose length cannot be matched to the keys' is not supported; "
                                             "give the model fixed input sizes.", op_type="Attention")
                if pad > 0:
                    fill = relax.op.full(m_shape[:-1] + [pad], ninf, dt)
                    mask = relax.op.concat([mask, fill], axis=-1)
                bias = bb.normalize(mask)
            if not causal and not window and nonpad is None:
                return bias
            i = relax.op.expand_dims(relax.op.arange(0, q_len, 1, "int64"), 1)  # (q, 1); symbolic lengths too
            j = relax.op.expand_dims(relax.op.arange(0, kv_len, 1, "int64"), 0)  # (1, kv)
            # the query block's position: after the past cache, or at nonpad - q_len per batch
            if nonpad is not None:
                nonpad = bb.normalize(relax.op.astype(nonpad, "int64"))
            if nonpad is not None and past_len == 0:
                offset = relax.op.reshape(bb.normalize(relax.op.subtract(nonpad, relax.const(q_len, "int64"))), [batch, 1, 1])
            else:
                offset = relax.const(past_len, "int64")
            diff = bb.normalize(relax.op.subtract(relax.op.add(i, offset), j))  # (q, kv) or (batch, q, kv)
            per_batch = nonpad is not None and past_len == 0

            def add_rule(bias, allowed):
                rule = relax.op.where(allowed, zero, ninf)
                if per_batch:
                    rule = relax.op.reshape(bb.normalize(rule), [batch, 1, q_len, kv_len])
                return bb.normalize(rule if bias is None else relax.op.add(bias, rule))

            if causal:
                bias = add_rule(bias, relax.op.greater_equal(diff, relax.const(0, "int64")))
            if window:
                allowed = relax.const(np.ones((q_len, kv_len), dtype=bool), "bool")
                if left >= 0:
                    allowed = relax.op.logical_and(allowed, relax.op.less_equal(diff, relax.const(left, "int64")))
                if right >= 0:
                    allowed = relax.op.logical_and(allowed, relax.op.less_equal(relax.op.negative(diff), relax.const(right, "int64")))
                bias = add_rule(bias, allowed)
            if nonpad is not None:
                valid = relax.op.less(j, relax.op.reshape(nonpad, [batch, 1]))  # (batch, kv)
                pad_bias = relax.op.reshape(bb.normalize(relax.op.where(valid, zero, ninf)), [batch, 1, 1, kv_len])
                bias = bb.normalize(pad_bias if bias is None else relax.op.add(bias, pad_bias))
            return bias

    class RMSNormalization(fe.OnnxOpConverter):
        """x / sqrt(mean(x^2 over axis..last) + epsilon) * scale, in float32 when stash_type is 1."""

        @classmethod
        def _impl_v23(cls, bb, inputs, attr, params):
            x, scale = inputs[0], inputs[1]
            dt = dtype_of(x)
            rank = len(dims(x, "RMSNormalization", "input"))  # symbolic sizes are fine: only the axes matter
            axis = int(attr.get("axis", -1))
            axis = axis + rank if axis < 0 else axis
            stash = int(attr.get("stash_type", 1))
            if stash != 1:
                raise UnsupportedOpError(f"RMSNormalization with stash_type {stash} is not supported (only 1, float32).", op_type="RMSNormalization")
            cdt = "float32" if dt != "float64" else dt
            xf = x if dt == cdt else relax.op.astype(x, cdt)
            sf = scale if dtype_of(scale) == cdt else relax.op.astype(scale, cdt)
            xf = bb.normalize(xf)
            ms = relax.op.mean(relax.op.multiply(xf, xf), list(range(axis, rank)), keepdims=True)
            inv = relax.op.rsqrt(relax.op.add(ms, const(float(attr.get("epsilon", 1e-5)), cdt)))
            y = relax.op.multiply(relax.op.multiply(xf, inv), sf)
            return y if dt == cdt else relax.op.astype(y, dt)

    class RotaryEmbedding(fe.OnnxOpConverter):
        """Rotary position embedding, after onnx/reference/ops/op_rotary_embedding.py."""

        @classmethod
        def _impl_v23(cls, bb, inputs, attr, params):
            x, cos, sin = inputs[0], inputs[1], inputs[2]
            positions = present(inputs, 3)
            shape = dims(x, "RotaryEmbedding", "input")  # batch and sequence may be symbolic
            if len(shape) == 3 and not isinstance(shape[2], int):
                raise UnsupportedOpError("RotaryEmbedding on a 3-D input of symbolic hidden size is not supported.", op_type="RotaryEmbedding")
            if len(shape) == 4 and not isinstance(shape[3], int):
                raise UnsupportedOpError("RotaryEmbedding of a symbolic head size is not supported.", op_type="RotaryEmbedding")
            if len(shape) == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
                x = bb.normalize(relax.op.permute_dims(x, [0, 2, 1, 3]))
            elif len(shape) == 3:
                heads = int(attr.get("num_heads", 0))
                if not heads or shape[2] % heads:
                    raise UnsupportedOpError("RotaryEmbedding on a 3-D input needs num_heads dividing its hidden size.", op_type="RotaryEmbedding")
                x = bb.normalize(relax.op.reshape(x, [shape[0], shape[1], heads, shape[2] // heads]))
            else:
                raise UnsupportedOpError(f"RotaryEmbedding on a {len(shape)}-D input is not supported (ONNX allows 3-D and 4-D).",
                                         op_type="RotaryEmbedding")
            b, s, h, d = dims(x, "RotaryEmbedding", "input")
            rot = int(attr.get("rotary_embedding_dim", 0)) or d
            half = rot // 2
            if positions is not None:
                cos, sin = relax.op.take(cos, positions, axis=0), relax.op.take(sin, positions, axis=0)
            cos = bb.normalize(relax.op.expand_dims(cos, 2))  # (batch, seq, 1, rot/2)
            sin = bb.normalize(relax.op.expand_dims(sin, 2))
            if dims(cos, "RotaryEmbedding", "cos cache")[-1] != half:
                raise UnsupportedOpError("RotaryEmbedding whose cos/sin cache does not hold rotary_embedding_dim/2 values is invalid.",
                                         op_type="RotaryEmbedding")
            interleaved = bool(attr.get("interleaved", 0))
            if interleaved:
                x1 = relax.op.strided_slice(x, [3], [0], [rot], [2])
                x2 = relax.op.strided_slice(x, [3], [1], [rot], [2])
            else:
                x1 = relax.op.strided_slice(x, [3], [0], [half])
                x2 = relax.op.strided_slice(x, [3], [half], [rot])
            x1, x2 = bb.normalize(x1), bb.normalize(x2)
            real = relax.op.subtract(relax.op.multiply(cos, x1), relax.op.multiply(sin, x2))
            imag = relax.op.add(relax.op.multiply(sin, x1), relax.op.multiply(cos, x2))
            if interleaved:
                rotated = relax.op.reshape(bb.normalize(relax.op.stack([real, imag], axis=4)), [b, s, h, rot])
            else:
                rotated = relax.op.concat([real, imag], axis=3)
            if rot < d:
                rotated = relax.op.concat([rotated, relax.op.strided_slice(x, [3], [rot], [d])], axis=3)
            rotated = bb.normalize(rotated)
            if len(shape) == 4:
                return relax.op.permute_dims(rotated, [0, 2, 1, 3])
            return relax.op.reshape(rotated, shape)

    return {"Attention": Attention, "RMSNormalization": RMSNormalization, "RotaryEmbedding": RotaryEmbedding}


MODERN_OPS: dict[str, type] = {**_build(), **REDUCE_OPS, **RESIZE_OPS}


def _register() -> None:
    from .registry import register_converter

    for op_type, converter in MODERN_OPS.items():
        register_converter(op_type, converter)


_register()
