"""Lineage from compiled kernels back to the ONNX nodes they compute."""
from __future__ import annotations

import logging
import re

__all__ = [
    "kernel_lineage",
]

logger = logging.getLogger(__name__)


_GENERIC_VAR = re.compile(r"^(lv|gv)\d*$")


def kernel_lineage(fused_mod, var_lineage: dict[str, list[str]], graph, prefused_mod=None, final_mod=None) -> dict[str, list[str]]:
    """kernel name -> ONNX node labels, read from the module right after FuseOps.

    Each kernel is either a fused Relax function (FuseTIR turns it into one TIR kernel of the same
    name) or a PrimFunc called directly from main. The import names every node's output binding
    after its ONNX tensor, and FuseOps keeps binding names inside the functions it creates, so a
    kernel's nodes are the import lineage of the bindings it contains. Generic names (`lvN`,
    `gvN`) are never trusted: passes reuse them. Each binding inside a fused function (its output
    is renamed `gv`; a function shared by several call sites carries the first site's names) is
    matched to its original in the module before FuseOps by callee and arguments, call site by
    call site;
    nodes whose bindings a pass rewrote (a batch-norm that DecomposeOpsForInference expanded)
    are recovered as the ONNX nodes lying on paths between two nodes of the same kernel.
    FuseTIR may rename kernels (a suffix when a name is taken); main's calls keep their order, so
    the names are taken from `final_mod` (the scheduled module) call by call.
    """
    from tvm import relax

    def bindings(func):
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return []
        return [b for blk in body.blocks for b in blk.bindings]

    def callee(value):
        if isinstance(value, relax.Call):
            if getattr(value.op, "name", "") == "relax.call_tir":
                return value.args[0].name_hint
            if isinstance(value.op, relax.GlobalVar):
                return value.op.name_hint
        return None

    def arg_names(value) -> tuple[str, ...]:
        args = value.args[1].fields if getattr(value.op, "name", "") == "relax.call_tir" else value.args
        return tuple(a.name if isinstance(a, relax.Var) else "" for a in args)

    def trusted(name: str) -> bool:
        return name in var_lineage and not _GENERIC_VAR.match(name)

    # the module before FuseOps, indexed by (callee, argument names): FuseOps copies these bindings
    # into the fused functions, so each inner binding is matched structurally to its original
    by_call: dict[tuple, list[str]] = {}
    if prefused_mod is not None:
        for b in bindings(prefused_mod["main"]):
            c = callee(b.value)
            if c is not None:
                by_call.setdefault((c, arg_names(b.value)), []).append(b.var.name)

    by_label = {n.label: n.id for n in graph.nodes}
    result: dict[str, list[set[str]]] = {}  # kernel -> the node labels of each call site
    funcs = {gv.name_hint: f for gv, f in fused_mod.functions_items()}
    calls = [b for b in bindings(fused_mod["main"]) if callee(b.value) is not None]
    final_names = [callee(b.value) for b in bindings(final_mod["main"])] if final_mod is not None else []
    final_names = [n for n in final_names if n is not None]
    rename = len(final_names) == len(calls)
    outer_name: dict[str, str] = {}  # var name in the fused main -> its name before FuseOps

    def original(key: tuple) -> str:
        # identical calls (q/k/v projections of one input) are taken in program order
        names = by_call.get(key) or []
        return names.pop(0) if names else ""

    for i, b in enumerate(calls):
        name = callee(b.value)
        labels: set[str] = set()
        result.setdefault(final_names[i] if rename else name, []).append(labels)
        outer_args = [outer_name.get(n, n) for n in arg_names(b.value)]
        inner = funcs.get(name)
        matched = ""
        if isinstance(inner, relax.Function):
            local = {p.name: arg for p, arg in zip(inner.params, outer_args)}
            for ib in bindings(inner):
                c = callee(ib.value)
                mapped = tuple(local.get(n, n) if n else "" for n in arg_names(ib.value)) if c is not None else ()
                matched = original((c, mapped)) if c is not None else ""
                local[ib.var.name] = matched or ib.var.name
                for var in (matched, ib.var.name):
                    if trusted(var):
                        labels.update(var_lineage[var])
                        break
        else:
            matched = original((name, tuple(outer_args)))
        if matched:
            outer_name[b.var.name] = matched
        for var in (matched, b.var.name):
            if trusted(var):
                labels.update(var_lineage[var])
                break
    order = {nid: i for i, nid in enumerate(graph.topological_order())}
    out: dict[str, list[str]] = {}
    for name, sites in result.items():
        all_ids: set[int] = set()
        for labels in sites:
            ids = {by_label[l] for l in labels if l in by_label}
            if len(ids) > 1:  # nodes between two nodes of one call site belong to it
                between = set()
                for a in ids:
                    desc = graph.descendants(a)
                    for b in ids:
                        if b != a and b in desc:
                            between |= desc & graph.ancestors(b)
                ids |= between
            all_ids |= ids
        out[name] = [graph.node(i).label for i in sorted(all_ids, key=lambda i: order.get(i, 0))]
    return out
