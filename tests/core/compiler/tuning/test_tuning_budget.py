"""The tuner keeps to its budget: no step starts that would end past the deadline at the pace seen
so far (core.compiler.tuning.runners.Pace), counted against an injected clock; and the
model-level A/B keeps what its first comparison costs (tuning_ab.ab_reserve_s)."""
from __future__ import annotations

import pytest

from core.compiler.tuning import tune as tuning
from core.compiler.tuning.ab import AB_MAX_SHARE, AB_SHARE, ab_reserve_s
from core.compiler.tuning.runners import Pace


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pace_learns_seconds_per_unit_and_says_what_fits():
    clock = Clock()
    pace = Pace(clock)
    assert pace.estimate("candidate", 4) == 0.0 and pace.fits(10.0, "candidate", 100)  # nothing known: start
    with pace.timed("candidate", 4):
        clock.now += 8.0
    assert pace.estimate("candidate", 4) == 8.0 and pace.estimate("confirm", 2, like="candidate") == 4.0
    assert pace.fits(16.0, "candidate", 4) and not pace.fits(15.9, "candidate", 4)
    pace.add("confirm", 3, 3.0)
    assert pace.estimate("confirm", 2, like="candidate") == 2.0
    clock.now = 20.0
    assert not pace.fits(19.0, "round", 1)  # past the deadline nothing fits


class FakeRule:
    """A template rule with `n` configs; config 0 is the default, each later one 10% faster."""

    name = "fake"
    space_version = 1

    def __init__(self, n: int):
        self.n = n

    def candidates(self, func, target):
        return list(range(self.n))

    def apply(self, func, target, config):
        return config


@pytest.fixture
def fake_tuning(monkeypatch):
    """(clock, measured configs, confirmations): measuring a schedule takes 2 s of the clock, a
    confirmation 1 s per schedule."""
    clock, measured, confirmed = Clock(), [], []

    def measure(schedules, target, builder, runner):
        clock.now += 2.0 * len(schedules)
        measured.extend(schedules)
        return [1e-3 * 0.9 ** c for c in schedules]

    def confirm(default, candidates, target, builder, runner):
        clock.now += 1.0 * (1 + len(candidates))
        confirmed.append(candidates)
        return 0, [1e-3] + [0.5e-3] * len(candidates)

    monkeypatch.setattr(tuning, "_measure_schedules", measure)
    monkeypatch.setattr(tuning, "confirm_at_threads", confirm)
    return clock, measured, confirmed


def test_the_template_search_starts_no_batch_that_would_end_past_the_deadline(monkeypatch, fake_tuning):
    clock, measured, confirmed = fake_tuning
    monkeypatch.setattr(tuning, "_template_rules", lambda: [FakeRule(20)])
    # batches of 4 take 8 s: at 0, 8, 16 s; the one at 24 s would end at 32 > 30
    record = tuning._tune_template(None, None, None, None, None, deadline=30.0, pace=Pace(clock))
    assert measured == list(range(12)) and clock.now <= 30.0
    # the confirmation (4 schedules, ~4 x 2 s at the measuring pace) would not end in time either:
    # left to a later run, the default kept, the record not complete
    assert confirmed == [] and record["config"] == 0 and record["complete"] is False


def test_with_time_for_everything_the_search_completes_and_confirms(monkeypatch, fake_tuning):
    clock, measured, confirmed = fake_tuning
    monkeypatch.setattr(tuning, "_template_rules", lambda: [FakeRule(6)])
    record = tuning._tune_template(None, None, None, None, None, deadline=100.0, pace=Pace(clock))
    assert measured == list(range(6)) and confirmed == [[5, 4, 3]]
    assert record["complete"] is True and record["config"] == 5


def test_the_ab_keeps_what_its_first_comparison_costs_within_bounds():
    assert ab_reserve_s(600.0, 5.0) == pytest.approx(AB_SHARE * 600.0)  # a long budget: its share
    reserve = ab_reserve_s(60.0, 10.0)  # a build of 10 s in a minute: more than a quarter
    assert AB_SHARE * 60.0 < reserve < AB_MAX_SHARE * 60.0
    assert ab_reserve_s(60.0, 100.0) == pytest.approx(AB_MAX_SHARE * 60.0)  # never more than half
