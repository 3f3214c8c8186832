"""The two-CPU probe that tells a 2-core run from one on a shared core."""
from __future__ import annotations

import os

import pytest

from benchmarks import core_pair


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_two_pinned_processes_do_between_one_and_two_units_of_work():
    speedup = core_pair.core_pair_speedup(seconds=0.05)
    assert speedup is not None
    # two cores ~2, one shared core ~1. Another process on a CPU during the probe (the suite's other
    # worker) skews it either way, so the bounds only say it measured work: never 0 or many
    assert 0.3 < speedup < 4


def test_one_cpu_is_not_probed(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert core_pair.core_pair_speedup() is None


def test_a_failed_probe_is_none(monkeypatch):
    monkeypatch.setattr(core_pair, "_PROBE", "raise SystemExit(3)")
    assert core_pair.core_pair_speedup(seconds=0.01) is None
