"""The workbench's converters for ONNX's quantized ops: QuantizeLinear / DequantizeLinear exactly as ONNX
defines them, the integer ops TVM 0.27's ONNX frontend cannot import (QLinearConv, QLinearMatMul,
ConvInteger), and onnxruntime's QLinearAdd, QLinearGlobalAveragePool and QGemm.

Importing this module registers them with `core.compiler.frontend.registry.register_converter`
(onnx_import loads it through CONVERTER_MODULES). Every converter emits plain Relax arithmetic, so the
lowering view shows what is computed and the checks of docs/quantization.md hold:

* QuantizeLinear: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``, the division in
  float32 (float16 / bfloat16 inputs are widened first), per tensor, per axis (``axis``, negative
  counts from the end) or per block (``block_size``, opset 21); int8, uint8, int16, uint16 outputs.
* DequantizeLinear: ``y = float32(int32(x) - int32(x_zero_point)) * x_scale`` (int8, uint8, int16,
  uint16, int32 inputs), cast to the scale's type (or ``output_dtype``); same granularities.
* QLinearConv / QLinearMatMul: an int32 convolution / matmul of the inputs less their zero points
  (plus the int32 bias), requantized as onnxruntime does: ``float32(acc) * (x_scale * w_scale /
  y_scale)`` (onnxruntime's order of the float products), rounded half to even, plus y_zero_point, saturated.
* ConvInteger: the int32 convolution alone.
* DynamicQuantizeLinear: TVM's arithmetic, except that an input whose range is one value (all
  zeros) gets scale 1 and zero point 0 as in onnxruntime; TVM divided by a zero scale.
* onnxruntime's QOperator ops (com.microsoft): QLinearAdd, QLinearGlobalAveragePool and QGemm, in
  the order MLAS computes them (docs/quantization.md).

TVM's own QuantizeLinear / DequantizeLinear (relax.quantize / relax.dequantize) compute the same
values for the cases they take (round via nearbyint, x / scale); they refuse block_size, and the
integer ops above are missing from its map. Float8 / 4-bit types are refused before any converter
runs (TVM cannot store or convert them as ONNX does). MatMulInteger is TVM's (checked exact against
onnxruntime in tests/core/compiler/frontend/test_quantized.py).
"""
from __future__ import annotations

import logging

__all__ = ["QUANTIZED_CONVERTERS", "INTEGER_RANGES"]

logger = logging.getLogger(__name__)

# the integer types a QuantizeLinear may write here, with their saturation bounds
INTEGER_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535)}
_DEQUANTIZABLE = (*INTEGER_RANGES, "int32")
_FLOATS = ("float32", "float16", "bfloat16")
# ONNX TensorProto element types of QuantizeLinear's / DequantizeLinear's output_dtype attribute
_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 10: "float16", 16: "bfloat16"}


def _build() -> dict[str, type]:
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from ...errors import UnsupportedOpError

    def node_name(attr) -> str:
        return str(attr.get("tvm_custom", {}).get("name", "") or "")

    def refuse(op: str, attr, what: str):
        name = node_name(attr)
        return UnsupportedOpError(f"{op} node '{name}' {what}.", op_type=op, node_name=name)

    def dtype(expr) -> str:
        return str(getattr(getattr(expr, "ty", None), "dtype", "") or "")

    def shape(expr) -> list[int] | None:
        """The static shape of `expr`, None when a dim is symbolic or unknown."""
        ty = getattr(expr, "ty", None)
        dims = getattr(ty, "shape", None)
        if dims is None:
            return None
        try:
            return [int(d) for d in dims]
        except (TypeError, ValueError):
            return None

    def is_scalar(expr) -> bool:
        """One element (shape [] or [1, ...]); False when the shape is unknown."""
        dims = shape(expr)
        return dims is not None and all(d == 1 for d in dims)

    def ndim(expr) -> int:
        return int(getattr(expr.ty, "ndim", -1))

    def as_f32(expr):
        return expr if dtype(expr) == "float32" else relax.op.astype(expr, "float32")

    def param_for(bb, op, attr, param, x, axis: int, block: int, cast: str):
        """`param` (a scale or zero point) as `cast`, shaped to broadcast against `x`: per tensor as
        it is, per axis as [..., n, ...] at `axis`, per block repeated `block` times along `axis`."""
        pshape = shape(param)
        param = param if dtype(param) == cast else relax.op.astype(param, cast)
        if pshape is None:
            raise refuse(op, attr, "has a scale or zero point of unknown shape, which the workbench cannot broadcast")
        if block:
            xs = shape(x)
            if xs is None or len(pshape) != len(xs):
                raise refuse(op, attr, "uses block_size with a scale whose rank differs from the input's (or an input of unknown shape)")
            if -(-xs[axis] // block) != pshape[axis] or any(p != d for i, (p, d) in enumerate(zip(pshape, xs)) if i != axis):
                raise refuse(op, attr, f"has a scale of shape {pshape} that does not fit block_size {block} on input shape {xs}")
            full = relax.op.repeat(bb.normalize(param), block, axis=axis)
            if pshape[axis] * block != xs[axis]:
                full = relax.op.strided_slice(full, axes=[axis], begin=[0], end=[xs[axis]])
            return full
        size = 1
        for d in pshape:
            size *= d
        if size == 1:
            return reshape(bb, param, []) if pshape else param
        if len(pshape) != 1:
            raise refuse(op, attr, f"has a scale of shape {pshape}: only a scalar, a 1-D per-axis or a blocked scale is defined")
        xs = shape(x)
        if xs is not None and xs[axis] != pshape[0]:
            raise refuse(op, attr, f"has {pshape[0]} scales for axis {axis} of length {xs[axis]}")
        target = [1] * ndim(x)
        target[axis] = pshape[0]
        return reshape(bb, param, target)

    def axis_of(op, attr, x) -> int:
        n = ndim(x)
        axis = int(attr.get("axis", 1))
        if n <= 1 and axis == 1:  # a 1-D tensor's default axis (ONNX: ignored for per-tensor scales)
            axis = 0
        if n >= 0 and not -n <= axis < max(n, 1):
            raise refuse(op, attr, f"has axis {axis} outside the input's {n} dimensions")
        return axis + n if axis < 0 else axis

    def reshape(bb, expr, new_shape):
        return relax.op.reshape(bb.normalize(expr), new_shape)

    def saturate_round(value, zero_point, out: str):
        lo, hi = INTEGER_RANGES[out]
        y = relax.op.round(value)
        if zero_point is not None:
            y = relax.op.add(y, zero_point)
        return relax.op.astype(relax.op.clip(y, lo, hi), out)

    class QuantizeLinear(fe.OnnxOpConverter):
        """ONNX QuantizeLinear (module docstring): round half to even, saturated, in float32."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            x, scale = inputs[0], inputs[1]
            zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            if attr.get("precision", 0):
                raise refuse("QuantizeLinear", attr, "sets the precision attribute, which the workbench does not implement")
            if attr.get("saturate", 1) != 1:
                raise refuse("QuantizeLinear", attr, "sets saturate=0, which only float8 outputs define")
            given = int(attr.get("output_dtype", 0))
            out = _ONNX_TYPES.get(given, f"ONNX type {given}") if given else (dtype(zp) if zp is not None else "uint8")
            if out not in INTEGER_RANGES:
                raise refuse("QuantizeLinear", attr, f"writes {out}; the workbench quantizes to int8, uint8, int16 and uint16 only")
            if zp is not None and dtype(zp) != out:
                raise refuse("QuantizeLinear", attr, f"has output_dtype {out} but a {dtype(zp)} zero point")
            if dtype(x) not in _FLOATS:
                raise refuse("QuantizeLinear", attr, f"quantizes a {dtype(x)} input; ONNX defines float inputs")
            axis, block = axis_of("QuantizeLinear", attr, x), int(attr.get("block_size", 0))
            s = param_for(bb, "QuantizeLinear", attr, scale, x, axis, block, "float32")
            z = None if zp is None else param_for(bb, "QuantizeLinear", attr, zp, x, axis, block, "float32")
            return saturate_round(relax.op.divide(as_f32(x), s), z, out)

    class DequantizeLinear(fe.OnnxOpConverter):
        """ONNX DequantizeLinear (module docstring): (x - zero_point) in int32, times the scale in float32."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            x, scale = inputs[0], inputs[1]
            zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
            if dtype(x) not in _DEQUANTIZABLE:
                raise refuse("DequantizeLinear", attr, f"dequantizes a {dtype(x)} input; the workbench takes int8, uint8, int16, uint16 and int32")
            if zp is not None and dtype(zp) != dtype(x):
                raise refuse("DequantizeLinear", attr, f"has a {dtype(zp)} zero point for a {dtype(x)} input")
            given = int(attr.get("output_dtype", 0))
            out = _ONNX_TYPES.get(given, f"ONNX type {given}") if given else (dtype(scale) or "float32")
            if out not in _FLOATS:
                raise refuse("DequantizeLinear", attr, f"writes {out}; the workbench dequantizes to float32, float16 and bfloat16")
            axis, block = axis_of("DequantizeLinear", attr, x), int(attr.get("block_size", 0))
            v = relax.op.astype(x, "int32")
            if zp is not None:
                v = relax.op.subtract(v, param_for(bb, "DequantizeLinear", attr, zp, x, axis, block, "int32"))
            y = relax.op.multiply(relax.op.astype(v, "float32"), param_for(bb, "DequantizeLinear", attr, scale, x, axis, block, "float32"))
            return y if out == "float32" else relax.op.astype(y, out)

    def less_zero_point(bb, op, attr, q, zp, axis: int | None):
        """int32(q) - int32(zp): zp a scalar, or per `axis` of q (None: must be a scalar)."""
        v = relax.op.astype(q, "int32")
        if zp is None:
            return v
        zs = shape(zp)
        z = relax.op.astype(zp, "int32")
        if is_scalar(zp):
            return relax.op.subtract(v, reshape(bb, z, []) if zs else z)
        if axis is None or zs is None or len(zs) != 1:
            raise refuse(op, attr, f"has a zero point of shape {zs}; ONNX defines a scalar one here")
        target = [1] * ndim(q)
        target[axis] = zs[0]
        return relax.op.subtract(v, reshape(bb, z, target))

    def multiplier(bb, op, attr, x_scale, w_scale, y_scale, w_shape_target):
        """x_scale * w_scale / y_scale in float32, in onnxruntime's order; w_scale per channel shaped by w_shape_target."""
        ws = shape(w_scale)
        w = as_f32(w_scale)
        if ws and any(d != 1 for d in ws):
            if len(ws) != 1:
                raise refuse(op, attr, f"has a weight scale of shape {ws}; ONNX defines a scalar or a 1-D one")
            w = reshape(bb, w, w_shape_target(ws[0]))
        elif ws:
            w = reshape(bb, w, [])
        for s, name in ((x_scale, "input"), (y_scale, "output")):
            if not is_scalar(s):
                raise refuse(op, attr, f"has a non-scalar {name} scale; ONNX defines a scalar one")
        xs = reshape(bb, as_f32(x_scale), []) if shape(x_scale) else as_f32(x_scale)
        ys = reshape(bb, as_f32(y_scale), []) if shape(y_scale) else as_f32(y_scale)
        return relax.op.divide(relax.op.multiply(xs, w), ys)

    def int_conv(bb, op, inputs, attr, params, x, w):
        """The int32 convolution of x and w (zero points subtracted), with TVM's Conv for pads and auto_pad."""
        x, w = bb.normalize(x), bb.normalize(w)
        if ndim(x) not in (3, 4, 5):
            raise refuse(op, attr, f"convolves a {ndim(x)}-D input; the workbench takes 1-D to 3-D convolutions")
        conv_attr = {k: v for k, v in attr.items() if k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")}
        return fe.Conv._impl_v11(bb, fe.onnx_input([x, w, None]), conv_attr, params)

    def out_type(op, attr, zp, fallback) -> str:
        out = dtype(zp) if zp is not None else dtype(fallback)
        if out not in ("int8", "uint8"):
            raise refuse(op, attr, f"writes {out}; ONNX defines int8 and uint8")
        return out

    class QLinearConv(fe.OnnxOpConverter):
        """int32 Conv of (x - x_zp) and (w - w_zp) + B, requantized (module docstring)."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = (inputs[i] for i in range(8))
            bias = inputs[8] if len(inputs) > 8 else None
            out = out_type("QLinearConv", attr, y_zp, x)
            n = ndim(x)
            acc = int_conv(bb, "QLinearConv", inputs, attr, params, less_zero_point(bb, "QLinearConv", attr, x, x_zp, None),
                           less_zero_point(bb, "QLinearConv", attr, w, w_zp, 0))
            if bias is not None:
                acc = relax.op.add(acc, reshape(bb, relax.op.astype(bias, "int32"), [1, -1] + [1] * (n - 2)))
            m = multiplier(bb, "QLinearConv", attr, x_scale, w_scale, y_scale, lambda c: [1, c] + [1] * (n - 2))
            z = None if y_zp is None else relax.op.astype(reshape(bb, y_zp, []) if shape(y_zp) else y_zp, "float32")
            return saturate_round(relax.op.multiply(relax.op.astype(acc, "float32"), m), z, out)

    class ConvInteger(fe.OnnxOpConverter):
        """int32 Conv of (x - x_zp) and (w - w_zp)."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            x, w = inputs[0], inputs[1]
            x_zp = inputs[2] if len(inputs) > 2 else None
            w_zp = inputs[3] if len(inputs) > 3 else None
            return int_conv(bb, "ConvInteger", inputs, attr, params, less_zero_point(bb, "ConvInteger", attr, x, x_zp, None),
                            less_zero_point(bb, "ConvInteger", attr, w, w_zp, 0))

    class QLinearMatMul(fe.OnnxOpConverter):
        """int32 MatMul of (a - a_zp) and (b - b_zp), requantized (module docstring)."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = (inputs[i] for i in range(8))
            out = out_type("QLinearMatMul", attr, y_zp, a)
            if ndim(a) < 2 or ndim(b) < 2:
                raise refuse("QLinearMatMul", attr, "multiplies a 1-D operand, which the workbench does not take")
            for s, what in ((a_scale, "a"), (a_zp, "a"), (y_scale, "y"), (y_zp, "y")):
                if s is not None and not is_scalar(s):
                    raise refuse("QLinearMatMul", attr, f"has a per-row scale or zero point for {what}, which the workbench does not take")
            acc = relax.op.matmul(less_zero_point(bb, "QLinearMatMul", attr, a, a_zp, None),
                                  less_zero_point(bb, "QLinearMatMul", attr, b, b_zp, ndim(b) - 1), out_dtype="int32")
            m = multiplier(bb, "QLinearMatMul", attr, a_scale, b_scale, y_scale, lambda c: [c])
            z = None if y_zp is None else relax.op.astype(reshape(bb, y_zp, []) if shape(y_zp) else y_zp, "float32")
            return saturate_round(relax.op.multiply(relax.op.astype(acc, "float32"), m), z, out)

    class DynamicQuantizeLinear(fe.OnnxOpConverter):
        """uint8 quantization with the scale and zero point of x's range widened to include 0; a range
        of one value (all zeros) gets scale 1 as in onnxruntime (TVM divided by a zero scale)."""

        @classmethod
        def _impl_v11(cls, bb, inputs, attr, params):
            x = inputs[0]
            if dtype(x) != "float32":
                raise refuse("DynamicQuantizeLinear", attr, f"quantizes a {dtype(x)} input; ONNX defines float32")
            zero = relax.const(0.0, "float32")
            hi = bb.normalize(relax.op.maximum(relax.op.max(x), zero))
            lo = bb.normalize(relax.op.minimum(relax.op.min(x), zero))
            span = relax.op.divide(relax.op.subtract(hi, lo), relax.const(255.0, "float32"))
            scale = bb.normalize(relax.op.where(relax.op.equal(hi, lo), relax.const(1.0, "float32"), span))
            zp = bb.normalize(saturate_round(relax.op.clip(relax.op.subtract(zero, relax.op.divide(lo, scale)), 0, 255), None, "uint8"))
            y = saturate_round(relax.op.divide(x, scale), relax.op.astype(zp, "float32"), "uint8")
            return relax.Tuple([y, scale, zp])

    def scalar_f32(bb, expr):
        return reshape(bb, as_f32(expr), []) if shape(expr) else as_f32(expr)

    def scalar_zp(bb, op, attr, zp, what):
        if zp is None:
            return relax.const(0.0, "float32")
        if not is_scalar(zp):
            raise refuse(op, attr, f"has a non-scalar {what} zero point; onnxruntime defines a scalar one")
        return scalar_f32(bb, zp)

    class QLinearAdd(fe.OnnxOpConverter):
        """com.microsoft QLinearAdd: C = quantize(A_scale * (A - A_zp) + B_scale * (B - B_zp)), as
        onnxruntime's MLAS computes it: A * (A_scale / C_scale) + B * (B_scale / C_scale) + (C_zp -
        A_zp * A_scale / C_scale - B_zp * B_scale / C_scale), rounded half to even, saturated."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            a, a_s, a_z, b, b_s, b_z, c_s = (inputs[i] for i in range(7))
            c_z = inputs[7] if len(inputs) > 7 else None
            out = out_type("QLinearAdd", attr, c_z, a)
            for sc, what in ((a_s, "A"), (b_s, "B"), (c_s, "C")):
                if not is_scalar(sc):
                    raise refuse("QLinearAdd", attr, f"has a non-scalar {what} scale; onnxruntime defines a scalar one")
            c_scale = bb.normalize(scalar_f32(bb, c_s))
            ra = bb.normalize(relax.op.divide(scalar_f32(bb, a_s), c_scale))
            rb = bb.normalize(relax.op.divide(scalar_f32(bb, b_s), c_scale))
            shift = relax.op.subtract(relax.op.subtract(scalar_zp(bb, "QLinearAdd", attr, c_z, "C"),
                                                        relax.op.multiply(ra, scalar_zp(bb, "QLinearAdd", attr, a_z, "A"))),
                                      relax.op.multiply(rb, scalar_zp(bb, "QLinearAdd", attr, b_z, "B")))
            value = relax.op.add(relax.op.add(relax.op.multiply(relax.op.astype(a, "float32"), ra),
                                              relax.op.multiply(relax.op.astype(b, "float32"), rb)), shift)
            return saturate_round(value, None, out)

    class QLinearGlobalAveragePool(fe.OnnxOpConverter):
        """com.microsoft QLinearGlobalAveragePool (NCHW): the int32 sum of each channel less N * x_zp,
        times x_scale / (y_scale * N), rounded half to even, plus y_zp, saturated (MLAS's order)."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            x, x_s, x_z, y_s = (inputs[i] for i in range(4))
            y_z = inputs[4] if len(inputs) > 4 else None
            out = out_type("QLinearGlobalAveragePool", attr, y_z, x)
            if int(attr.get("channels_last", 0)):
                raise refuse("QLinearGlobalAveragePool", attr, "pools channels-last data, which the workbench does not take")
            dims = shape(x)
            if dims is None or len(dims) < 3:
                raise refuse("QLinearGlobalAveragePool", attr, "pools an input of unknown or fewer than 3 dimensions")
            count = 1
            for d in dims[2:]:
                count *= d
            axes = list(range(2, len(dims)))
            total = relax.op.sum(relax.op.astype(x, "int32"), axis=axes, keepdims=True)
            if x_z is not None:  # N * x_zp in int32 (in float32 it is inexact past 2^24)
                if not is_scalar(x_z):
                    raise refuse("QLinearGlobalAveragePool", attr, "has a non-scalar input zero point; onnxruntime defines a scalar one")
                zp = relax.op.astype(reshape(bb, x_z, []) if shape(x_z) else x_z, "int32")
                total = relax.op.subtract(total, relax.op.multiply(zp, relax.const(count, "int32")))
            scale = relax.op.divide(scalar_f32(bb, x_s), relax.op.multiply(scalar_f32(bb, y_s), relax.const(float(count), "float32")))
            z = None if y_z is None else scalar_zp(bb, "QLinearGlobalAveragePool", attr, y_z, "output")
            return saturate_round(relax.op.multiply(relax.op.astype(total, "float32"), scale), z, out)

    class QGemm(fe.OnnxOpConverter):
        """com.microsoft QGemm with a quantized output (y_scale given), alpha 1 and A not transposed:
        QLinearMatMul's arithmetic with B optionally transposed and the int32 bias C added."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            a, a_s, a_z, b, b_s, b_z = (inputs[i] for i in range(6))
            bias = inputs[6] if len(inputs) > 6 else None
            y_s = inputs[7] if len(inputs) > 7 else None
            y_z = inputs[8] if len(inputs) > 8 else None
            if y_s is None:
                raise refuse("QGemm", attr, "has a float output (no y_scale), which the workbench does not take")
            if float(attr.get("alpha", 1.0)) != 1.0 or int(attr.get("transA", 0)):
                raise refuse("QGemm", attr, "sets alpha or transA, which the workbench does not take")
            out = out_type("QGemm", attr, y_z, a)
            trans_b = bool(int(attr.get("transB", 0)))
            # B's zero point runs along its output columns: axis 0 of a transposed B, else axis 1
            b_int = less_zero_point(bb, "QGemm", attr, b, b_z, 0 if trans_b else 1)
            if trans_b:
                b_int = relax.op.permute_dims(bb.normalize(b_int), [1, 0])
            acc = relax.op.matmul(less_zero_point(bb, "QGemm", attr, a, a_z, None), b_int, out_dtype="int32")
            if bias is not None:
                acc = relax.op.add(acc, relax.op.astype(bias, "int32"))
            m = multiplier(bb, "QGemm", attr, a_s, b_s, y_s, lambda c: [c])
            z = None if y_z is None else scalar_f32(bb, y_z)
            return saturate_round(relax.op.multiply(relax.op.astype(acc, "float32"), m), z, out)

    return {"QuantizeLinear": QuantizeLinear, "DynamicQuantizeLinear": DynamicQuantizeLinear, "DequantizeLinear": DequantizeLinear, "QLinearConv": QLinearConv,
            "ConvInteger": ConvInteger, "QLinearMatMul": QLinearMatMul, "QLinearAdd": QLinearAdd,
            "QLinearGlobalAveragePool": QLinearGlobalAveragePool, "QGemm": QGemm}


QUANTIZED_CONVERTERS: dict[str, type] = _build()


def _register() -> None:
    from .registry import register_converter

    for op_type, converter in QUANTIZED_CONVERTERS.items():
        register_converter(op_type, converter)


_register()
