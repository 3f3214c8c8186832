"""benchmarks/compiled_vs_onnxruntime.py's timing loop: alternating blocks, each started with untimed runs."""
from __future__ import annotations

import pytest

from benchmarks.compiled_vs_onnxruntime import measure_alternating


def test_blocks_alternate_and_start_with_untimed_runs(monkeypatch):
    from core.compiler import bench

    monkeypatch.setattr(bench, "SETTLE_S", 0.0)
    log = []

    def runner(name, ms):
        def run(n):
            log.append((name, n))
            return [ms + 0.001 * i for i in range(n)]  # each a little slower: which runs were dropped shows
        return run

    times = measure_alternating([runner("a", 100.0), runner("b", 2.0)], runs=6, warmup=2, blocks=3)
    # warm-ups, then per block: a (1 untimed run at 100 ms) and b (10 untimed runs at 2 ms), alternately
    assert log == [("a", 2), ("b", 2)] + [("a", 3), ("b", 12)] * 3
    assert times[0] == pytest.approx([100.001, 100.002] * 3) and times[1] == pytest.approx([2.010, 2.011] * 3)
