"""The one timing loop: runtimes (or builds) take turns in blocks, each timed in steady state.

Every comparison of two or more ways to run a model times them here: `bench --vs-ort` and the
GUI's Compile & Run (ours against onnxruntime in its own process, core.compiler.measure.bench),
benchmarks/compiled_vs_onnxruntime.py (ours, onnxruntime, 1 thread, tuned) and the model-level
A/B after tuning (untuned against tuned builds, core.compiler.tuning.ab). Why alternate: a slow
drift of the machine's load (other processes on a shared host) then hits all of them alike
instead of whichever happened to be timed during it.

A runner is a function n -> [ms of each of n runs] (`timed` makes one from a function that runs
the model once; core.compiler.measure.ort_worker.OrtProcess.run is one). `alternate`:

1. warms each runner up (`warmup` untimed runs), which also measures what a run costs;
2. times `blocks` blocks; in each, every runner in turn (in reverse order on odd blocks with
   `mirror`) runs its block's runs, after `settle_s` of pause when the runners are separate
   thread pools (never one timed while another's threads spin: TVM's idle workers yield-spin up
   to ~10^5 times before they sleep, onnxruntime's briefly too);
3. after such a pause the first runs are slow (caches refilled, cores woken), so with
   `warm_blocks` each block of a runner starts with `block_warm_runs` untimed runs.

Runners of one thread pool (two TVM builds in this process) need no pause, and without a pause
there is no ramp to skip: settle_s=0, warm_blocks=False.
"""
from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence

__all__ = [
    "BLOCK_WARM_S",
    "MAX_BLOCK_WARM_RUNS",
    "SETTLE_S",
    "Runner",
    "alternate",
    "block_sizes",
    "block_warm_runs",
    "flatten",
    "timed",
]

logger = logging.getLogger(__name__)

Runner = Callable[[int], list[float]]

# TVM's idle workers yield-spin up to ~10^5 times before they sleep, onnxruntime's briefly too.
SETTLE_S = 0.2
# After a pause the first runs are slow, and not alike for the two runtimes (caches refilled,
# cores woken), so that short blocks measured mostly that ramp. So each block starts with untimed
# runs, at least BLOCK_WARM_S of them (and at most MAX_BLOCK_WARM_RUNS, which only bounds the
# tiniest models' warm-up count), and the blocks compare steady state. (docs/performance.md:
# COLD_GAP and COLD_WARMUP, BLOCK_WARM_S and MAX_BLOCK_WARM_RUNS)
BLOCK_WARM_S = 0.02
MAX_BLOCK_WARM_RUNS = 2000


def block_warm_runs(ms_per_run: float) -> int:
    """Untimed runs that start a block (see BLOCK_WARM_S) for a model taking `ms_per_run`."""
    return max(1, min(MAX_BLOCK_WARM_RUNS, math.ceil(BLOCK_WARM_S * 1000.0 / max(ms_per_run, 1e-3))))


def block_sizes(runs: int, blocks: int) -> list[int]:
    """`runs` split into at most `blocks` nearly equal blocks."""
    blocks = max(1, min(blocks, runs))
    return [runs // blocks + (1 if i < runs % blocks else 0) for i in range(blocks)]


def timed(run_once: Callable[[], object]) -> Runner:
    """A runner (n -> [ms of each run]) from a function that runs the model once."""

    def run(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            run_once()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    return run


def flatten(blocks: list[list[float]]) -> list[float]:
    """One runner's ms of all blocks, in the order they were timed."""
    return [t for block in blocks for t in block]


def alternate(
    runners: Sequence[Runner],
    *,
    blocks: int,
    runs: int | None = None,
    block_s: float | None = None,
    min_block_runs: int = 3,
    warmup: int = 3,
    settle_s: float | None = None,
    warm_blocks: bool = True,
    mirror: bool = False,
    cancel: Callable[[], bool] | None = None,
    on_block: Callable[[int, int], None] | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> list[list[list[float]]]:
    """ms per timed run of each runner, per block: result[runner][block] (module docstring).

    How many runs a block has: `runs` (each runner's timed runs in all) split into `blocks`
    nearly equal blocks, or, with `block_s`, `blocks` blocks of as many runs as fill `block_s`
    seconds at the runners' mean warm-up median (at least `min_block_runs`). `settle_s`: the pause
    after every warm-up and block (default SETTLE_S; 0: none). `mirror`: odd blocks run the
    runners in reverse order (a, b, b, a, ...). `cancel()` is asked before each block: True
    stops the loop and what was timed is returned (fewer blocks). `on_block(index, count)` hears
    each finished block."""
    if (runs is None) == (block_s is None):
        raise ValueError("give either runs or block_s")
    pause = SETTLE_S if settle_s is None else settle_s
    warm_ms = []
    for run in runners:
        warm_ms.append(statistics.median(run(max(1, warmup))))
        if pause > 0:
            sleep(pause)  # without it, the first block ran beside the last warm-up's spinning threads
    if runs is not None:
        sizes = block_sizes(runs, blocks)
    else:
        per_run = max(statistics.fmean(warm_ms), 1e-6)
        sizes = [max(min_block_runs, int(block_s * 1e3 / per_run))] * max(1, blocks)
    skip = [block_warm_runs(ms) if warm_blocks else 0 for ms in warm_ms]
    times: list[list[list[float]]] = [[] for _ in runners]
    order = list(range(len(runners)))
    for index, size in enumerate(sizes):
        if cancel is not None and cancel():
            break
        for i in (order[::-1] if mirror and index % 2 else order):
            times[i].append(list(runners[i](skip[i] + size)[skip[i]:]))
            if pause > 0:
                sleep(pause)
        if on_block is not None:
            on_block(index, len(sizes))
    return times
