"""Fixes for ONNX ops that TVM 0.27's ONNX frontend converts wrongly.

Each fix was found by running single-op models through TVM and onnxruntime on the same inputs
(`tests/core/compiler/frontend/test_compile_converters.py` keeps those checks). A fix is a converter class in TVM's
own shape (`_impl_vN(bb, inputs, attr, params)`), registered in `FIXES` under the ONNX op type;
`from_onnx_fixed` imports a model with TVM's converter map overlaid by `FIXES`.

Importing this module registers every fix with `core.compiler.frontend.registry.register_converter` (the import
hook lowering and compile share; onnx_import imports this module before its first import), so the
Lowering panel and compile see the same conversion. `from_onnx_fixed` is the same conversion for
code that wants TVM's plain `from_onnx` (no lineage).

Fixed here:

1. `Pow` with an integer exponent and a float base (legal ONNX: T1 and T2 differ). TVM emits
   `R.power(float, int)` and fails with "Binary operators must have the same datatype". The
   exponent is cast to the base's dtype, which is what onnxruntime computes.
2. `Resize` with an empty `scales` input next to `sizes` (what PyTorch's exporter writes). TVM
   treats the empty tensor as given and refuses "Only one of scales and sizes can be provided".
   An empty `scales` is dropped, per the ONNX spec ("only one of scales and sizes may be
   specified; the other is empty").
3. `Dropout`: the mask comes back as float, not bool; training mode (random) is refused.
4. `IsInf`: detect_positive / detect_negative were ignored.
5. `Mod` on floats by ±inf: NaN, where C's fmod gives a and Python's % gives a or b by sign.
6. `BitShift` by a negative amount or by the width or more: LLVM's undefined shift, not 0 (-1).
7. `PRelu`: a per-channel slope before opset 7 (legacy broadcast) failed an assertion; any
   slope broadcast now goes through where(x < 0, slope * x, x).
8. `Reshape` to a shape computed as a tensor at run time: TVM takes only constants and shapes.
9. `Expand` to a shape given as a run-time tensor: broadcast both ways, as ONNX specifies.
10. `LayerNormalization` with its Mean / InvStdDev outputs used: TVM returns zeros for them.
11. `Range` whose bounds are sizes (`torch.arange(seq)`): TVM bound its length to a fresh
    variable, and every tensor the positions reach lost its shape.
12. `ReduceMax` / `ReduceMin` of a row of -inf / +inf: TVM returned the lowest / highest finite float.
13. `NonMaxSuppression`: TVM put defaults in place of limits it could not read (0 boxes); now
    read from constants, refused when given at run time.
"""
from __future__ import annotations

__all__ = ["FIXES", "from_onnx_fixed", "fixes_applied", "patched_convert_map"]


def _frontend():
    from tvm.relax.frontend.onnx import onnx_frontend

    return onnx_frontend


def _build_fixes() -> dict[str, type]:
    import numpy as np
    import tvm
    import tvm.sym
    from tvm import relax

    from ...errors import UnsupportedOpError

    fe = _frontend()

    def is_empty_const(expr) -> bool:
        if expr is None:
            return False
        value = expr.value if isinstance(expr, tvm.ir.GenericConst) else None
        try:
            return value is not None and int(value.numpy().size) == 0
        except Exception:  # noqa: BLE001
            return False

    class PowMixedDtype(fe.Pow):
        """Pow(float base, int exponent): cast the exponent to the base's dtype."""

        @classmethod
        def _impl_v7(cls, bb, inputs, attr, params):
            base, exponent = inputs[0], inputs[1]
            bt = getattr(getattr(base, "ty", None), "dtype", None)
            et = getattr(getattr(exponent, "ty", None), "dtype", None)
            if bt and et and bt != et and str(bt).startswith(("float", "bfloat")):
                exponent = bb.normalize(relax.op.astype(exponent, bt))
                inputs = fe.onnx_input([base, exponent])
            return super()._impl_v7(bb, inputs, attr, params)

    class ResizeEmptyScales(fe.Resize):
        """Resize with sizes given and an empty scales tensor: treat scales as absent."""

        @classmethod
        def _impl_v18(cls, bb, inputs, attr, params):
            if len(inputs) > 3 and inputs[3] is not None and is_empty_const(fe.get_constant(inputs[2], params)):
                inputs = fe.onnx_input([inputs[0], inputs[1], None, inputs[3]])
            return super()._impl_v18(bb, inputs, attr, params)

    def dtype_of(expr) -> str:
        return str(getattr(getattr(expr, "ty", None), "dtype", "") or "")

    def node_name(attr) -> str:
        return str(attr.get("tvm_custom", {}).get("name", "") or "")

    class DropoutInference(fe.Dropout):
        """Dropout at inference: the input unchanged and an all-true bool mask (TVM returns the
        mask in the input's float type). Training mode is random and refused."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            return cls._inference(inputs[0])

        @classmethod
        def _impl_v12(cls, bb, inputs, attr, params):
            if len(inputs) > 2 and inputs[2] is not None:
                const = fe.get_constant(inputs[2], params)
                value = const.value.numpy() if isinstance(const, tvm.ir.GenericConst) else None
                if value is None or bool(value.reshape(-1)[0]):
                    name = node_name(attr)
                    raise UnsupportedOpError(
                        f"Dropout node '{name}' runs in training mode, which drops values at random; the workbench compiles "
                        "inference, so remove the node or set training_mode to a constant false.", op_type="Dropout", node_name=name,
                    )
            return cls._inference(inputs[0])

        @staticmethod
        def _inference(x):
            return relax.Tuple([x, relax.op.full_like(x, relax.const(True, "bool"), dtype="bool")])

    class IsInfDirected(fe.IsInf):
        """IsInf honouring detect_positive / detect_negative (TVM's ignores both)."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            x = inputs[0]
            pos, neg = int(attr.get("detect_positive", 1)), int(attr.get("detect_negative", 1))
            inf = relax.op.isinf(x)
            if pos and neg:
                return inf
            if not pos and not neg:
                return relax.op.full_like(x, relax.const(False, "bool"), dtype="bool")
            zero = relax.const(0, dtype_of(x))
            sign = relax.op.greater(x, zero) if pos else relax.op.less(x, zero)
            return relax.op.logical_and(inf, sign)

    class ModFmodInf(fe.Mod):
        """Mod with fmod=1 on floats: C's fmod(a, ±inf) is a for finite a; TVM computes
        a - trunc(a/b)*b, which is NaN there."""

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            result = super()._impl_v10(bb, inputs, attr, params)
            a, b = inputs[0], inputs[1]
            if not dtype_of(a).startswith(("float", "bfloat")):
                return result
            finite_by_inf = relax.op.logical_and(relax.op.isinf(b), relax.op.isfinite(a))
            if attr.get("fmod", 0) == 0:
                # Python's a % ±inf: a when a is 0 or has b's sign, else b
                zero = relax.const(0, dtype_of(a))
                differ = relax.op.logical_and(relax.op.logical_xor(relax.op.less(a, zero), relax.op.less(b, zero)), relax.op.not_equal(a, zero))
                return relax.op.where(finite_by_inf, relax.op.where(differ, b, a), result)
            return relax.op.where(finite_by_inf, a, result)

    class BitShiftInRange(fe.BitShift):
        """BitShift by a negative amount or by the type's width or more: 0 (RIGHT of a negative
        signed value: -1), as ONNX specifies; TVM passes LLVM's undefined shift through."""

        @classmethod
        def _impl_v11(cls, bb, inputs, attr, params):
            result = super()._impl_v11(bb, inputs, attr, params)
            a, b = inputs[0], inputs[1]
            dt = dtype_of(a)
            if not dt:
                return result
            width = int("".join(ch for ch in dt if ch.isdigit()) or 64)
            out = relax.op.logical_or(relax.op.less(b, relax.const(0, dtype_of(b))), relax.op.greater_equal(b, relax.const(width, dtype_of(b))))
            zero = relax.const(0, dt)
            fill = zero
            direction = attr.get("direction", b"LEFT")
            direction = direction.decode("ascii") if isinstance(direction, bytes) else str(direction)
            if direction == "RIGHT" and dt.startswith("int"):
                fill = relax.op.where(relax.op.less(a, zero), relax.const(-1, dt), zero)
            return relax.op.where(out, fill, result)

    class PReluChannel(fe.PRelu):
        """PRelu as where(x < 0, slope * x, x) with ONNX's unidirectional broadcast of the slope;
        before opset 7 a 1-D slope of the channel count applies per channel (axis 1). TVM's
        converter asserts on a per-channel slope it cannot map to an axis."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            return cls._where(bb, inputs, legacy=True)

        @classmethod
        def _impl_v7(cls, bb, inputs, attr, params):
            return cls._where(bb, inputs, legacy=False)

        @staticmethod
        def _where(bb, inputs, legacy: bool):
            x, slope = inputs[0], inputs[1]
            xs = list(x.ty.shape) if hasattr(x.ty, "shape") and x.ty.shape is not None else None
            ss = list(slope.ty.shape) if hasattr(slope.ty, "shape") and slope.ty.shape is not None else None
            if legacy and xs is not None and ss is not None and len(ss) == 1 and len(xs) > 2:
                slope = relax.op.reshape(slope, [ss[0]] + [1] * (len(xs) - 2))
            zero = relax.const(0, dtype_of(x))
            return relax.op.where(relax.op.less(x, zero), relax.op.multiply(x, slope), x)

    class ReshapeComputedShape(fe.Reshape):
        """Reshape to a shape computed at run time as an int64 tensor (a Concat of Shape ->
        Gather results whose sizes TVM cannot follow, e.g. after a Range): the tensor becomes a
        shape with fresh symbolic dims (tensor_to_shape + match_cast). TVM's converter accepts
        only constants and shapes. The entries must be the sizes themselves (no 0 or -1)."""

        @classmethod
        def _impl_v13(cls, bb, inputs, attr, params):
            data, shape = inputs[0], inputs[1]
            ty = getattr(shape, "ty", None)
            if (
                isinstance(data, relax.Expr) and not isinstance(data, relax.ShapeExpr)
                and isinstance(ty, relax.TensorType) and not isinstance(fe.get_constant(shape, params), tvm.ir.GenericConst)
                and ty.shape is not None and len(ty.shape) == 1 and isinstance(ty.shape[0], tvm.tirx.IntImm)
            ):
                n = int(ty.shape[0])
                dims = [tvm.tirx.Var(f"reshape_dim{i}", "int64") for i in range(n)]
                bb.match_cast(bb.emit(relax.op.tensor_to_shape(shape)), relax.ShapeType(dims))
                return relax.op.reshape(data, relax.ShapeExpr(dims))
            return super()._impl_v13(bb, inputs, attr, params)

    class ExpandComputedShape(fe.Expand):
        """Expand to a shape given as a run-time int64 tensor: ONNX broadcasts the input and the
        shape both ways (the result has the larger rank; a 1 on either side takes the other's
        size). TVM's converter broadcast_to's the input to the shape as given, which fails when
        the shape is shorter and is wrong where it holds 1s (onnx `simple/test_expand_shape_model*`)."""

        @classmethod
        def _impl_v13(cls, bb, inputs, attr, params):
            data, shape = inputs[0], inputs[1]
            ty = getattr(shape, "ty", None)
            dty = getattr(data, "ty", None)
            if (
                isinstance(ty, relax.TensorType) and not isinstance(fe.get_constant(shape, params), tvm.ir.GenericConst)
                and ty.shape is not None and len(ty.shape) == 1 and isinstance(ty.shape[0], tvm.tirx.IntImm)
                and isinstance(dty, relax.TensorType) and dty.shape is not None
            ):
                k = int(ty.shape[0])
                dims = [tvm.tirx.Var(f"expand_dim{i}", "int64") for i in range(k)]
                bb.match_cast(bb.emit(relax.op.tensor_to_shape(shape)), relax.ShapeType(dims))
                data_dims = list(dty.shape)
                rank = max(k, len(data_dims))
                a = [None] * (rank - len(data_dims)) + data_dims
                b = [None] * (rank - k) + dims
                def joint(x, y):
                    if y is None or x is None:
                        return x if y is None else y
                    if isinstance(x, tvm.tirx.IntImm):  # a static size: 1 takes the shape's, n stays n
                        return y if int(x) == 1 else x
                    return tvm.tirx.max(x, y)

                out = [joint(x, y) for x, y in zip(a, b)]
                return relax.op.broadcast_to(data, relax.ShapeExpr(out))
            return super()._impl_v13(bb, inputs, attr, params)

    class LayerNormalizationStats(fe.LayerNormalization):
        """LayerNormalization whose Mean and InvStdDev outputs are used: TVM returns two scalar
        zeros for them. They are computed here (in float32, ONNX's stash type): the mean and
        1/sqrt(var + epsilon) over the normalized axes, kept as size-1 dims."""

        @classmethod
        def _impl_v17(cls, bb, inputs, attr, params):
            if attr.get("tvm_custom", {}).get("num_outputs", 1) < 2:
                return super()._impl_v17(bb, inputs, attr, params)
            x, scale, bias = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
            rank = len(x.ty.shape)
            axis = int(attr.get("axis", -1))
            axis = axis + rank if axis < 0 else axis
            axes = list(range(axis, rank))
            dt = dtype_of(x)
            xf = relax.op.astype(x, "float32") if dt != "float32" else x
            mean = bb.normalize(relax.op.mean(xf, axes, keepdims=True))
            centered = bb.normalize(relax.op.subtract(xf, mean))
            var = relax.op.mean(relax.op.multiply(centered, centered), axes, keepdims=True)
            inv = bb.normalize(relax.op.rsqrt(relax.op.add(var, relax.const(float(attr.get("epsilon", 1e-5)), "float32"))))
            y = relax.op.multiply(relax.op.multiply(centered, inv), relax.op.astype(scale, "float32") if dtype_of(scale) != "float32" else scale)
            if bias is not None:
                y = relax.op.add(y, relax.op.astype(bias, "float32") if dtype_of(bias) != "float32" else bias)
            if dt != "float32":
                y = relax.op.astype(y, dt)
            return relax.Tuple([bb.normalize(y), mean, inv])

    class SumPairwise(fe.Sum):
        """Sum of tensors as pairwise adds (ONNX's Sum broadcasts like Add), not stack + reduce:
        an add fuses into the convolution before it (ResNet's residual), and carries the
        channel-blocked layout (core.compiler.passes.layout.nchwc) where stack has no layout rule."""

        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            if all(isinstance(x, tvm.ir.GenericConst) for x in inputs):
                return super()._impl_v1(bb, inputs, attr, params)
            return cls._impl_dynamic(bb, list(inputs))

    class RangeSymbolic(fe.Range):
        """Integer Range whose bounds are sizes (a Shape -> Gather of a symbolic dim, as exporters
        write `torch.arange(seq)`): the length is computed on the symbolic sizes, so the result
        has the dim `sequence` itself. TVM computes it in tensors and binds a fresh variable, and
        everything the positions reach (the position embedding added to the token embedding)
        loses its shape, which LegalizeOps cannot compile ("emit_te now only supports Tensor
        that has ShapeExpr shape")."""

        @classmethod
        def _impl_v12(cls, bb, inputs, attr, params):
            values = [fe.get_constant(x, params) for x in inputs[:3]]

            def scalar(x):
                if tvm.ir.is_prim_expr(x):
                    return x if str(x.ty) == "int64" else tvm.tirx.Cast("int64", x)
                if isinstance(x, tvm.ir.GenericConst) and x.value.numpy().size == 1 and x.value.numpy().dtype.kind in "iu":
                    return tvm.tirx.IntImm("int64", int(x.value.numpy().reshape(-1)[0]))
                return None

            start, limit, delta = (scalar(x) for x in values)
            dt = str(values[0].ty) if tvm.ir.is_prim_expr(values[0]) else dtype_of(values[0])
            dynamic = any(tvm.ir.is_prim_expr(x) for x in values)
            if not dynamic or any(v is None for v in (start, limit, delta)) or not isinstance(delta, tvm.tirx.IntImm) or int(delta) <= 0:
                return super()._impl_v12(bb, inputs, attr, params)
            count = tvm.tirx.floordiv(limit - start + (int(delta) - 1), delta)
            analyzer = tvm.sym.Analyzer()
            for var in tvm.tirx.analysis.undefined_vars(count):  # sizes: never negative
                analyzer.update(var, tvm.sym.ConstIntBound(0, tvm.sym.ConstIntBound.POS_INF))
            count = analyzer.simplify(count)
            if not analyzer.can_prove(count >= 0):
                count = tvm.tirx.max(count, tvm.tirx.IntImm("int64", 0))
            positions = relax.op.arange(0, count, 1, "int64")
            if not (isinstance(start, tvm.tirx.IntImm) and int(start) == 0 and int(delta) == 1):
                offset = relax.op.add(relax.op.multiply(positions, relax.const(int(delta), "int64")),
                                      relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr([start])), ()))
                positions = offset
            return relax.op.astype(positions, dt) if dt and dt != "int64" else positions

    class NonMaxSuppressionConstant(fe.NonMaxSuppression):
        """NonMaxSuppression with max_output_boxes_per_class, iou_threshold and score_threshold
        read from constants (initializers, Constant nodes, values folded before import). TVM's
        converter puts its defaults in place of any it cannot read (0 boxes: an empty result),
        a silent wrong answer; a true run-time input is refused (the importer names the node).
        ONNX suppresses a box whose IoU is *above* the threshold, TVM's kernel at or above: the
        threshold goes to the next float32 up. An absent score_threshold means no threshold."""

        _INPUTS = ("max_output_boxes_per_class", "iou_threshold", "score_threshold")

        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            values = []
            for k, what in enumerate(cls._INPUTS, start=2):
                x = inputs[k] if len(inputs) > k else None
                const = fe.get_constant(x, params) if x is not None else None
                if x is not None and not isinstance(const, tvm.ir.GenericConst):
                    raise ValueError(f"its {what} is a run-time input, and TVM's NMS needs it as a constant (an initializer or a Constant node)")
                array = None if const is None else const.value.numpy().reshape(-1)
                values.append(None if array is None or array.size == 0 else array[0].item())
            max_boxes, iou, score = values
            iou = np.nextafter(np.float32(0.0 if iou is None else iou), np.float32(np.inf))
            boxes = inputs[0]
            if attr.get("center_point_box", 0) != 0:
                xc, yc, w, h = (relax.TupleGetItem(bb.emit(relax.op.split(boxes, 4, axis=2)), i) for i in range(4))
                two = relax.const(2.0, dtype_of(boxes))
                hw, hh = relax.op.divide(w, two), relax.op.divide(h, two)
                boxes = relax.op.concat([relax.op.subtract(yc, hh), relax.op.subtract(xc, hw), relax.op.add(yc, hh), relax.op.add(xc, hw)], axis=2)
            out = bb.normalize(relax.op.vision.all_class_non_max_suppression(
                boxes, inputs[1], relax.const(int(max_boxes or 0), "int64"), relax.const(float(iou), "float32"),
                relax.const(float(np.finfo(np.float32).min if score is None else score), "float32"), output_format="onnx",
            ))
            return bb.emit(relax.TupleGetItem(out, 0))

    def reduce_to_infinity(base: type, inf: float) -> type:
        """ReduceMax (inf=-inf) / ReduceMin (inf=+inf) that return the infinity when every
        reduced element is it (a fully masked attention row): TVM starts the reduction at the
        lowest (highest) finite float, and returns that. The indicator x != inf, reduced by the
        same converter (same axes, keepdims), tells where all were the infinity."""

        class ReduceToInfinity(base):
            @classmethod
            def get_converter(cls, opset):
                reduce = base.get_converter(opset)
                sign = 1.0 if inf < 0 else -1.0  # max of (x != -inf) / min of -(x != +inf): 0 where all are inf

                def convert(bb, inputs, attr, params):
                    result = reduce(bb, inputs, attr, params)
                    x = inputs[0]
                    dt = dtype_of(x)
                    if result is x or not dt.startswith(("float", "bfloat")):
                        return result
                    other = relax.op.astype(relax.op.not_equal(x, relax.const(inf, dt)), dt)
                    other = bb.normalize(relax.op.multiply(other, relax.const(sign, dt)))
                    rest = [inputs[i] for i in range(1, len(inputs))]
                    seen = bb.normalize(reduce(bb, fe.onnx_input([other] + rest), attr, params))
                    all_inf = relax.op.equal(seen, relax.const(0.0, dt))
                    return relax.op.where(all_inf, relax.const(inf, dt), bb.normalize(result))

                return convert

        ReduceToInfinity.__name__ = base.__name__ + "ToInfinity"
        return ReduceToInfinity

    return {
        "Sum": SumPairwise,
        "LayerNormalization": LayerNormalizationStats,
        "Expand": ExpandComputedShape,
        "Reshape": ReshapeComputedShape,
        "Range": RangeSymbolic,
        "ReduceMax": reduce_to_infinity(fe.ReduceMax, float("-inf")),
        "ReduceMin": reduce_to_infinity(fe.ReduceMin, float("inf")),
        "NonMaxSuppression": NonMaxSuppressionConstant,
        "Pow": PowMixedDtype, "Resize": ResizeEmptyScales, "Dropout": DropoutInference, "IsInf": IsInfDirected,
        "Mod": ModFmodInf, "BitShift": BitShiftInRange, "PRelu": PReluChannel,
    }


_FIXES: dict[str, type] | None = None


def fixes() -> dict[str, type]:
    global _FIXES
    if _FIXES is None:
        _FIXES = _build_fixes()
    return _FIXES


def _register_with_import_hook() -> None:
    """Register every fix with the import's converter registry (core.compiler.frontend.registry)."""
    from .registry import register_converter

    for op_type, converter in fixes().items():
        register_converter(op_type, converter)


FIXES: dict[str, type] = fixes()
_register_with_import_hook()


def patched_convert_map():
    """TVM's ONNX converter map with the workbench's fixes overlaid, for the duration (a context manager)."""
    from ..tvm_compat import patched_convert_map as overlaid

    return overlaid(fixes())


def fixes_applied(model) -> list[str]:
    """The op types of `model` (an onnx.ModelProto) whose conversion a fix replaces."""
    ops = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
    return sorted(ops & set(fixes()))


def from_onnx_fixed(model, **kwargs):
    """tvm.relax.frontend.onnx.from_onnx with the fixes; weights become constants by default."""
    import warnings

    from tvm.relax.frontend.onnx import from_onnx

    kwargs.setdefault("keep_params_in_input", False)
    with patched_convert_map(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return from_onnx(model, **kwargs)
