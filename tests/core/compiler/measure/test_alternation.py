"""core.compiler.measure.alternation: the one timing loop of bench, the benchmark scripts and the tuning A/B."""
from __future__ import annotations

import pytest

from core.compiler.measure import alternation
from core.compiler.measure.alternation import (
    MAX_BLOCK_WARM_RUNS,
    alternate,
    block_sizes,
    block_warm_runs,
    flatten,
    timed,
)


def recorder(log):
    """runner(name, ms): a runner whose runs take `ms`, each a little more than the one before
    (which runs were dropped as untimed shows), logging (name, n) per call; and a fake sleep."""

    def runner(name, ms):
        def run(n):
            log.append((name, n))
            return [ms + 0.001 * i for i in range(n)]

        return run

    return runner, lambda s: log.append(("pause", s))


def test_blocks_alternate_with_pauses_and_start_with_untimed_runs():
    log = []
    runner, sleep = recorder(log)
    times = alternate([runner("a", 100.0), runner("b", 2.0)], blocks=3, runs=6, warmup=2, sleep=sleep)
    pause = ("pause", alternation.SETTLE_S)
    # warm-ups (each followed by a pause), then per block: a (1 untimed run at 100 ms) and b (10
    # untimed runs at 2 ms), in turn, a pause after each
    assert log == [("a", 2), pause, ("b", 2), pause] + [("a", 3), pause, ("b", 12), pause] * 3
    assert times[0] == [pytest.approx([100.001, 100.002])] * 3
    assert flatten(times[1]) == pytest.approx([2.010, 2.011] * 3)


def test_one_pool_mirrors_the_order_fills_block_s_and_never_pauses():
    """The tuning A/B's use: two builds of one thread pool, a b b a a b, blocks of block_s seconds
    at the mean warm-up run, no pause and nothing dropped."""
    log = []
    runner, sleep = recorder(log)
    times = alternate([runner("a", 1.0), runner("b", 3.0)], blocks=3, block_s=0.021, warmup=6, settle_s=0.0,
                      warm_blocks=False, mirror=True, sleep=sleep)
    assert log == [("a", 6), ("b", 6), ("a", 10), ("b", 10), ("b", 10), ("a", 10), ("a", 10), ("b", 10)]
    assert [len(block) for block in times[0]] == [10, 10, 10] and times[1][0][0] == 3.0
    # a slow model still gets min_block_runs per block
    assert alternate([runner("c", 500.0)], blocks=1, block_s=0.02, warmup=1, settle_s=0.0, warm_blocks=False, sleep=sleep) == [[[500.0 + 0.001 * i for i in range(3)]]]


def test_cancel_stops_between_blocks_and_returns_what_was_timed():
    log = []
    runner, sleep = recorder(log)
    asked = iter([False, False, True])
    seen = []
    times = alternate([runner("a", 1.0), runner("b", 1.0)], blocks=5, runs=10, settle_s=0.0, warm_blocks=False,
                      cancel=lambda: next(asked), on_block=lambda i, n: seen.append((i, n)), sleep=sleep)
    assert [len(t) for t in times] == [2, 2] and seen == [(0, 5), (1, 5)]


def test_wrong_use_and_the_block_arithmetic():
    with pytest.raises(ValueError):
        alternate([timed(lambda: None)], blocks=1)
    assert block_sizes(3, 5) == [1, 1, 1] and block_sizes(12, 5) == [3, 3, 2, 2, 2] and block_sizes(7, 1) == [7]
    assert block_warm_runs(100.0) == 1  # a big model: one run
    assert block_warm_runs(5.0) == 4  # ~20 ms of runs
    assert block_warm_runs(0.04) == 500  # a 40 us model: still ~20 ms of runs
    assert block_warm_runs(0.001) == MAX_BLOCK_WARM_RUNS  # a tinier one: capped
    calls = []
    ms = timed(lambda: calls.append(1))(4)
    assert len(calls) == 4 and len(ms) == 4 and all(t >= 0 for t in ms)
