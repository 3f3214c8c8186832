"""The workbench's default schedule of a kernel as steps a person can edit (a starting point
beside the naive program, which is the MLC course's exercise).

The schedule rule that compile gives the kernel (core.compiler.schedules) is run once while its
trace is recorded; the trace is then replayed instruction by instruction and each instruction
that changes the kernel becomes a step:

1. an instruction with a step kind (split, fuse, reorder, parallel, vectorize, unroll,
   compute_at, reverse_compute_at, compute_inline, reverse_compute_inline, decompose_reduction,
   cache_read, cache_write), with TVM's default options, becomes that step, its loops and blocks
   named as the loop nest shows them in the state before it;
2. it is kept only if applying the step by those names gives the very TIR the instruction gave
   (structural equality), so a step never claims what it does not do;
3. every other instruction (pad_einsum, set_scope, transform_layout with a padded map, an
   annotation, ...) and every step that failed 2. goes, with its neighbours of the same sort, into
   one `tvm_trace` step: TVM's own trace JSON of those instructions, preceded by lookups (a block
   by name, a loop as the n-th around a block) for what they use from before, listed as Python
   in the step. It is applied by TVM's trace parser, undone like any step, and says what it is.

The steps together give the default's TIR exactly; `plan_default` checks that at the end and
otherwise returns the whole trace as one `tvm_trace` step.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import WorkbenchError
from .nest import loop_nest
from .steps import describe_step, parse_step, run_step

__all__ = ["DefaultStart", "plan_default", "same_tir"]

logger = logging.getLogger(__name__)

_KEY = "__manual_default__"


@dataclass
class DefaultStart:
    """The default schedule of a kernel as steps: `rule` (the schedule rule's name, None when no
    rule schedules the kernel and the default is the kernel as written), `steps`, `func` (the
    default's TIR, what compile gives the kernel) and how many TVM instructions went into steps
    of their own vs into `tvm_trace` steps."""

    rule: str | None
    steps: list[dict] = field(default_factory=list)
    func: Any = None
    mapped: int = 0
    opaque: int = 0

    @property
    def untraced(self) -> bool:
        """Whether the rule changed the TIR outside its trace (the last step replaces the TIR)."""
        return bool(self.steps) and self.steps[-1]["primitive"] == "replace_tir"

    def describe(self) -> str:
        if self.rule is None:
            return "no schedule rule applies to this kernel: its default is the program as written"
        if not self.steps:
            return f"schedule rule {self.rule} leaves this kernel as written"
        if self.mapped + self.opaque == 0:
            return f"schedule rule {self.rule}: its trace does not replay, so one step replaces the TIR by the default's"
        kept = f"{self.mapped} of {self.mapped + self.opaque} TVM instructions as steps"
        return (f"schedule rule {self.rule}: {len(self.steps)} step{'s' if len(self.steps) != 1 else ''} ({kept}" + (f", {self.opaque} kept as TVM trace" if self.opaque else "")
                + (", then its edit outside the trace" if self.untraced else "") + ")")


def same_tir(a, b) -> bool:
    """Whether PrimFuncs `a` and `b` are the same program (structural equality), whatever their
    name (global_symbol) and whether compile has marked them scheduled."""
    import tvm_ffi  # TVM 0.27 keeps structural_equal in tvm_ffi

    def plain(f):
        for key in ("global_symbol", "tirx.is_scheduled"):
            if f.attrs is not None and key in f.attrs:
                f = f.without_attr(key)
        return f

    return bool(tvm_ffi.structural_equal(plain(a), plain(b)))


def _schedule(func):
    import tvm
    from tvm import s_tir

    return s_tir.Schedule(tvm.IRModule({"main": func}))


@dataclass
class _Inst:
    index: int  # in the trace's JSON
    kind: str
    step: dict | None  # the step it maps to, named in the state before it
    before: Any  # the PrimFunc before it
    after: Any = None  # ... and after it


def _name_loop(nest, stmt) -> str | None:
    return next((n.name for n in nest.loops if n.stmt.same_as(stmt)), None)


def _candidate(kind: str, inputs, attrs, sch, nest) -> dict | None:
    """The step one trace instruction is, with the names `nest` shows; None where no step kind
    expresses it with the options it was given."""
    import tvm

    def loop(rv):
        return _name_loop(nest, sch.get(rv))

    def block(rv):
        name = sch.get(rv).name_hint
        return name if name in nest.blocks else None

    attrs = [a.value if hasattr(a, "value") else a for a in attrs]
    try:
        if kind == "Split" and list(attrs) == [True, False]:
            factors = []
            for f in inputs[1:]:
                value = sch.get(f) if isinstance(f, tvm.tirx.Var) else f
                factors.append(None if value is None else int(value))
            step = {"primitive": "split", "loop": loop(inputs[0]), "factors": factors}
        elif kind in ("Fuse", "Reorder") and (kind == "Reorder" or list(attrs) in ([1], [True])):
            step = {"primitive": kind.lower(), "loops": [loop(x) for x in inputs]}
        elif kind in ("Parallel", "Vectorize", "Unroll"):
            step = {"primitive": kind.lower(), "loop": loop(inputs[0])}
        elif kind in ("ComputeAt", "ReverseComputeAt") and list(attrs) in ([0, -1], [False, -1]):
            step = {"primitive": "compute_at" if kind == "ComputeAt" else "reverse_compute_at", "block": block(inputs[0]), "loop": loop(inputs[1])}
        elif kind in ("ComputeInline", "ReverseComputeInline"):
            step = {"primitive": "compute_inline" if kind == "ComputeInline" else "reverse_compute_inline", "block": block(inputs[0])}
        elif kind == "DecomposeReduction":
            step = {"primitive": "decompose_reduction", "block": block(inputs[0]), "loop": loop(inputs[1])}
        elif kind in ("CacheRead", "CacheWrite") and (len(inputs) == 1 or not list(inputs[1] or [])):
            stmt = sch.get(inputs[0])
            regions = stmt.reads if kind == "CacheRead" else stmt.writes
            step = {"primitive": "cache_read" if kind == "CacheRead" else "cache_write", "block": block(inputs[0]),
                    "buffer": regions[int(attrs[0])].buffer.name, "scope": str(attrs[1])}
        else:
            return None
    except Exception as exc:  # noqa: BLE001 - an instruction of an unexpected form: kept as TVM trace
        logger.debug("trace instruction %s kept as TVM trace: %s", kind, exc)
        return None
    values = [v for k, v in step.items() if k != "primitive"]
    if any(v is None for v in values) or any(isinstance(v, list) and None in v and k != "factors" for k, v in step.items()):
        return None
    return parse_step(step)


def _replay(base, trace) -> tuple[list[_Inst], Any]:
    """Replay `trace` on `base`, noting for each instruction that changes the kernel the state
    before and after it and the step it would be."""
    sch = _schedule(base)
    insts: list[_Inst] = []
    cache: dict = {}

    def provider(inst, inputs, attrs, decision):
        func = sch.mod["main"]
        if not inst.kind.is_pure:
            if insts:
                insts[-1].after = func  # lookups in between change nothing
            if id(func) not in cache:
                cache.clear()
                cache[id(func)] = (func, loop_nest(func))
            nest = cache[id(func)][1]
            insts.append(_Inst(len(index), inst.kind.name, _candidate(inst.kind.name, inputs, attrs, sch, nest), func))
        index.append(inst)
        return decision

    index: list = []
    trace.apply_to_schedule(sch, remove_postproc=True, decision_provider=provider)
    if insts:
        insts[-1].after = sch.mod["main"]
    return insts, sch.mod["main"]


def _step_works(inst: _Inst) -> bool:
    sch = _schedule(inst.before)
    try:
        run_step(sch, loop_nest(inst.before), inst.step)
    except Exception:  # noqa: BLE001 - a step TVM refuses is no step of this schedule
        return False
    return same_tir(sch.mod["main"], inst.after)


def _segment(base, trace_json, first: int, last: int, label: str) -> dict:
    """A `tvm_trace` step of trace instructions first..last (JSON indices): lookups naming what
    they use from before `first` in the state before it, then the instructions themselves."""
    from tvm.s_tir import Trace

    insts, decisions = trace_json
    sch = _schedule(base)
    prefix_decisions = [d for d in decisions if d[0] < first]
    Trace.apply_json_to_schedule([insts[:first], prefix_decisions], sch)
    live = {}  # JSON name -> the schedule's RV before `first`
    for j, inst in enumerate(sch.trace.insts):
        for name, rv in zip(insts[j][3], inst.outputs):
            live[name] = rv
    body = insts[first : last + 1]
    defined: set[str] = set()
    needed: list[str] = []
    for inst in body:
        for x in inst[1]:
            if isinstance(x, str) and x in live and x not in defined and x not in needed:
                needed.append(x)
        defined.update(n for n in inst[3] if isinstance(n, str))
    func = sch.mod["main"]
    nest = loop_nest(func)
    lookups: list[list] = []
    fresh = 0
    for name in needed:
        obj = sch.get(live[name])
        if name.startswith("b"):
            lookups.append(["GetSBlock", [], [obj.name_hint, "main"], [name]])
            continue
        if not name.startswith("l"):
            raise WorkbenchError(f"the default schedule's trace uses {name} in a way no step can name.")
        node = next(n for n in nest.loops if n.stmt.same_as(obj))
        around = nest.blocks[node.first_block].loops
        outs = [f"_v{fresh}_{k}" for k in range(len(around))]
        outs[around.index(node.name)] = name
        fresh += 1
        lookups += [["GetSBlock", [], [node.first_block, "main"], [f"_b{fresh}"]], ["GetLoops", [f"_b{fresh}"], [], outs]]
    shift = len(lookups) - first
    seg = [lookups + body, [[d[0] + shift, d[1]] for d in decisions if first <= d[0] <= last]]
    python = _python_of(func, seg)
    return parse_step({"primitive": "tvm_trace", "label": label, "trace": seg, "python": python})


def _python_of(func, seg) -> list[str]:
    from tvm.s_tir import Trace

    sch = _schedule(func)
    Trace.apply_json_to_schedule(seg, sch)
    return list(sch.trace.as_python())


def _kinds(kinds: list[str]) -> str:
    import re

    names = []
    for k in kinds:
        n = re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower()
        if n not in names:
            names.append(n)
    return ", ".join(names)


def plan_default(base, target, kernel: str = "") -> DefaultStart:
    """The default schedule compile gives kernel `base` on `target`, as steps (see the module)."""
    from ..schedules import recording_traces, schedule_cpu_func, with_root_block
    from .steps import plain_json

    rooted = with_root_block(base)
    with recording_traces() as traces:
        func, rule = schedule_cpu_func(rooted, target, kernel=_KEY)
    if func is None:
        return DefaultStart(None, [], base)
    func = func.without_attr("tirx.is_scheduled")  # compile's mark, not part of the program
    trace = traces[_KEY].trace.simplified(remove_postproc=True)
    trace_json = plain_json(trace.as_json(remove_postproc=True))
    start = rooted.with_attr("global_symbol", "main")
    label = f"default schedule ({rule})"

    def replaced(exc) -> DefaultStart:
        logger.warning("the trace of %s's default schedule does not replay (%s): one step replaces the TIR", kernel, exc)
        import tvm

        step = parse_step({"primitive": "replace_tir", "label": f"{label}: its trace does not replay, so the whole TIR is replaced by the default's",
                           "tir": tvm.ir.save_json(func)})
        return DefaultStart(rule, [step], func, 0, 0)

    try:
        insts, final = _replay(start, trace)
    except Exception as exc:  # noqa: BLE001 - TVM cannot replay the rule's trace (its edits outside the trace changed what it meant)
        return replaced(exc)
    try:
        return _as_steps(start, trace, trace_json, insts, final, func, rule, label, kernel)
    except Exception as exc:  # noqa: BLE001 - a part of it does not replay by name (two blocks rfactor named alike)
        return replaced(exc)


def _as_steps(start, trace, trace_json, insts, final, func, rule, label: str, kernel: str) -> DefaultStart:
    """plan_default's steps from the replayed trace: the instructions a step names, the rest as TVM trace segments."""
    steps: list[dict] = []
    pending: list[_Inst] = []
    mapped = opaque = 0

    def flush() -> None:
        nonlocal opaque
        if pending:
            kinds = _kinds([i.kind for i in pending])
            steps.append(_segment(start, trace_json, pending[0].index, pending[-1].index, f"{label}: {kinds}"))
            opaque += len(pending)
            pending.clear()

    for inst in insts:
        if inst.step is not None and _step_works(inst):
            flush()
            steps.append(inst.step)
            mapped += 1
        else:
            pending.append(inst)
    flush()
    if not _check(start, steps, final):
        logger.warning("the default schedule of %s as steps does not give its trace's TIR; it is one TVM trace step instead", kernel)
        whole = {"primitive": "tvm_trace", "label": f"{label}: the whole trace", "trace": trace_json, "python": list(trace.as_python())}
        steps, mapped, opaque = [parse_step(whole)], 0, len(insts)
    if not same_tir(final, func):
        # the rule edited the IR where its trace does not see it (cpu.Matmul's clamped row padding)
        import tvm

        steps.append(parse_step({"primitive": "replace_tir", "label": f"{label}: its edit outside TVM's trace (TIR replaced by the default's)",
                                 "tir": tvm.ir.save_json(func)}))
    plan = DefaultStart(rule, steps, func, mapped, opaque)
    logger.info("default start of %s: %s", kernel, "; ".join(describe_step(s) for s in plan.steps))
    return plan


def _check(start, steps: list[dict], final) -> bool:
    sch = _schedule(start)
    try:
        for step in steps:
            sch = run_step(sch, loop_nest(sch.mod["main"]), step)
    except Exception as exc:  # noqa: BLE001 - reported by the caller as a fallback
        logger.warning("default steps do not replay: %s", exc)
        return False
    return same_tir(sch.mod["main"], final)
