"""Lineage: which ONNX nodes each Relax binding, fused function and compiled kernel computes.

One module for both directions lineage is read in:

* stage to stage (`propagate_lineage`, used by lowering for every snapshot):
  1. a binding whose variable name existed before keeps its origin (passes keep names);
  2. a fused Relax function's origin is the union of its bindings' origins (FuseOps moves the
     bindings, names and all); a kernel's origin is the union of the callers' (LegalizeOps replaces
     `x = R.op(...)` by `x = R.call_tir(kernel, ...)`), or that of the same-named function before
     (FuseTIR names the kernel after the fused function);
  3. a binding with a new name calling a function takes the function's origin; anything else new
     (allocations, storage) takes that of the next binding that has one.
* kernel to ONNX nodes in one read of the modules around FuseOps (`kernel_lineage`, what compile
  records in the manifest and bench uses to put kernel time on the graph).

The import records the first link (core.compiler.frontend.onnx_import: Relax variable -> ONNX node ids;
`import_lineage` makes it a Lineage).
"""
from __future__ import annotations

import heapq
import logging
import re
from collections import Counter
from typing import Any

__all__ = [
    "KernelLineageTap",
    "bucket_lineage",
    "kernel_lineage",
    "propagate_lineage",
    "import_lineage",
    "deferred_lineage",
]

logger = logging.getLogger(__name__)


_GENERIC_VAR = re.compile(r"^(lv|gv)\d*$")


class KernelLineageTap:
    """An `after` hook for core.compiler.pipeline.runner that keeps the modules `kernel_lineage` reads:
    the one before the fusing step (FuseOps) and the one after it (after the legalizing step,
    LegalizeOps, when fusing is off). The steps are found by their passes' flags, not by name."""

    def __init__(self, imported_mod):
        self.prev = imported_mod
        self.prefused = None
        self.fused = None

    def __call__(self, result) -> None:
        info = result.step.info  # None: a step compile inserted (tuning), neither fuses nor legalizes
        fuses = info is not None and info.fuses
        if fuses:
            self.prefused = self.prev
        if fuses or (self.fused is None and info is not None and info.legalizes):
            self.fused = result.mod
        self.prev = result.mod

    def kernel_lineage(self, var_lineage: dict[str, list[str]], graph, final_mod) -> dict[str, list[str]]:
        """kernel_lineage of what the run kept ({} when no step made kernels)."""
        if self.fused is None:
            return {}
        return kernel_lineage(self.fused, var_lineage, graph, self.prefused, final_mod)


def bucket_lineage(tap: KernelLineageTap, function: str, var_lineage: dict[str, list[str]], graph, final_mod) -> dict[str, list[str]]:
    """kernel_lineage of a shape bucket's function (core.compiler.pipeline.buckets): the modules
    the tap kept, read with `function` in main's place. A bucket is main with its dims bound, its
    bindings named as main's, so its kernels trace to the same ONNX nodes."""
    from .buckets import as_main

    if tap.fused is None:
        return {}
    fused, prefused, final = (as_main(m, function) for m in (tap.fused, tap.prefused, final_mod))
    if fused is None:
        return {}
    # the result's generic name is made unique in the module (`gv` -> `gv1`): it stands for main's
    ours, mains = _returned(fused["main"]), _returned(tap.fused["main"])
    if ours and mains in var_lineage and ours not in var_lineage:
        var_lineage = {**var_lineage, ours: var_lineage[mains]}
    return kernel_lineage(fused, var_lineage, graph, prefused, final)


def _returned(func) -> str | None:
    """The name of the variable a Relax function returns (None: not one variable)."""
    from tvm import relax

    body = getattr(func, "body", None)
    return body.body.name if isinstance(body, relax.SeqExpr) and isinstance(body.body, relax.Var) else None


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
    the names are taken from `final_mod` (the scheduled module) call by call. A kernel a pass built
    from several bindings names them in its `mlcwb.absorbs` attribute (IntegerConv: the conv and
    its DequantizeLinear inputs), and their nodes are the kernel's too.
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
    body = fused_mod["main"].body
    returned = body.body.name if isinstance(body, relax.SeqExpr) and isinstance(body.body, relax.Var) else None

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
            absorbed = inner.attrs.get("mlcwb.absorbs", None) if inner is not None and inner.attrs is not None else None
            for var in absorbed or ():  # bindings a pass computed in this kernel (passes.integer_conv)
                if trusted(str(var)):
                    labels.update(var_lineage[str(var)])
        if matched:
            outer_name[b.var.name] = matched
        for var in (matched, b.var.name):
            if trusted(var):
                labels.update(var_lineage[var])
                break
        else:
            if b.var.name == returned and returned in var_lineage:  # main's result keeps its generic name (`gv`) from the import on
                labels.update(var_lineage[returned])
    order = {nid: i for i, nid in enumerate(graph.topological_order())}
    out: dict[str, list[str]] = {}
    for name, sites in result.items():
        all_ids: set[int] = set()
        for labels in sites:
            ids = {by_label[l] for l in labels if l in by_label}
            if len(ids) > 1:  # nodes between two nodes of one call site belong to it
                ids |= _between(graph, ids, order)
            all_ids |= ids
        out[name] = [graph.node(i).label for i in sorted(all_ids, key=lambda i: order.get(i, 0))]
    return out


def _between(graph, ids: set[int], order: dict[int, int]) -> set[int]:
    """Nodes on a path from one node of `ids` to another: reachable downwards from the set and
    upwards from it. Both walks stay within the set's span of the topological order, so a kernel
    costs its span, not the graph (pairwise descendants/ancestors made compile quadratic in the
    model: a 2,000-node chain spent most of its compile here)."""
    G = graph.to_networkx()
    lo = min(order.get(i, 0) for i in ids)
    hi = max(order.get(i, 0) for i in ids)

    def walk(step, inside) -> set[int]:
        seen: set[int] = set()
        stack = list(ids)
        while stack:
            for nxt in step(stack.pop()):
                if nxt not in seen and inside(order.get(nxt, -1)):
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    down = walk(G.successors, lambda k: k <= hi)
    up = walk(G.predecessors, lambda k: lo <= k)
    return (down & up) - ids


def _callee(value) -> str | None:
    from tvm import relax

    if isinstance(value, relax.Call):
        if isinstance(value.op, relax.GlobalVar):
            return value.op.name_hint
        name = getattr(value.op, "name", None)
        if name in ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed") and value.args:
            if isinstance(value.args[0], relax.GlobalVar):
                return value.args[0].name_hint
    return None


def _function_bindings(func):
    from tvm import relax

    if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
        return []
    return [b for blk in func.body.blocks for b in blk.bindings]


def _realign_main(mod, prev_mod, prev, by_var: dict, func_origin: dict, callee_of: dict) -> None:
    """Bindings of the previous `main` that vanished (fused away, re-created) hand their origins
    to the new bindings that took their place.

    A new binding calling a fused function stands for a group of old bindings: those the function
    still holds (same Var, or a new Var with the import's name), grown along the data flow with
    the kernels the function calls (conv2d, then the subtract that reads it, ...). A group found
    nothing that way (a function shared by identical blocks) is seeded by its arguments: the
    first vanished binding of a needed kernel that reads what the call reads. Groups may
    interleave (two branches imported side by side); data flow keeps them apart.
    """
    if prev_mod is None:
        return
    try:
        old_bindings = _function_bindings(prev_mod["main"])
        new_bindings = _function_bindings(mod["main"])
    except Exception:  # noqa: BLE001 - no main
        return
    from ...views.relax_view import Lineage, _vars_in

    old_set = {b.var for b in old_bindings}
    new_set = {b.var for b in new_bindings}
    orphans = [b.var for b in old_bindings if b.var not in new_set]
    fresh = [b.var for b in new_bindings if b.var not in old_set]
    if not orphans or not fresh:
        return
    if len(orphans) == len(fresh) and all(o.name == f.name or not Lineage.stable_name(o.name) for o, f in zip(orphans, fresh)):
        # the same bindings, re-created (ToNonDataflow makes every variable anew): pair them up
        for o, f in zip(orphans, fresh):
            ids = prev.of_var(o)
            if ids:
                by_var.setdefault(f, set()).update(ids)
        return
    old_value = {b.var: b.value for b in old_bindings}
    new_value = {b.var: b.value for b in new_bindings}
    kind = {o: _callee(old_value[o]) for o in orphans}
    inputs = {o: set(_vars_in(old_value[o])) for o in orphans}
    index: dict = {}
    for k, o in enumerate(orphans):
        index[o] = k
        if Lineage.stable_name(o.name):
            index.setdefault(o.name, k)

    callers: dict[str, int] = {}
    for v in new_set:
        f = callee_of.get(v)
        if f:
            callers[f] = callers.get(f, 0) + 1
    group: dict[str, list] = {}  # function -> the kernels its bindings call
    inner: dict[str, set] = {}  # function -> its binding Vars and import-chosen names
    for gv, func in mod.functions.items():
        bl = _function_bindings(func)
        group[gv.name_hint] = [c for c in (_callee(b.value) for b in bl) if c] if bl else [gv.name_hint]
        names = set()
        for b in bl:
            names.add(b.var)
            if Lineage.stable_name(b.var.name):
                names.add(b.var.name)
        inner[gv.name_hint] = names

    owner: dict[int, object] = {}
    owned: dict = {u: [] for u in fresh}
    need = {u: Counter(group.get(callee_of.get(u), ())) for u in fresh}
    left = {u: sum(need[u].values()) for u in fresh}  # kernels u still needs: none, nothing more to take
    readers: dict = {}  # old var -> positions of the orphans reading it, ascending
    for k, o in enumerate(orphans):
        for a in inputs[o]:
            readers.setdefault(a, []).append(k)

    def take(k: int, u) -> None:
        owner[k] = u
        owned[u].append(k)
        c = kind[orphans[k]]
        if need[u].get(c):
            need[u][c] -= 1
            left[u] -= 1

    def wanted(u, o) -> bool:
        return bool(need[u].get(kind[o]))

    for u in fresh:  # 1. bindings a fused function (called once) kept
        f = callee_of.get(u)
        if f and callers.get(f) == 1:
            for item in inner.get(f, ()):
                k = index.get(item)
                if k is not None and k not in owner:
                    take(k, u)
    replaced: dict = {}  # new var -> the old var it stands for
    for u in fresh:  # 2. seed by the call's arguments, grow along the data flow
        if not owned[u] and need[u]:
            reads = set()
            for a in _vars_in(new_value[u]):
                if a in old_set:
                    reads.add(a)
                elif a in replaced:
                    reads.add(replaced[a])
                elif a not in new_set and a in readers:  # a parameter of main (the first fused call reads the input)
                    reads.add(a)
            # the first free orphan of a wanted kernel reading what the call reads (only the
            # readers of those vars can: no scan of every orphan per call, which was quadratic)
            for k in sorted({k for a in reads for k in readers.get(a, ())}):
                if k not in owner and wanted(u, orphans[k]):
                    take(k, u)
                    break
        if owned[u]:
            # grow along the data flow in binding order: the orphans after the first owned one
            # that read an owned one, while u needs kernels (a heap of the readers, not a scan)
            start = min(owned[u])
            mine = {orphans[k] for k in owned[u]}
            heap = sorted({k for m in mine for k in readers.get(m, ()) if k >= start})
            queued = set(heap)
            while heap and left[u] > 0:
                k = heapq.heappop(heap)
                o = orphans[k]
                if k not in owner and wanted(u, o):
                    take(k, u)
                    mine.add(o)
                    for r in readers.get(o, ()):
                        if r > k and r not in queued:
                            queued.add(r)
                            heapq.heappush(heap, r)
            replaced[u] = orphans[max(owned[u])]
    # 3. a vanished binding and a new one of the same name (unique on both sides) are one
    # binding rebuilt (LowerAllocTensor keeps `alloc3`, `storage1` but makes new variables)
    old_names = Counter(o.name for o in orphans)
    new_by_name: dict[str, list] = {}
    for f in fresh:
        new_by_name.setdefault(f.name, []).append(f)
    for k, o in enumerate(orphans):
        same = new_by_name.get(o.name, [])
        if k not in owner and old_names[o.name] == 1 and len(same) == 1:
            owner[k] = same[0]
    # 4. the rest: the first new binding after the same surviving neighbour (allocations,
    # storage: bindings a pass replaced one for one in place)
    first_fresh_after: dict = {}
    pending_anchor = None
    for b in new_bindings:
        if b.var in old_set:
            pending_anchor = b.var
        elif pending_anchor not in first_fresh_after:
            first_fresh_after[pending_anchor] = b.var
    anchor = None
    for b in old_bindings:
        o = b.var
        if o in new_set:
            anchor = o
            continue
        k = index[o]
        ids = prev.of_var(o)
        if not ids:
            continue
        u = owner.get(k)
        if u is None and kind[o] is None:
            continue  # bookkeeping (an allocation, a storage) with no heir: its kernel call has the origin
        if u is None:
            u = first_fresh_after.get(anchor)
        if u is None:
            u = fresh[0]
        by_var.setdefault(u, set()).update(ids)


def propagate_lineage(mod, prev, prev_mod=None):
    """Lineage (core.views.relax_view.Lineage) of `mod`, from the previous stage's (module docstring)."""
    from tvm import relax

    from ...views.relax_view import Lineage

    by_var: dict = {}
    funcs = {gv.name_hint: f for gv, f in mod.functions.items()}
    calls: dict[str, list[tuple[Any, str | None]]] = {}
    for fname, func in funcs.items():
        if isinstance(func, relax.Function):
            calls[fname] = [(b.var, _callee(b.value)) for b in _function_bindings(func)]
    # 1. kept bindings; 2. fused functions from their bindings
    func_origin: dict[str, set[int]] = {}
    for fname, bl in calls.items():
        for var, _ in bl:
            ids = prev.of_var(var)
            if ids:
                by_var[var] = set(ids)
        if fname != "main":
            func_origin[fname] = {i for var, _ in bl for i in by_var.get(var, ())}
    callee_of = {var: callee for var, callee in calls.get("main", []) if callee}
    _realign_main(mod, prev_mod, prev, by_var, func_origin, callee_of)
    for fname in funcs:
        ids = prev.of_function(fname)
        if ids:
            func_origin.setdefault(fname, set()).update(ids)
    # kernels: union of their callers' origins
    for fname, bl in calls.items():
        for var, callee in bl:
            if callee and callee in funcs:
                caller = by_var.get(var) or (func_origin.get(fname, set()) if fname != "main" else set())
                func_origin.setdefault(callee, set()).update(caller)
    # 3. new bindings calling functions, then the rest from the next (else previous) known binding
    call_count: dict[str, int] = {}
    for bl in calls.values():
        for _, callee in bl:
            if callee:
                call_count[callee] = call_count.get(callee, 0) + 1
    for fname, bl in calls.items():
        for var, callee in bl:
            # a shared kernel's origin is every caller's: a call site takes it only when it is the one
            if not by_var.get(var) and callee and func_origin.get(callee) and call_count.get(callee) == 1:
                by_var[var] = set(func_origin[callee])
        nxt: set[int] | None = None
        for var, _ in reversed(bl):
            if by_var.get(var):
                nxt = by_var[var]
            elif nxt:
                by_var[var] = set(nxt)
        last: set[int] | None = None
        for var, _ in bl:
            if by_var.get(var):
                last = by_var[var]
            elif last:
                by_var[var] = set(last)
    by_name: dict[str, set[int]] = {}
    for var, ids in by_var.items():
        if Lineage.stable_name(var.name):
            by_name.setdefault(var.name, set()).update(ids)
    for name, ids in prev.by_name.items():  # names that left the module may come back (e.g. inlined)
        by_name.setdefault(name, set(ids))
    return Lineage(by_var={k: sorted(v) for k, v in by_var.items() if v},
                   by_name={k: sorted(v) for k, v in by_name.items() if v},
                   by_function={k: sorted(v) for k, v in func_origin.items() if v})


def deferred_lineage(build):
    """A Lineage that `build()` computes on first use (lowering: a stage's lineage is wanted only
    when its view is shown, and propagating it through every stage of a 60,000-node model costs
    more than a third of lowering it). It is a Lineage, so whatever takes one takes it."""
    from ...views.relax_view import Lineage

    class DeferredLineage(Lineage):
        def __init__(self):  # no super().__init__(): the fields come from build()
            self._build, self._real = build, None

        def _resolve(self) -> Lineage:
            if self._real is None:
                self._real, self._build = self._build(), None
            return self._real

        by_var = property(lambda self: self._resolve().by_var)
        by_name = property(lambda self: self._resolve().by_name)
        by_function = property(lambda self: self._resolve().by_function)

    return DeferredLineage()


def import_lineage(mod, names: dict[str, list[int]]):
    """Lineage (core.views.relax_view.Lineage) of the imported module from the import's
    Relax variable name -> ONNX node ids."""
    from ...views.relax_view import Lineage

    by_var = {}
    for b in _function_bindings(mod["main"]):
        ids = names.get(b.var.name)
        if ids:
            by_var[b.var] = list(ids)
    return Lineage(by_var=by_var, by_name={k: v for k, v in names.items() if Lineage.stable_name(k)})
