"""LegalizeOps that legalizes each distinct call once.

TVM's LegalizeOps turns every high-level Relax call into a call_tir, building a tensor expression
and a PrimFunc for each call through Python (`BlockBuilder.call_te`, most of a large chain's
lowering: docs/performance.md, Legalizing each distinct call once), only for the BlockBuilder to
find afterwards that most of those PrimFuncs are structurally identical and keep one. This pass
gives LegalizeOps a customized map whose functions remember, per run, what a call with the same
op, attributes and argument types became, and build the next such call_tir directly on the
PrimFunc already made.

A result is reused only when that is exactly what a fresh legalization would give:
* every argument is a Relax variable or constant with a tensor type of static shape (no symbolic
  dims, no shapes or tuples whose values a legalizer could read; no legalizer in the modules
  allowed below reads a constant's data: call_te passes constants to the PrimFunc as arguments);
* the op's legalization is registered in a module of TVM's legalize_ops that never looks at
  bindings (`bb.lookup_binding`, which would make the result depend on where an argument came
  from), see `cacheable_ops`;
* the result is a plain `call_tir(gv, (args...), out_sinfo)` over the call's own arguments, in
  order, so the new call is the old one with the new arguments;
* the key (op, attributes, argument and output types) matches structurally, checked with
  `tvm_ffi.structural_equal` on every hit, not just by hash.
Anything else is legalized the usual way. `LEGALIZE_STATS` counts hits and misses of the last run.

`legalize_round` is the pipeline's legalization of relax.round on CPU targets (an override, as for
the blocked conv2d: core.compiler.pipeline.pass_list).
"""
from __future__ import annotations

import importlib
import inspect
import logging
import re

__all__ = ["LEGALIZE_STATS", "cacheable_ops", "legalize_pass", "legalize_round"]

logger = logging.getLogger(__name__)

LEGALIZE_STATS: dict[str, int] = {"hits": 0, "misses": 0, "uncached": 0}
_CACHEABLE: set[str] | None = None


def cacheable_ops() -> set[str]:
    """Relax ops whose registered legalization may be reused: those registered (by name) in a
    module of tvm.relax.transform.legalize_ops that never calls `bb.lookup_binding` (such a
    legalizer's result would depend on where an argument came from, not only on its type).
    Read from TVM's own sources, so an op TVM adds or moves is judged by its code."""
    global _CACHEABLE
    if _CACHEABLE is None:
        import pkgutil

        from tvm.relax.transform import legalize_ops

        ops: set[str] = set()
        for info in pkgutil.iter_modules(legalize_ops.__path__):
            try:
                source = inspect.getsource(importlib.import_module(f"{legalize_ops.__name__}.{info.name}"))
            except (ImportError, OSError, TypeError):
                continue
            if "lookup_binding" not in source:
                ops.update(re.findall(r'register_legalize\(\s*"([^"]+)"', source))
        _CACHEABLE = ops
    return _CACHEABLE


def _ops_in(mod) -> set[str]:
    """Names of the Relax ops called in the module's Relax functions."""
    import tvm
    from tvm import relax

    names: set[str] = set()

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op):
            names.add(e.op.name)

    for f in mod.functions.values():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f, visit)
    return names


def _static_tensor_args(call) -> bool:
    from tvm import relax, tirx
    from tvm.ir.expr import Constant

    for a in call.args:
        if not isinstance(a, (relax.Var, Constant)):
            return False
        si = a.ty
        if not isinstance(si, relax.TensorType) or not isinstance(si.shape, relax.ShapeExpr):
            return False
        if not all(isinstance(d, tirx.IntImm) for d in si.shape.values):
            return False
    return True


def _caching(op_name: str, func, call_tir_op):
    """`func` wrapped with a per-run cache (the dict lives in the closure of one pass run)."""
    import tvm_ffi  # TVM 0.27 keeps structural_hash / structural_equal in tvm_ffi
    from tvm import relax

    cache: dict[tuple, list[tuple]] = {}

    def legalize(bb, call):
        if not _static_tensor_args(call):
            LEGALIZE_STATS["uncached"] += 1
            return func(bb, call)
        sinfos = [a.ty for a in call.args]
        key = (tvm_ffi.structural_hash(call.attrs) if call.attrs is not None else 0,
               tuple(tvm_ffi.structural_hash(s) for s in sinfos),
               tuple(tvm_ffi.structural_hash(s) for s in call.ty_args))
        for attrs, old_sinfos, sinfo_args, gv, out in cache.get(key, ()):
            if (tvm_ffi.structural_equal(attrs, call.attrs) and len(old_sinfos) == len(sinfos)
                    and all(tvm_ffi.structural_equal(a, b) for a, b in zip(old_sinfos, sinfos))
                    and len(sinfo_args) == len(call.ty_args)
                    and all(tvm_ffi.structural_equal(a, b) for a, b in zip(sinfo_args, call.ty_args))):
                LEGALIZE_STATS["hits"] += 1
                return relax.op.call_tir(gv, relax.Tuple(list(call.args)), out)
        result = func(bb, call)
        LEGALIZE_STATS["misses"] += 1
        if (isinstance(result, relax.Call) and result.op.same_as(call_tir_op) and len(result.args) == 2
                and isinstance(result.args[1], relax.Tuple) and len(result.args[1].fields) == len(call.args)
                and all(f.same_as(a) for f, a in zip(result.args[1].fields, call.args))):
            cache.setdefault(key, []).append((call.attrs, sinfos, list(call.ty_args), result.args[0], list(result.ty_args)))
        return result

    legalize.__name__ = f"cached_legalize_{op_name.replace('.', '_')}"
    return legalize


def legalize_pass(target=None, overrides: dict | None = None):
    """A module pass running relax.transform.LegalizeOps with the caching map described above.
    `overrides` (op name -> legalize function) replace TVM's registered legalization of those
    ops (the channel-blocked conv2d, core.compiler.passes.layout.nchwc); they are cached only for ops
    whose registered legalization is (the override must then not read bindings either)."""
    import tvm
    from tvm import relax

    overrides = dict(overrides or {})

    @tvm.transform.module_pass(opt_level=0, name="LegalizeOps")
    def _pass(mod, _ctx):
        call_tir_op = tvm.ir.Op.get("relax.call_tir")
        cmap = {}
        cacheable = cacheable_ops()
        for name in sorted(_ops_in(mod) & (cacheable | set(overrides))):
            func = overrides.get(name) or tvm.ir.Op.get(name).get_attr("FLegalize")
            if func is None:
                continue
            cmap[name] = _caching(name, func, call_tir_op) if name in cacheable else func
        for k in LEGALIZE_STATS:
            LEGALIZE_STATS[k] = 0
        out = relax.transform.LegalizeOps(customize_legalize_map=cmap)(mod)
        logger.debug("LegalizeOps: %s (cached ops: %s)", LEGALIZE_STATS, ", ".join(cmap))
        return out

    return _pass


def legalize_round(bb, call):
    """LegalizeOps for relax.round on LLVM targets: `tirx.round` where TVM's topi.round writes
    `tirx.nearbyint`. LLVM gets the same intrinsic from both (vrndscaleps $12 on x86, frinti on ARM:
    ties to even), but TVM's VectorizeLoop can leave a nearbyint in a fused epilogue as a scalar loop
    (a quantized conv's QuantizeLinear after a Winograd output transform: docs/performance.md,
    "Rounding in fused epilogues")."""
    from tvm import te, tirx

    return bb.call_te(lambda x: te.compute(x.shape, lambda *i: tirx.round(x(*i)), name="T_round"), call.args[0],
                      primfunc_name_hint="tir_round")
