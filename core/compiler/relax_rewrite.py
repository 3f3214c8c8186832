"""One graph rewrite over a Relax module: the shared tail of the pattern passes (FuseLayerNorm,
PadAttentionKeys, FoldLinearReshape).

`rewrite_functions(mod, pattern, rewrite)` runs tvm.relax.dpl.rewrite_call on every Relax function
and returns a new module when anything changed, with dead bindings removed. It never edits `mod`:
the Lowering panel keeps each stage's module as a snapshot, and a pass that changed its input in
place would change the snapshot of the stage before it too.
"""
from __future__ import annotations


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
