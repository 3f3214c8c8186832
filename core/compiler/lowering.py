"""Step-through lowering: the model, one abstraction level at a time.

`lower(graph, target)` turns a Graph into a list of `Stage`s, a snapshot after every step:

    ONNX graph -> Relax import -> one stage per enabled pass of the pipeline (core.compiler.pipeline:
    graph passes, LegalizeOps, FuseOps/FuseTIR, ScheduleTIR, the VM lowering) -> target code
    (LLVM IR for CPU, plus assembly with `assembly=True`; CUDA C and the host's LLVM IR for CUDA:
    generating CUDA source needs no GPU).

Each Stage has its IR text (TVMScript for Relax/TIR), a ViewGraph of that IR (built lazily; see
core.views.relax_view), the seconds the step took (measured with a tvm.instrument PassInstrument, which
also gives the nested passes' times) and lineage: Relax variable / function name -> ONNX node ids.

Lineage is recorded at import (core.compiler.tvm_import) and carried from stage to stage:
1. a binding whose variable name existed before keeps its origin (passes keep names);
2. a fused Relax function's origin is the union of its bindings' origins (FuseOps moves the
   bindings, names and all); a kernel's origin is the union of the callers' (LegalizeOps replaces
   `x = R.op(...)` by `x = R.call_tir(kernel, ...)`), or that of the same-named function before
   (FuseTIR names the kernel after the fused function);
3. a binding with a new name calling a function takes the function's origin; anything else new
   (allocations, storage) takes that of the next binding that has one.

Editing the pipeline and lowering again reuses a `LoweringCache`: a stage is keyed by the model's
bytes, the target and the enabled passes up to it, so disabling pass k recomputes from k on.
`cancel()` is polled between steps, and within the long ones: the CPU schedules between kernels,
their weight prepacking and the target code between groups of kernels (core.compiler.codegen);
other single TVM passes run to their end. `progress(done, total, name)` reports each step.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..errors import UnsupportedOpError, WorkbenchError
from ..views.viewgraph import ViewGraph

__all__ = ["Stage", "LoweringCache", "LoweringError", "LoweringCancelled", "lower", "onnx_text", "stage_filename"]

logger = logging.getLogger(__name__)


class LoweringError(WorkbenchError):
    """A step of the lowering failed; `stages` holds the stages done before it."""

    def __init__(self, message: str, stages: list["Stage"] | None = None):
        super().__init__(message)
        self.stages = stages or []


class LoweringCancelled(Exception):
    """The user cancelled; `stages` holds the stages done so far."""

    def __init__(self, stages: list["Stage"] | None = None):
        super().__init__("lowering cancelled.")
        self.stages = stages or []


@dataclass
class Stage:
    """The module after one step, as text, as a graph, timed, with lineage back to ONNX nodes."""

    index: int
    name: str  # 'ONNX graph', 'Relax import', a pass name, 'LLVM IR', 'CUDA C', 'Assembly'
    level: str  # 'graph' | 'tensor program' | 'target code'
    pass_name: str  # the pass or step that made this stage
    text: str
    language: str  # 'onnx' | 'tvmscript' | 'llvm' | 'asm' | 'cuda'
    seconds: float
    lineage: Any = None  # core.views.relax_view.Lineage: binding / function -> ONNX node ids
    pass_seconds: list[tuple[str, float, int]] = field(default_factory=list)  # (pass, seconds, depth), tvm.instrument
    changed: bool = True  # text differs from the previous stage's
    cached: bool = False  # reused from a LoweringCache
    mod: Any = None  # the tvm IRModule after this step (None for ONNX and target code)
    _view: ViewGraph | None = field(default=None, repr=False)
    _view_builder: Callable[[], ViewGraph] | None = field(default=None, repr=False)

    @property
    def view(self) -> ViewGraph:
        """The graph of this stage's IR (built on first use)."""
        if self._view is None and self._view_builder is not None:
            self._view = self._view_builder()
        return self._view

    @property
    def functions(self) -> list[str]:
        """Functions of the module (fused Relax functions and TIR kernels), expandable in the view."""
        if self.language != "tvmscript" or self.mod is None:
            return []
        from ..views.relax_view import function_spans

        return [n for n in function_spans(self.text) if n != "main"]

    def function_view(self, name: str) -> ViewGraph:
        """The graph of one fused function or kernel of this stage (what a call node expands into)."""
        from ..views.relax_view import function_view

        if self.mod is None:
            raise KeyError(name)
        return function_view(self.mod, name, self.text, self.lineage)

    def function_lines(self, name: str) -> tuple[int, int] | None:
        from ..views.relax_view import function_spans

        return function_spans(self.text).get(name)

    def lines_of(self, node_id) -> tuple[int, int] | None:
        """The IR lines (1-based, inclusive) of a view node: its statement, or a callee's definition."""
        view = self.view
        if view is None:
            return None
        try:
            node = view.node(node_id)
        except KeyError:
            return None
        line = node.data.get("line")
        end = node.data.get("end_line", line)
        return (line, end) if line else None

    def lineage_map(self) -> dict[str, list[int]]:
        """Relax variable name / '@function' -> ONNX node ids (for the ONNX stage: node id -> itself)."""
        if self.lineage is None:
            return {}
        return self.lineage if isinstance(self.lineage, dict) else self.lineage.as_dict()

    def summary(self) -> dict:
        return {"index": self.index, "name": self.name, "level": self.level, "pass": self.pass_name,
                "seconds": round(self.seconds, 4), "changed": self.changed, "cached": self.cached,
                "language": self.language, "lines": self.text.count("\n") + 1}


def stage_filename(stage: Stage) -> str:
    """'03_FoldWeights.py'-style name for dumping a stage (extension by language)."""
    ext = {"onnx": "txt", "tvmscript": "py", "llvm": "ll", "asm": "s", "cuda": "cu"}.get(stage.language, "txt")
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in stage.name)
    return f"{stage.index:02d}_{safe}.{ext}"


# ---- ONNX stage ---------------------------------------------------------------------------------

def _attr_text(v) -> str:
    import numpy as np

    if isinstance(v, np.ndarray):
        return f"<tensor {'×'.join(map(str, v.shape)) or 'scalar'}>"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_attr_text(x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, bytes):
        return repr(v.decode(errors="replace"))
    if hasattr(v, "name") and hasattr(v, "node"):  # subgraph
        return f"<graph {v.name}>"
    return repr(v) if isinstance(v, str) else str(v)


def onnx_text(graph) -> tuple[str, dict[int, int]]:
    """A readable listing of the ONNX graph (weights by shape, not value) and node id -> line."""
    lines = [f"graph {graph.name or 'model'} (opset {graph.opset})"]
    for v in graph.inputs:
        lines.append(f"  input  %{v.name}: {v.dtype}{v.shape_text}")
    for v in graph.outputs:
        lines.append(f"  output %{v.name}: {v.dtype}{v.shape_text}")
    inits = graph.initializers
    if inits:
        lines.append(f"  weights ({len(inits)}):")
        for v in inits:
            lines.append(f"    %{v.name}: {v.dtype}{v.shape_text}")
    lines.append("")
    line_of: dict[int, int] = {}
    for n in graph.nodes:
        attrs = n.attributes
        attr = "" if not attrs else "<" + ", ".join(f"{k}={_attr_text(v)}" for k, v in attrs.items()) + ">"
        outs = ", ".join(f"%{o}" for o in n.outputs)
        ins = ", ".join(f"%{i}" if i else "_" for i in n.inputs)
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        lines.append(f"  {outs} = {op}{attr}({ins})    # {n.label} [#{n.id}]")
        line_of[n.id] = len(lines)
    return "\n".join(lines) + "\n", line_of


def _onnx_stage(graph) -> Stage:
    from ..views.viewgraph import from_graph

    t0 = time.perf_counter()
    text, line_of = onnx_text(graph)
    view = from_graph(graph)
    for node in view.nodes:
        if isinstance(node.id, int):
            node.data["line"] = line_of.get(node.id)
    view.data["stage"] = "ONNX graph"
    return Stage(index=0, name="ONNX graph", level="graph", pass_name="onnx", text=text, language="onnx",
                 seconds=time.perf_counter() - t0, lineage={str(n.id): [n.id] for n in graph.nodes}, _view=view)


# ---- lineage ------------------------------------------------------------------------------------

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
    from ..views.relax_view import Lineage, _vars_in

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

    def take(k: int, u) -> None:
        owner[k] = u
        owned[u].append(k)
        c = kind[orphans[k]]
        if need[u].get(c):
            need[u][c] -= 1

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
            for k, o in enumerate(orphans):
                if k not in owner and wanted(u, o) and inputs[o] & reads:
                    take(k, u)
                    break
        if owned[u]:
            mine = {orphans[k] for k in owned[u]}
            for k in range(min(owned[u]), len(orphans)):
                o = orphans[k]
                if k not in owner and wanted(u, o) and inputs[o] & mine:
                    take(k, u)
                    mine.add(o)
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

    from ..views.relax_view import Lineage

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


def _import_lineage(mod, names: dict[str, list[int]]):
    from ..views.relax_view import Lineage

    by_var = {}
    for b in _function_bindings(mod["main"]):
        ids = names.get(b.var.name)
        if ids:
            by_var[b.var] = list(ids)
    return Lineage(by_var=by_var, by_name={k: v for k, v in names.items() if Lineage.stable_name(k)})


# ---- timing -------------------------------------------------------------------------------------

def _timing_instrument():
    import tvm

    @tvm.ir.instrument.pass_instrument
    class PassTimes:
        """Seconds per pass, nested passes included (depth 0 = the step itself)."""

        def __init__(self):
            self.times: list[tuple[str, float, int]] = []
            self._stack: list[tuple[str, float]] = []

        def run_before_pass(self, mod, info):
            self._stack.append((info.name, time.perf_counter()))

        def run_after_pass(self, mod, info):
            name, t0 = self._stack.pop()
            self.times.append((name, time.perf_counter() - t0, len(self._stack)))

    return PassTimes()


def _run_timed(fn, mod):
    import tvm

    instrument = _timing_instrument()
    cur = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=cur.opt_level, config=dict(cur.config), instruments=[instrument],
                                   required_pass=list(cur.required_pass), disabled_pass=list(cur.disabled_pass)):
        t0 = time.perf_counter()
        out = fn(mod)
        seconds = time.perf_counter() - t0
    times = sorted(instrument.times, key=lambda x: x[2])
    return out, seconds, times


# ---- cache --------------------------------------------------------------------------------------

class LoweringCache:
    """Stages by (model bytes, target, enabled passes so far); lets an edited pipeline reuse its prefix."""

    def __init__(self, max_entries: int = 96):
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple, Stage] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> Stage | None:
        stage = self._entries.get(key)
        if stage is not None:
            self._entries.move_to_end(key)
            self.hits += 1
        else:
            self.misses += 1
        return stage

    def put(self, key: tuple, stage: Stage) -> None:
        self._entries[key] = stage
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _fingerprint(graph) -> str:
    from .tvm_import import registered_converters

    h = hashlib.sha1(graph.to_bytes())
    h.update(",".join(f"{k}={v.__module__}.{v.__qualname__}" for k, v in sorted(registered_converters().items())).encode())
    return h.hexdigest()


# ---- target code --------------------------------------------------------------------------------

def _find_modules(lib, kinds: tuple[str, ...]) -> list:
    found, stack, seen = [], [lib], set()
    while stack:
        m = stack.pop()
        key = id(m)
        if key in seen:
            continue
        seen.add(key)
        if getattr(m, "kind", None) in kinds:
            found.append(m)
        stack.extend(list(getattr(m, "imports", []) or []))
    return found


def _cpu_code_parallel(mod, target, with_asm: bool, parts: int, cancel=None) -> list[tuple[str, str, str]]:
    """The kernels' LLVM IR, built in `parts` chunks on a few threads (`cancel()` polled meanwhile).

    TVM's LLVM codegen is single-threaded and is most of the lowering time of a big model
    (ResNet-50: ~6 s CPU); the kernels are independent PrimFuncs, so building them in chunks on
    every core gives the same code per kernel (same target, same TIR pipeline) in a fraction of
    the wall time. Each chunk's module is shown in turn, headed by a comment line.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    import tvm

    from .codegen import POLL_S, BuildCancelled

    funcs = sorted(((gv, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)),
                   key=lambda kv: kv[0].name_hint)
    chunks = [dict(funcs[i::parts]) for i in range(parts)]

    def build(chunk):
        lib = tvm.tirx.build(tvm.IRModule(chunk, attrs=mod.attrs), target)
        return lib.inspect_source("ll"), (lib.inspect_source("asm") if with_asm else "")

    from .target import host_cores

    pool = ThreadPoolExecutor(min(parts, host_cores(), 4), thread_name_prefix="codegen")
    try:
        futures = [pool.submit(build, c) for c in chunks]
        pending = set(futures)
        while pending:  # cancel lands between polls; chunks already building finish in the background
            _, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            if cancel is not None and cancel():
                raise BuildCancelled()
        built = [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    head = "; ---- kernels {names} ({i}/{n}) ----\n"
    ll = "".join(head.format(names=f"{len(c)} functions", i=i + 1, n=parts) + code[0] for i, (c, code) in enumerate(zip(chunks, built)))
    out = [("LLVM IR", "llvm", ll)]
    if with_asm:
        asm = "".join(f"# ---- kernels ({i + 1}/{parts}) ----\n" + code[1] for i, code in enumerate(built))
        out.append(("Assembly", "asm", asm))
    return out


def _target_code(mod, target, with_asm: bool, cancel=None) -> list[tuple[str, str, str]]:
    """[(stage name, language, text)] from building `mod` (already through the Relax pipeline)."""
    import tvm

    from .codegen import BuildCancelled
    from .target import host_cores

    if "gpu" not in target.keys:
        n_funcs = sum(1 for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc))
        # more chunks than threads: a cancel leaves at most one small chunk per thread running
        parts = min(max(host_cores(), n_funcs // 4), n_funcs)
        if parts > 1 and n_funcs >= 8:
            try:
                return _cpu_code_parallel(mod, target, with_asm, parts, cancel)
            except BuildCancelled:
                raise
            except Exception:  # noqa: BLE001 - fall back to the plain build, which reports properly
                logger.debug("parallel codegen failed; building in one piece", exc_info=True)
    ex = tvm.compile(mod, target, relax_pipeline=None)
    lib = ex.mod
    out = []
    if "gpu" in target.keys:
        cuda = _find_modules(lib, ("cuda",))
        if not cuda:
            raise LoweringError("the CUDA build produced no CUDA module to show.")
        out.append(("CUDA C", "cuda", "\n".join(m.inspect_source() for m in cuda)))
        host = _find_modules(lib, ("llvm",))
        if host:
            out.append(("Host LLVM IR", "llvm", host[0].inspect_source("ll")))
        return out
    llvm = _find_modules(lib, ("llvm",))
    if not llvm:
        raise LoweringError("the CPU build produced no LLVM module to show.")
    out.append(("LLVM IR", "llvm", llvm[0].inspect_source("ll")))
    if with_asm:
        out.append(("Assembly", "asm", llvm[0].inspect_source("asm")))
    return out


# ---- lower --------------------------------------------------------------------------------------

def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # TVM errors end with the message after a traceback
    for ln in reversed(lines):
        if not ln.startswith(("File ", "at ", "^", "~")) and "Traceback" not in ln:
            return ln.rstrip(".")
    return type(e).__name__


def lower(
    graph,
    target: Any = "cpu",
    specs: list | None = None,
    *,
    cache: LoweringCache | None = None,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    target_code: bool = True,
    assembly: bool = False,
) -> list[Stage]:
    """The stages of lowering `graph` for `target` ('cpu', 'cuda' or a tvm Target) through `specs`.

    Raises UnsupportedOpError / LoweringError (with `.stages`: the stages before the failing step,
    at least the ONNX graph) and LoweringCancelled (with `.stages`) when `cancel()` turns true.
    """
    from .pipeline import default_pipeline, make_pass, validate
    from .target import make_target

    tgt = make_target(target) if isinstance(target, str) else target
    specs = list(specs) if specs is not None else default_pipeline(tgt)
    enabled = [s for s in specs if s.enabled]
    total = 2 + len(enabled) + (1 if target_code else 0)
    stages: list[Stage] = []

    def step(name: str) -> None:
        if cancel is not None and cancel():
            raise LoweringCancelled(stages)
        if progress is not None:
            progress(len(stages), total, name)

    step("ONNX graph")
    stages.append(_onnx_stage(graph))
    problems = validate(specs)
    if problems:
        raise LoweringError(problems[0], stages)

    from ..views.relax_view import kernel_view, module_view

    fp = _fingerprint(graph)
    key: tuple = (fp, str(tgt))

    def relax_stage(name, level, pass_name, mod, lineage, seconds, times) -> Stage:
        text = mod.script(show_meta=False)
        prev = stages[-1]
        stage = Stage(index=len(stages), name=name, level=level, pass_name=pass_name, text=text, language="tvmscript",
                      seconds=seconds, lineage=lineage, pass_seconds=times, changed=text != prev.text, mod=mod)
        title = f"{stage.index}. {name}"
        stage._view_builder = lambda m=mod, t=text, ln=lineage, ti=title: module_view(m, t, ln, ti)
        return stage

    def reuse(k) -> bool:
        hit = cache.get(k) if cache is not None else None
        if hit is None:
            return False
        stage = replace(hit, index=len(stages), cached=True)
        stage.changed = stage.text != stages[-1].text
        stages.append(stage)
        return True

    # Relax import
    step("Relax import")
    key = key + ("import",)
    if not reuse(key):
        from .tvm_import import import_graph

        try:
            result = import_graph(graph)
        except UnsupportedOpError as e:
            e.stages = stages
            raise
        stage = relax_stage("Relax import", "graph", "relax.frontend.onnx.from_onnx", result.mod,
                            _import_lineage(result.mod, result.lineage),
                            result.seconds, [("from_onnx", result.seconds, 0)])
        stage.changed = True
        stages.append(stage)
        if cache is not None:
            cache.put(key, stage)

    from .codegen import BuildCancelled, cancel_scope

    with tgt, cancel_scope(cancel):
        for spec in enabled:
            step(spec.name)
            key = key + (spec.name,)
            if reuse(key):
                continue
            prev = stages[-1]
            try:
                mod, seconds, times = _run_timed(make_pass(spec, tgt), prev.mod)
            except Exception as e:  # noqa: BLE001 - TVM raises its own types; name the pass
                if isinstance(e, BuildCancelled) or (cancel is not None and cancel()):
                    raise LoweringCancelled(stages) from None  # a pass polling cancel stopped
                raise LoweringError(f"pass {spec.name} failed on {graph.path.name if graph.path else 'the model'}: "
                                    f"{_first_line(e)}.", stages) from e
            lineage = propagate_lineage(mod, prev.lineage, prev.mod)
            stage = relax_stage(spec.name, spec.level, spec.name, mod, lineage, seconds, times)
            stages.append(stage)
            if cache is not None:
                cache.put(key, stage)

        if target_code:
            step("target code")
            code_key = key + ("target code", assembly)
            hit = cache.get(code_key) if cache is not None else None
            if hit is not None:
                for s in hit:
                    stages.append(replace(s, index=len(stages), cached=True))
            else:
                last = stages[-1]
                # the kernels' data flow reads best before CallTIRRewrite (destination passing
                # routes every tensor through an allocation)
                base = next((s for s in reversed(stages) if s.language == "tvmscript" and "R.call_tir(" in s.text), last)
                try:
                    codes, seconds, times = _run_timed(lambda m: _target_code(m, tgt, assembly, cancel), last.mod)
                except BuildCancelled:
                    raise LoweringCancelled(stages) from None
                except LoweringError as e:
                    e.stages = stages
                    raise
                except Exception as e:  # noqa: BLE001
                    raise LoweringError(f"building target code failed: {_first_line(e)}.", stages) from e
                made = []
                for k, (name, language, text) in enumerate(codes):
                    s = Stage(index=len(stages), name=name, level="target code",
                              pass_name="tvm.compile (TIR pipeline + codegen)", text=text, language=language,
                              seconds=seconds if k == 0 else 0.0, lineage=last.lineage,
                              pass_seconds=times if k == 0 else [], changed=True)
                    if language == "llvm" and k == 0 and "gpu" not in tgt.keys:
                        s.pass_name = "TIR pipeline + LLVM codegen (tvm.tirx.build)"
                    title = f"{s.index}. {name}"
                    s._view_builder = (lambda b=base, code=text, lang=language, ti=title:
                                       kernel_view(b.view, code, lang, b.lineage, ti))
                    stages.append(s)
                    made.append(s)
                if cache is not None:
                    cache.put(code_key, made)
    if progress is not None:
        progress(total, total, "done")
    return stages
