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
`measure()` times the kernel alone (core.compiler.measure.kernel_measure) beside its default schedule
(core.compiler.schedules) and its best tuned record (core.compiler.tuning.tune); `use_in_compile()`
files the trace in the tuning database, where compile weighs it against the others.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import WorkbenchError
from .nest import LoopNest, StepRefused, loop_nest
from .steps import PRIMITIVES, describe_step, load_steps, parse_step, plain_json, refusal, run_step

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
    naive_ms: float | None = None  # the kernel as written (no steps)

    @property
    def gflops(self) -> float:
        return self.flops / (self.ms * 1e-3) / 1e9 if self.ms > 0 else 0.0

    @property
    def peak_fraction(self) -> float:
        return self.gflops / self.peak_gflops if self.peak_gflops > 0 else 0.0

    def to_json(self) -> dict:
        r = lambda v: None if v is None else round(v, 5)  # noqa: E731
        return {"steps": self.steps, "ms": r(self.ms), "gflops": round(self.gflops, 3), "peak_fraction": round(self.peak_fraction, 5),
                "default_ms": r(self.default_ms), "naive_ms": r(self.naive_ms), "tuned_ms": r(self.tuned_ms), "tuned_kind": self.tuned_kind,
                "flops": self.flops, "bytes": self.bytes}


# ---- the session ------------------------------------------------------------------------------------

class ScheduleSession:
    """One kernel, the steps applied to it (undo/redo), its measurements."""

    def __init__(self, func, name: str, target, *, onnx_nodes: list[str] | None = None, database=None):
        import tvm
        from tvm import s_tir

        from ..measure.kernel_measure import estimate_bytes, estimate_flops, peak_estimate

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
        self.naive_ms: float | None = None
        self.start = "naive"  # where the steps began: 'naive' (the kernel as written) or 'default'
        self._default_plan = None
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
            sch = run_step(sch, loop_nest(sch.mod["main"]), step)
        except StepRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - TVM's ScheduleError and friends: the user's step
            raise refusal(step, exc) from None
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

    # -- starting points
    def default_plan(self):
        """The default schedule compile gives this kernel, as steps (core.compiler.manual.default_start)."""
        if self._default_plan is None:
            from .default_start import plan_default

            self._default_plan = plan_default(self.base, self.target, self.name)
        return self._default_plan

    def start_from(self, start: str) -> None:
        """Drop the steps and begin again from `start`: 'naive' (the kernel as written, the MLC
        course's exercise) or 'default' (the default schedule's steps, applied and undoable back
        to the naive kernel)."""
        if start not in ("naive", "default"):
            raise WorkbenchError(f"unknown starting point '{start}': choose naive or default.")
        plan = self.default_plan() if start == "default" else None
        self._applied.clear()
        self._redo.clear()
        self.start = start
        if plan is not None:
            self.apply_all(plan.steps)

    # -- trace
    @property
    def untraced(self) -> dict | None:
        """The last step that replaced the TIR outside TVM's trace (a default schedule's rule
        edit), or None: past it there is no trace of the steps from the kernel as written."""
        return next((s for s, _ in reversed(self._applied) if s["primitive"] == "replace_tir"), None)

    def trace(self):
        """TVM's trace of the steps (lookups nothing uses are dropped)."""
        if self.untraced is not None:
            raise WorkbenchError(f"step '{describe_step(self.untraced)}' changed the TIR outside TVM's trace: undo it to export "
                                 "or file a trace of the steps.")
        return self.schedule.trace.simplified(remove_postproc=True)

    def trace_python(self) -> str:
        """TVM's trace as Python lines, to paste into a script over `sch = tvm.s_tir.Schedule(mod)`."""
        return "\n".join(self.trace().as_python())

    def trace_json(self) -> Any:
        """TVM's trace as JSON (its own format: instructions and decisions)."""
        return plain_json(self.trace().as_json())

    def to_json(self) -> dict:
        """What --save-trace writes: the kernel, its steps (data --steps reads back) and TVM's trace."""
        from ..tuning.tune import kernel_workload

        return {"kernel": self.name, "workload": kernel_workload(self.base), "target": _target_text(self.target),
                "steps": self.steps, "tvm_trace": self.trace_json(), "tvm_trace_python": self.trace_python().splitlines()}

    # -- measuring
    def baselines(self, refresh: bool = False) -> tuple[float | None, float | None, str | None]:
        """(default schedule ms, best tuned record ms, its kind), measured now (once per session)."""
        if self._baselines is None or refresh:
            from ..measure.kernel_measure import time_kernel
            from ..schedules import schedule_cpu_func
            from ..tuning.tune import tuned_schedule

            self._check_static()
            default, _rule = schedule_cpu_func(self.base, self.target)
            self.naive_ms = time_kernel(self.base, self.target)
            default_ms = time_kernel(default, self.target) if default is not None else self.naive_ms
            tuned = tuned_schedule(self.base, self.target, self.database)
            tuned_ms = time_kernel(tuned[1], self.target) if tuned is not None else None
            self._baselines = (default_ms, tuned_ms, tuned[0] if tuned is not None else None)
        return self._baselines

    @property
    def measured_baselines(self) -> tuple[float | None, float | None, str | None] | None:
        """What `baselines()` measured so far, or None before the first measurement (no timing here)."""
        return self._baselines

    def measure(self, baselines: bool = True) -> Measurement:
        """Time the kernel as it stands (and, the first time, its default and tuned schedules)."""
        from ..measure.kernel_measure import time_kernel

        self._check_static()
        default_ms, tuned_ms, tuned_kind = self.baselines() if baselines else (None, None, None)
        ms = time_kernel(self.func, self.target)
        label = describe_step(self._applied[-1][0]) if self._applied else "as written (no steps)"
        m = Measurement(steps=len(self._applied), ms=ms, flops=self.flops, bytes=self.bytes, peak_gflops=self.peak.gflops,
                        default_ms=default_ms, tuned_ms=tuned_ms, tuned_kind=tuned_kind, label=label, naive_ms=self.naive_ms)
        self.measurements.append(m)
        return m

    def _check_static(self) -> None:
        from ..measure.kernel_measure import estimate_bytes

        if estimate_bytes(self.base) == 0 and self.base.params:
            raise WorkbenchError(f"kernel {self.name} has symbolic shapes: it cannot be measured alone (give the model fixed input shapes).")

    def use_in_compile(self, database=None) -> dict:
        """File the steps' trace in the tuning database (measured now unless the last measurement
        is of these steps); a compile applying that database uses it where it measured fastest.
        Returns {database, workload, ms, default_ms, choice, options}."""
        from ..tuning.tune import database_choice, kernel_workload, record_schedule

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
        from ..measure.kernel_measure import estimate_bytes, estimate_flops

        return {"name": self.name, "compiled_name": self.compiled_name, "onnx_nodes": self.onnx_nodes, "flops": estimate_flops(self.func),
                "bytes": estimate_bytes(self.func), **loop_nest(self.func).to_json()}


def _target(target):
    from ..target import make_target

    return make_target(target) if isinstance(target, str) else target


def list_kernels(graph_or_path, target="cpu") -> list[KernelInfo]:
    """The kernels of a model as FuseTIR leaves them (what ScheduleTIR and tuning receive), in
    the order main calls them, with the ONNX nodes each computes."""
    from ..runtime import prepare

    prepare()  # TVM's thread settings and the workbench's pool, before TVM is first imported (a no-op once done)
    from ...model.graph import Graph
    from ...model.onnx_io import load_model
    from ..compile import import_relax
    from ..pipeline.lineage import KernelLineageTap
    from ..pipeline.runner import Pipeline

    graph = graph_or_path if isinstance(graph_or_path, Graph) else load_model(graph_or_path)
    pipe = Pipeline(_target(target))
    # the default pipeline's steps up to the VM lowering, without scheduling: what tuning receives
    steps = pipe.steps()
    front = steps[: next((i for i, s in enumerate(steps) if s.info.vm_lowering), len(steps))]
    imported = import_relax(graph)
    tap = KernelLineageTap(imported.mod)
    mod = pipe.run(imported.mod, [s for s in front if not s.info.schedules], after=tap)
    try:
        lineage = tap.kernel_lineage(imported.lineage, graph, mod)
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

    from ..tuning.tune import prepare_module

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
