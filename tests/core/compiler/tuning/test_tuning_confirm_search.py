"""MetaSchedule's records get the template winners' confirmation: the fastest records of a
kernel's search (measured on one thread) are measured again beside the default schedule at the
model's thread count, and compile applies a searched record only if it won there.

As in test_tuning_confirm, measurements are injected (a builder and runners handing out set
times in the order they are asked); the search itself is replaced by one that files two
schedules in the database, as MetaSchedule's would. The database, the progress file, the
confirmation and the apply pass are the real ones."""
from __future__ import annotations

import json

import pytest

from tests.core.compiler.tuning.test_tuning import _conv_model, _fused
from tests.core.compiler.tuning.test_tuning_confirm import _Builder, _Runner

# one-thread figures of the two records the 'search' files, and of everything else (the default
# and every template config: no template config beats the default, so it stays out of the way)
RECORD_A, RECORD_B, DEFAULT = 0.5e-3, 0.6e-3, 1e-3


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def _conv_func(mod):
    """The conv kernel as tuning and compile's apply pass see it."""
    from core.compiler.tuning.tune import prepare_module

    return next(f for g, f in prepare_module(mod).functions_items() if "conv2d" in g.name_hint)


def _conv_kernel(mod):
    from core.compiler.tuning.db import _task_module

    return _task_module(_conv_func(mod))


def _hand_trace(task_mod, factor: int):
    """A schedule of the conv kernel (channels split by `factor`, the outer part parallel): its trace."""
    from tvm import s_tir

    sch = s_tir.Schedule(task_mod)
    loops = sch.get_loops(sch.get_sblock("conv2d_nchw"))
    outer, _ = sch.split(loops[1], [None, factor])
    sch.parallel(outer)
    return sch.trace


def _file(db, task_mod, trace, target, secs: float) -> None:
    from tvm.s_tir import meta_schedule as ms

    db.commit_tuning_record(
        ms.database.TuningRecord(trace, db.commit_workload(task_mod), run_secs=[secs], target=target,
                                 args_info=ms.arg_info.ArgInfo.from_prim_func(task_mod["main"]))
    )


def _fake_search(monkeypatch, records):
    """MetaSchedule's tune_tasks replaced by one that files `records` [(split factor, secs)] for the conv kernel."""
    from tvm.s_tir import meta_schedule as ms

    def tune_tasks(*, tasks, database, **_):
        task_mod = tasks[0].mod
        if "conv2d" in task_mod.script():
            for factor, secs in records:
                _file(database, task_mod, _hand_trace(task_mod, factor), tasks[0].target, secs)

    monkeypatch.setattr(ms, "tune_tasks", tune_tasks)


def _at_threads(a_secs: float, b_secs: float):
    """The confirmation's rounds of [default, A, B]: the default 1 ms, A and B as given."""
    return lambda position: (DEFAULT, a_secs, b_secs)[position % 3]


def _tune(tmp_path, target, monkeypatch, confirm):
    from core.compiler.tuning.tune import tune_module

    _fake_search(monkeypatch, [(4, RECORD_A), (8, RECORD_B)])
    mod = _fused(_conv_model())
    report = tune_module(mod, target, tmp_path, budget_s=300, trials_per_task=1, builder=_Builder(),
                         runner=_Runner(lambda position: DEFAULT), confirm_runner=confirm)
    return mod, next(t for t in report.tasks if "conv2d" in t.name)


def _progress(tmp_path, target, workload) -> dict:
    from core.compiler.tuning.db import PROGRESS_FILE, database_dir

    return json.loads((database_dir(tmp_path, target) / PROGRESS_FILE).read_text())[workload]


def _applied(mod, target, tmp_path):
    """The conv kernel as compile's apply pass leaves it (scheduled from the database, or not)."""
    from core.compiler.tuning.tune import apply_database_pass

    applied = apply_database_pass(target, tmp_path)(mod)
    return next(f for g, f in applied.functions_items() if "conv2d" in g.name_hint)


def test_the_record_that_wins_at_the_models_threads_is_applied_not_the_one_thread_winner(tmp_path, target, monkeypatch):
    import tvm
    from tvm import s_tir

    from core.compiler.tuning.tune import (
        database_choice,
        open_database,
        search_option,
        trace_key,
    )

    confirm = _Runner(_at_threads(1.2e-3, 0.8e-3))  # A fastest on one thread, slower than the default at the model's
    mod, conv = _tune(tmp_path, target, monkeypatch, confirm)
    assert confirm.asked == 3 * 3  # default, A and B, three rounds
    task_mod = _conv_kernel(mod)
    db = open_database(tmp_path, target)
    entry = _progress(tmp_path, target, conv.workload)["search_confirmed"]
    a, b = (_hand_trace(task_mod, f) for f in (4, 8))  # the records the search filed
    record, ms = search_option(db, task_mod, _progress(tmp_path, target, conv.workload))
    assert entry["top"] != entry["record"] == trace_key(record)
    assert entry["default_ms"] == pytest.approx(1.0) and entry["ms"] == pytest.approx(0.8)
    assert [f[1] for f in entry["finalists"]] == [pytest.approx(1.2), pytest.approx(0.8)]
    assert ms == pytest.approx(RECORD_B * 1e3) and conv.search_ms == pytest.approx(RECORD_B * 1e3)
    assert conv.best_ms == pytest.approx(RECORD_A * 1e3) and conv.tuned_ms == pytest.approx(RECORD_B * 1e3)
    func = _conv_func(mod)
    assert database_choice(func, target, tmp_path)[0] == "search"
    # compile gets B's schedule (the split by 8), not A's
    expected, other = s_tir.Schedule(task_mod), s_tir.Schedule(task_mod)
    b.apply_to_schedule(expected, remove_postproc=False)
    a.apply_to_schedule(other, remove_postproc=False)
    kernel = _applied(mod, target, tmp_path)
    assert "tirx.is_scheduled" in kernel.attrs
    tvm.ir.assert_structural_equal(kernel.without_attr("tirx.is_scheduled"), expected.mod["main"].without_attr("global_symbol"))
    assert other.mod["main"].script() != expected.mod["main"].script()


def test_records_that_lose_at_the_models_threads_are_not_applied(tmp_path, target, monkeypatch):
    from core.compiler.tuning.tune import database_choice, tune_module

    mod, conv = _tune(tmp_path, target, monkeypatch, _Runner(_at_threads(1.1e-3, 1.02e-3)))
    entry = _progress(tmp_path, target, conv.workload)["search_confirmed"]
    assert entry["record"] is None and len(entry["finalists"]) == 2
    func = _conv_func(mod)
    assert database_choice(func, target, tmp_path)[0] == "default" and conv.search_ms is None
    assert conv.best_ms == pytest.approx(RECORD_A * 1e3) and conv.tuned_ms == pytest.approx(DEFAULT * 1e3)
    assert "tirx.is_scheduled" not in (_applied(mod, target, tmp_path).attrs or {})
    # a rerun with the same records does not measure them again
    again = _Runner(_at_threads(0.5e-3, 0.5e-3))
    tune_module(mod, target, tmp_path, budget_s=300, trials_per_task=2, builder=_Builder(),
                runner=_Runner(lambda position: DEFAULT), confirm_runner=again)
    assert again.asked == 0 and database_choice(func, target, tmp_path)[0] == "default"


def test_a_schedule_filed_by_hand_after_the_search_competes_as_measured(tmp_path, target, monkeypatch):
    from core.compiler.tuning.tune import database_choice, record_schedule

    mod, _ = _tune(tmp_path, target, monkeypatch, _Runner(_at_threads(1.1e-3, 1.1e-3)))
    func = _conv_func(mod)
    assert database_choice(func, target, tmp_path)[0] == "default"
    # the Schedule panel files a faster schedule (measured beside the default there): it is the
    # fastest record now, one the search's confirmation never saw, and it applies
    record_schedule(func, target, _hand_trace(_conv_kernel(mod), 16), 0.2, tmp_path)
    choice, options = database_choice(func, target, tmp_path)
    assert choice == "search" and dict(options)["search"] == pytest.approx(0.2)
