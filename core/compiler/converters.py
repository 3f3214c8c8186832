"""Fixes for ONNX ops that TVM 0.27's ONNX frontend converts wrongly.

Each fix was found by running single-op models through TVM and onnxruntime on the same inputs
(`tests/core/compiler/test_compile_converters.py` keeps those checks). A fix is a converter class in TVM's
own shape (`_impl_vN(bb, inputs, attr, params)`), registered in `FIXES` under the ONNX op type;
`from_onnx_fixed` imports a model with TVM's converter map overlaid by `FIXES`.

Importing this module registers every fix with `core.compiler.converter_registry.register_converter` (the import
hook lowering and compile share; tvm_import imports this module before its first import), so the
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
"""
from __future__ import annotations

import contextlib
import threading

__all__ = ["FIXES", "from_onnx_fixed", "fixes_applied", "patched_convert_map"]

_lock = threading.RLock()


def _frontend():
    from tvm.relax.frontend.onnx import onnx_frontend

    return onnx_frontend


def _build_fixes() -> dict[str, type]:
    import tvm
    from tvm import relax

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

    return {"Pow": PowMixedDtype, "Resize": ResizeEmptyScales}


_FIXES: dict[str, type] | None = None


def fixes() -> dict[str, type]:
    global _FIXES
    if _FIXES is None:
        _FIXES = _build_fixes()
    return _FIXES


def _register_with_import_hook() -> None:
    """Register every fix with the import's converter registry (core.compiler.converter_registry)."""
    from .converter_registry import register_converter

    for op_type, converter in fixes().items():
        register_converter(op_type, converter)


FIXES: dict[str, type] = fixes()
_register_with_import_hook()


@contextlib.contextmanager
def patched_convert_map():
    """TVM's ONNX converter map with the workbench's fixes overlaid, for the duration."""
    fe = _frontend()
    with _lock:
        original = fe._get_convert_map

        def convert_map():
            m = dict(original())
            m.update(fixes())
            return m

        fe._get_convert_map = convert_map
        try:
            yield
        finally:
            fe._get_convert_map = original


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
