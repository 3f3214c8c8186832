"""MetaSchedule's open search, the second stage of core.compiler.tuning.tune's tune_module: which kernels
are tasks for it, the target it tunes for, the default schedule's figure it is measured against,
the search strategy, the callback that counts trials and stops on cancel or deadline, and the
confirmation of its fastest records at the model's thread count (`_confirm_search`).

Split out of core.compiler.tuning.tune (which re-exports `extract_tasks`) to keep that module under
the size limit, unchanged.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .db import _prepare, _record_seconds, schedule_from_record, search_records, trace_key
from .runners import CONFIRM_MARGIN, confirm_at_threads, scheduled_module
from .runners import measure_schedules as _measure_schedules

__all__ = ["extract_tasks"]

logger = logging.getLogger(__name__)


def _confirm_search(task_mod, target, db, builder, runner, default_ms: float | None, previous: dict | None, finalists: int = 3) -> dict | None:
    """The MetaSchedule search's counterpart of the template finalists' confirmation: its
    `finalists` fastest records that beat the default by CONFIRM_MARGIN on one thread, measured
    again beside the default schedule on `runner` (the model's thread count) in alternating
    rounds (tuning_runners.confirm_at_threads). Returns the SEARCH_CONFIRMED entry
    {top, record, default_ms, ms, finalists}: `record` is the winner's trace_key, None when none
    won (the default stays). None when nothing can be confirmed (no records; no default
    schedule, or it did not run: the records apply as measured), or when `previous` already
    confirmed the same fastest record."""
    from ..schedules import default_schedule

    records = search_records(db, task_mod, finalists)
    if not records or (previous is not None and previous.get("top") == trace_key(records[0])):
        return None
    scheduled, _rule = default_schedule(task_mod["main"], target)
    if scheduled is None:
        return None
    entry = {"top": trace_key(records[0]), "record": None, "default_ms": None, "ms": None, "finalists": []}
    faster = [r for r in records if default_ms is None or _record_seconds(r) * 1e3 < default_ms * (1.0 - CONFIRM_MARGIN)]
    candidates = []
    for record in faster:
        try:
            candidates.append((record, schedule_from_record(record, task_mod)))
        except Exception as exc:  # noqa: BLE001 - a record that no longer applies is no finalist
            logger.info("tuning record does not apply: %s", exc)
    if not candidates:
        return entry
    default = scheduled_module(scheduled)
    winner, secs = confirm_at_threads(default, [sch for _, sch in candidates], target, builder, runner)
    if secs[0] is None:
        return None
    entry["default_ms"] = secs[0] * 1e3
    entry["finalists"] = [[trace_key(r), None if t is None else t * 1e3] for (r, _), t in zip(candidates, secs[1:])]
    if winner is not None:
        entry["record"], entry["ms"] = entry["finalists"][winner]
    return entry


def extract_tasks(mod, target) -> list:
    """MetaSchedule's tuning tasks for the fused module (one per distinct kernel), minus those
    already scheduled."""
    from tvm.s_tir import meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(_prepare(mod), target)
    out = []
    for task in tasks:
        func = task.dispatched[0]["main"]
        if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
            continue
        if not _static_shapes(func):
            # MetaSchedule measures on concrete tensors; a symbolic batch dimension keeps the
            # kernel on its default schedule.
            continue
        out.append(task)
    return out


def _tuning_target(target):
    """`target` with what MetaSchedule's GPU rules read and dlight does not: the per-block thread
    and shared-memory limits (from the GPU when one is here; else sm_80+'s 1024 threads and the
    48 KiB of shared memory a block gets without opting in). CPU targets are returned as they are."""
    import json

    import tvm

    if target.kind.name != "cuda" or "max_threads_per_block" in target.attrs:
        return target
    threads, shared = 1024, 48 * 1024
    from ..target import gpu_present

    if gpu_present():
        dev = tvm.cuda(0)
        threads, shared = int(dev.max_threads_per_block), int(dev.max_shared_memory_per_block)
    config = json.loads(str(target))
    config.update({"max_threads_per_block": threads, "max_shared_memory_per_block": shared})
    host = config.pop("host", None)
    return tvm.target.Target(config, host=host)


def _static_shapes(func) -> bool:
    for param in func.params:
        shape = getattr(param, "shape", None)
        if shape is not None and any(not isinstance(getattr(dim, "value", None), int) for dim in shape):
            return False
    return True


def _measure_default(task_mod, target, builder, runner) -> float | None:
    """Seconds of core.compiler.schedules' default schedule for one task, or None."""
    from ..schedules import default_schedule

    scheduled, _rule = default_schedule(task_mod["main"], target)
    if scheduled is None:
        return None
    try:
        return _measure_schedules([scheduled_module(scheduled)], target, builder, runner)[0]
    except Exception as exc:  # noqa: BLE001 - no default figure: the kernel is tuned all the same
        logger.info("could not measure the default schedule: %s", exc)
        return None


def _make_callback(deadline: float, cancel: Callable[[], bool] | None, state: dict, on_round):
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _StopWhenAsked(ms.measure_callback.PyMeasureCallback):
        """Counts measured trials; stops the task once time is up or the user cancelled."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            state["trials"] += len(measure_candidates)
            on_round()
            if (cancel is not None and cancel()) or time.monotonic() >= deadline:
                state["stopped"] = True
                task_scheduler.terminate_task(task_id)

    return _StopWhenAsked()


def _reset_meta_schedule_logging() -> None:
    """Drop the handlers MetaSchedule's previous tuning runs left on its logger.

    Each run's logging set-up lists the logger's current handlers by name and adds its own two, so
    they pile up over a session (a file handle per run), and a handler without a name, left by an
    earlier set-up in the same process, turns into None in that list and fails the next tuning
    ("'NoneType' object has no attribute 'format'"). Every run adds the two it needs again."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in list(ms_logger.handlers):
        ms_logger.removeHandler(handler)
        handler.close()


def _search_strategy():
    """MetaSchedule's evolutionary search, sized for a few cores: a quarter of the default
    population and half its generations. The defaults (512, 4) spend 70-90 s per round of 16
    candidates on 2 cores before anything is measured - and a round cannot be cancelled."""
    from tvm.s_tir import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(population_size=128, genetic_num_iters=2, init_min_unmeasured=16)
