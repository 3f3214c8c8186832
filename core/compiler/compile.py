"""Compile a model for CPU (LLVM) or GPU (CUDA), check it against onnxruntime, export a folder that ships.

The chain is the one the Lowering panel shows, run by the same runner (core.compiler.pipeline.runner):
import the ONNX graph into Relax, run the pass pipeline of `core.compiler.pipeline.pass_list` (graph passes,
LegalizeOps, FuseOps/FuseTIR, tuning when asked for, then
`core.compiler.schedules.schedule_pass(target)`, then the VM lowering passes) and generate code
(`tvm.compile`). What the user steps through is what gets compiled.

Never a silent wrong answer: TVM's ONNX frontend computes wrong results for some ops without any
warning, so `compile_model` runs the compiled model and onnxruntime on the same seeded random
inputs and refuses (naming the op and node that first goes wrong) when they disagree. Known bad
conversions are replaced by the workbench's own converters (`core.compiler.frontend.converters`).

The exported folder is described in `core.compiler.runtime.artifact`; verification in
`core.compiler.check.verification`.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Cancelled, WorkbenchError
from ..model.external_data import self_contained_proto
from ..progress import Progress, ProgressCallback
from .runtime.artifact import FORMAT_VERSION, LIBRARY, RUNNER, SOURCE_MODEL, Artifact, TensorSpec, load_artifact, specs_from_proto
from .runtime.manifest import Manifest, ManifestTarget, PassRecord, ShapeBucket, TuningRecord, Verification
from .runtime.recipe import RecipeSource
from .backend.codegen import BuildCancelled, cancel_scope
from .backend.cuda import cuda_source_of, host_cuda_arch, prefer_nvcc_for_jit
from .pipeline.buckets import add_shape_buckets, normalise_buckets
from .pipeline.lineage import KernelLineageTap, bucket_lineage
from .check.reference import ATOL, RTOL, compare_outputs, random_feeds
from .pipeline.size_limit import check_size
from .schedules import recording_traces
from .target import TargetKind, gpu_present
from .check.verification import CompiledMismatchError, verify_artifact
from .tuning.winograd_choice import WINOGRAD_SHARE

__all__ = [
    "compile_model",
    "import_relax",
    "CompileCancelled",
    "CUDA_TUNING_NEEDS_GPU",
    "TUNING_STEP",
    "CHOICE_STEP",
    # re-exported: what a compile hands back and how it is checked
    "Artifact",
    "TensorSpec",
    "CompiledMismatchError",
    "load_artifact",
    "random_feeds",
    "compare_outputs",
]

logger = logging.getLogger(__name__)

# the steps compile inserts when tuning (core.compiler.tuning): each stops in rounds, so a cancel
# waits for the round in progress (their progress events say so: Progress.stops_after)
TUNING_STEP, CHOICE_STEP = "MetaSchedule tuning", "Winograd choice"
_TUNING_STOPS, _CHOICE_STOPS = "the measuring round in progress", "the conv being measured"


# the one cancel error of core (core.errors.Cancelled), under the name older callers import
CompileCancelled = Cancelled


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
    code_names: dict[str, str] | None = None  # user's name -> C identifier in the kernels (changed ones)


def import_relax(graph) -> Imported:
    """ONNX Graph -> Relax IRModule (weights as constants) through the workbench's import
    (core.compiler.frontend.onnx_import: lineage + the converter fixes of core.compiler.frontend.converters), with
    the lineage told in node labels."""
    from .pipeline.runner import Pipeline

    t0 = time.perf_counter()
    result = Pipeline.import_graph(graph)
    label = {n.id: n.label for n in graph.nodes}
    lineage = {var: [label[i] for i in ids if i in label] for var, ids in result.lineage.items()}
    return Imported(result.mod, lineage, time.perf_counter() - t0, result.code_names)


@contextlib.contextmanager
def _cancelled_as_compile(cancel: Callable[[], bool] | None):
    """A pass that polled `cancel` (core.compiler.backend.codegen.cancel_scope) stopped: the compile is
    cancelled. (Raised inside a pass, BuildCancelled reaches here through TVM's C++ as a
    RuntimeError: `cancel()` itself tells.)"""
    try:
        yield
    except BuildCancelled:
        raise CompileCancelled("compile cancelled.") from None
    except Exception:
        if cancel is not None and cancel():
            raise CompileCancelled("compile cancelled.") from None
        raise


def _check_cancel(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled("compile cancelled.")


def compile_model(
    graph_or_path,
    target: TargetKind | str = TargetKind.CPU,
    *,
    pipeline=None,
    verify: bool = True,
    verify_dims: dict[str, int] | None = None,
    verify_inputs: dict | None = None,
    shape_buckets: list[dict[str, int]] | None = None,
    rewrites: list[str] | None = None,
    tune_trials: int = 0,
    tune_db: str | os.PathLike | None = None,
    tune_budget_s: float | None = None,
    tune_rpc: str | None = None,
    cpu: str | None = None,
    cpu_features=None,
    triple: str | None = None,
    cores: int | None = None,
    progress: ProgressCallback | None = None,
    cancel: Callable[[], bool] | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> Artifact:
    """Compile an ONNX model (a Graph or a file) for 'cpu' or 'cuda' and return an Artifact.

    `pipeline` is a list of core.compiler.pipeline.pass_list PassSpecs (the Lowering panel's, edits included);
    default: core.compiler.pipeline.pass_list.default_pipeline(target). With `verify` (the default) the compiled
    model runs against onnxruntime on seeded random inputs (symbolic dims from `verify_dims`,
    default 1), or on `verify_inputs` (input name -> array) when given; a difference beyond
    rtol/atol raises CompiledMismatchError naming the first op that goes wrong. The reference is
    onnxruntime, or onnx's reference evaluator where onnxruntime cannot run the model. CUDA is verified only where a GPU exists (code generation needs none).
    `shape_buckets` (dicts giving every symbolic input dim a size, e.g. [{"batch": 2, "sequence": 96}])
    compile main once more per bucket with those dims bound, so its kernels get the static
    schedules (core.compiler.pipeline.buckets); a run whose inputs match a bucket exactly calls it,
    any other the general main. Each bucket is checked at its shape, and so is the general main
    (beside its own check at `verify_dims`); the manifest lists them under `shape_buckets`.
    Tuning (`tune_budget_s` seconds for the model, or `tune_trials` > 0 with a 600 s budget):
    every candidate config of the schedule rules' templates is measured, then MetaSchedule
    searches `tune_trials` schedules per kernel with the time left; the records go to the
    database folder `tune_db` (default core.compiler.tuning.tune.default_database_root()) and the compile
    uses the fastest measured schedule per kernel. On CPU code this host runs, tuning ends with a
    model-level A/B (core.compiler.tuning.ab: the whole model untuned against tuned, timed
    alternately here), and this compile and later ones of the model apply only the records that
    made the model faster there. A `tune_db` alone only applies that
    database. Tuning for cuda needs a GPU on this machine (candidates are measured on it; the
    template search is CPU-only, so a CUDA tuning is MetaSchedule's search against dlight's
    defaults). It reports through `progress` (5-55 %) and stops after the measuring round in
    which `cancel()` turns True. `tune_rpc` ('HOST:PORT:KEY') measures the candidates on the
    devices registered under KEY with the TVM RPC tracker at HOST:PORT instead of here (the
    target must describe those devices).
    `cpu` / `cpu_features` name the CPU the code is for (an LLVM CPU name or "host", and feature
    changes such as "-avx512f"; default: MLCWB_CPU / MLCWB_CPU_FEATURES, else this host; see
    core.compiler.target.make_target); `triple` ("aarch64-linux-gnu") builds for another
    architecture, `cores` for that many cores (core.compiler.target.DEVICE_PRESETS name both).
    Code this machine cannot run (AVX-512 code on an AVX2 host, ARM64 code) compiles and exports
    (cross-linked), but is not verified here, and is tuned only on RPC devices.
    `progress(event)` hears a core.progress.Progress as each step starts (and as tuning goes on):
    its `cancellable` says whether a cancel now stops at once; `cancel()` returning True stops the
    compile with core.errors.Cancelled at the next step, or within the steps that poll it.
    """
    from .runtime import prepare

    prepare()  # TVM's thread settings and the workbench's pool, before TVM is first imported (a no-op once done)
    import tvm

    from .levels import Level
    from .pipeline.runner import Pipeline, Step, StepResult
    from .target import foreign_code, make_target, target_cpu

    target = TargetKind.parse(target)
    cpu_kind = target is TargetKind.CPU
    tune_budget = _check_tuning_options(target, tune_trials, tune_budget_s)
    cuda_arch = (host_cuda_arch() or "sm_80") if not cpu_kind else "sm_80"
    tvm_target = make_target(target, cuda_arch=cuda_arch, mcpu=cpu, mattr=cpu_features, triple=triple, cores=cores)
    built_for = target_cpu(tvm_target)
    foreign = foreign_code(built_for) if cpu_kind else None
    if foreign and (tune_trials > 0 or tune_budget_s is not None) and not tune_rpc:
        raise WorkbenchError(f"cannot tune here: tuning measures every candidate on this machine, and {foreign}; "
                             "tune on such devices through an RPC tracker (--tune-rpc), or compile without tuning.")
    report = progress or (lambda event: None)
    t_start = time.perf_counter()
    graph = _resolve_graph(graph_or_path)
    check_size(graph, "compiling")
    proto = self_contained_proto(graph)  # the artifact's model.onnx and onnxruntime need the weights inline
    model_bytes = proto.SerializeToString(deterministic=True)
    inputs, outputs = specs_from_proto(proto)
    buckets = normalise_buckets(shape_buckets, inputs)  # refused before minutes of compiling
    if not cpu_kind and gpu_present():
        prefer_nvcc_for_jit()
    pipe = Pipeline(tvm_target, pipeline)
    passes_applied: list[PassRecord] = []

    report(Progress(0.02, "import to Relax", step="import to Relax"))
    _check_cancel(cancel)
    imported = import_relax(graph)
    passes_applied.append(PassRecord("ONNX import (Relax)", round(imported.seconds, 4)))
    start_mod, bucket_functions = add_shape_buckets(imported.mod, buckets, imported.code_names)

    # the steps up to the scheduled module, tuning before the scheduling step; then the VM
    # lowering (kept apart: the module before it is the scheduled one, for the memory estimate
    # and lineage). Steps are found by their passes' flags (PassInfo), not by name.
    steps = pipe.steps()
    cut = next((i for i, s in enumerate(steps) if s.info.vm_lowering), len(steps))
    front, back = steps[:cut], steps[cut:]
    tuning_step = tune_at = choice_at = None
    tune = tune_trials > 0 or tune_budget_s is not None
    if tune or tune_db is not None:
        runner = None
        if tune_rpc:
            from .tuning.tune import parse_rpc_address, rpc_runner

            runner = rpc_runner(*parse_rpc_address(tune_rpc))
        tune_at = next((i for i, s in enumerate(front) if s.info.schedules), len(front))
        rest = front[tune_at:] + back
        build = None
        if tune and cpu_kind and not foreign and not tune_rpc:
            # the model-level A/B after tuning compiles the fused module the rest of the way, here
            def build(mod):
                built = Artifact(library=pipe.codegen(pipe.run(mod, rest), cancel=cancel), target=target, inputs=inputs,
                                 outputs=outputs, manifest=Manifest(target=ManifestTarget(cpu=built_for)))
                args = built.to_device(random_feeds(inputs, dims=verify_dims, model=proto))
                return lambda: built.run_device(args)
        # the choice of direct or Winograd per 3x3 conv is made when legalizing: tuned and applied
        # in its own step before LegalizeOps, on a share of the budget (core.compiler.tuning.winograd_choice)
        from .tuning.winograd_choice import winograd_choice_pass

        legalize_at = next((i for i, s in enumerate(front) if s.info.legalizes), None)
        choice_s = WINOGRAD_SHARE * tune_budget if tune and cpu_kind and not foreign and not tune_rpc else None
        if choice_s is not None and legalize_at is not None:
            choice_at = legalize_at  # the choice is tuned: its step gets its share of the bar
        tuning_step = _TuningStep(tvm_target, tune_trials, tune_db, tune_budget if tune else None, report, cancel, runner=runner, build=build,
                                  start=_tuning_start(choice_at))
        front.insert(tune_at, Step(TUNING_STEP, Level.TENSOR_PROGRAM, lambda: tuning_step, stops_after=_TUNING_STOPS))
        if legalize_at is not None:
            db = str(tune_db) if tune_db is not None else None
            choice_progress = _choice_progress(report)
            front.insert(legalize_at, Step(CHOICE_STEP, Level.GRAPH, lambda: winograd_choice_pass(
                tvm_target, db, choice_s, cancel, progress=choice_progress, spent=tuning_step.spend, applied=tuning_step.winograd_choices),
                stops_after=_CHOICE_STOPS))
            tune_at += 1
    tap = KernelLineageTap(start_mod)  # keeps the modules around FuseOps that lineage reads
    kept: dict[str, Any] = {}
    stages: list[tuple[str, str]] = [("Relax import", imported.mod.script(show_meta=False))]  # each step's TVMScript, for the recipe

    # code generation polls cancel between groups of kernels on CPU; a CUDA build is one piece
    def codegen_progress(message: str = "code generation") -> Progress:
        return Progress(0.62, message, step="code generation", cancellable=cpu_kind)

    def before(i: int, step: Step) -> None:
        _check_cancel(cancel)
        if i < len(front):
            report(step.progress(_step_fraction(i, len(front), tune_at, choice_at)))
        elif i == len(front):  # the VM lowering: quick, shown as the start of code generation
            report(codegen_progress())

    def after(r: StepResult) -> None:
        tap(r)
        if r.step.info is not None and r.step.info.legalizes:
            kept.setdefault("relax", stages[-1][1])  # after the graph passes: the recipe's relax_module.py
        stages.append((r.step.name, r.mod.script(show_meta=False)))
        if r.index == len(front) - 1:
            kept["scheduled"] = r.mod
        passes_applied.append(PassRecord(r.step.name, round(r.seconds, 4)))

    with _cancelled_as_compile(cancel), cancel_scope(cancel), recording_traces() as traces:
        final = pipe.run(start_mod, front + back, before=before, after=after, on_error=lambda step, e: _tvm_failure(step.name, e))
    scheduled = kept.get("scheduled", start_mod)
    _check_cancel(cancel)
    if not back:
        report(codegen_progress())
    t0 = time.perf_counter()
    with _cancelled_as_compile(cancel):
        ex = _tvm_step("code generation", lambda m: pipe.codegen(m, cancel=cancel, progress=lambda msg: report(codegen_progress(msg))), final)
    passes_applied.append(PassRecord(f"codegen ({'LLVM' if cpu_kind else 'CUDA + LLVM host'})", round(time.perf_counter() - t0, 4)))

    lineage = tap.kernel_lineage(imported.lineage, graph, scheduled)
    for function in bucket_functions:  # a bucket's kernels: the same lineage, read from its function
        for kernel, nodes in bucket_lineage(tap, function, imported.lineage, graph, scheduled).items():
            lineage.setdefault(kernel, nodes)
    cuda_src = cuda_source_of(ex) if not cpu_kind else None
    from .frontend.converters import fixes_applied

    manifest = Manifest(
        format_version=FORMAT_VERSION,
        name=graph.name or (Path(graph.path).stem if getattr(graph, "path", None) else "model"),
        library=LIBRARY,
        runner=RUNNER,
        source_model=SOURCE_MODEL,
        source_model_sha256=hashlib.sha256(model_bytes).hexdigest(),
        source_path=str(graph.path) if getattr(graph, "path", None) else None,
        target=ManifestTarget(kind=target, tvm_target=_target_json(tvm_target), cpu=built_for),
        device="cpu" if cpu_kind else "cuda",
        tvm_version=tvm.__version__,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        inputs=list(inputs),
        outputs=list(outputs),
        code_names=dict(imported.code_names or {}),
        rewrites=list(rewrites if rewrites is not None else getattr(graph, "applied_rewrites", []) or []),
        converter_fixes=fixes_applied(proto),
        passes=passes_applied,
        tuning=_tuning_manifest(tuning_step, tune_trials, tune_budget if tune else None, tune_db, tvm_target),
        kernel_lineage=lineage,
        shape_buckets=[ShapeBucket(f, dict(b)) for f, b in zip(bucket_functions, buckets)],
    )
    if cpu_kind:
        manifest.parallel_kernels = parallel_kernel_count(scheduled)
        from .passes.input_alignment import DEFAULT, input_alignment

        alignment = input_alignment(final)  # 16: numpy's arrays are read in place (ReadInputsInPlace)
        manifest.input_alignment = alignment if alignment != DEFAULT else None
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
        recipe=RecipeSource.of_stages(tvm_target, final, kept.get("relax"), stages, traces),
    )
    try:
        from .measure.bench import estimate_memory

        manifest.memory_estimate = estimate_memory(art, dims=verify_dims)
    except WorkbenchError:
        raise
    except Exception:  # noqa: BLE001 - an estimate is a figure, not a reason to fail a compile
        logger.exception("memory estimate failed")
    if verify and foreign:
        manifest.verification = Verification(checked=False, reason=foreign)
    elif verify and (cpu_kind or gpu_present()):
        _check_cancel(cancel)
        report(Progress(0.8, "check against onnxruntime", step="check against onnxruntime"))
        general = "main" if buckets else None  # the general kernels, even at a bucket's shape
        manifest.verification = verify_artifact(art, dims=verify_dims, rtol=rtol, atol=atol, cancel=cancel, inputs=verify_inputs,
                                                function=general)
        for bucket in manifest.shape_buckets:  # each bucket at its shape, and the general main there too
            _check_cancel(cancel)
            report(Progress(0.85, f"check bucket {bucket.label}", step="check against onnxruntime"))
            bucket.verification = verify_artifact(art, dims=bucket.dims, rtol=rtol, atol=atol, cancel=cancel, function=bucket.function)
            bucket.general_verification = verify_artifact(art, dims=bucket.dims, rtol=rtol, atol=atol, cancel=cancel, function="main")
    else:
        manifest.verification = Verification(checked=False, reason="verification off" if not verify else "no GPU on the compiling machine")
    manifest.compile_seconds = round(time.perf_counter() - t_start, 3)
    report(Progress(1.0, "done"))
    return art


def parallel_kernel_count(mod) -> int:
    """How many of `mod`'s kernels have a parallel loop (0: the thread count never matters, and
    Artifact.run_device skips choosing it). Counted once, at compile: printing every kernel is slow."""
    return sum(1 for _, func in mod.functions_items() if type(func).__name__ == "PrimFunc" and "T.parallel" in func.script())


def _tvm_failure(name: str, e: Exception) -> Exception | None:
    """The refusal for TVM's own failure in step `name` (None: a WorkbenchError, raised as it is)."""
    from ..errors import UnsupportedOpError, brief_reason
    from ..files import user_error

    if isinstance(e, WorkbenchError):
        return None
    mine = user_error(e)  # a full disk or a read-only folder (tuning records) is the user's, not TVM's
    if mine is not None:
        return mine
    logger.debug("TVM step %s failed", name, exc_info=e)
    return UnsupportedOpError(
        f"TVM cannot compile this model: its {name} step fails ({brief_reason(e)}); simplify or replace the op involved, "
        "or compile with another tool."
    )


def _tvm_step(name: str, fn, mod):
    """fn(mod), with TVM's own failures (internal checks, type errors deep in a pass or in code
    generation) turned into one sentence naming the step (`_tvm_failure`): a model TVM cannot
    compile is a refusal the user can read, not a traceback."""
    try:
        return fn(mod)
    except Exception as e:  # noqa: BLE001 - every TVM failure here is "TVM cannot compile this model"
        better = _tvm_failure(name, e)
        if better is None:
            raise
        raise better from e


def _tuning_manifest(step: "_TuningStep | None", trials: int, budget_s: float | None, db, tvm_target) -> TuningRecord | None:
    """The manifest's record of tuning: options, database folder, and what it gave this compile."""
    if step is None:
        return None
    from .tuning.tune import database_dir

    return TuningRecord(
        trials=int(trials),
        budget_s=budget_s,
        database=str(database_dir(db, tvm_target)),
        summary=step.summary,
        kernels=step.kernels,
        kernels_from_database=step.from_database,
        winograd_choices_from_database=len(step.winograd_choices),  # core.compiler.tuning.winograd_choice
        model_ab=step.model_ab,
    )


def _target_json(t) -> dict:
    try:
        return json.loads(str(t))
    except Exception:  # noqa: BLE001
        return {"text": str(t)}


DEFAULT_TUNE_BUDGET_S = 600.0  # the 10 minutes per model


# compile's progress while tuning: the steps before it, the tuning itself, the steps after it;
# a tuned Winograd choice (before LegalizeOps) takes the first part of the tuning's share, as
# it takes that share of the budget (winograd_choice.WINOGRAD_SHARE)
_TUNE_START, _TUNE_END, _AFTER_TUNE_END = 0.05, 0.55, 0.60
_CHOICE_END = _TUNE_START + WINOGRAD_SHARE * (_TUNE_END - _TUNE_START)


def _check_tuning_options(target: TargetKind, tune_trials, tune_budget_s) -> float:
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
    if (tune_trials > 0 or tune_budget_s is not None) and target is TargetKind.CUDA and not gpu_present():
        raise WorkbenchError(CUDA_TUNING_NEEDS_GPU)
    return budget


# MetaSchedule measures every candidate schedule on the device it tunes for
CUDA_TUNING_NEEDS_GPU = (
    "tuning for cuda measures every candidate on a GPU, and this machine has none; compile for cuda without "
    "tuning (a database tuned on a GPU machine still applies with tune_db / --tune-db)."
)


class _TuningStep:
    """The tuning pass as a compile step, keeping what compile reports about it: the tuning
    report's one-line summary and, after the pass, how many kernels got a schedule from the
    tuning database (counted, not taken from the report)."""

    def __init__(self, tvm_target, trials: int, db, budget_s: float | None, report: ProgressCallback, cancel: Callable[[], bool] | None,
                 runner=None, build=None, start: float = _TUNE_START):
        self.summary: str | None = None
        self.model_ab: dict | None = None  # the model-level A/B's outcome (core.compiler.tuning.ab)
        self.kernels = self.from_database = 0

        def progress(frac, msg=""):  # tuning's own (fraction, message), as compile's events
            frac = min(max(float(frac), 0.0), 1.0)
            if frac >= 1.0 and msg:
                self.summary = msg
            text = msg if msg.startswith("tuning ") else f"tuning: {msg}" if msg else "tuning"
            report(Progress(frac, text, step=TUNING_STEP, cancellable=False, stops_after=_TUNING_STOPS).within(start, _TUNE_END))

        try:
            from .tuning.ab import tuning_pass
        except ImportError as e:
            raise WorkbenchError(f"tuning is not available in this build ({e}); compile without --tune-trials / --tune-db.") from None
        # the budget less what earlier steps spent of it (`spend`: the Winograd choice)
        self.budget_s, self.spent_s = budget_s, 0.0
        self.winograd_choices: dict[str, str] = {}  # convs the database computes otherwise than the rule
        self._make = lambda budget: tuning_pass(tvm_target, trials=trials, database=str(db) if db is not None else None, budget_s=budget,
                                                progress=progress, cancel=cancel, runner=runner, on_report=self._heard, build=build)

    def spend(self, seconds: float) -> None:
        self.spent_s += seconds

    def _heard(self, tuning_report) -> None:
        self.summary, self.model_ab = tuning_report.summary(), tuning_report.model_ab

    def __call__(self, mod):
        before = _scheduled_kernels(mod)[0]
        mod = self._make(None if self.budget_s is None else max(0.5 * self.budget_s, self.budget_s - self.spent_s))(mod)
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


def _step_fraction(i: int, n: int, tune_at: int | None, choice_at: int | None = None) -> float:
    """Progress fraction at the start of compile step i of n. Without tuning the steps share
    5-60 %; with it the tuning step (at tune_at) owns 5-55 %, the steps before it 2-5 % and those
    after it 55-60 %, so the bar never runs backwards. A tuned Winograd choice (at choice_at)
    owns 5-15 % of that (_choice_progress), the steps between it and the tuning stay at 15 %."""
    if tune_at is None:
        return 0.05 + 0.55 * i / max(n, 1)
    first = tune_at if choice_at is None else choice_at
    if i < first:
        return 0.02 + (_TUNE_START - 0.02) * i / max(first, 1)
    if i == first:
        return _TUNE_START
    if i < tune_at:
        return _CHOICE_END
    if i == tune_at:
        return _tuning_start(choice_at)
    return _TUNE_END + (_AFTER_TUNE_END - _TUNE_END) * (i - tune_at - 1) / max(n - tune_at - 1, 1)


def _tuning_start(choice_at: int | None) -> float:
    return _TUNE_START if choice_at is None else _CHOICE_END


def _choice_progress(report: ProgressCallback):
    """The Winograd choice's progress(fraction, message) as compile's events over 5-15 %: the
    message which conv of how many ("Winograd conv 2 of 5"), the detail which conv."""
    def progress(frac: float, msg: str) -> None:
        event = Progress(frac, f"Winograd {msg.split(': ', 1)[0]}", step=CHOICE_STEP, cancellable=False,
                         stops_after=_CHOICE_STOPS, detail=f"{CHOICE_STEP}: {msg}")
        report(event.within(_TUNE_START, _CHOICE_END))

    return progress
