"""Resize (opset 11+) with its output sizes given at run time, and the opset 18 attributes TVM's
converter drops without a word.

TVM's converter takes constant sizes only and ignores `axes`, `antialias` and
`keep_aspect_ratio_policy`. Here a 4-D Resize with a `sizes` input (a constant or a run-time
tensor, all four sizes or those of `axes`) resizes the two spatial axes with
`relax.op.image.resize2d` to sizes read at run time (fresh symbolic dims); with sizes ONNX maps
coordinates by output/input size, as TOPI does. Refused with one sentence, as nothing faithful
can be built from TOPI's resize: antialiasing, an aspect-ratio policy other than stretch, a
resize of the batch or channel axis, `tf_crop_and_resize` with a run-time region, and scales
given at run time (ONNX maps coordinates by the given scale, TOPI by the output size).
Everything else stays with the converter it had (core.compiler.frontend.converters' fix of TVM's).
Nearest mode is one gather per axis with ONNX's float64 formulas, except where TVM's own resize2d
provably picks the same pixels (`topi_agrees`: integer up- and downsampling, the common case), which
then fuses into its neighbours' kernels.
"""
from __future__ import annotations

import logging

__all__ = ["RESIZE_OPS"]

logger = logging.getLogger(__name__)


def _build() -> dict[str, type]:
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from ...errors import UnsupportedOpError
    from .converters import fixes

    base = fixes().get("Resize") or fe.Resize

    def text(attr, name: str, default: str) -> str:
        value = attr.get(name, default)
        return value.decode("ascii") if isinstance(value, bytes) else str(value)

    def refuse(what: str):
        raise UnsupportedOpError(f"Resize {what} is not supported.", op_type="Resize")

    def constant(x, params):
        if x is None:
            return None
        c = fe.get_constant(x, params)
        return c.value.numpy() if isinstance(c, tvm.ir.GenericConst) else x

    def is_empty(value) -> bool:
        return isinstance(value, np.ndarray) and value.size == 0

    def pick(bb, values, position: int, dtype: str):
        """values[position] of a run-time 1-D tensor, as a scalar tensor of `dtype`."""
        one = relax.op.take(values, relax.const(np.array(position, dtype="int64"), "int64"), axis=0)
        return bb.normalize(relax.op.astype(one, dtype))

    def symbolic(bb, scalar, name: str):
        """A fresh size variable bound to the value of an int64 scalar tensor."""
        var = tvm.tirx.Var(name, "int64")
        bb.match_cast(bb.emit(relax.op.tensor_to_shape(relax.op.reshape(scalar, [1]))), relax.ShapeType([var]))
        return var

    def _nearest(bb, x, rank, axes, scales, sizes, mode, rounding, policy):
        """Nearest resize as one gather per resized axis, the source index computed in float64 by
        ONNX's formulas (TOPI's float32 `in/out` rounds ties such as 0.5 the other way)."""
        shape = getattr(x.ty, "shape", None)
        if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            refuse("in nearest mode of an input of unknown or symbolic shape")
        shape = [int(d) for d in shape]
        axes = [a + rank if a < 0 else a for a in (axes or range(rank))]
        use_sizes = sizes is not None and not is_empty(sizes)
        given = sizes if use_sizes else scales
        if given is None or is_empty(given):
            refuse("without scales or sizes")
        f64 = "float64"
        common = None  # keep_aspect_ratio_policy: one scale for all axes, min (not_larger) or max (not_smaller)
        if policy != "stretch":
            if not use_sizes:
                refuse(f"with keep_aspect_ratio_policy '{policy}' and scales (ONNX applies it to sizes only)")
            pick_one = relax.op.minimum if policy == "not_larger" else relax.op.maximum
            if isinstance(given, np.ndarray):
                ratios = [float(given[i]) / shape[a] for i, a in enumerate(axes)]
                common = min(ratios) if policy == "not_larger" else max(ratios)
            else:
                for i, a in enumerate(axes):
                    ratio = relax.op.divide(pick(bb, given, i, f64), relax.const(float(shape[a]), f64))
                    common = ratio if common is None else pick_one(common, ratio)
                common = bb.normalize(common)
        for i, a in enumerate(axes):
            n_in = shape[a]
            if common is not None:  # out = round_half_up(scale * in), coordinates by that scale
                scale = relax.const(common, f64) if isinstance(common, float) else common
                if isinstance(common, float):
                    n_out = int(np.floor(common * n_in + 0.5))
                    out_f = relax.const(float(n_out), f64)
                else:
                    out_f = bb.normalize(relax.op.floor(relax.op.add(relax.op.multiply(common, relax.const(float(n_in), f64)), relax.const(0.5, f64))))
                    n_out = symbolic(bb, bb.normalize(relax.op.astype(out_f, "int64")), f"resize_dim{a}")
            elif isinstance(given, np.ndarray):
                value = float(given[i])
                if use_sizes:
                    n_out, scale = int(value), relax.const(value / n_in, f64)
                else:
                    n_out, scale = int(np.floor(n_in * value)), relax.const(value, f64)
                if n_out == n_in and (use_sizes or value == 1.0):
                    continue
                out_f = relax.const(float(n_out), f64)
            else:
                value = pick(bb, given, i, f64)
                out_f = value if use_sizes else bb.normalize(relax.op.floor(relax.op.multiply(value, relax.const(float(n_in), f64))))
                scale = bb.normalize(relax.op.divide(value, relax.const(float(n_in), f64))) if use_sizes else value
                n_out = symbolic(bb, bb.normalize(relax.op.astype(out_f, "int64")), f"resize_dim{a}")
            pos = relax.op.arange(0, n_out, 1, f64)
            half = relax.const(0.5, f64)
            if mode in ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric", "tf_half_pixel_for_nn"):
                src = relax.op.divide(relax.op.add(pos, half), scale)
                if mode != "tf_half_pixel_for_nn":
                    src = relax.op.subtract(src, half)
                if mode == "half_pixel_symmetric":  # offset = in/2 * (1 - out / (scale * in))
                    adjust = relax.op.divide(out_f, relax.op.multiply(scale, relax.const(float(n_in), f64)))
                    offset = relax.op.multiply(relax.const(n_in / 2, f64), relax.op.subtract(relax.const(1.0, f64), adjust))
                    src = relax.op.add(src, offset)
                if mode == "pytorch_half_pixel":
                    src = relax.op.where(relax.op.greater(out_f, relax.const(1.0, f64)), src, relax.op.zeros_like(src))
            elif mode == "asymmetric":
                src = relax.op.divide(pos, scale)
            elif mode == "align_corners":
                ratio = relax.op.divide(relax.const(float(n_in - 1), f64), relax.op.maximum(relax.op.subtract(out_f, relax.const(1.0, f64)),
                                                                                        relax.const(1.0, f64)))
                src = relax.op.multiply(pos, ratio)
            else:
                refuse(f"in nearest mode with coordinate_transformation_mode '{mode}'")
            src = bb.normalize(src)
            if rounding == "round_prefer_floor":
                index = relax.op.ceil(relax.op.subtract(src, half))
            elif rounding == "round_prefer_ceil":
                index = relax.op.floor(relax.op.add(src, half))
            elif rounding in ("floor", "ceil"):
                index = getattr(relax.op, rounding)(src)
            else:
                refuse(f"with nearest_mode '{rounding}'")
            index = relax.op.astype(relax.op.clip(index, 0, n_in - 1), "int64")
            x = bb.normalize(relax.op.take(x, bb.normalize(index), axis=a))
        return x

    def topi_agrees(x, scales, sizes, mode: str, rounding: str) -> bool:
        """Whether TVM's own nearest resize (resize2d: fused with its neighbours, scheduled) picks
        ONNX's source pixels here: a 4-D input, constant scales or sizes of the two spatial axes,
        and every output position's index the same by ONNX's formula in float64 (the given scale)
        and by TOPI's in float32 (in/out sizes; with and without a fused multiply-add). Integer
        up- and downsampling always agree; ties such as 0.5 may not."""
        shape = getattr(x.ty, "shape", None)
        if shape is None or len(shape) != 4 or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
            return False
        shape = [int(d) for d in shape]
        use_sizes = isinstance(sizes, np.ndarray) and sizes.size == 4
        if not use_sizes and not (isinstance(scales, np.ndarray) and scales.size == 4):
            return False
        given = sizes if use_sizes else scales
        if any(float(given[a]) != (shape[a] if use_sizes else 1.0) for a in (0, 1)):
            return False
        if mode not in ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners", "tf_half_pixel_for_nn"):
            return False
        if rounding not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            return False
        f32 = np.float32
        for a in (2, 3):
            n_in = shape[a]
            n_out = int(given[a]) if use_sizes else int(np.floor(n_in * float(given[a])))
            scale = float(given[a]) / n_in if use_sizes else float(given[a])
            if n_out < 1:
                return False
            pos = np.arange(n_out, dtype=np.float64)
            if mode in ("half_pixel", "pytorch_half_pixel"):
                onnx_src = (pos + 0.5) / scale - 0.5
                if mode == "pytorch_half_pixel" and n_out <= 1:
                    onnx_src = np.zeros_like(pos)
            elif mode == "tf_half_pixel_for_nn":
                onnx_src = (pos + 0.5) / scale
            elif mode == "asymmetric":
                onnx_src = pos / scale
            else:
                onnx_src = pos * ((n_in - 1) / max(n_out - 1, 1))
            want = np.clip(_round(onnx_src, rounding, 0.0), 0, n_in - 1)
            step = f32(f32(n_in) / f32(n_out))
            x32 = pos.astype(f32)
            if mode in ("half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
                shifted = (x32 + f32(0.5)).astype(np.float64)
                sub = 0.0 if mode == "tf_half_pixel_for_nn" else 0.5
                candidates = [(f32(shifted * step) - f32(sub)).astype(f32), (shifted * float(step) - sub).astype(f32)]  # rounded twice / once (FMA)
                if mode == "pytorch_half_pixel" and n_out <= 1:
                    candidates = [np.zeros(n_out, f32)]
            elif mode == "asymmetric":
                candidates = [(x32 * step).astype(f32)]
                if rounding == "floor" and n_out % n_in == 0:
                    candidates.append((pos // (n_out // n_in)).astype(f32))  # TOPI's integer division
            else:
                ratio = f32(f32(n_in - 1) / f32(max(n_out - 1, 1)))
                candidates = [(ratio * x32).astype(f32)]
            for src in candidates:
                got = np.clip(_round(src.astype(np.float64), rounding, 1e-5), 0, n_in - 1)
                if not np.array_equal(got, want):
                    return False
        return True

    def _round(src, rounding: str, eps: float):
        if rounding == "round_prefer_floor":
            return np.ceil(src - 0.5)
        if rounding == "round_prefer_ceil":
            return np.floor(src + 0.5)
        return np.floor(src + eps) if rounding == "floor" else np.ceil(src - eps)

    class ResizeSizes(base):
        @classmethod
        def get_converter(cls, opset):
            previous = base.get_converter(opset)
            if opset < 11:
                return previous

            def convert(bb, inputs, attr, params):
                x = inputs[0]
                rank = len(x.ty.shape) if getattr(x.ty, "shape", None) is not None else 0
                roi, scales, sizes = (constant(inputs[k], params) if len(inputs) > k else None for k in (1, 2, 3))
                if int(attr.get("antialias", 0)):
                    refuse("with antialias=1 (TVM's resize has no antialiasing filter)")
                policy = text(attr, "keep_aspect_ratio_policy", "stretch")
                mode = text(attr, "coordinate_transformation_mode", "half_pixel")
                if mode == "tf_crop_and_resize" and roi is not None and not isinstance(roi, np.ndarray):
                    refuse("with tf_crop_and_resize and a region (roi) given at run time")
                axes = attr.get("axes")
                method = text(attr, "mode", "nearest")
                runtime_sizes = sizes is not None and not isinstance(sizes, np.ndarray)
                if method == "nearest" and mode != "tf_crop_and_resize":
                    rounding = text(attr, "nearest_mode", "round_prefer_floor")
                    if axes is None and policy == "stretch" and topi_agrees(x, scales, sizes, mode, rounding):
                        return previous(bb, inputs, attr, params)  # resize2d: one op, fused with its neighbours
                    return _nearest(bb, x, rank, axes, scales, sizes, mode, text(attr, "nearest_mode", "round_prefer_floor"), policy)
                if policy != "stretch":
                    refuse(f"in {method} mode with keep_aspect_ratio_policy '{policy}'")
                if scales is not None and not isinstance(scales, np.ndarray):
                    refuse("with scales given at run time (ONNX maps coordinates by the scale, TVM's resize by the output size)")
                if not runtime_sizes and axes is None:
                    return previous(bb, inputs, attr, params)
                if rank != 4:
                    refuse(f"of a {rank}-D input with axes or run-time sizes (only 4-D)")
                axes = [a + rank if a < 0 else a for a in (axes or range(rank))]
                if sizes is None or is_empty(sizes):
                    refuse("with axes and scales (only sizes)")
                if any(a < 2 and isinstance(sizes, np.ndarray) and int(sizes[i]) != int(x.ty.shape[a]) for i, a in enumerate(axes)):
                    refuse("of the batch or channel axis")
                where = [axes.index(a) if a in axes else None for a in (2, 3)]
                if isinstance(sizes, np.ndarray):
                    size = [int(sizes[w]) if w is not None else x.ty.shape[a] for w, a in zip(where, (2, 3))]
                else:
                    size = [pick(bb, sizes, w, "int64") if w is not None else x.ty.shape[a] for w, a in zip(where, (2, 3))]
                    size = [symbolic(bb, v, f"resize_dim{i}") if isinstance(v, relax.Expr) else v for i, v in enumerate(size)]
                roi_values = [0.0] * 4
                if mode == "tf_crop_and_resize" and isinstance(roi, np.ndarray) and roi.size:
                    starts, ends = roi[: roi.size // 2].tolist(), roi[roi.size // 2:].tolist()
                    full = {a: (s, e) for a, s, e in zip(axes, starts, ends)}
                    roi_values = [full.get(2, (0.0, 1.0))[0], full.get(3, (0.0, 1.0))[0], full.get(2, (0.0, 1.0))[1], full.get(3, (0.0, 1.0))[1]]
                return relax.op.image.resize2d(
                    x, size=relax.ShapeExpr(size), roi=roi_values, layout="NCHW",
                    method="nearest_neighbor" if method == "nearest" else method,
                    coordinate_transformation_mode=mode,
                    rounding_method=text(attr, "nearest_mode", "round_prefer_floor"),
                    cubic_alpha=float(attr.get("cubic_coeff_a", -0.75)), cubic_exclude=int(attr.get("exclude_outside", 0)),
                    extrapolation_value=float(attr.get("extrapolation_value", 0.0)),
                )

            return convert

    return {"Resize": ResizeSizes}


RESIZE_OPS: dict[str, type] = _build()
