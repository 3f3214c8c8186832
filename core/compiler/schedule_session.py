"""Schedule one tensor program of a model by hand: TensorIR transformations as data, undoable,
measured on the spot (the MLC course's `mm_relu` walk: split, reorder, reverse_compute_at,
vectorize, decompose_reduction, parallel).

A `ScheduleSession` holds one kernel (a TIR PrimFunc as FuseTIR wrote it, before the default
schedule) and a list of **steps**. A step is a JSON object naming a primitive of
`tvm.s_tir.Schedule` and its arguments by the loop and block names the loop nest shows:

    {"primitive": "split", "loop": "i1", "factors": [null, 4]}
    {"primitive": "reverse_compute_at", "block": "compute", "loop": "i1_0"}
    {"primitive": "transform_layout", "block": "matmul", "buffer": "B", "index_map": "k, j -> j // 16, k, j % 16"}

Steps are data, never code: an index map is parsed (names, integers, + - * // %), never
evaluated, so loading a steps or trace file executes nothing. Loop names are TIR's loop variable
names; a name two loops share is qualified by the first block under the loop
(`matmul/i1`, `compute/i1`), and `BLOCK/LOOP` is accepted for any loop.

Each applied step keeps a copy of the schedule after it, so undo and redo cost nothing; a step
TVM refuses raises StepRefused (one sentence naming the step) and the session keeps its steps.
`measure()` times the kernel alone (core.compiler.kernel_measure) beside its default schedule
(core.compiler.schedules) and its best tuned record (core.compiler.tuning); `use_in_compile()`
files the trace in the tuning database, where compile weighs it against the others.
"""
from __future__ import annotations

import ast
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import WorkbenchError
from .schedule_nest import LoopNest, StepRefused, loop_nest

__all__ = [
    "PRIMITIVES",
    "StepRefused",
    "KernelInfo",
    "Measurement",
    "ScheduleSession",
    "parse_step",
    "describe_step",
    "load_steps",
    "list_kernels",
    "open_session",
    "session_from_module",
    "LoopNest",
]

logger = logging.getLogger(__name__)

# primitive -> its arguments: (name, kind); kind ends in '?' when optional
PRIMITIVES: dict[str, tuple[tuple[str, str], ...]] = {
    "split": (("loop", "loop"), ("factors", "factors")),
    "fuse": (("loops", "loops"),),
    "reorder": (("loops", "loops"),),
    "parallel": (("loop", "loop"),),
    "vectorize": (("loop", "loop"),),
    "unroll": (("loop", "loop"),),
    "cache_read": (("block", "block"), ("buffer", "buffer"), ("scope", "scope?")),
    "cache_write": (("block", "block"), ("buffer", "buffer"), ("scope", "scope?")),
    "compute_at": (("block", "block"), ("loop", "loop")),
    "reverse_compute_at": (("block", "block"), ("loop", "loop")),
    "compute_inline": (("block", "block"),),
    "reverse_compute_inline": (("block", "block"),),
    "decompose_reduction": (("block", "block"), ("loop", "loop")),
    "transform_layout": (("block", "block"), ("buffer", "buffer"), ("index_map", "index_map")),
}


# ---- steps as data ----------------------------------------------------------------------------------

def parse_step(obj: Any) -> dict:
    """A checked copy of one step (a dict from JSON); StepRefused says what is wrong with it."""
    if not isinstance(obj, dict):
        raise StepRefused(f"a step must be a JSON object like {{\"primitive\": \"split\", ...}}, not {json.dumps(obj)[:60]}.")
    prim = obj.get("primitive")
    if prim not in PRIMITIVES:
        raise StepRefused(f"unknown primitive {json.dumps(prim)}: choose one of {', '.join(PRIMITIVES)}.", obj)
    out: dict = {"primitive": prim}
    for name, kind in PRIMITIVES[prim]:
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if name not in obj:
            if optional:
                continue
            raise StepRefused(f"{prim} needs '{name}' ({_KIND_HELP[kind]}).", obj)
        value = obj[name]
        if not _KIND_CHECK[kind](value):
            raise StepRefused(f"{prim}'s '{name}' must be {_KIND_HELP[kind]}, not {json.dumps(value)[:60]}.", obj)
        out[name] = list(value) if isinstance(value, list) else value
    extra = set(obj) - {"primitive"} - {n for n, _ in PRIMITIVES[prim]}
    if extra:
        raise StepRefused(f"{prim} takes no '{sorted(extra)[0]}' (its arguments: {', '.join(n for n, _ in PRIMITIVES[prim])}).", obj)
    if prim == "split" and sum(f is None for f in out["factors"]) > 1:
        raise StepRefused("split's factors may leave one factor open (null), not more.", obj)
    if prim == "transform_layout":
        _parse_index_map(out["index_map"])  # refuses a bad map before anything runs
    return out


_KIND_HELP = {
    "loop": "a loop name",
    "loops": "a list of loop names",
    "block": "a block name",
    "buffer": "a buffer name",
    "scope": "a storage scope such as \"global\"",
    "factors": "a list of two or more positive integers, one of them may be null",
    "index_map": "an index map such as \"i, j -> i // 4, j, i % 4\"",
}
_KIND_CHECK = {
    "loop": lambda v: isinstance(v, str) and bool(v),
    "loops": lambda v: isinstance(v, list) and len(v) >= 1 and all(isinstance(x, str) and x for x in v),
    "block": lambda v: isinstance(v, str) and bool(v),
    "buffer": lambda v: isinstance(v, str) and bool(v),
    "scope": lambda v: isinstance(v, str) and bool(v),
    "factors": lambda v: isinstance(v, list) and len(v) >= 2
    and all(f is None or (isinstance(f, int) and not isinstance(f, bool) and f > 0) for f in v),
    "index_map": lambda v: isinstance(v, str) and "->" in v,
}


def describe_step(step: dict) -> str:
    """One line for the step list: 'split i1 by [None, 4]', 'reverse_compute_at compute at i1_0'."""
    p = step.get("primitive", "?")
    if p == "split":
        return f"split {step['loop']} by {[f for f in step['factors']]}"
    if p in ("fuse", "reorder"):
        return f"{p} {', '.join(step['loops'])}"
    if p in ("parallel", "vectorize", "unroll"):
        return f"{p} {step['loop']}"
    if p in ("compute_at", "reverse_compute_at", "decompose_reduction"):
        return f"{p} {step['block']} at {step['loop']}"
    if p in ("cache_read", "cache_write"):
        return f"{p} {step['buffer']} of {step['block']} ({step.get('scope', 'global')})"
    if p == "transform_layout":
        return f"transform_layout {step['buffer']} of {step['block']}: {step['index_map']}"
    return f"{p} {step.get('block', '')}".strip()


def load_steps(path) -> list[dict]:
    """Steps from a JSON file: a list of steps, or an object with "steps" (a saved trace)."""
    from pathlib import Path

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkbenchError(f"cannot read steps file '{p}': {exc.strerror}.") from None
    except ValueError as exc:
        raise WorkbenchError(f"steps file '{p}' is not JSON: {exc}.") from None
    steps = data.get("steps") if isinstance(data, dict) else data
    if not isinstance(steps, list):
        raise WorkbenchError(f"steps file '{p}' must hold a list of steps or an object with \"steps\".")
    out = []
    for i, s in enumerate(steps):
        try:
            out.append(parse_step(s))
        except StepRefused as exc:
            raise StepRefused(f"step {i + 1} of '{p.name}': {exc}", s) from None
    return out


_INDEX_OPS = {ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__"}


def _parse_index_map(text: str) -> tuple[list[str], list[ast.expr]]:
    """'i, j -> i // 4, j, i % 4' as (parameter names, expression trees); only names of the
    parameters, integers and + - * // % are allowed (the text is parsed, never evaluated)."""
    left, _, right = text.partition("->")
    params = [p.strip() for p in left.split(",") if p.strip()]
    if not params or any(not p.isidentifier() for p in params) or len(set(params)) != len(params):
        raise StepRefused(f"index map '{text}': the left of '->' must be distinct index names such as 'i, j'.")
    try:
        tree = ast.parse(right.strip(), mode="eval").body
    except SyntaxError:
        raise StepRefused(f"index map '{text}': the right of '->' is not a list of index expressions.") from None
    exprs = list(tree.elts) if isinstance(tree, ast.Tuple) else [tree]
    for node in (n for e in exprs for n in ast.walk(e)):
        ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Load, ast.Name, ast.Constant))
        if isinstance(node, ast.Name) and node.id not in params:
            raise StepRefused(f"index map '{text}': '{node.id}' is not one of its indices ({', '.join(params)}).")
        if isinstance(node, ast.Constant) and (not isinstance(node.value, int) or isinstance(node.value, bool)):
            ok = False
        if isinstance(node, ast.BinOp) and not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
            ok = False
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.USub):
            ok = False
        if not ok:
            raise StepRefused(f"index map '{text}': only indices, integers and + - * // % are allowed.")
    return params, exprs


def _index_map(text: str, dtype: str):
    """The tvm IndexMap of an index-map text (see _parse_index_map)."""
    import tvm

    params, exprs = _parse_index_map(text)
    vars_ = {p: tvm.tirx.Var(p, dtype) for p in params}

    def build(node):
        if isinstance(node, ast.Name):
            return vars_[node.id]
        if isinstance(node, ast.Constant):
            return tvm.tirx.IntImm(dtype, node.value)
        if isinstance(node, ast.UnaryOp):
            return tvm.tirx.IntImm(dtype, 0) - build(node.operand)
        a, b = build(node.left), build(node.right)
        if isinstance(node.op, ast.FloorDiv):
            return tvm.tirx.floordiv(a, b)
        if isinstance(node.op, ast.Mod):
            return tvm.tirx.floormod(a, b)
        return getattr(a, _INDEX_OPS[type(node.op)])(b)

    return tvm.tirx.IndexMap([vars_[p] for p in params], [build(e) for e in exprs], None)


# ---- refusals in one sentence -------------------------------------------------------------------

def _refusal(step: dict, exc: BaseException) -> StepRefused:
    """TVM's ScheduleError (a page of IR with the reason at its end) as one sentence."""
    text = str(exc)
    found = re.findall(r"Error message:\s*(.+)", text)
    if found:
        reason = found[-1].strip()
    else:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("File ", "^", "~"))]
        reason = lines[-1] if lines else type(exc).__name__
        reason = re.sub(r"^(\w+Error|ScheduleError|InternalError):\s*", "", reason)
    loops = step.get("loops") or ([step["loop"]] if "loop" in step else [])
    reason = re.sub(r"tirx\.For#(\d+)", lambda m: f"'{loops[int(m.group(1))]}'" if int(m.group(1)) < len(loops) else "the loop", reason)
    reason = re.sub(r"(?:s_tir|tirx)\.S?Block#\d+", f"'{step['block']}'" if "block" in step else "the block", reason)
    return StepRefused(f"{describe_step(step)} was refused by TVM: {reason.rstrip('.')}.", step)


# ---- measurements -----------------------------------------------------------------------------------

@dataclass
class Measurement:
    """The kernel timed alone after `steps` steps, beside its default and tuned schedules."""

    steps: int
    ms: float
    flops: int
    bytes: int
    peak_gflops: float
    default_ms: float | None = None
    tuned_ms: float | None = None
    tuned_kind: str | None = None  # 'template' | 'search' (MetaSchedule or a hand schedule filed earlier)
    label: str = ""

    @property
    def gflops(self) -> float:
        return self.flops / (self.ms * 1e-3) / 1e9 if self.ms > 0 else 0.0

    @property
    def peak_fraction(self) -> float:
        return self.gflops / self.peak_gflops if self.peak_gflops > 0 else 0.0

    def to_json(self) -> dict:
        r = lambda v: None if v is None else round(v, 5)  # noqa: E731
        return {"steps": self.steps, "ms": r(self.ms), "gflops": round(self.gflops, 3), "peak_fraction": round(self.peak_fraction, 5),
                "default_ms": r(self.default_ms), "tuned_ms": r(self.tuned_ms), "tuned_kind": self.tuned_kind,
                "flops": self.flops, "bytes": self.bytes}


# ---- the session ------------------------------------------------------------------------------------

class ScheduleSession:
    """One kernel, the steps applied to it (undo/redo), its measurements."""

    def __init__(self, func, name: str, target, *, onnx_nodes: list[str] | None = None, database=None):
        import tvm
        from tvm import s_tir

        from .kernel_measure import estimate_bytes, estimate_flops, peak_estimate

        if "cpu" not in target.keys:
            raise WorkbenchError(f"hand scheduling is available for the cpu target only, not {target.kind.name}.")
        self.name = name
        self.target = target
        self.base = func
        self.onnx_nodes = list(onnx_nodes or [])
        self.database = database
        self.flops = estimate_flops(func)
        self.bytes = estimate_bytes(func)
        self.peak = peak_estimate(target)
        self._start = s_tir.Schedule(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
        self._applied: list[tuple[dict, Any]] = []  # (step, schedule after it)
        self._redo: list[dict] = []
        self._baselines: tuple | None = None  # (default_ms, tuned_ms, tuned_kind)
        self.measurements: list[Measurement] = []

    # -- state
    @property
    def schedule(self):
        return self._applied[-1][1] if self._applied else self._start

    @property
    def steps(self) -> list[dict]:
        return [dict(s) for s, _ in self._applied]

    @property
    def func(self):
        return self.schedule.mod["main"]

    def script(self) -> str:
        """The kernel's TIR as TVMScript, as it stands after the steps."""
        return self.func.script()

    def nest(self) -> LoopNest:
        return loop_nest(self.func)

    @property
    def can_undo(self) -> bool:
        return bool(self._applied)

    @property
    def can_redo(self) -> bool:
        return bool(self._redo)

    # -- steps
    def apply(self, step: dict) -> dict:
        """Apply one step; StepRefused (one sentence) leaves the session as it was."""
        step = parse_step(step)
        sch = self.schedule.copy()
        try:
            _run_step(sch, loop_nest(sch.mod["main"]), step)
        except StepRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM's ScheduleError and friends: the user's step
            raise _refusal(step, exc) from None
        self._applied.append((step, sch))
        self._redo.clear()
        return step

    def apply_all(self, steps: list[dict]) -> None:
        """Apply steps in order; the first refused one raises, naming its number (those before stay)."""
        for i, step in enumerate(steps):
            try:
                self.apply(step)
            except StepRefused as exc:
                raise StepRefused(f"step {i + 1}: {exc}", exc.step) from None

    def undo(self) -> dict | None:
        if not self._applied:
            return None
        step, _ = self._applied.pop()
        self._redo.append(step)
        return step

    def redo(self) -> dict | None:
        if not self._redo:
            return None
        step = self._redo.pop()
        redo = list(self._redo)
        self.apply(step)
        self._redo = redo
        return step

    # -- trace
    def trace(self):
        """TVM's trace of the steps (lookups nothing uses are dropped)."""
        return self.schedule.trace.simplified(remove_postproc=True)

    def trace_python(self) -> str:
        """TVM's trace as Python lines, to paste into a script over `sch = tvm.s_tir.Schedule(mod)`."""
        return "\n".join(self.trace().as_python())

    def trace_json(self) -> Any:
        """TVM's trace as JSON (its own format: instructions and decisions)."""
        return _plain(self.trace().as_json())

    def to_json(self) -> dict:
        """What --save-trace writes: the kernel, its steps (data --steps reads back) and TVM's trace."""
        from .tuning import kernel_workload

        return {"kernel": self.name, "workload": kernel_workload(self.base), "target": _target_text(self.target),
                "steps": self.steps, "tvm_trace": self.trace_json(), "tvm_trace_python": self.trace_python().splitlines()}

    # -- measuring
    def baselines(self, refresh: bool = False) -> tuple[float | None, float | None, str | None]:
        """(default schedule ms, best tuned record ms, its kind), measured now (once per session)."""
        if self._baselines is None or refresh:
            from .kernel_measure import time_kernel
            from .schedules import schedule_cpu_func
            from .tuning import tuned_schedule

            self._check_static()
            default, _rule = schedule_cpu_func(self.base, self.target)
            default_ms = time_kernel(default if default is not None else self.base, self.target)
            tuned = tuned_schedule(self.base, self.target, self.database)
            tuned_ms = time_kernel(tuned[1], self.target) if tuned is not None else None
            self._baselines = (default_ms, tuned_ms, tuned[0] if tuned is not None else None)
        return self._baselines

    def measure(self, baselines: bool = True) -> Measurement:
        """Time the kernel as it stands (and, the first time, its default and tuned schedules)."""
        from .kernel_measure import time_kernel

        self._check_static()
        default_ms, tuned_ms, tuned_kind = self.baselines() if baselines else (None, None, None)
        ms = time_kernel(self.func, self.target)
        label = describe_step(self._applied[-1][0]) if self._applied else "as written (no steps)"
        m = Measurement(steps=len(self._applied), ms=ms, flops=self.flops, bytes=self.bytes, peak_gflops=self.peak.gflops,
                        default_ms=default_ms, tuned_ms=tuned_ms, tuned_kind=tuned_kind, label=label)
        self.measurements.append(m)
        return m

    def _check_static(self) -> None:
        from .kernel_measure import estimate_bytes

        if estimate_bytes(self.base) == 0 and self.base.params:
            raise WorkbenchError(f"kernel {self.name} has symbolic shapes: it cannot be measured alone (give the model fixed input shapes).")

    def use_in_compile(self, database=None) -> dict:
        """File the steps' trace in the tuning database (measured now unless the last measurement
        is of these steps); a compile applying that database uses it where it measured fastest.
        Returns {database, workload, ms, default_ms, choice, options}."""
        from .tuning import database_choice, kernel_workload, record_schedule

        if not self._applied:
            raise WorkbenchError(f"kernel {self.name} has no steps yet: apply some before using it in compile.")
        database = database if database is not None else self.database
        last = self.measurements[-1] if self.measurements and self.measurements[-1].steps == len(self._applied) else self.measure()
        folder = record_schedule(self.base, self.target, self.trace(), last.ms, database, default_ms=last.default_ms)
        choice, options = database_choice(self.base, self.target, database)
        best_search = next((ms for kind, ms in options if kind == "search"), None)
        mine = choice == "search" and best_search is not None and abs(best_search - last.ms) < 1e-9
        return {"database": folder, "workload": kernel_workload(self.base), "ms": last.ms, "default_ms": last.default_ms,
                "choice": "hand schedule" if mine else choice, "options": [{"kind": k, "ms": v} for k, v in options]}


def _run_step(sch, nest: LoopNest, step: dict) -> None:
    """Apply one parsed step to `sch`, finding loops and blocks by name in `nest`."""
    p = step["primitive"]
    loop = lambda ref: nest.loop_rv(sch, ref)  # noqa: E731
    block = lambda ref: nest.block_rv(sch, ref)  # noqa: E731
    if p == "split":
        sch.split(loop(step["loop"]), factors=list(step["factors"]))
    elif p in ("fuse", "reorder"):
        if p == "fuse" and len(step["loops"]) < 2:
            raise StepRefused("fuse needs two or more loops.", step)
        getattr(sch, p)(*[loop(ref) for ref in step["loops"]])
    elif p in ("parallel", "vectorize", "unroll"):
        getattr(sch, p)(loop(step["loop"]))
    elif p in ("cache_read", "cache_write"):
        nest.check_buffer(step["block"], step["buffer"], "read" if p == "cache_read" else "write")
        getattr(sch, p)(block(step["block"]), step["buffer"], step.get("scope", "global"))
    elif p in ("compute_at", "reverse_compute_at", "decompose_reduction"):
        getattr(sch, p)(block(step["block"]), loop(step["loop"]))
    elif p in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, p)(block(step["block"]))
    elif p == "transform_layout":
        buf = nest.check_buffer(step["block"], step["buffer"], "any")
        dtype = str(buf.shape[0].dtype) if len(buf.shape) else "int64"
        sch.transform_layout(block(step["block"]), step["buffer"], _index_map(step["index_map"], dtype))

def _plain(obj):
    """TVM's JSON-like objects (IntImm, String, Array, Map) as plain Python for json.dumps."""
    import tvm

    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
        return obj.value
    if hasattr(obj, "items"):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__len__"):
        return [_plain(v) for v in obj]
    return str(obj)


def _target_text(target) -> str:
    attrs = target.attrs
    return f"{target.kind.name} {attrs['mcpu'] if 'mcpu' in attrs else ''} {attrs['num-cores'] if 'num-cores' in attrs else ''} cores".replace("  ", " ")


# ---- kernels of a model ---------------------------------------------------------------------------

@dataclass
class KernelInfo:
    """One kernel of a model, before scheduling, with the ONNX nodes it computes."""

    name: str  # as FuseTIR names it (the Lowering panel's tensor-program stages)
    func: Any
    onnx_nodes: list[str] = field(default_factory=list)
    compiled_name: str = ""  # as the scheduled stages and the compiled model name it

    def to_json(self) -> dict:
        from .kernel_measure import estimate_bytes, estimate_flops

        return {"name": self.name, "compiled_name": self.compiled_name, "onnx_nodes": self.onnx_nodes, "flops": estimate_flops(self.func),
                "bytes": estimate_bytes(self.func), **loop_nest(self.func).to_json()}


def _target(target):
    from .target import make_target

    return make_target(target) if isinstance(target, str) else target


def list_kernels(graph_or_path, target="cpu") -> list[KernelInfo]:
    """The kernels of a model as FuseTIR leaves them (what ScheduleTIR and tuning receive), in
    the order main calls them, with the ONNX nodes each computes."""
    import tvm

    from ..model.graph import Graph
    from ..model.onnx_io import load_model
    from .compile import import_relax, split_pipeline
    from .lineage import kernel_lineage
    from .pipeline import make_pass

    graph = graph_or_path if isinstance(graph_or_path, Graph) else load_model(graph_or_path)
    tgt = _target(target)
    front, _ = split_pipeline(tgt)
    imported = import_relax(graph)
    mod, prefused, fused = imported.mod, None, None
    with tgt:
        for spec in front:
            if not spec.enabled or spec.name == "ScheduleTIR":
                continue
            if spec.name == "FuseOps":
                prefused = mod
            mod = make_pass(spec, tgt)(mod)
            if spec.name == "FuseOps" or (fused is None and spec.name == "LegalizeOps"):
                fused = mod
    try:
        lineage = kernel_lineage(fused, imported.lineage, graph, prefused, mod) if fused is not None else {}
    except Exception as exc:  # noqa: BLE001 - lineage is a help, never a reason to fail the listing
        logger.warning("no kernel lineage: %s", exc)
        lineage = {}
    prepared = prepared_kernels(mod)
    order = [n for n in lineage if n in prepared] + [n for n in prepared if n not in lineage]
    return [KernelInfo(n, prepared[n][0], lineage.get(n, []), prepared[n][1]) for n in order]


def prepared_kernels(mod) -> dict[str, tuple[Any, str]]:
    """name -> (kernel as tuning sees it, its name there) for the unscheduled PrimFuncs of a
    Relax+TIR module. Tuning's preparation (weights marked layout-free) renames every kernel
    (`fused_conv2d_add` -> `fused_conv2d_add1`, as the scheduled stages and the compiled model
    show them); main's calls pair the names up."""
    import tvm
    from tvm import relax

    from .tuning import prepare_module

    def callees(m) -> list[str]:
        out = []
        for block in m["main"].body.blocks:
            for b in block.bindings:
                v = b.value
                if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                    out.append(v.args[0].name_hint)
        return out

    funcs = {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    if not any(isinstance(f, relax.Function) for _, f in mod.functions_items()):
        return {n: (f, n) for n, f in funcs.items()}
    pmod = prepare_module(mod)
    pfuncs = {gv.name_hint: f for gv, f in pmod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    out: dict[str, tuple[Any, str]] = {}
    for before, after in zip(callees(mod), callees(pmod)):
        if before in funcs and after in pfuncs and before not in out:
            out[before] = (pfuncs[after], after)
    for n, f in funcs.items():  # not called from main: as it is
        out.setdefault(n, (f, n))
    return {n: v for n, v in out.items() if not (v[0].attrs is not None and "tirx.is_scheduled" in v[0].attrs)}


def open_session(graph_or_path, kernel: str, target="cpu", database=None) -> ScheduleSession:
    """A session on the kernel named `kernel` of a model (an unknown name: one sentence listing them)."""
    kernels = list_kernels(graph_or_path, target)
    hit = next((k for k in kernels if k.name == kernel), None) or next((k for k in kernels if k.compiled_name == kernel), None)
    if hit is None:
        names = ", ".join(k.name for k in kernels[:12]) + (" ..." if len(kernels) > 12 else "")
        raise WorkbenchError(f"the model has no kernel '{kernel}': its kernels are {names}.")
    return ScheduleSession(hit.func, hit.name, _target(target), onnx_nodes=hit.onnx_nodes, database=database)


def session_from_module(mod, kernel: str, target="cpu", onnx_nodes=None, database=None) -> ScheduleSession:
    """A session on kernel `kernel` of a Relax+TIR module (a Lowering stage's module, before
    ScheduleTIR), prepared as tuning sees it so its database records match compile's."""
    kernels = prepared_kernels(mod)
    hit = kernels.get(kernel) or next((v for v in kernels.values() if v[1] == kernel), None)
    if hit is None:
        raise WorkbenchError(f"the module has no unscheduled TIR kernel '{kernel}' (a kernel opens from a stage before ScheduleTIR).")
    return ScheduleSession(hit[0], kernel, _target(target), onnx_nodes=onnx_nodes, database=database)
