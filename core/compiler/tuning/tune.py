"""MetaSchedule tuning with a budget, a persistent database, progress and cancel, and RPC scale-out.

Why a layer over `tvm.s_tir.meta_schedule`: TVM's one-call tuners spend a trial budget over all
kernels with no wall-clock limit, no way to stop them from a GUI, and they start every kernel's
search from scratch. Here:

* **Database** (core.compiler.tuning.db): a folder per target (`<root>/<target key>/`, a MetaSchedule JSONDatabase) holding
  tuning records keyed by the kernel's structure (workload) - so the same conv shape is tuned
  once and reused by every later compile, of this model or another one. `progress.json` beside
  it records trials spent per workload, which makes tuning resumable: a rerun continues where a
  cancelled or timed-out one stopped and skips kernels that already had their trials.
* **Measured against the default schedules**: before a kernel is tuned, core.compiler.schedules' rule is
  applied to it and measured the same way (progress.json keeps the figure). Applying the
  database uses a tuned record only where it beats that default by 3% (tuning_db.SEARCH_MARGIN:
  a pick within the noise is as likely slower), so tuning does not make a kernel slower. (The search itself is not seeded with the default's trace: MetaSchedule's
  layout-rewrite postprocessor fails on a trace that already packs the weights.)
* **Template search first**: for kernels a core.compiler.schedules rule has knobs for (convolutions:
  register tile, channel blocks per tile, input channel blocking, unrolling, loop order;
  matmuls: rows x vectors of the register tile), every candidate config of that rule is
  built and measured on one thread - the default config among them, so the search starts from
  the default schedule. The fastest few that beat the default are then measured again beside
  it at the model's thread count (tuning_runners.confirm_at_threads: alternating rounds, a 3%
  margin, most rounds won): a config replaces the default only if it wins there too, since a
  tile that is best on one core may split its parallel loop worse over two. The decision per
  workload goes to `templates.json` beside the MetaSchedule records. This is cheap (a few
  dozen builds per kernel).
* **MetaSchedule's open search** then gets the budget left. Its records are measured on one thread
  too, so after each kernel's search its fastest few records that beat the default are
  confirmed the same way (tuning_search's `_confirm_search`; the outcome is kept in `progress.json`): compile
  applies a searched record only if it won there.
* **Budget**: kernels are tuned most expensive first (measured default time x how often the model
  calls it) until `budget_s` runs out; `trials_per_task` trials each, in rounds of
  `trials_per_round`. `progress(fraction, message)` reports, `cancel()` stops after the round.
* **Model-level A/B** (core.compiler.tuning.ab, whose `tuning_pass` is compile's tuning step):
  after tuning, the whole model untuned against the model with the records; only records that
  win there are applied to that model.
* **Scale-out**: pass `runner=rpc_runner(host, port, key)` to measure candidates on machines
  registered with a TVM RPC tracker (see `rpc_runner`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# the database (folders, record files, applying it) is core.compiler.tuning.db, the builders and
# runners that measure candidates core.compiler.tuning.runners; their public names are
# re-exported here, where callers have always found them
from .db import PROGRESS_FILE, SEARCH_CONFIRMED, TEMPLATES_FILE, _best_seconds, _current_space, _load_progress, _load_templates, _prepare, _save_progress, _save_templates, _template_rules, _workload_key, apply_database_pass, database_choice, database_coverage, database_dir, default_database_root, kernel_workload, open_database, prepare_module, record_schedule, schedule_from_record, search_option, search_records, target_key, trace_key, tuned_schedule
from .runners import CONFIRM_MARGIN, Pace, _worker_initializer, confirm_at_threads, local_builder, local_runner, measure_schedules, parse_rpc_address, rpc_runner

# MetaSchedule's open search (its tasks, strategy, stop callback and record confirmation) is
# core.compiler.tuning.search
from .search import _confirm_search, _make_callback, _measure_default, _reset_meta_schedule_logging, _search_strategy, _tuning_target, extract_tasks

__all__ = [
    "TaskResult",
    "TuningReport",
    "default_database_root",
    "target_key",
    "database_dir",
    "open_database",
    "extract_tasks",
    "tune_module",
    "apply_database_pass",
    "database_coverage",
    "rpc_runner",
    "parse_rpc_address",
    "local_builder",
    "local_runner",
    "prepare_module",
    "kernel_workload",
    "tuned_schedule",
    "record_schedule",
    "database_choice",
]

logger = logging.getLogger(__name__)


@dataclass
class TaskResult:
    """One kernel's tuning: default-schedule time, best time in the database, trials spent."""

    name: str
    workload: str  # structural hash of the kernel, the database key
    weight: int  # how many times the model calls it
    default_ms: float | None = None
    best_ms: float | None = None  # MetaSchedule's best record
    # the one-thread ms of the record compile applies: the record that won the confirmation at the
    # model's threads (None when none did), or the best record where none was confirmed
    search_ms: float | None = None
    trials: int = 0  # MetaSchedule trials spent on it in total (this run and earlier ones)
    reused: bool = False  # already tuned by an earlier run: nothing spent now
    template_ms: float | None = None  # best config of the template search
    template_config: dict | None = None
    candidates: int = 0  # template configs measured

    @property
    def tuned_ms(self) -> float | None:
        """What the compiled model will get: the fastest of default, template and the search's applicable record."""
        times = [t for t in (self.default_ms, self.template_ms, self.search_ms) if t is not None]
        return min(times) if times else None


@dataclass
class TuningReport:
    database: str
    seconds: float = 0.0
    cancelled: bool = False
    out_of_time: bool = False
    tasks: list[TaskResult] = field(default_factory=list)
    model_ab: dict | None = None  # the model-level A/B's outcome (core.compiler.tuning.ab), when one ran

    def summary(self) -> str:
        tuned = sum(1 for t in self.tasks if t.trials or t.template_ms is not None)
        reused = sum(1 for t in self.tasks if t.reused)
        state = "cancelled" if self.cancelled else "budget spent" if self.out_of_time else "done"
        text = f"{tuned}/{len(self.tasks)} kernels tuned ({reused} reused from the database), {self.seconds:.0f} s, {state}"
        before = sum((t.default_ms or 0.0) * t.weight for t in self.tasks if t.default_ms is not None and t.tuned_ms is not None)
        after = sum(t.tuned_ms * t.weight for t in self.tasks if t.default_ms is not None and t.tuned_ms is not None)
        if before > 0 and after > 0:
            text += f"; measured kernels {before:.2f} -> {after:.2f} ms per run ({before / after:.2f}x)"
        return text


def _measure_schedules(schedules: list, target, builder, runner) -> list[float | None]:
    """Seconds per schedule (None where it did not build or run): all built, then all run."""
    return measure_schedules(schedules, target, builder, runner)


def _stop(report, cancel, deadline: float, clock: Callable[[], float] = time.monotonic) -> bool:
    """True once the user cancelled or the budget ran out (and the report says which)."""
    if report.cancelled or report.out_of_time:
        return True
    if cancel is not None and cancel():
        report.cancelled = True
    elif clock() >= deadline:
        report.out_of_time = True
    return report.cancelled or report.out_of_time


def _has_template(func, target) -> bool:
    if target.kind.name != "llvm":  # the template rules are CPU schedules
        return False
    return any(rule.candidates(func, target) for rule in _template_rules())


def _tune_template(func, target, builder, runner, cancel, deadline, batch: int = 4, confirm_runner=None, finalists: int = 3,
                   pace: Pace | None = None) -> dict | None:
    """Measure every candidate config of the first template rule that matches `func` (on
    `runner`: one thread), then confirm the `finalists` fastest that beat the default there
    by CONFIRM_MARGIN against
    it on `confirm_runner` (the model's thread count; `runner` when None), side by side in
    alternating rounds. The record ({rule, config, ms, default_ms, measured, confirmed}) keeps a
    config other than the default only when it won there by tuning_runners.CONFIRM_MARGIN; None
    when no rule has knobs for `func`. Stops early (keeping what was measured; the record then
    says it is not complete) on cancel or when the next batch, or the confirmation, would end
    past the deadline at `pace`."""
    for rule in _template_rules():
        configs = rule.candidates(func, target)
        if configs:
            break
    else:
        return None
    pace = pace or Pace()
    measured = []
    for start in range(0, len(configs), batch):
        if (cancel is not None and cancel()) or not pace.fits(deadline, "candidate", len(configs[start : start + batch])):
            break
        group, schedules = [], []
        for config in configs[start : start + batch]:
            try:
                sch = rule.apply(func, target, config)
            except Exception as exc:  # noqa: BLE001 - a config the function does not take
                logger.info("config %s does not apply: %s", config, exc)
                continue
            if sch is not None:
                group.append(config)
                schedules.append(sch)
        with pace.timed("candidate", len(schedules)):
            times = _measure_schedules(schedules, target, builder, runner) if schedules else []
        for config, secs in zip(group, times):
            measured.append((config, None if secs is None else secs * 1e3))
    timed = [(c, ms) for c, ms in measured if ms is not None]
    if not timed:
        return None
    best_config, best_ms = min(timed, key=lambda x: x[1])
    default_ms = measured[0][1] if measured and measured[0][0] == configs[0] else None
    confirmed = None
    faster = [] if default_ms is None else sorted((x for x in timed if x[1] < default_ms * (1.0 - CONFIRM_MARGIN)), key=lambda x: x[1])
    # a confirmation that would end past the deadline is left to a later run (the record is incomplete)
    skipped = bool(faster) and ((cancel is not None and cancel()) or not pace.fits(deadline, "confirm", min(len(faster), finalists) + 1, like="candidate"))
    if faster and not skipped:
        # A winner picked from a dozen noisy one-thread measurements is partly luck, and what
        # is best on one core may parallelize worse on the model's threads: the finalists and
        # the default again, side by side on `confirm_runner`; the default unless one wins.
        faster = faster[:finalists]
        with pace.timed("confirm", len(faster) + 1):
            winner, secs = confirm_at_threads(
                rule.apply(func, target, configs[0]),
                [rule.apply(func, target, c) for c, _ in faster],
                target,
                builder,
                confirm_runner or runner,
            )
        confirmed = {
            "default_ms": None if secs[0] is None else secs[0] * 1e3,
            "finalists": [[c, None if t is None else t * 1e3] for (c, _), t in zip(faster, secs[1:])],
        }
        best_config, best_ms = (configs[0], default_ms) if winner is None else faster[winner]
        confirmed["ms"] = confirmed["default_ms"] if winner is None else confirmed["finalists"][winner][1]
    elif default_ms is not None:
        best_config, best_ms = configs[0], default_ms
    return {
        "rule": rule.name,
        "space": getattr(rule, "space_version", 0),
        "config": best_config,
        "ms": best_ms,
        "default_ms": default_ms,
        "confirmed": confirmed,
        "complete": len(measured) == len(configs) and not skipped,
        "measured": [[c, ms] for c, ms in measured],
    }


def tune_module(
    mod,
    target,
    database=None,
    *,
    budget_s: float = 600.0,
    trials_per_task: int = 64,
    trials_per_round: int = 16,
    runner=None,
    builder=None,
    progress: Callable[[float, str], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    seed: int = 0,
    confirm_runner=None,
    clock: Callable[[], float] = time.monotonic,
) -> TuningReport:
    """Tune the kernels of a fused Relax+TIR module into the database folder `database`.

    `mod` is the module after FuseTIR (what schedule_pass receives). Returns a TuningReport;
    the records are in the database whatever happened (cancel, budget, a failing kernel).
    Candidates are measured on `runner` (default: one local thread); a template config replaces
    the default only after winning again on `confirm_runner` (default: `runner` when one is
    given, else the target's cores locally), where the model will run. No step (a batch of
    candidates, a confirmation, a search round) starts that would end past `budget_s` at the
    pace seen so far (tuning_runners.Pace, on `clock`).
    """
    from tvm.s_tir import meta_schedule as ms

    pace = Pace(clock)
    start = clock()
    deadline = start + budget_s
    report_progress = progress or (lambda fraction, message: None)
    target = _tuning_target(target)
    folder = database_dir(database, target)
    db = open_database(database, target)
    saved = _load_progress(folder)
    report = TuningReport(database=str(folder))

    report_progress(0.0, "extracting kernels")
    tasks = extract_tasks(mod, target)
    # template winners are confirmed at the thread count the model runs on (an RPC runner
    # measures on its device as that device runs). Local builders and runners start worker
    # processes (seconds, and as long again to stop): made only once something is measured.
    made = {"builder": builder, "runner": runner, "confirm": confirm_runner or runner}

    def tools():
        made["builder"] = made["builder"] or local_builder(target=target)
        made["confirm"] = made["confirm"] or local_runner(threads=_cores(target))
        made["runner"] = made["runner"] or local_runner()
        return made["builder"], made["runner"], made["confirm"]
    work_dir = str(folder / "logs")

    # Measure what the defaults cost where nothing is known yet, to tune where the time goes.
    entries = []
    for task in tasks:
        task_mod = task.dispatched[0]
        key = _workload_key(task_mod)
        result = TaskResult(name=task.task_name, workload=key, weight=int(task.weight))
        result.trials = int(saved.get(key, {}).get("trials", 0))
        result.default_ms = saved.get(key, {}).get("default_ms")
        result.best_ms = None if (best := _best_seconds(db, task_mod)) is None else best * 1e3
        result.search_ms = None if (found := search_option(db, task_mod, saved.get(key, {}))) is None else found[1]
        entries.append((task, task_mod, result))
        report.tasks.append(result)
    # 1. Template search: the rules' own knobs, biggest kernels first.
    templates = _load_templates(folder)
    by_work = sorted(entries, key=lambda e: -(_work_estimate(e[1]["main"]) * e[2].weight))
    span = 0.6 if trials_per_task > 0 else 1.0  # of the progress bar
    for index, (task, task_mod, result) in enumerate(by_work):
        record = templates.get(result.workload)
        if record is not None and record.get("complete") and _current_space(record):
            result.reused = True
        elif not _stop(report, cancel, deadline, clock):
            if _has_template(task_mod["main"], target):
                report_progress(span * index / max(len(by_work), 1), f"template search: {result.name}")
                builder, runner, confirm_runner = tools()
                found = _tune_template(task_mod["main"], target, builder, runner, cancel, deadline, confirm_runner=confirm_runner, pace=pace)
                if found is not None:
                    found["name"] = result.name
                    templates[result.workload] = record = found
                    _save_templates(folder, templates)
        if record is not None:
            result.template_ms, result.template_config = record["ms"], record["config"]
            result.candidates = len(record.get("measured", []))
            if record.get("default_ms") is not None:
                result.default_ms = record["default_ms"]
                saved.setdefault(result.workload, {})["default_ms"] = result.default_ms
    _save_progress(folder, saved)

    # 2. MetaSchedule's search with what is left of the budget.
    todo = [e for e in entries if e[2].trials < trials_per_task] if trials_per_task > 0 else []
    for _, _, result in entries:
        if trials_per_task > 0 and result.trials >= trials_per_task:
            result.reused = True
    for index, (task, task_mod, result) in enumerate(todo):
        if _stop(report, cancel, deadline, clock):
            break
        if result.default_ms is None:
            if not pace.fits(deadline, "candidate", 1):
                report.out_of_time = True
                break
            report_progress(0.6, f"measuring default schedule of {result.name}")
            builder, runner, confirm_runner = tools()
            with pace.timed("candidate", 1):
                secs = _measure_default(task_mod, target, builder, runner)
            if secs is not None:
                # Kept beside the database, not in it: MetaSchedule's layout-rewrite postprocessor
                # cannot replay a trace that already packs the weights (its search fails on such
                # a seed), so the default competes with the tuned records when they are applied.
                result.default_ms = secs * 1e3
                saved.setdefault(result.workload, {})["default_ms"] = result.default_ms
                _save_progress(folder, saved)
    todo.sort(key=lambda e: -((e[2].default_ms or 1.0) * e[2].weight))

    for index, (task, task_mod, result) in enumerate(todo):
        if _stop(report, cancel, deadline, clock):
            break
        if not pace.fits(deadline, "round", 1):  # a round cannot be stopped once it started
            report.out_of_time = True
            break
        remaining = trials_per_task - result.trials
        state = {"trials": 0, "stopped": False}

        def on_round(index=index, result=result, state=state):
            elapsed = clock() - start
            report_progress(
                min(0.99, 0.6 + 0.4 * max(index / len(todo), elapsed / max(budget_s, 1e-9))),
                f"tuning {result.name}: {result.trials + state['trials']} trials",
            )

        on_round()
        builder, runner, confirm_runner = tools()
        _worker_initializer()()  # TuneContext imports every tensor intrinsic: do it the fast way
        _reset_meta_schedule_logging()
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            [task], work_dir=work_dir, num_threads=_cores(target), seed=seed, strategy=_search_strategy()
        )
        searched = clock()
        try:
            ms.tune_tasks(
                tasks=contexts,
                task_weights=weights,
                work_dir=work_dir,
                max_trials_global=remaining,
                max_trials_per_task=remaining,
                num_trials_per_iter=min(trials_per_round, remaining),
                builder=builder,
                runner=runner,
                database=db,
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), _make_callback(deadline, cancel, state, on_round)],
                task_scheduler="round-robin",
            )
        except Exception as exc:  # noqa: BLE001 - one kernel that cannot be tuned keeps its default
            if state["stopped"]:  # the scheduler complains about the task we stopped: expected
                pass
            else:
                logger.warning("tuning %s failed: %s", result.name, str(exc).splitlines()[0] if str(exc) else exc)
        pace.add("round", -(-state["trials"] // max(1, min(trials_per_round, remaining))), clock() - searched)
        result.trials += state["trials"]
        entry = saved.setdefault(result.workload, {})
        # CPU only: a GPU's runner already measures a kernel as the model runs it (no thread count)
        if target.kind.name == "llvm" and not (cancel is not None and cancel()) and pace.fits(deadline, "confirm", 4, like="candidate"):
            with pace.timed("confirm", 4):
                confirmed = _confirm_search(task_mod, target, db, builder, confirm_runner, result.default_ms, entry.get(SEARCH_CONFIRMED))
            if confirmed is not None:
                entry[SEARCH_CONFIRMED] = confirmed
        best = _best_seconds(db, task_mod)
        result.best_ms = None if best is None else best * 1e3
        found = search_option(db, task_mod, entry)
        result.search_ms = None if found is None else found[1]
        # A task stopped early keeps its count below the target, so a rerun resumes it.
        entry.update({"trials": result.trials, "name": result.name})
        _save_progress(folder, saved)
        if state["stopped"]:
            if cancel is not None and cancel():
                report.cancelled = True
            else:
                report.out_of_time = True
    report.seconds = clock() - start
    report_progress(1.0, report.summary())
    return report


def _work_estimate(func) -> int:
    """Iterations of the function's top-level blocks (static extents): orders kernels by cost."""
    from tvm import s_tir

    from ..schedules.cpu_common import iter_extents, root_blocks

    sch = s_tir.Schedule(func)
    total = 0
    for block in root_blocks(sch):
        work = 1
        for extent in iter_extents(sch, block):
            work *= extent or 1
        total += work
    return total


def _cores(target) -> int:
    from ..target import host_cores

    cores = target.attrs.get("num-cores") if target.attrs is not None else None
    return int(cores) if cores else host_cores()
