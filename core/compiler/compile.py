"""Compile a model for CPU (LLVM) or GPU (CUDA), check it against onnxruntime, export a folder that ships.

The chain is the one the Lowering panel shows: import the ONNX graph into Relax, run the pass
pipeline of `core.compiler.pipeline` (graph passes, LegalizeOps, FuseOps/FuseTIR, then
`core.compiler.schedules.schedule_pass(target)`), then the VM lowering passes and code generation
(`tvm.compile`). What the user steps through is what gets compiled.

Never a silent wrong answer: TVM's ONNX frontend computes wrong results for some ops without any
warning, so `compile_model` runs the compiled model and onnxruntime on the same seeded random
inputs and refuses (naming the op and node that first goes wrong) when they disagree. Known bad
conversions are replaced by the workbench's own converters (`core.compiler.converters`).

The exported folder is described in `core.compiler.artifact`; verification in
`core.compiler.verification`.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import WorkbenchError
from .artifact import FORMAT_VERSION, LIBRARY, RUNNER, SOURCE_MODEL, Artifact, TensorSpec, load_artifact, specs_from_proto
from .cuda import cuda_source_of, host_cuda_arch, prefer_nvcc_for_jit
from .lineage import kernel_lineage
from .reference import ATOL, RTOL, compare_outputs, random_feeds
from .target import gpu_present
from .verification import CompiledMismatchError, verify_artifact

__all__ = [
    "compile_model",
    "import_relax",
    "split_pipeline",
    "CompileCancelled",
    # re-exported: what a compile hands back and how it is checked
    "Artifact",
    "TensorSpec",
    "CompiledMismatchError",
    "load_artifact",
    "random_feeds",
    "compare_outputs",
]

logger = logging.getLogger(__name__)

Progress = Callable[[str, float], None]


class CompileCancelled(WorkbenchError):
    """The user cancelled a compile."""


def _resolve_graph(graph_or_path):
    from ..model.graph import Graph
    from ..model.onnx_io import load_model

    if isinstance(graph_or_path, Graph):
        return graph_or_path
    if isinstance(graph_or_path, (str, os.PathLike)):
        return load_model(graph_or_path)
    raise WorkbenchError(f"compile_model needs a Graph or a path to an ONNX file, not {type(graph_or_path).__name__}.")


@dataclass
class Imported:
    """A Relax module imported from ONNX, with lineage (Relax var name -> ONNX node labels)."""

    mod: Any
    lineage: dict[str, list[str]]
    seconds: float


def import_relax(graph) -> Imported:
    """ONNX Graph -> Relax IRModule (weights as constants) through the workbench's import hook
    `core.compiler.tvm_import` (lineage + the converter fixes of core.compiler.converters); TVM's plain
    frontend with the same fixes when that module is absent."""
    t0 = time.perf_counter()
    try:
        from . import tvm_import
    except ImportError:
        tvm_import = None
    if tvm_import is not None:
        result = tvm_import.import_graph(graph)
        label = {n.id: n.label for n in graph.nodes}
        lineage = {var: [label[i] for i in ids if i in label] for var, ids in result.lineage.items()}
        return Imported(result.mod, lineage, time.perf_counter() - t0)
    from . import converters

    proto = graph.to_proto()
    mod = _guarded_import(lambda: converters.from_onnx_fixed(proto), proto)
    return Imported(mod, {}, time.perf_counter() - t0)


def _guarded_import(fn, proto):
    """Run a frontend import; turn its failures into one sentence naming the op (and keep the
    frontend's own prints off stdout, where `--json` output goes)."""
    import contextlib
    import io

    from ..errors import UnsupportedOpError

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            return fn()
    except WorkbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - every frontend failure is the model's op, told in one sentence
        text = str(e).strip()
        m = re.search(r"not supported for frontend ONNX: (.+)", text)
        if m:
            ops = m.group(1).strip().rstrip(".")
            raise UnsupportedOpError(f"TVM's ONNX frontend does not support the op(s) {ops}; this model cannot be compiled.", op_type=ops) from None
        m = re.search(r"Error converting operator (\w+)", buf.getvalue())
        op = m.group(1) if m else ""
        node = next((n.name or n.op_type for n in proto.graph.node if n.op_type == op), "") if op else ""
        last = text.splitlines()[-1] if text else type(e).__name__
        where = f" at {op} node '{node}'" if op else ""
        raise UnsupportedOpError(f"TVM's ONNX frontend failed{where}: {last}", op_type=op, node_name=node) from None


# Passes from here on turn scheduled Relax+TIR into VM code; compile stops before them to keep the
# scheduled module (memory estimate, lineage) and hands them to tvm.compile.
_VM_LOWERING_START = "DataflowLowering"


def split_pipeline(target, specs=None) -> tuple[list, list]:
    """(graph-to-scheduled-TIR specs, VM-lowering specs) of core.compiler.pipeline's list for `target`."""
    from . import pipeline

    specs = list(specs) if specs is not None else pipeline.default_pipeline(target)
    problems = pipeline.validate(specs)
    if problems:
        raise WorkbenchError("the pass pipeline cannot build: " + " ".join(problems))
    names = [s.name for s in specs]
    cut = names.index(_VM_LOWERING_START) if _VM_LOWERING_START in names else len(specs)
    return specs[:cut], specs[cut:]


def _check_cancel(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise CompileCancelled("compile cancelled.")


def compile_model(
    graph_or_path,
    target: str = "cpu",
    *,
    pipeline=None,
    verify: bool = True,
    verify_dims: dict[str, int] | None = None,
    rewrites: list[str] | None = None,
    tune_trials: int = 0,
    tune_db: str | os.PathLike | None = None,
    tune_budget_s: float | None = None,
    tune_rpc: str | None = None,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> Artifact:
    """Compile an ONNX model (a Graph or a file) for 'cpu' or 'cuda' and return an Artifact.

    `pipeline` is a list of core.compiler.pipeline PassSpecs (the Lowering panel's, edits included);
    default: core.compiler.pipeline.default_pipeline(target). With `verify` (the default) the compiled
    model runs against onnxruntime on seeded random inputs (symbolic dims from `verify_dims`,
    default 1); a difference beyond rtol/atol raises CompiledMismatchError naming the first op
    that goes wrong. CUDA is verified only where a GPU exists (code generation needs none).
    Tuning (`tune_budget_s` seconds for the model, or `tune_trials` > 0 with a 600 s budget):
    every candidate config of the schedule rules' templates is measured, then MetaSchedule
    searches `tune_trials` schedules per kernel with the time left; the records go to the
    database folder `tune_db` (default core.compiler.tuning.default_database_root()) and the compile
    uses the fastest measured schedule per kernel. A `tune_db` alone only applies that
    database. Tuning is for the cpu target; it reports through `progress` (5-55 %) and stops
    after the measuring round in which `cancel()` turns True. `tune_rpc` ('HOST:PORT:KEY')
    measures the candidates on the devices registered under KEY with the TVM RPC tracker at
    HOST:PORT instead of here (the target must describe those devices).
    `progress(step, fraction)` is called between steps; `cancel()` returning True stops the
    compile with CompileCancelled at the next step.
    """
    import tvm

    from . import pipeline as pl
    from .target import TARGET_KINDS, make_target

    if target not in TARGET_KINDS:
        raise WorkbenchError(f"unknown target '{target}': choose one of {', '.join(TARGET_KINDS)}.")
    tune_budget = _check_tuning_options(target, tune_trials, tune_budget_s)
    report = progress or (lambda step, frac: None)
    t_start = time.perf_counter()
    graph = _resolve_graph(graph_or_path)
    proto = graph.to_proto()
    model_bytes = proto.SerializeToString(deterministic=True)
    inputs, outputs = specs_from_proto(proto)
    if target == "cuda" and gpu_present():
        prefer_nvcc_for_jit()
    tvm_target = make_target(target, cuda_arch=host_cuda_arch() or "sm_80") if target == "cuda" else make_target(target)
    front, back = split_pipeline(tvm_target, pipeline)
    passes_applied: list[dict] = []

    report("import to Relax", 0.02)
    _check_cancel(cancel)
    imported = import_relax(graph)
    mod = imported.mod
    passes_applied.append({"name": "ONNX import (Relax)", "seconds": round(imported.seconds, 4)})

    steps = [(spec.name, spec) for spec in front if spec.enabled]
    tuning_step = tune_at = None
    tune = tune_trials > 0 or tune_budget_s is not None
    if tune or tune_db is not None:
        runner = None
        if tune_rpc:
            from .tuning import parse_rpc_address, rpc_runner

            runner = rpc_runner(*parse_rpc_address(tune_rpc))
        tuning_step = _TuningStep(tvm_target, tune_trials, tune_db, tune_budget if tune else None, report, cancel, runner=runner)
        tune_at = next((i for i, (n, _) in enumerate(steps) if n == "ScheduleTIR"), len(steps))
        steps.insert(tune_at, ("MetaSchedule tuning", tuning_step))
    fused = prefused = None
    with tvm_target:
        for i, (name, spec) in enumerate(steps):
            _check_cancel(cancel)
            report(name, _step_fraction(i, len(steps), tune_at))
            t0 = time.perf_counter()
            p = pl.make_pass(spec, tvm_target) if isinstance(spec, pl.PassSpec) else spec
            if name == "FuseOps":
                prefused = mod
            mod = p(mod)
            passes_applied.append({"name": name, "seconds": round(time.perf_counter() - t0, 4)})
            if name == "FuseOps" or (fused is None and name == "LegalizeOps"):
                fused = mod
    scheduled = mod
    _check_cancel(cancel)
    report("code generation", 0.62)
    t0 = time.perf_counter()
    ex = tvm.compile(scheduled, tvm_target, relax_pipeline=pl.build_relax_pipeline(back, tvm_target))
    passes_applied += [{"name": spec.name} for spec in back if spec.enabled]
    passes_applied.append({"name": f"codegen ({'LLVM' if target == 'cpu' else 'CUDA + LLVM host'})", "seconds": round(time.perf_counter() - t0, 4)})

    lineage = kernel_lineage(fused, imported.lineage, graph, prefused, scheduled) if fused is not None else {}
    cuda_src = cuda_source_of(ex) if target == "cuda" else None
    from .converters import fixes_applied

    manifest = {
        "format_version": FORMAT_VERSION,
        "name": graph.name or (Path(graph.path).stem if getattr(graph, "path", None) else "model"),
        "library": LIBRARY,
        "runner": RUNNER,
        "source_model": SOURCE_MODEL,
        "source_model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "source_path": str(graph.path) if getattr(graph, "path", None) else None,
        "target": {"kind": target, "tvm_target": _target_json(tvm_target)},
        "device": "cuda" if target == "cuda" else "cpu",
        "tvm_version": tvm.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": [s.to_json() for s in inputs],
        "outputs": [s.to_json() for s in outputs],
        "rewrites": list(rewrites if rewrites is not None else getattr(graph, "applied_rewrites", []) or []),
        "converter_fixes": fixes_applied(proto),
        "passes": passes_applied,
        "tuning": _tuning_manifest(tuning_step, tune_trials, tune_budget if tune else None, tune_db, tvm_target),
        "kernel_lineage": lineage,
    }
    art = Artifact(
        library=ex,
        target=target,
        inputs=inputs,
        outputs=outputs,
        manifest=manifest,
        scheduled_mod=scheduled,
        model_bytes=model_bytes,
        cuda_source=cuda_src,
        kernel_lineage=lineage,
        pipeline=pipeline,
    )
    try:
        from .bench import estimate_memory

        manifest["memory_estimate"] = estimate_memory(art, dims=verify_dims)
    except WorkbenchError:
        raise
    except Exception:  # noqa: BLE001 - an estimate is a figure, not a reason to fail a compile
        logger.exception("memory estimate failed")
    if verify and (target == "cpu" or gpu_present()):
        _check_cancel(cancel)
        report("check against onnxruntime", 0.8)
        manifest["verification"] = verify_artifact(art, dims=verify_dims, rtol=rtol, atol=atol, cancel=cancel)
    else:
        manifest["verification"] = {"checked": False, "reason": "verification off" if not verify else "no GPU on the compiling machine"}
    manifest["compile_seconds"] = round(time.perf_counter() - t_start, 3)
    report("done", 1.0)
    return art


def _tuning_manifest(step: "_TuningStep | None", trials: int, budget_s: float | None, db, tvm_target) -> dict | None:
    """The manifest's record of tuning: options, database folder, and what it gave this compile."""
    if step is None:
        return None
    from .tuning import database_dir

    return {
        "trials": int(trials),
        "budget_s": budget_s,
        "database": str(database_dir(db, tvm_target)),
        "summary": step.summary,
        "kernels": step.kernels,
        "kernels_from_database": step.from_database,
    }


def _target_json(t) -> dict:
    try:
        return json.loads(str(t))
    except Exception:  # noqa: BLE001
        return {"text": str(t)}


DEFAULT_TUNE_BUDGET_S = 600.0  # the 10 minutes per model


# compile's progress while tuning: the steps before it, the tuning itself, the steps after it
_TUNE_START, _TUNE_END, _AFTER_TUNE_END = 0.05, 0.55, 0.60


def _check_tuning_options(target: str, tune_trials, tune_budget_s) -> float:
    """The tuning budget in seconds, after checking the options; one sentence when one is wrong."""
    import math
    import numbers

    if isinstance(tune_trials, bool) or not isinstance(tune_trials, numbers.Integral) or tune_trials < 0:
        raise WorkbenchError(f"tune_trials must be a whole number of trials per kernel, 0 or more, not {tune_trials!r}.")
    if tune_budget_s is None:
        budget = DEFAULT_TUNE_BUDGET_S
    else:
        try:
            budget = float(tune_budget_s)
        except (TypeError, ValueError):
            budget = float("nan")
        if isinstance(tune_budget_s, bool) or not math.isfinite(budget) or budget <= 0:
            raise WorkbenchError(f"the tuning budget must be a positive number of seconds, not {tune_budget_s!r}.")
    if (tune_trials > 0 or tune_budget_s is not None) and target != "cpu":
        raise WorkbenchError(f"tuning is available for the cpu target only, not {target}; compile for {target} without tuning.")
    return budget


class _TuningStep:
    """The tuning pass as a compile step, keeping what compile reports about it: the tuning
    report's one-line summary and, after the pass, how many kernels got a schedule from the
    tuning database (counted, not taken from the report)."""

    def __init__(self, tvm_target, trials: int, db, budget_s: float | None, report: Progress, cancel: Callable[[], bool] | None, runner=None):
        from . import schedules

        fn = getattr(schedules, "tuning_pass", None)
        if fn is None:
            raise WorkbenchError("tuning is not available in this build (core.compiler.schedules has no tuning_pass); compile without --tune-trials.")
        self.summary: str | None = None
        self.kernels = self.from_database = 0

        def progress(frac, msg=""):
            frac = min(max(float(frac), 0.0), 1.0)
            if frac >= 1.0 and msg:
                self.summary = msg
            report(f"tuning: {msg}" if msg else "tuning", _TUNE_START + (_TUNE_END - _TUNE_START) * frac)

        try:
            self._pass = fn(
                tvm_target,
                trials=trials,
                database=str(db) if db is not None else None,
                budget_s=budget_s,
                progress=progress,
                cancel=cancel,
                runner=runner,
                on_report=lambda tuning_report: setattr(self, "summary", tuning_report.summary()),
            )
        except ImportError as e:
            raise WorkbenchError(f"tuning is not available in this build ({e}); compile without --tune-trials / --tune-db.") from None

    def __call__(self, mod):
        before = _scheduled_kernels(mod)[0]
        mod = self._pass(mod)
        scheduled, self.kernels = _scheduled_kernels(mod)
        self.from_database = max(0, scheduled - before)
        return mod


def _scheduled_kernels(mod) -> tuple[int, int]:
    """(kernels already scheduled, kernels in all) of a Relax+TIR module."""
    import tvm

    scheduled = total = 0
    for _, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            total += 1
            scheduled += func.attrs is not None and "tirx.is_scheduled" in func.attrs
    return scheduled, total


def _step_fraction(i: int, n: int, tune_at: int | None) -> float:
    """Progress fraction at the start of compile step i of n. Without tuning the steps share
    5-60 %; with it the tuning step (at tune_at) owns 5-55 %, the steps before it 2-5 % and those
    after it 55-60 %, so the bar never runs backwards."""
    if tune_at is None:
        return 0.05 + 0.55 * i / max(n, 1)
    if i < tune_at:
        return 0.02 + (_TUNE_START - 0.02) * i / max(tune_at, 1)
    if i == tune_at:
        return _TUNE_START
    return _TUNE_END + (_AFTER_TUNE_END - _TUNE_END) * (i - tune_at - 1) / max(n - tune_at - 1, 1)
