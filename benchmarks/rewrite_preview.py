"""Rewrite preview speed on DenseNet-121 (and friends), once the matches are known.

    .venv/bin/python benchmarks/rewrite_preview.py [--runs N] [--models densenet121,resnet50]

For every rule with matches it prints: the time to find the matches, the preview time with a
spare copy prepared in advance (what the GUI does: the copy is made on the worker thread that
counts matches, so "preview" is the rewrite itself), the cold preview time (copy included), and
the copy alone. Models are the onnx wheel's light models as shipped (ConstantOfShape weights:
folding must evaluate them) and with seeded random initializer weights (the usual exported form).
Target from the rewrites issue: preview <= 100 ms on DenseNet-121 once matches are known.
Medians of --runs runs (default 5). Not a pass/fail test: it prints a table.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.common  # noqa: E402,F401 - first: it prepares the process before anything imports tvm

import onnx  # noqa: E402

from core import load_model  # noqa: E402
from core.rewrite import SpareCopy, find_matches, preview  # noqa: E402
from core.verify import with_random_weights  # noqa: E402
from rewrites import all_rules  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TARGET_MS = 100.0


def _median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bench(graph, label: str, runs: int) -> list[tuple]:
    rows = []
    copy_ms = _median_ms(lambda: graph.clone(), runs)
    for rule in all_rules():
        t0 = time.perf_counter()
        matches = find_matches(graph, rule)
        find_ms = (time.perf_counter() - t0) * 1000
        if not matches:
            continue
        warm, warm_cpu = [], []
        for _ in range(runs):
            spare = SpareCopy(graph)  # prepared ahead, as the panel's counting job does
            t0, c0 = time.perf_counter(), time.process_time()
            pv = preview(graph, rule, matches, spare=spare)
            warm.append((time.perf_counter() - t0) * 1000)
            warm_cpu.append((time.process_time() - c0) * 1000)
        cold_ms = _median_ms(lambda: preview(graph, rule, matches), runs)
        rows.append((label, len(graph), rule.id, len(matches), len(pv.applied), find_ms, statistics.median(warm), min(warm), statistics.median(warm_cpu), cold_ms, copy_ms))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", default="densenet121")
    args = ap.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        g = load_model(LIGHT / f"light_{name}.onnx")
        rows += bench(g, f"{name} (light)", args.runs)
        rows += bench(with_random_weights(g, seed=0), f"{name} (random init.)", args.runs)
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs (wall times grow with it; cpu ms much less)\n")
    head = f"{'model':<26} {'nodes':>5}  {'rule':<22} {'matches':>7} {'applied':>7} {'find ms':>8} {'preview ms':>10} {'best':>6} {'cpu ms':>7} {'cold ms':>8} {'copy ms':>8}  target"
    print(head)
    print("-" * len(head))
    for label, n, rule, m, a, f, w, wb, wc, c, cp in rows:
        ok = "ok" if w <= TARGET_MS else "MISSED"
        print(f"{label:<26} {n:>5}  {rule:<22} {m:>7} {a:>7} {f:>8.1f} {w:>10.1f} {wb:>6.1f} {wc:>7.1f} {c:>8.1f} {cp:>8.1f}  {ok} (<= {TARGET_MS:.0f} ms)")
    print("\npreview ms: median wall time of the rewrite on a copy prepared in advance (the GUI's path;")
    print("best: the fastest run; cpu ms: median process CPU time); cold ms: a fresh copy included;")
    print("copy ms: the copy alone. The target is judged on the median wall time.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
