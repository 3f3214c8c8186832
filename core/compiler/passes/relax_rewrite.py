"""Shared pieces of the workbench's Relax graph passes.

`is_const` and `static_shape` answer the two questions every pass asks of an operand (FoldScaleIntoConv,
ConvertLayoutNCHWc, the channel padding); `array_const` makes a numpy array a constant of its own dtype
(`relax.const` alone turns int64 into int32 and float64 into float32).

`rewrite_functions(mod, pattern, rewrite)` runs tvm.relax.dpl.rewrite_call on every Relax function
and returns a new module when anything changed, with dead bindings removed. It never edits `mod`:
the Lowering panel keeps each stage's module as a snapshot, and a pass that changed its input in
place would change the snapshot of the stage before it too.
"""
from __future__ import annotations

__all__ = ["array_const", "is_const", "rewrite_functions", "static_shape"]


def array_const(value):
    """A Relax constant holding the numpy array `value` with its dtype as it is: TVM's relax.const
    without a dtype narrows int64 to int32 and float64 to float32 (an index folded to int32 then
    meets int64 indices, "Binary operators must have the same datatype")."""
    import numpy as np
    from tvm import relax

    value = np.asarray(value)
    return relax.const(value, str(value.dtype))


def is_const(expr) -> bool:
    """Whether a Relax expression is a constant (TVM 0.27 names them GenericConst)."""
    return type(expr).__name__ in ("GenericConst", "Constant")


def static_shape(expr) -> list[int] | None:
    """The static shape of a Relax expression's tensor type, None where it has none or a
    symbolic dimension."""
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None:
        return None
    try:
        return [int(v) for v in shape]
    except (TypeError, ValueError):
        return None


def rewrite_functions(mod, pattern, rewrite):
    """`mod` with `rewrite(expr, matches)` applied wherever `pattern` matches, in every Relax
    function; `mod` itself when nothing matched."""
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    updates = {}
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            new = rewrite_call(pattern, rewrite, func)
            if not new.same_as(func):
                updates[gvar] = new
    if not updates:
        return mod
    mod = mod.clone()
    for gvar, func in updates.items():
        mod[gvar] = func
    return relax.transform.DeadCodeElimination()(mod)
