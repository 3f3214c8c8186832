"""Model-level A/B after tuning: keep a model's tuning records only if the whole model got faster.

Why: the tuner (core.compiler.tuning.tune) picks each kernel's schedule from measurements of that
kernel alone, and wins of a few % there need not add up in the model: kernels evict each other's
data from the caches, and a schedule that splits well over the threads alone may not beside its
neighbours (docs/performance.md: Model-level A/B). So after tuning,
the untuned build and the build with the records are compiled both and timed in alternating
blocks in this process (core.compiler.measure.alternation), and the records are kept only where the tuned build
wins by a margin at the median and block by block, and is not slower at p10 (`decide`), twice in a
row. When the whole
set loses, subsets are tried within the time left: the records with the largest kernel-level wins
first, half of them, then half of that (`candidate_subsets`).

The outcome goes to the tuning database (tuning_db.MODEL_AB_FILE: the model's key -> which records
to apply, and the model-level ms of both builds), and every later compile of that model with that
database applies only the records kept (tuning_db.apply_database_pass), so on this host tuned is
no slower than untuned as far as the A/B could measure. Records the A/B of a model never saw (a
model never A/B-tested, a kernel tuned since) apply as they always did. A cancelled A/B files
nothing.

`tuning_pass` is compile's tuning step: tune, A/B, apply.
"""
from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import tune as tuning
from ..measure.alternation import alternate, timed
from .tune import TuningReport
from .db import apply_database_pass, database_records, load_model_ab, model_key, save_model_ab

__all__ = [
    "AB_MARGIN",
    "ABTrial",
    "ab_reserve_s",
    "candidate_subsets",
    "decide",
    "describe_ab",
    "model_ab",
    "percentile",
    "search_subsets",
    "settle",
    "time_builds",
    "tuning_pass",
]

logger = logging.getLogger(__name__)

# The tuned build must be this much faster at the median (and no slower at p10) to be kept: on this
# project's shared 2-core KVM host two identical builds differ by 10-30% from run to run, and a
# difference inside the noise is as likely a loss.
AB_MARGIN = 0.02
AB_BLOCKS = 12  # alternating blocks per comparison (each build timed in every one)
BLOCK_S = 0.15  # seconds per build per block
SETTLE_TIMEOUT_S = 3.0  # the longest settle() waits for other processes before each comparison
# the share of a tuning budget kept for the A/B at least (the first comparison runs even when it
# is spent), and at most AB_MAX_SHARE when its first comparison needs more (ab_reserve_s)
AB_SHARE = 0.25
AB_MAX_SHARE = 0.5


def percentile(times: list[float], q: float) -> float:
    """The q-th percentile (0-100) of `times`, linearly interpolated (numpy's default, as
    core.compiler.measure.bench.latency_stats reports latencies)."""
    if not times:
        raise ValueError("no times")
    return float(np.percentile(times, q))


def decide(untuned: list[list[float]], tuned: list[list[float]], margin: float = AB_MARGIN) -> bool:
    """True when the tuned build won. `untuned`, `tuned`: ms per run in blocks, block i of each
    timed next to the other's (`time_builds`). Won means all three: its median over all runs at
    least `margin` below the untuned one; its p10 (the runs least disturbed by the machine) not
    above the untuned p10; and block by block, the median of the ratios tuned / untuned (each
    ratio of two blocks a fraction of a second apart, so a load that comes and goes between
    blocks cancels) at least `margin` below 1."""
    a = [t for block in untuned for t in block]
    b = [t for block in tuned for t in block]
    paired = [percentile(tb, 50) / percentile(ub, 50) for ub, tb in zip(untuned, tuned) if ub and tb]
    return (percentile(b, 50) <= percentile(a, 50) * (1.0 - margin)
            and percentile(b, 10) <= percentile(a, 10)
            and bool(paired) and percentile(paired, 50) <= 1.0 - margin)


def candidate_subsets(wins: dict[str, float]) -> list[list[str]]:
    """The record sets to try, in order: all of them, then the half with the largest kernel-level
    wins (`wins`: record -> ms saved per model run), then half of that, down to the single largest."""
    order = sorted(wins, key=lambda k: (-wins[k], k))
    subsets, n = [], len(order)
    while n >= 1:
        subsets.append(order[:n])
        n = 0 if n == 1 else (n + 1) // 2
    return subsets


@dataclass
class ABTrial:
    """One record set's comparison: ms per run of both builds, and whether the tuned one won."""

    records: list[str]
    untuned_ms: list[float] = field(default_factory=list)
    tuned_ms: list[float] = field(default_factory=list)
    won: bool = False

    def to_json(self) -> dict:
        return {
            "records": len(self.records),
            "untuned_ms": round(percentile(self.untuned_ms, 50), 4),
            "tuned_ms": round(percentile(self.tuned_ms, 50), 4),
            "untuned_p10_ms": round(percentile(self.untuned_ms, 10), 4),
            "tuned_p10_ms": round(percentile(self.tuned_ms, 10), 4),
            "won": self.won,
        }


def search_subsets(
    wins: dict[str, float],
    measure: Callable[[list[str]], tuple[list[list[float]], list[list[float]]]],
    time_left: Callable[[], float] = lambda: float("inf"),
    confirm: bool = True,
) -> tuple[list[str], list[ABTrial]]:
    """(the records to keep, the trials made). `measure(records)` -> (untuned ms, tuned ms, each in
    blocks) times the untuned build against the one with `records`. The subsets of `candidate_subsets` are tried
    in turn; the first that wins (`decide`), and with `confirm` wins again in a second
    measurement, is kept. All sets are tried while `time_left()` (seconds) exceeds the time the
    previous trial took; the first is always tried. [] when none won."""
    trials: list[ABTrial] = []
    last = 0.0  # seconds the previous trial took
    for index, subset in enumerate(candidate_subsets(wins)):
        started = time.monotonic()
        if index > 0 and time_left() <= last:
            break
        trial = ABTrial(subset)
        for _ in range(2 if confirm else 1):
            untuned, tuned = measure(subset)
            trial.untuned_ms += [t for block in untuned for t in block]
            trial.tuned_ms += [t for block in tuned for t in block]
            if not decide(untuned, tuned):
                break
        else:
            trial.won = True
        trials.append(trial)
        if trial.won:
            return subset, trials
        last = time.monotonic() - started
    return [], trials


def settle(others: Callable[[], int] | None = None, *, timeout_s: float = SETTLE_TIMEOUT_S, poll_s: float = 0.05) -> bool:
    """Wait until no thread outside this process is runnable on two polls in a row (at most
    `timeout_s`); True when that happened. Why: the A/B starts right after the tuning, whose
    builder and runner worker processes take a moment to exit, and timed beside them the first
    trial measured both builds far slower than the later ones (docs/performance.md: Model-level A/B).
    On a machine that stays busy this gives up after `timeout_s` and the A/B measures as it is."""
    if others is None:
        from ..runtime.threads import runnable_elsewhere as others
    quiet = 0
    end = time.monotonic() + timeout_s
    while True:
        quiet = quiet + 1 if others() == 0 else 0
        if quiet >= 2:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(poll_s)


def time_builds(run_a: Callable[[], object], run_b: Callable[[], object], *,
                cancel: Callable[[], bool] | None = None) -> tuple[list[list[float]], list[list[float]]]:
    """ms per run of two builds (`run_a`, `run_b` each run the model once), per block: AB_BLOCKS
    blocks of BLOCK_S seconds per build, in the order a, b, then b, a (core.compiler.measure.alternation).
    The two share this process's thread pool, so no pause between blocks and no untimed runs to
    start them: there is no idle time to recover from."""
    a, b = alternate([timed(run_a), timed(run_b)], blocks=AB_BLOCKS, block_s=BLOCK_S, warmup=6, settle_s=0.0,
                     warm_blocks=False, mirror=True, cancel=cancel)
    return a, b


def ab_reserve_s(total_s: float, build_s: float) -> float:
    """Seconds of a `total_s` tuning budget to keep for the A/B, given that a build of the model
    takes `build_s`: what its first comparison costs (one more build, the tuned one, and two
    timings of AB_BLOCKS blocks of both builds, each after settle()'s wait of a second or so),
    at least AB_SHARE and at most AB_MAX_SHARE of the budget. Why: with a fixed quarter, the
    first comparison, which always runs, took 35 s of a 1-minute budget's 15 on
    mobilenet_v3_small (the tuning having overrun its share too)."""
    first_trial = build_s + 2 * (2 * AB_BLOCKS * BLOCK_S + 1.0)
    return min(AB_MAX_SHARE * total_s, max(AB_SHARE * total_s, first_trial))


def describe_ab(outcome: dict) -> str:
    """The one line the CLI and the GUI show for an A/B outcome."""
    earlier = " (measured earlier)" if outcome.get("reused") else ""
    return (f"model-level A/B: untuned {outcome['untuned_ms']:.4g} ms, tuned {outcome['tuned_ms']:.4g} ms "
            f"(p10 {outcome['untuned_p10_ms']:.4g} vs {outcome['tuned_p10_ms']:.4g} ms), "
            f"kept {len(outcome['records'])} of {len(outcome['candidates'])} records{earlier}")


def model_ab(mod, target, database, report: TuningReport | None, build: Callable, *, deadline: float,
             cancel: Callable[[], bool] | None = None, progress: Callable[[str], None] | None = None,
             run_untuned: Callable[[], object] | None = None) -> dict | None:
    """A/B the fused module `mod` untuned against the database's records for it, and file the
    outcome (module docstring). `build(mod)` compiles a fused module the rest of the way and
    returns a function that runs it once. `report` (the tuning just done) gives each record's
    kernel-level win, which orders the subsets. `run_untuned`: `build(mod)` when already made.
    Returns the outcome filed (`reused`: True when an
    earlier A/B of the same records is still valid: nothing is measured), or None when the
    database has no record for the model or the A/B was cancelled."""
    say = progress or (lambda message: None)
    candidates = database_records(mod, target, database)
    if not candidates:
        return None
    key = model_key(mod)
    earlier = load_model_ab(database, target).get(key)
    if earlier is not None and earlier.get("candidates") == candidates:
        return {**earlier, "reused": True}
    started = time.monotonic()
    by_task = {t.workload: t for t in (report.tasks if report is not None else [])}
    wins = {}
    for workload in candidates:
        task = by_task.get(workload)
        saved = 0.0
        if task is not None and task.default_ms is not None and task.tuned_ms is not None:
            saved = (task.default_ms - task.tuned_ms) * task.weight
        wins[workload] = saved
    if run_untuned is None:
        say("model-level A/B: building the untuned model")
        run_untuned = build(mod)
    builds: dict[tuple, Callable] = {}

    def measure(records: list[str]) -> tuple[list[list[float]], list[list[float]]]:
        if tuple(records) not in builds:
            builds.clear()  # one tuned build alive at a time
            say(f"model-level A/B: building the model with {len(records)} of {len(candidates)} records")
            builds[tuple(records)] = build(apply_database_pass(target, database, only=records)(mod))
        say(f"model-level A/B: timing untuned against {len(records)} records")
        settle()
        return time_builds(run_untuned, builds[tuple(records)], cancel=cancel)

    cancelled = lambda: cancel is not None and cancel()
    kept, trials = search_subsets(wins, measure, time_left=lambda: -1.0 if cancelled() else deadline - time.monotonic())
    if cancelled() or not trials:
        return None
    shown = trials[-1] if kept else trials[0]  # the kept set's figures, else the whole set's
    figures = shown.to_json()
    outcome = {
        "records": kept,
        "candidates": candidates,
        "untuned_ms": figures["untuned_ms"],
        "tuned_ms": figures["tuned_ms"],
        "untuned_p10_ms": figures["untuned_p10_ms"],
        "tuned_p10_ms": figures["tuned_p10_ms"],
        "trials": [t.to_json() for t in trials],
        "seconds": round(time.monotonic() - started, 1),
        "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    save_model_ab(database, target, key, outcome)
    logger.info("%s", describe_ab(outcome))
    return outcome


def tuning_pass(target, trials: int = 0, database=None, *, budget_s: float | None = None, progress=None, cancel=None,
                runner=None, on_report=None, build: Callable | None = None):
    """What compile inserts before its "scheduled TIR" step: tune into the database folder, then
    apply it. Tuning runs when `budget_s` is given (seconds for the model) or `trials` > 0
    (MetaSchedule trials per kernel after the template search; budget then 10 minutes);
    with neither, the database is only applied. With `build` (fused module -> a function running
    the compiled model once; CPU code this host runs) the tuning is followed by the model-level
    A/B (`model_ab`): the untuned model is built first, which tells what the A/B's first
    comparison will cost, and the tuning gets the budget less that (ab_reserve_s), so that
    tuning and A/B together end about when the budget does. `on_report(TuningReport)` hears how
    it went; its `model_ab` is the A/B's outcome."""
    import tvm

    apply = apply_database_pass(target, database)
    say = progress or (lambda fraction, message: None)

    @tvm.transform.module_pass(opt_level=0, name="MetaScheduleTuning")
    def _pass(mod, _ctx):
        if trials > 0 or budget_s is not None:
            total = 600.0 if budget_s is None else budget_s
            started = time.monotonic()
            deadline = started + total
            run_untuned, share = None, 1.0
            if build is not None:
                say(0.0, "model-level A/B: building the untuned model")
                run_untuned = build(mod)
                reserve = ab_reserve_s(total, time.monotonic() - started)
                share = 1.0 - reserve / total
            budget = max(0.0, deadline - time.monotonic() - (total * (1.0 - share)))
            report = tuning.tune_module(mod, target, database, budget_s=budget, trials_per_task=trials,
                                 progress=lambda frac, msg: say(min(frac, 0.99) * share, msg), cancel=cancel, runner=runner)
            logger.info("tuning: %s", report.summary())
            if build is not None and not report.cancelled:
                report.model_ab = model_ab(mod, target, database, report, build, deadline=deadline, cancel=cancel,
                                           progress=lambda message: say(share + 0.5 * (1.0 - share), message),
                                           run_untuned=run_untuned)
            say(1.0, report.summary())
            if on_report is not None:
                on_report(report)
        return apply(mod)

    return _pass
