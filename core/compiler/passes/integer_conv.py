"""IntegerConv: a QDQ model's quantized convolutions and matmuls computed in integers, as onnxruntime does.

Why: a model quantized in ONNX's QDQ form (DequantizeLinear -> Conv -> QuantizeLinear) computes, as
ONNX writes it, a float32 convolution between its Q/DQ nodes, so it ran exactly as fast as the float
model. onnxruntime fuses such a group into one integer kernel (QLinearConv): uint8 activations times
int8 weights summed in int32, then one requantization. AVX-512 VNNI's `vpdpbusd` does 64 of those
multiply-adds per instruction, four times an fp32 FMA's 16.

What: on an x86 target with AVX-512 VNNI, every binding computing

    Q(Conv(DQ(x), DQ(w)) [+ DQ(bias)])      x uint8 or int8 (one scale and zero point), w a constant
                                            int8 weight with per-channel (or one) scale, zero point 0

becomes one call to a kernel built and scheduled by core.compiler.passes.integer_kernels:

* x is copied into channel blocks of 4 (NCHW4c), its padding filled with x's zero point, so the
  padded taps add nothing once the zero point is taken out (int8 inputs are moved to uint8 by +128);
* `acc[o] = sum x * w` in int32, 16 output channels by 4 input channels per `vpdpbusd`, over a tile
  of up to 14 output columns held in registers;
* `y = saturate(round_half_even(float32(acc + c[o]) * m[o]) + y_zero_point)`, with
  `c[o] = bias[o] - (x_zero_point + shift) * sum(w[o])` (shift 128 for int8 inputs, else 0) and `m[o] = x_scale * w_scale[o] / y_scale` (float32,
  onnxruntime's order) -- onnxruntime's requantization of QLinearConv (MLAS).

A Q(MaxPool(DQ(x))) with one scale and zero point pools the integers (`_integer_max_pool`). ONNX's
QLinearConv / QLinearMatMul, as the import writes them, run on the same kernels (`_match_qlinear`).
Quantized matmuls likewise (`integer_dense_kernel`): Q(MatMul(DQ(a), DQ(W)) [+ DQ(bias)]) with W a
constant int8 (k, n) weight or its transpose (Gemm's transB), a's rows viewed as one matrix.

The result is onnxruntime's fused int8 kernels' arithmetic, not the float arithmetic the ONNX graph
writes (the two differ by a quantization step where a float sum lands near a rounding boundary;
docs/quantization.md). Output channels that fill no whole block of 16 are computed padded with zero
weights and cut off after the kernel. Anything else is left to the float path: another CPU, a
weight zero point, groups or dilation, a bias whose scale is not x_scale * w_scale, a symbolic
shape, sums that could leave int32.
"""
from __future__ import annotations

import logging

__all__ = ["KERNEL_ATTR", "has_vnni", "integer_conv", "integer_conv_kernel", "integer_conv_pass", "integer_dense_kernel", "int8_path",
           "pack_weight"]

from .integer_kernels import DEPTH, LANES, RANGES, has_vnni, integer_conv_kernel, integer_dense_kernel, pack_weight, shift_for
from .relax_rewrite import static_shape

logger = logging.getLogger(__name__)

KERNEL_ATTR = "mlcwb.integer_conv"  # on each kernel built here: the ONNX-level facts it computes


# ---- matching the import's Q/DQ arithmetic (core.compiler.frontend.quantized) ----------------------


def _op(expr) -> str:
    import tvm
    from tvm import relax

    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


class _Function:
    """One Relax function's bindings, for following variables to what computes them."""

    def __init__(self, func):
        from tvm import relax

        self.defs = {}
        if isinstance(func.body, relax.SeqExpr):
            for block in func.body.blocks:
                for b in block.bindings:
                    if isinstance(b, relax.VarBinding):
                        self.defs[b.var] = b.value

    def value(self, expr):
        """What `expr` is bound to (itself when it is no bound variable)."""
        seen = 0
        while expr in self.defs and seen < 64:
            expr, seen = self.defs[expr], seen + 1
        return expr

    def call(self, expr, op: str):
        e = self.value(expr)
        return e if _op(e) == op else None

    def const(self, expr):
        """The numpy value of an expression of constants (astype, reshape, expand_dims, arithmetic), or None."""
        import numpy as np

        from .relax_rewrite import is_const

        e = self.value(expr)
        if is_const(e):
            return e.value.numpy()
        op = _op(e)
        if op == "relax.astype":
            v = self.const(e.args[0])
            return None if v is None else v.astype(str(e.attrs.dtype))
        if op == "relax.reshape":
            v, dims = self.const(e.args[0]), getattr(e.args[1], "values", None)
            return None if v is None or dims is None else v.reshape([int(d) for d in dims])
        if op == "relax.expand_dims":
            v = self.const(e.args[0])
            return None if v is None else np.expand_dims(v, tuple(int(a) for a in e.attrs.axis))
        binary = {"relax.subtract": np.subtract, "relax.multiply": np.multiply, "relax.add": np.add, "relax.divide": np.divide}
        if op in binary:
            a, b = self.const(e.args[0]), self.const(e.args[1])
            return None if a is None or b is None else binary[op](a, b)
        return None

    def dequantized(self, expr):
        """(q, scale, zero point) where `expr` is DequantizeLinear's `float32(int32(q) - zp) * scale`
        with constant scale and zero point (numpy arrays, as broadcast against q), else None."""
        mul = self.call(expr, "relax.multiply")
        if mul is None:
            return None
        scale = self.const(mul.args[1])
        to_float = self.call(mul.args[0], "relax.astype")
        if scale is None or scale.dtype != "float32" or to_float is None or str(to_float.attrs.dtype) != "float32":
            return None
        inner, zp = to_float.args[0], 0
        sub = self.call(inner, "relax.subtract")
        if sub is not None:
            zp = self.const(sub.args[1])
            inner = sub.args[0]
            if zp is None:
                return None
        to_int = self.call(inner, "relax.astype")
        if to_int is None or str(to_int.attrs.dtype) != "int32":
            return None
        return to_int.args[0], scale, zp

    def rounded(self, expr):
        """(x, zero point, dtype) where `expr` is `dtype(clip(round(x) + zp, lo, hi))` with a constant
        scalar zero point (0 when absent) and the type's own bounds, else None."""
        import numpy as np

        cast = self.call(expr, "relax.astype")
        if cast is None or str(cast.attrs.dtype) not in RANGES:
            return None
        out = str(cast.attrs.dtype)
        clip = self.call(cast.args[0], "relax.clip")
        if clip is None or [float(v.value) for v in clip.args[1:3]] != [float(r) for r in RANGES[out]]:
            return None
        inner, zp = clip.args[0], np.zeros((), np.float32)
        add = self.call(inner, "relax.add")
        if add is not None:
            zp = self.const(add.args[1])
            inner = add.args[0]
        rnd = self.call(inner, "relax.round")
        if rnd is None or zp is None or zp.size != 1:
            return None
        return rnd.args[0], zp.reshape(()), out

    def quantized(self, expr):
        """(y, scale, zero point, dtype) where `expr` is QuantizeLinear's
        `dtype(clip(round(y / scale) + zp, lo, hi))` with constant scalar scale and zero point."""
        found = self.rounded(expr)
        div = self.call(found[0], "relax.divide") if found is not None else None
        scale = self.const(div.args[1]) if div is not None else None
        if scale is None or scale.size != 1 or scale.dtype != "float32":
            return None
        return div.args[0], float(scale.reshape(())), found[1], found[2]

    def integer_operand(self, expr):
        """(q, zero point) where `expr` is `int32(q) - zp` (zp a constant) or `int32(q)`, else None."""
        sub = self.call(expr, "relax.subtract")
        zp, inner = (self.const(sub.args[1]), sub.args[0]) if sub is not None else (0, expr)
        cast = self.call(inner, "relax.astype")
        if zp is None or cast is None or str(cast.attrs.dtype) != "int32":
            return None
        return cast.args[0], zp


def _quantized_call(fn: _Function, binding, op: str):
    """(call, bias expression or None, QuantizeLinear's (y, scale, zero point, dtype)) where `binding`
    quantizes `op(...)` or `op(...) + bias`, else None."""
    q = fn.quantized(binding.value)
    if q is None:
        return None
    call, bias = fn.call(q[0], op), None
    if call is None:
        add = fn.call(q[0], "relax.add")
        if add is None:
            return None
        call, bias = fn.call(add.args[0], op), add.args[1]
    return None if call is None else (call, bias, q)


def _match(fn: _Function, binding):
    """The kernel's inputs when `binding` is a quantized conv the kernel computes (module docstring), else None."""
    import numpy as np
    from tvm import relax

    found = _quantized_call(fn, binding, "relax.nn.conv2d")
    if found is None:
        return None
    conv, bias, (y, y_scale, y_zp, y_dtype) = found
    a = conv.attrs
    if (int(a.groups) != 1 or [int(d) for d in a.dilation] != [1, 1] or str(a.data_layout) != "NCHW"
            or str(a.kernel_layout) != "OIHW" or str(a.out_layout) != "NCHW"):
        return None
    dx, dw = fn.dequantized(conv.args[0]), fn.dequantized(conv.args[1])
    if dx is None or dw is None:
        return None
    x, x_scale, x_zp = dx
    x_shape = static_shape(x)
    x_dtype = str(getattr(getattr(x, "ty", None), "dtype", ""))
    weight = fn.const(dw[0])
    if x_shape is None or len(x_shape) != 4 or x_dtype not in RANGES or weight is None or weight.dtype != "int8" or weight.ndim != 4:
        return None
    params = _requantization(fn, weight, dw[1], dw[2], x_scale, x_zp, x_dtype, bias, y_scale)
    if params is None:
        return None
    strides = [int(s) for s in a.strides]
    pads = [int(p) for p in a.padding]
    pads = pads * 2 if len(pads) == 2 else pads
    absorbed = [v.name for v in (y, conv.args[0], conv.args[1], bias) if isinstance(v, relax.Var)]
    return dict(absorbed=absorbed, x=x, x_shape=x_shape, x_dtype=x_dtype, weight=weight, kernel=tuple(weight.shape[2:]), strides=strides,
                pads=pads, x_zp=int(np.asarray(x_zp).reshape(())), y_zp=int(y_zp), y_dtype=y_dtype, **params)


def _match_dense(fn: _Function, binding):
    """The dense kernel's inputs when `binding` is Q(MatMul(DQ(a), DQ(W)) [+ bias]) with W a constant
    (k, n) int8 weight, or its transpose (Gemm's transB), else None."""
    import numpy as np
    from tvm import relax

    found = _quantized_call(fn, binding, "relax.matmul")
    if found is None:
        return None
    mm, bias, (y, y_scale, y_zp, y_dtype) = found
    if str(mm.attrs.out_dtype) not in ("", "None", "float32", "void"):
        return None
    w_expr, transposed = mm.args[1], False
    perm = fn.call(w_expr, "relax.permute_dims")
    if perm is not None and [int(v) for v in perm.attrs.axes] == [1, 0]:
        w_expr, transposed = perm.args[0], True
    da, dw = fn.dequantized(mm.args[0]), fn.dequantized(w_expr)
    if da is None or dw is None:
        return None
    a, a_scale, a_zp = da
    a_shape, a_dtype = static_shape(a), str(getattr(getattr(a, "ty", None), "dtype", ""))
    weight = fn.const(dw[0])
    if a_shape is None or len(a_shape) < 2 or a_dtype not in RANGES or weight is None or weight.dtype != "int8" or weight.ndim != 2:
        return None
    w_scale = np.broadcast_to(np.asarray(dw[1], np.float32), weight.shape)
    w_zp = np.broadcast_to(np.asarray(dw[2]), weight.shape)
    if not transposed:  # (k, n) -> output channels first
        weight, w_scale, w_zp = weight.T, w_scale.T, w_zp.T
    if weight.shape[1] != a_shape[-1]:
        return None
    params = _requantization(fn, np.ascontiguousarray(weight), w_scale, w_zp, a_scale, a_zp, a_dtype, bias, y_scale)
    if params is None:
        return None
    absorbed = [v.name for v in (binding.var, y, mm.args[0], mm.args[1], w_expr, bias) if isinstance(v, relax.Var)]
    return dict(absorbed=absorbed, a=a, a_shape=a_shape, a_dtype=a_dtype, weight=np.ascontiguousarray(weight),
                a_zp=int(np.asarray(a_zp).reshape(())), y_zp=int(y_zp), y_dtype=y_dtype, **params)


def _match_qlinear(fn: _Function, binding):
    """(conv?, the kernel's inputs) where `binding` is what the import makes of ONNX's QLinearConv or
    QLinearMatMul (core.compiler.frontend.quantized: an int32 conv / matmul of the operands less
    their zero points, plus the int32 bias, times x_scale * w_scale / y_scale, rounded), with a
    constant int8 weight of zero point 0; else None."""
    import numpy as np
    from tvm import relax

    found = fn.rounded(binding.value)
    mul = fn.call(found[0], "relax.multiply") if found is not None else None
    to_float = fn.call(mul.args[0], "relax.astype") if mul is not None else None
    mult = fn.const(mul.args[1]) if mul is not None else None
    if to_float is None or str(to_float.attrs.dtype) != "float32" or mult is None or mult.dtype != "float32":
        return None
    acc, bias = to_float.args[0], None
    add = fn.call(acc, "relax.add")
    if add is not None:
        acc, bias = add.args[0], fn.const(add.args[1])
        if bias is None or bias.dtype != "int32":
            return None
    call = fn.call(acc, "relax.nn.conv2d")
    call = call if call is not None else fn.call(acc, "relax.matmul")
    if call is None:
        return None
    conv = _op(call) == "relax.nn.conv2d"
    if conv and (int(call.attrs.groups) != 1 or [int(d) for d in call.attrs.dilation] != [1, 1] or str(call.attrs.data_layout) != "NCHW"):
        return None
    w_expr, transposed = call.args[1], False
    perm = fn.call(w_expr, "relax.permute_dims") if not conv else None
    if perm is not None and [int(v) for v in perm.attrs.axes] == [1, 0]:  # QGemm's transB
        w_expr, transposed = perm.args[0], True
    xo, wo = fn.integer_operand(call.args[0]), fn.integer_operand(w_expr)
    weight = fn.const(wo[0]) if wo is not None else None
    if xo is None or weight is None or weight.dtype != "int8" or np.any(np.asarray(wo[1]) != 0) or np.size(xo[1]) != 1:
        return None
    x, x_zp = xo[0], int(np.asarray(xo[1]).reshape(()))
    x_shape, x_dtype = static_shape(x), str(getattr(getattr(x, "ty", None), "dtype", ""))
    if x_shape is None or x_dtype not in RANGES or weight.ndim != (4 if conv else 2) or len(x_shape) < 2 or (conv and len(x_shape) != 4):
        return None
    if not conv and not transposed:
        weight = np.ascontiguousarray(weight.T)  # (k, n) -> output columns first
    channels = weight.shape[0]
    mult = np.broadcast_to(mult, (1, channels, 1, 1) if conv else (1, channels)).reshape(channels)
    if bias is not None:
        bias = np.broadcast_to(bias, (1, channels, 1, 1) if conv else (1, channels))
    corr = _correction(weight, x_zp, x_dtype, bias)
    if corr is None:
        return None
    names = [v.name for v in (call.args[0], call.args[1], acc) if isinstance(v, relax.Var)]
    m = dict(absorbed=names, weight=weight, y_zp=int(found[1]), y_dtype=found[2], corr=corr,
             mult=np.ascontiguousarray(mult, np.float32))
    if conv:
        pads = [int(p) for p in call.attrs.padding]
        m.update(x=x, x_shape=x_shape, x_dtype=x_dtype, x_zp=x_zp, kernel=tuple(weight.shape[2:]),
                 strides=[int(v) for v in call.attrs.strides], pads=pads * 2 if len(pads) == 2 else pads)
    else:
        m.update(a=x, a_shape=x_shape, a_dtype=x_dtype, a_zp=x_zp)
    return conv, m


def _requantization(fn: _Function, weight, w_scale, w_zp, x_scale, x_zp, x_dtype: str, bias, y_scale: float):
    """The kernel's `c` (int32) and `m` (float32) per output channel (module docstring) for an int8
    `weight` (output channels first) with `w_scale` / `w_zp` as broadcast against it, or None where
    the kernel cannot compute it (a weight zero point, scales that vary along the sums, a bias not
    in the accumulator's scale)."""
    import numpy as np

    out_channels = weight.shape[0]
    w_scale = np.broadcast_to(np.asarray(w_scale, np.float32), weight.shape).reshape(out_channels, -1)
    if np.any(np.asarray(w_zp) != 0) or np.size(x_scale) != 1 or np.size(x_zp) != 1 or np.any(w_scale != w_scale[:, :1]):
        return None
    # onnxruntime's order: (x_scale * w_scale) / y_scale, in float32
    acc_scale = np.float32(np.asarray(x_scale).reshape(())) * w_scale[:, 0]
    ints = None
    if bias is not None:
        b = fn.const(bias)
        if b is None or b.size != out_channels:
            return None
        b = b.reshape(-1).astype(np.float32)
        ints = np.rint(b.astype(np.float64) / acc_scale.astype(np.float64))
        if not np.array_equal((ints * acc_scale.astype(np.float64)).astype(np.float32), b) or np.abs(ints).max(initial=0) >= 2**31:
            return None  # a bias not in the accumulator's scale (not DequantizeLinear(int32, x_scale * w_scale))
    corr = _correction(weight, int(np.asarray(x_zp).reshape(())), x_dtype, ints)
    return None if corr is None else dict(corr=corr, mult=(acc_scale / np.float32(y_scale)).astype(np.float32))


def _correction(weight, x_zp: int, x_dtype: str, bias):
    """The kernel's int32 `c` per output channel: bias - (x_zp + shift) * sum(w) (the kernel reads
    int8 activations as uint8 + 128, their zero point with them); None where the sums or `c` could
    leave int32."""
    import numpy as np

    channels = weight.shape[0]
    if 255 * 128 * (weight.size // channels) >= 2**31:
        return None
    corr = -(x_zp + shift_for(x_dtype)) * weight.reshape(channels, -1).astype(np.int64).sum(axis=1)
    if bias is not None:
        corr = corr + np.asarray(bias).reshape(channels).astype(np.int64)
    return None if np.abs(corr).max(initial=0) >= 2**31 else corr.astype(np.int32)


def _integer_max_pool(fn: _Function, b):
    """The bindings of max_pool2d of the integers where `b` is Q(MaxPool(DQ(x))) with the same scale and zero point
    on both sides (the quantizer writes them so): exactly the float path's result, since both
    steps are monotone and Q(DQ(k)) = k; the padding's smallest integer is never larger than a
    real value of the window. None otherwise."""
    import numpy as np
    from tvm import relax

    q = fn.quantized(b.value)
    pool = fn.call(q[0], "relax.nn.max_pool2d") if q is not None else None
    dq = fn.dequantized(pool.args[0]) if pool is not None else None
    if dq is None:
        return None
    x, x_scale, x_zp = dq
    _, y_scale, y_zp, y_dtype = q
    if (str(getattr(getattr(x, "ty", None), "dtype", "")) != y_dtype or np.size(x_scale) != 1 or np.size(x_zp) != 1
            or np.float32(np.asarray(x_scale).reshape(())) != np.float32(y_scale) or int(np.asarray(x_zp).reshape(())) != int(y_zp)):
        return None
    a = pool.attrs
    pooled = relax.op.nn.max_pool2d(x, a.pool_size, a.strides, a.padding, a.dilation, bool(a.ceil_mode), bool(a.count_include_pad),
                                    str(a.layout), str(a.out_layout))
    if not isinstance(q[0], relax.Var):
        return [relax.VarBinding(b.var, pooled)]
    # computed under the MaxPool's own name (its kernel's time lands on the MaxPool), the Q's name its alias
    named = (relax.DataflowVar if isinstance(b.var, relax.DataflowVar) else relax.Var)(q[0].name, b.var.ty)
    return [relax.VarBinding(named, pooled), relax.VarBinding(b.var, named)]


def _rewrite(bb, fn: _Function, b):
    """The bindings computing `b` with an integer kernel (added to `bb`), or None when it is no
    quantized conv, matmul or max pool the kernels compute."""
    import numpy as np
    from tvm import relax

    from .relax_rewrite import array_const

    pooled = _integer_max_pool(fn, b)
    if pooled is not None:
        return pooled
    m = _match(fn, b)
    conv = m is not None
    m = m if conv else _match_dense(fn, b)
    if m is None:
        qlinear = _match_qlinear(fn, b)
        if qlinear is None:
            return None
        conv, m = qlinear
    channels = m["weight"].shape[0]
    padded = -(-channels // LANES) * LANES
    if padded != channels:  # whole lane blocks: zero weights, the extra outputs cut off after the kernel
        m["weight"] = np.concatenate([m["weight"], np.zeros((padded - channels, *m["weight"].shape[1:]), np.int8)])
        m["corr"], m["mult"] = np.pad(m["corr"], (0, padded - channels)), np.pad(m["mult"], (0, padded - channels))
    shape = [int(d) for d in b.var.ty.shape]
    if conv:
        prim = integer_conv_kernel(m["x_shape"], m["x_dtype"], padded, m["kernel"], m["strides"], m["pads"], m["x_zp"],
                                   m["y_zp"], m["y_dtype"])
        facts = {"op": "conv", "x_zero_point": m["x_zp"], "y_zero_point": m["y_zp"], "kernel": list(m["kernel"]),
                 "strides": m["strides"], "pads": m["pads"]}
        inputs, weight, kernel_shape = m["x"], pack_weight(m["weight"]), [shape[0], padded, *shape[2:]]
    else:
        rows, depth = int(np.prod(m["a_shape"][:-1])), m["a_shape"][-1]
        prim = integer_dense_kernel(rows, depth, m["a_dtype"], padded, m["a_zp"], m["y_zp"], m["y_dtype"])
        facts = {"op": "matmul", "a_zero_point": m["a_zp"], "y_zero_point": m["y_zp"]}
        inputs = m["a"] if len(m["a_shape"]) == 2 else relax.op.reshape(m["a"], [rows, depth])
        weight, kernel_shape = pack_weight(m["weight"][:, :, None, None]).reshape(padded // LANES, -1, LANES, DEPTH), [rows, padded]
    # lineage (core.compiler.pipeline.lineage) adds the nodes of the bindings the kernel took in
    # (b's own name too: the call is bound to a new variable when its result is sliced or reshaped)
    prim = prim.with_attr(KERNEL_ATTR, str(facts)).with_attr("mlcwb.absorbs", [b.var.name, *m["absorbed"]])
    kernel = bb.add_func(prim, f"integer_{facts['op']}_{b.var.name}")
    out = []
    new_var = relax.DataflowVar if isinstance(b.var, relax.DataflowVar) else relax.Var

    def bind(value, dims, dtype, name=None):  # a new variable, or b's own for the last step (name None)
        var = b.var if name is None else new_var(f"{b.var.name}_{name}", relax.TensorType(dims, dtype))
        out.append(relax.VarBinding(var, value))
        return var

    if not isinstance(inputs, relax.Var):  # a's rows as one matrix: a view
        inputs = bind(inputs, [rows, depth], m["a_dtype"], "rows")
    args = relax.Tuple([inputs, array_const(weight), array_const(m["corr"]), array_const(m["mult"])])
    sliced = [*kernel_shape[:1], channels, *kernel_shape[2:]]
    steps = [(lambda v: relax.op.call_tir(kernel, args, relax.TensorType(kernel_shape, m["y_dtype"])), kernel_shape, "int8")]
    if padded != channels:  # the padded channels cut off
        steps.append((lambda v: relax.op.strided_slice(v, axes=[1], begin=[0], end=[channels]), sliced, "sliced"))
    if sliced != shape:  # a matmul's rows back in the activation's shape
        steps.append((lambda v: relax.op.reshape(v, shape), shape, "out"))
    value = None
    for k, (make, dims, name) in enumerate(steps):
        value = bind(make(value), dims, m["y_dtype"], name if k < len(steps) - 1 else None)
    return out


def integer_conv(mod, target):
    """`mod` with every quantized conv of its Relax functions computed by an integer kernel (module
    docstring); `mod` itself when the target lacks VNNI or nothing matches."""
    from tvm import relax

    if not has_vnni(target):
        return mod
    bb = relax.BlockBuilder(mod)
    updates = {}
    count = 0
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        fn = _Function(func)
        blocks, changed = [], False
        for block in func.body.blocks:
            bindings = []
            for b in block.bindings:
                new = _rewrite(bb, fn, b) if isinstance(b, relax.VarBinding) else None
                bindings.extend(new or [b])
                changed = changed or new is not None
                count += new is not None
            blocks.append(relax.DataflowBlock(bindings, block.span) if isinstance(block, relax.DataflowBlock)
                          else relax.BindingBlock(bindings, block.span))
        if changed:
            body = relax.SeqExpr(blocks, func.body.body, func.body.span)
            updates[gv] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    if not updates:
        return mod
    out = bb.get().clone()
    for gv, func in updates.items():
        out[gv] = relax.analysis.remove_all_unused(func)
    logger.info("IntegerConv: %d quantized convs, matmuls and max pools computed in integers", count)
    return out


def integer_conv_pass(target):
    """IntegerConv as a tvm module pass for `target` (the pipeline's factory)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="IntegerConv")
    def _pass(mod, _ctx):
        return integer_conv(mod, target)

    return _pass


def int8_path(kernel_names, op_types) -> str:
    """Which path a compiled model's quantized ops took, for compile's summary line: "20 quantized
    convs and 1 matmul on int8 kernels (AVX-512 VNNI)", or for a model with Q/DQ nodes and none,
    that they compute in float; "" for a model without quantized ops. `kernel_names`: the
    artifact's kernels; `op_types`: the model's ONNX op types."""
    names = list(kernel_names)
    convs = sum(n.startswith("integer_conv_") for n in names)
    matmuls = sum(n.startswith("integer_matmul_") for n in names)
    if convs or matmuls:
        parts = [f"{n} quantized {what}{'s' if n != 1 else ''}" for n, what in ((convs, "conv"), (matmuls, "matmul")) if n]
        return f"{' and '.join(parts)} on int8 kernels (AVX-512 VNNI)"
    if "DequantizeLinear" in set(op_types):
        return ("quantized ops in float between their Q/DQ nodes (int8 kernels need AVX-512 VNNI, and convs or "
                "matmuls with constant symmetric int8 weights: docs/quantization.md)")
    return ""
