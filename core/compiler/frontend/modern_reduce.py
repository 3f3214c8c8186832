"""Reduce* ops whose axes come at run time (an input, as opset 13's ReduceSum and opset 18's others
take them): TVM's converters take constant axes only.

Which axes are reduced is known only when the model runs, so the reduction is built per axis: for
every axis d, `where(d is reduced, reduce(y, d) broadcast back, y)`; the result keeps the input's
shape, with the reduced value repeated along the reduced axes. A slice to the output's run-time
shape (1 on a reduced axis, else the input's size), then for keepdims=0 a reshape that drops the
reduced axes, gives the ONNX result; its dims are fresh symbolic sizes. An axes tensor of unknown
length may turn out empty at run time: then all axes are reduced (or none, with
noop_with_empty_axes). Inputs with a zero-size dimension are refused: TVM's frontend reads ONNX's
0 as an unknown size, so the empty set's identity (0, 1, -inf, ...) could not be told apart.

Axes given as a constant, or as an empty tensor (all axes, or none with noop_with_empty_axes),
stay with the converter they had (TVM's, or core.compiler.frontend.converters' fix).
"""
from __future__ import annotations

import logging

__all__ = ["REDUCE_OPS"]

logger = logging.getLogger(__name__)

# op -> (prepare the values, reduce per axis, finish the result)
_KINDS = {
    "ReduceSum": (None, "sum", None),
    "ReduceMean": (None, "mean", None),
    "ReduceMax": (None, "max", None),
    "ReduceMin": (None, "min", None),
    "ReduceProd": (None, "prod", None),
    "ReduceSumSquare": ("square", "sum", None),
    "ReduceL1": ("abs", "sum", None),
    "ReduceL2": ("square", "sum", "sqrt"),
    "ReduceLogSum": (None, "sum", "log"),
    "ReduceLogSumExp": ("exp", "sum", "log"),
}


def _build() -> dict[str, type]:
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from ...errors import UnsupportedOpError
    from .converters import fixes

    def dtype_of(expr) -> str:
        return str(getattr(getattr(expr, "ty", None), "dtype", "") or "")

    def shape_of(expr):
        shape = getattr(getattr(expr, "ty", None), "shape", None)
        try:
            return [int(d) for d in shape]
        except (TypeError, ValueError):
            return None

    def reduce_runtime_axes(op: str) -> type:
        prepare, kind, finish = _KINDS[op]
        base = fixes().get(op) or getattr(fe, op)

        class ReduceRuntimeAxes(base):
            @classmethod
            def get_converter(cls, opset):
                previous = base.get_converter(opset)

                def convert(bb, inputs, attr, params):
                    axes = inputs[1] if len(inputs) > 1 else None
                    if axes is None or isinstance(fe.get_constant(axes, params), tvm.ir.GenericConst):
                        return previous(bb, inputs, attr, params)
                    x = inputs[0]
                    n = shape_of(axes)
                    if n == [0]:  # no axes: all of them, or none with noop_with_empty_axes
                        return x if attr.get("noop_with_empty_axes", 0) else previous(bb, fe.onnx_input([x]), attr, params)
                    shape = shape_of(x)
                    keepdims = bool(attr.get("keepdims", 1))
                    length = list(getattr(axes.ty, "shape", None) or [])
                    if shape is None or len(length) != 1 or 0 in shape:
                        # TVM's frontend reads a 0 in an ONNX shape as an unknown size: an empty set cannot be told apart
                        raise UnsupportedOpError(f"{op} with axes given at run time needs an input of fixed, non-zero sizes.", op_type=op)
                    if n is None and not keepdims:
                        raise UnsupportedOpError(f"{op} with keepdims=0 and an axes input of unknown length is not supported.", op_type=op)
                    noop = bool(attr.get("noop_with_empty_axes", 0))
                    return _dynamic(bb, x, axes, shape, n[0] if n else length[0], keepdims, None if n else noop)

                return convert

        def _dynamic(bb, x, axes, shape, count, keepdims, noop_if_empty):
            """`noop_if_empty` (None when the axes' length is known): an axes tensor that turns out
            empty at run time reduces all axes (False) or none (True)."""
            rank = len(shape)
            dt = dtype_of(x)
            axes = bb.normalize(relax.op.astype(axes, "int64"))
            axes = relax.op.where(relax.op.less(axes, relax.const(0, "int64")), relax.op.add(axes, relax.const(rank, "int64")), axes)
            dims = relax.const(np.arange(rank, dtype="int64").reshape(rank, 1), "int64")
            hits = relax.op.astype(relax.op.equal(dims, relax.op.reshape(bb.normalize(axes), [1, count])), "int64")
            flags = bb.normalize(relax.op.greater(relax.op.sum(hits, axis=1), relax.const(0, "int64")))  # (rank,) bool
            if noop_if_empty is not None:
                # the length itself (a reduction over zero elements is not relied on)
                given = relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr([count])), [])
                empty = relax.op.equal(given, relax.const(0, "int64"))
                flags = bb.normalize(relax.op.where(empty, relax.const(not noop_if_empty, "bool"), flags))
            in_shape = relax.const(np.array(shape, dtype="int64"), "int64")
            out_shape = bb.normalize(relax.op.where(flags, relax.const(1, "int64"), in_shape))  # keepdims shape
            flag = [bb.normalize(relax.op.reshape(relax.op.take(flags, relax.const(d, "int64"), axis=0), [])) for d in range(rank)]
            work = x
            if dt == "bool":
                work = relax.op.astype(x, "int8")
            work = bb.normalize(work)
            wdt = dtype_of(work)
            if kind in ("max", "min") and wdt.startswith("float"):
                result = _extreme_to_infinity(bb, work, flag, shape, wdt)
            elif op == "ReduceLogSumExp":
                top = _repeat_reduced(bb, work, flag, shape, "max")
                top = relax.op.where(relax.op.isinf(top), relax.const(0.0, wdt), top)
                total = _repeat_reduced(bb, relax.op.exp(relax.op.subtract(work, top)), flag, shape, "sum")
                result = relax.op.add(relax.op.log(total), top)
            else:
                pre = {"square": lambda y: relax.op.multiply(y, y), "abs": relax.op.abs, None: lambda y: y}[prepare]
                result = _repeat_reduced(bb, pre(work), flag, shape, kind)
                if finish:
                    result = getattr(relax.op, finish)(result)
            if dt == "bool":
                result = relax.op.astype(result, "bool")
            zeros = relax.const(np.zeros(rank, dtype="int64"), "int64")
            ones = relax.const(np.ones(rank, dtype="int64"), "int64")
            sliced = bb.normalize(relax.op.dynamic_strided_slice(bb.normalize(result), zeros, out_shape, ones))
            sliced = _sized(bb, sliced, out_shape, rank)
            return _drop(bb, sliced, flags, shape, count, keepdims)

        def _extreme_to_infinity(bb, work, flag, shape, wdt):
            """max/min that give -inf/+inf where every reduced value is it (TVM starts at the
            lowest/highest finite float), as converters.reduce_to_infinity does for constant axes."""
            inf = float("-inf") if kind == "max" else float("inf")
            result = _repeat_reduced(bb, work, flag, shape, kind)
            finite = relax.op.astype(relax.op.not_equal(work, relax.const(inf, wdt)), wdt)
            seen = _repeat_reduced(bb, finite, flag, shape, "max")
            return relax.op.where(relax.op.equal(seen, relax.const(0.0, wdt)), relax.const(inf, wdt), result)

        def _repeat_reduced(bb, y, flag, shape, how):
            y = bb.normalize(y)
            for d, f in enumerate(flag):
                reduced = getattr(relax.op, how)(y, axis=[d], keepdims=True)
                y = bb.normalize(relax.op.where(f, relax.op.broadcast_to(reduced, shape), y))
            return y

        ReduceRuntimeAxes.__name__ = op + "RuntimeAxes"
        return ReduceRuntimeAxes

    def _sized(bb, value, shape_tensor, rank):
        """`value` cast to fresh symbolic dims read from the int64 tensor `shape_tensor`."""
        dims = [tvm.tirx.Var(f"reduce_dim{i}", "int64") for i in range(rank)]
        bb.match_cast(bb.emit(relax.op.tensor_to_shape(shape_tensor)), relax.ShapeType(dims))
        return bb.match_cast(value, relax.TensorType(dims, dtype_of(value)))

    def _drop(bb, value, flags, shape, count, keepdims):
        """keepdims=0: the reduced axes removed (the kept sizes in order: argsort of flag*rank+d)."""
        if keepdims:
            return value
        rank = len(shape)
        kept = rank - count
        if kept < 0:
            raise UnsupportedOpError("a Reduce op with more axes than its input has dimensions is invalid.", op_type="Reduce")
        key = relax.op.add(relax.op.multiply(relax.op.astype(flags, "int64"), relax.const(rank, "int64")),
                           relax.const(np.arange(rank, dtype="int64"), "int64"))
        order = bb.normalize(relax.op.strided_slice(bb.normalize(relax.op.argsort(key, dtype="int64")), [0], [0], [kept]))
        sizes = bb.normalize(relax.op.take(relax.const(np.array(shape, dtype="int64"), "int64"), order, axis=0))
        dims = [tvm.tirx.Var(f"kept_dim{i}", "int64") for i in range(kept)]
        bb.match_cast(bb.emit(relax.op.tensor_to_shape(sizes)), relax.ShapeType(dims))
        return relax.op.reshape(value, relax.ShapeExpr(dims))

    return {op: reduce_runtime_axes(op) for op in _KINDS}


REDUCE_OPS: dict[str, type] = _build()
