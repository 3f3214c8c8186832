"""Step-through lowering: the model, one abstraction level at a time.

`lower(graph, target)` turns a Graph into a list of `Stage`s, a snapshot after every step:

    ONNX graph -> Relax import -> one stage per enabled pass of the pipeline (core.compiler.pipeline.pass_list:
    graph passes, LegalizeOps, FuseOps/FuseTIR, ScheduleTIR, the VM lowering) -> target code
    (LLVM IR for CPU, plus assembly with `assembly=True`; CUDA C and the host's LLVM IR for CUDA:
    generating CUDA source needs no GPU).

Each Stage has its IR text (TVMScript for Relax/TIR), a ViewGraph of that IR (built lazily; see
core.views.relax_view), the seconds the step took (measured with a tvm.instrument PassInstrument, which
also gives the nested passes' times) and lineage: Relax variable / function name -> ONNX node ids.

The steps are run by core.compiler.pipeline.runner, the runner compile and bench use too: lowering
hooks in after each step to take its snapshot. Lineage is recorded at import
(core.compiler.frontend.onnx_import) and carried from stage to stage by core.compiler.pipeline.lineage.

Editing the pipeline and lowering again reuses a `LoweringCache`: a stage is keyed by the model's
bytes, the target and the enabled passes up to it, so disabling pass k recomputes from k on.
`cancel()` is polled between steps, and within the long ones: the CPU schedules between kernels,
their weight prepacking and the target code between groups of kernels (core.compiler.backend.codegen);
other single TVM passes run to their end. `progress(event)` hears a core.progress.Progress as each
step starts, its `cancellable` telling which kind of step it is (the pass's flag).
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..errors import Cancelled, UnsupportedOpError, WorkbenchError
from ..progress import Progress
from ..views.viewgraph import ViewGraph
from .levels import Level
from .target import TargetKind

__all__ = ["Stage", "LoweringCache", "LoweringError", "LoweringCancelled", "lower", "onnx_text", "stage_filename", "kernel_to_schedule"]

logger = logging.getLogger(__name__)


class LoweringError(WorkbenchError):
    """A step of the lowering failed; `stages` holds the stages done before it."""

    def __init__(self, message: str, stages: list["Stage"] | None = None):
        super().__init__(message)
        self.stages = stages or []


# the one cancel error of core (core.errors.Cancelled: `stages` holds the stages done so far),
# under the name older callers import
LoweringCancelled = Cancelled


@dataclass
class Stage:
    """The module after one step, as text, as a graph, timed, with lineage back to ONNX nodes."""

    index: int
    name: str  # 'ONNX graph', 'Relax import', a pass name, 'LLVM IR', 'CUDA C', 'Assembly'
    level: Level
    pass_name: str  # the pass or step that made this stage
    text: str
    language: str  # 'onnx' | 'tvmscript' | 'llvm' | 'asm' | 'cuda'
    seconds: float
    lineage: Any = None  # core.views.relax_view.Lineage: binding / function -> ONNX node ids
    pass_seconds: list[tuple[str, float, int]] = field(default_factory=list)  # (pass, seconds, depth), tvm.instrument
    changed: bool = True  # text differs from the previous stage's
    cached: bool = False  # reused from a LoweringCache
    mod: Any = None  # the tvm IRModule after this step (None for ONNX and target code)
    info: Any = None  # the PassInfo of the pass that made it (its role flags); None for import and target code
    _view: ViewGraph | None = field(default=None, repr=False)
    _view_builder: Callable[[], ViewGraph] | None = field(default=None, repr=False)

    @property
    def view(self) -> ViewGraph:
        """The graph of this stage's IR (built on first use)."""
        if self._view is None and self._view_builder is not None:
            self._view = self._view_builder()
        return self._view

    @property
    def view_if_built(self) -> ViewGraph | None:
        """The graph if `view` was built already, else None (a UI then builds it off its thread)."""
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

def kernel_to_schedule(stages: list[Stage], stage: Stage, kernel: str):
    """(module, ONNX node ids) to schedule TIR kernel `kernel` of `stage` by hand, or None.

    The kernel is taken as it stands before the scheduling step (ScheduleTIR, found by its flag:
    this stage when it comes before it, else the last stage before it), so hand steps start from
    the unscheduled loop nest; the node ids are the stage's lineage of the kernel."""
    import tvm

    if stage.mod is None:
        return None
    func = next((f for gv, f in stage.mod.functions_items() if gv.name_hint == kernel), None)
    if not isinstance(func, tvm.tirx.PrimFunc):
        return None
    cut = next((i for i, s in enumerate(stages) if s.info is not None and s.info.schedules), len(stages))
    base = stage if stage.index < cut else next((s for s in reversed(stages[:cut]) if s.mod is not None), None)
    if base is None:
        return None
    ids = stage.lineage_map().get("@" + kernel, [])
    return base.mod, list(ids)


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
    return Stage(index=0, name="ONNX graph", level=Level.GRAPH, pass_name="onnx", text=text, language="onnx",
                 seconds=time.perf_counter() - t0, lineage={str(n.id): [n.id] for n in graph.nodes}, _view=view)


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
    from .frontend.onnx_import import registered_converters

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

    from .backend.codegen import POLL_S, BuildCancelled

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

    from .backend.codegen import BuildCancelled
    from .target import host_cores

    gpu = TargetKind.of(target) is TargetKind.CUDA
    if not gpu:
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
    if gpu:
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
    target: Any = TargetKind.CPU,
    specs: list | None = None,
    *,
    cache: LoweringCache | None = None,
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[Progress], None] | None = None,
    target_code: bool = True,
    assembly: bool = False,
) -> list[Stage]:
    """The stages of lowering `graph` for `target` (a TargetKind, 'cpu', 'cuda' or a tvm Target) through `specs`.

    Raises UnsupportedOpError / LoweringError (with `.stages`: the stages before the failing step,
    at least the ONNX graph) and core.errors.Cancelled (with `.stages`) when `cancel()` turns true.
    """
    from .runtime import prepare

    prepare()  # TVM's thread settings and the workbench's pool, before TVM is first imported (a no-op once done)
    from .pipeline.lineage import deferred_lineage, import_lineage, propagate_lineage
    from .pipeline.runner import Pipeline, StepResult, run_timed
    from .pipeline.size_limit import check_size

    check_size(graph, "lowering")
    pipe = Pipeline(target, specs, check=False)
    tgt = pipe.target
    steps = pipe.steps()
    total = 2 + len(steps) + (1 if target_code else 0)
    stages: list[Stage] = []

    def report(event: Progress) -> None:  # a step starts: cancel is checked first
        if cancel is not None and cancel():
            raise Cancelled("lowering cancelled.", stages)
        if progress is not None:
            progress(event)

    def step(name: str) -> None:  # lowering's own steps: short, or polling cancel (target code)
        report(Progress(len(stages) / total, name, step=name))

    step("ONNX graph")
    stages.append(_onnx_stage(graph))
    if pipe.problems:
        raise LoweringError(pipe.problems[0], stages)

    from ..views.relax_view import kernel_view, module_view

    fp = _fingerprint(graph) if cache is not None else ""  # keys only the cache (serializes the whole graph)
    key: tuple = (fp, str(tgt))

    def relax_stage(name, level, pass_name, mod, lineage, seconds, times, info=None) -> Stage:
        text = mod.script(show_meta=False)
        prev = stages[-1]
        stage = Stage(index=len(stages), name=name, level=level, pass_name=pass_name, text=text, language="tvmscript",
                      seconds=seconds, lineage=lineage, pass_seconds=times, changed=text != prev.text, mod=mod, info=info)
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
        try:
            result = pipe.import_graph(graph)
        except UnsupportedOpError as e:
            e.stages = stages
            raise
        stage = relax_stage("Relax import", Level.GRAPH, "relax.frontend.onnx.from_onnx", result.mod,
                            deferred_lineage(lambda m=result.mod, n=result.lineage: import_lineage(m, n)),
                            result.seconds, [("from_onnx", result.seconds, 0)])
        stage.changed = True
        stages.append(stage)
        if cache is not None:
            cache.put(key, stage)

    # the pipeline's steps, one stage each; a step cached with the same prefix is not run again
    keys = []
    for s in steps:
        key = key + (s.name,)
        keys.append(key)

    def cached(i, _step):
        return stages[-1].mod if reuse(keys[i]) else None

    def snapshot(r: StepResult) -> None:
        prev = stages[-1]
        lineage = deferred_lineage(lambda m=r.mod, pl=prev.lineage, pm=prev.mod: propagate_lineage(m, pl, pm))
        stage = relax_stage(r.step.name, r.step.level, r.step.name, r.mod, lineage, r.seconds, r.pass_seconds, r.step.info)
        stages.append(stage)
        if cache is not None:
            cache.put(keys[r.index], stage)

    def failed(s, e):  # TVM raises its own types; name the pass
        if isinstance(e, Cancelled) or (cancel is not None and cancel()):
            return Cancelled("lowering cancelled.", stages)  # a pass polling cancel stopped
        return LoweringError(f"pass {s.name} failed on {graph.path.name if graph.path else 'the model'}: "
                             f"{_first_line(e)}.", stages)

    from .backend.codegen import BuildCancelled, cancel_scope

    with cancel_scope(cancel):
        pipe.run(stages[-1].mod, steps, before=lambda i, s: report(s.progress(len(stages) / total)), reuse=cached, after=snapshot,
                 on_error=failed)

    with tgt:
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
                    codes, seconds, times = run_timed(lambda m: _target_code(m, tgt, assembly, cancel), last.mod)
                except BuildCancelled:
                    raise Cancelled("lowering cancelled.", stages) from None
                except LoweringError as e:
                    e.stages = stages
                    raise
                except Exception as e:  # noqa: BLE001
                    raise LoweringError(f"building target code failed: {_first_line(e)}.", stages) from e
                made = []
                for k, (name, language, text) in enumerate(codes):
                    s = Stage(index=len(stages), name=name, level=Level.TARGET_CODE,
                              pass_name="tvm.compile (TIR pipeline + codegen)", text=text, language=language,
                              seconds=seconds if k == 0 else 0.0, lineage=last.lineage,
                              pass_seconds=times if k == 0 else [], changed=True)
                    if language == "llvm" and k == 0 and TargetKind.of(tgt) is TargetKind.CPU:
                        s.pass_name = "TIR pipeline + LLVM codegen (tvm.tirx.build)"
                    title = f"{s.index}. {name}"
                    s._view_builder = (lambda b=base, code=text, lang=language, ti=title:
                                       kernel_view(b.view, code, lang, b.lineage, ti))
                    stages.append(s)
                    made.append(s)
                if cache is not None:
                    cache.put(code_key, made)
    if progress is not None:
        progress(Progress(1.0, "done"))
    return stages
