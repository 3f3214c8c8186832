"""core.compiler.tuning.ab: the model-level A/B after tuning. The decision rule and the subset
search on synthetic timings; then one real run on the small CNN sample: tuning (over template
records filed beforehand, so it measures nothing), the A/B's builds timed, its outcome in the
database, and compile applying exactly the records the outcome keeps."""
from __future__ import annotations

import json

import pytest

from core.compiler.tuning import ab as tuning_ab
from core.compiler.tuning.ab import (
    candidate_subsets,
    decide,
    describe_ab,
    percentile,
    search_subsets,
)
from tests.conftest import sample

UNTUNED = [10.0, 10.2, 10.4, 10.1, 10.3, 11.0, 12.0, 10.0, 10.1, 10.2]


def _blocks(times: list[float], n: int = 4) -> list[list[float]]:
    return [list(times) for _ in range(n)]


def test_percentile_interpolates():
    assert percentile([4.0, 1.0, 3.0, 2.0, 5.0], 50) == 3.0
    assert percentile([1.0, 2.0], 10) == pytest.approx(1.1)
    assert percentile([7.0], 10) == 7.0


def test_tuned_is_kept_only_when_faster_by_the_margin_and_not_slower_at_p10():
    untuned = _blocks(UNTUNED)
    assert decide(untuned, _blocks([t * 0.95 for t in UNTUNED]))
    assert not decide(untuned, _blocks([t * 0.99 for t in UNTUNED]))  # inside the 2% margin
    assert not decide(untuned, _blocks([t * 1.05 for t in UNTUNED]))
    # 5% faster at the median, but the untuned build's undisturbed runs (p10) were faster still
    untuned = _blocks([8.0, 8.0] + [10.0] * 8)
    assert not decide(untuned, _blocks([9.5] * 10))
    assert decide(untuned, _blocks([7.9] * 2 + [9.5] * 8))


def test_tuned_must_win_block_by_block_not_only_in_the_pooled_runs():
    """Load that came while the untuned build's blocks 3 and 4 ran makes the pooled medians favour
    the tuned build; side by side, block by block, it lost 3 of 4."""
    untuned = [[12.0] * 5, [12.0] * 5, [20.0] * 5, [20.0] * 5]
    tuned = [[11.9] + [12.5] * 4, [11.9] + [12.5] * 4, [11.9] + [12.5] * 4, [21.0] * 5]
    assert percentile([t for b in tuned for t in b], 50) < 0.9 * percentile([t for b in untuned for t in b], 50)
    assert not decide(untuned, tuned)
    assert decide(untuned, [[11.0] * 5, [11.0] * 5, [11.0] * 5, [19.0] * 5])


def test_subsets_drop_the_smallest_kernel_level_wins_first():
    wins = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 0.5, "e": 0.0}
    assert candidate_subsets(wins) == [["a", "c", "b", "d", "e"], ["a", "c", "b"], ["a", "c"], ["a"]]
    assert candidate_subsets({"x": 1.0}) == [["x"]]
    assert candidate_subsets({}) == []


def _measure(tuned_ms, calls):
    """A measure function of synthetic timings: tuned_ms(records, call number) for the tuned build."""
    def measure(records):
        calls.append(list(records))
        return _blocks(UNTUNED), _blocks([tuned_ms(records, len(calls)) * t / 10.0 for t in UNTUNED])
    return measure


def test_search_keeps_all_drops_all_or_finds_the_subset_that_wins():
    wins = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 0.5, "e": 0.0}
    calls = []
    kept, trials = search_subsets(wins, _measure(lambda r, n: 9.0, calls))
    assert kept == ["a", "c", "b", "d", "e"] and len(trials) == 1 and trials[0].won and len(calls) == 2  # won, then confirmed
    calls = []
    kept, trials = search_subsets(wins, _measure(lambda r, n: 11.0, calls))
    assert kept == [] and [len(t.records) for t in trials] == [5, 3, 2, 1] and not any(t.won for t in trials)
    # the record with the smallest wins ("d") slows the model down: the first half without it is kept
    calls = []
    kept, trials = search_subsets(wins, _measure(lambda r, n: 11.0 if "d" in r else 9.0, calls))
    assert kept == ["a", "c", "b"] and [t.won for t in trials] == [False, True]
    assert trials[1].to_json()["tuned_ms"] < trials[1].to_json()["untuned_ms"]


def test_a_win_must_repeat_and_the_time_left_bounds_the_search():
    wins = {"a": 2.0, "b": 1.0}
    calls = []
    kept, trials = search_subsets(wins, _measure(lambda r, n: 9.0 if n % 2 else 11.0, calls))  # wins, then loses
    assert kept == [] and len(calls) == 4
    calls = []
    kept, trials = search_subsets(wins, _measure(lambda r, n: 11.0, calls), time_left=lambda: 0.0)
    assert kept == [] and len(trials) == 1  # the whole set is always measured, the rest only with time left


def test_the_ab_waits_for_other_processes_to_go_quiet_but_not_forever():
    """Before timing, settle() waits for two quiet polls in a row (the tuning's worker processes
    exiting), and on a machine that stays busy gives up at its timeout."""
    counts = iter([2, 1, 0, 1, 0, 0, 5])
    polls = []

    def others():
        polls.append(1)
        return next(counts)

    assert tuning_ab.settle(others, timeout_s=5.0, poll_s=0.0) is True
    assert len(polls) == 6  # stopped at the second quiet poll in a row
    assert tuning_ab.settle(lambda: 1, timeout_s=0.05, poll_s=0.01) is False


def test_the_line_the_cli_and_gui_show():
    outcome = {"records": ["a"], "candidates": {"a": "template", "b": "search"}, "untuned_ms": 9.1234, "tuned_ms": 8.5,
               "untuned_p10_ms": 8.9, "tuned_p10_ms": 8.4}
    assert describe_ab(outcome) == "model-level A/B: untuned 9.123 ms, tuned 8.5 ms (p10 8.9 vs 8.4 ms), kept 1 of 2 records"
    assert describe_ab({**outcome, "reused": True}).endswith("kept 1 of 2 records (measured earlier)")


def _file_template_records(db, target) -> dict[str, str]:
    """A non-default template config for every conv of the small CNN, filed as a complete template
    search that beat the default (so tuning reuses it and compile would apply it): workload -> name."""
    from core.compiler.manual.session import list_kernels
    from core.compiler.tuning.db import (
        TEMPLATES_FILE,
        _template_rules,
        database_dir,
        kernel_workload,
    )

    records = {}
    for kernel in list_kernels(sample("small_cnn"), target):
        for rule in _template_rules():
            configs = rule.candidates(kernel.func, target)
            if len(configs) > 1:
                records[kernel_workload(kernel.func)] = {
                    "rule": rule.name, "space": getattr(rule, "space_version", 0), "config": configs[-1], "ms": 0.001,
                    "default_ms": 0.002, "confirmed": None, "complete": True, "measured": [], "name": kernel.name,
                }
                break
    folder = database_dir(db, target)
    folder.mkdir(parents=True)
    (folder / TEMPLATES_FILE).write_text(json.dumps(records))
    return {k: r["name"] for k, r in records.items()}


def test_compile_after_tuning_runs_the_ab_files_it_and_applies_only_kept_records(tmp_path, monkeypatch, capsys):
    from cli import run_cli
    from core.compiler.target import make_target
    from core.compiler.tuning.db import MODEL_AB_FILE, database_dir

    monkeypatch.setattr(tuning_ab, "AB_BLOCKS", 5)
    monkeypatch.setattr(tuning_ab, "BLOCK_S", 0.02)
    target = make_target("cpu")
    db = tmp_path / "db"
    filed = _file_template_records(db, target)
    assert len(filed) >= 2
    out = tmp_path / "art"
    # a tiny budget: tuning reuses the records above, the A/B gets the whole set measured at least
    assert run_cli(["compile", str(sample("small_cnn")), "-o", str(out), "--tune-minutes", "0.05", "--tune-db", str(db),
                    "--no-verify", "--json"]) == 0
    tuning = json.loads(capsys.readouterr().out)["tuning"]
    ab = tuning["model_ab"]
    assert set(ab["candidates"]) == set(filed) and set(ab["records"]) <= set(filed)
    assert ab["untuned_ms"] > 0 and ab["tuned_ms"] > 0 and ab["trials"][0]["records"] == len(filed)
    assert ab["records"] == [] or ab["trials"][-1]["won"]
    # the compile applied what the A/B kept, and the outcome is in the database under the model's key
    assert tuning["kernels_from_database"] == len(ab["records"])
    folder = database_dir(db, target)
    outcomes = json.loads((folder / MODEL_AB_FILE).read_text())
    (key, stored), = outcomes.items()
    assert stored["records"] == ab["records"] and stored["untuned_ms"] == ab["untuned_ms"]

    def applied(outcome: dict | None) -> int:
        """Kernels on database schedules in a compile that only applies the database, given `outcome`."""
        (folder / MODEL_AB_FILE).write_text(json.dumps({} if outcome is None else {key: outcome}))
        assert run_cli(["compile", str(sample("small_cnn")), "-o", str(out), "--tune-db", str(db), "--no-verify", "--json"]) == 0
        return json.loads(capsys.readouterr().out)["tuning"]["kernels_from_database"]

    keep_one = sorted(filed)[:1]
    assert applied({**stored, "records": keep_one}) == 1
    assert applied({**stored, "records": []}) == 0
    assert applied(None) == len(filed)  # a model no A/B measured: every record, as before A/Bs
    # valid JSON, not an object: corrupt. Which records the A/B kept is unknown, so none applies
    # (every record would undo what the A/B is for: keeping those that made the model slower)
    (folder / MODEL_AB_FILE).write_text("[1, 2]")
    assert run_cli(["compile", str(sample("small_cnn")), "-o", str(out), "--tune-db", str(db), "--no-verify", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tuning"]["kernels_from_database"] == 0
    # tuning again with the same records: the A/B filed for them stands, nothing is measured again
    (folder / MODEL_AB_FILE).write_text(json.dumps({key: {**stored, "records": keep_one}}))
    assert run_cli(["compile", str(sample("small_cnn")), "-o", str(out), "--tune-minutes", "0.05", "--tune-db", str(db),
                    "--no-verify"]) == 0
    text = capsys.readouterr().out
    assert f"kept 1 of {len(filed)} records (measured earlier)" in text and "model-level A/B: untuned " in text
