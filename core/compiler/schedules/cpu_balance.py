"""Even parallel splits: how many chunks a CNN kernel's output rows join its parallel loop in.

TVM splits a parallel loop of n iterations statically over the pool's T threads: T tasks of
ceil(n/T) iterations (src/target/llvm/codegen_cpu.cc: the parallel For inside the task
CreateParallelLaunch makes, step = ceil(n / num_task)), and the region lasts as long as its
longest task. A depthwise conv or pool in NCHW parallel over its channel blocks alone may have
few of them: light ShuffleNet's 24-channel max pool has 3 blocks of 8, split 2:1 at 2 threads,
its 112-channel depthwise conv 7 blocks of 16, 4:3. Joined with 2 chunks of output rows the loops
have 6 and 14 iterations, even at 2 threads (docs/performance.md: balanced_row_chunks).
Each chunk copies the padded input rows it reads, so the chunks are kept long enough that the
rows copied twice cost nothing measurable (halo_min_rows), and as few as make the split even at
2 threads, the cores of this project's hosts. At 4 threads
(the code is the same whatever the host's core count: a model built here runs on a 16-core host
as well) such a loop splits no worse than the channel blocks alone.

benchmarks/parallel.py --mode balance lists every kernel's split for the benchmark models.
"""
from __future__ import annotations

import logging
import math

__all__ = ["MAX_IMBALANCE", "balanced_row_chunks", "halo_min_rows", "split_imbalance"]

logger = logging.getLogger(__name__)

# The longest task against an even share at 2 threads that passes: 14:13 of 27 iterations does
# (1.04), 8:7 of 15 does not (1.07).
MAX_IMBALANCE = 1.04


def split_imbalance(n: int, threads: int = 2) -> float:
    """The longest task of a parallel loop of `n` iterations over `threads` (ceil(n/T)
    iterations) against an even share n/T: 1.0 for an even split, 1.5 for 3 at 2 threads."""
    return math.ceil(n / threads) / (n / threads)


def halo_min_rows(kernel_rows: int, stride: int) -> int:
    """Output rows a chunk needs at least when each chunk copies its own padded input rows: a
    chunk of r rows copies (r - 1) * stride + kernel_rows input rows, kernel_rows - stride more
    than its share of r * stride. From r >= 24 (kernel_rows - stride) / stride (and at least 4)
    that is 1/24 more copying or less: a 3x3 stride-2 window 12 rows, 3x3 stride 1 48, 5x5
    stride 1 96, a 2x2 stride-2 pool 4 (no overlap). (docs/performance.md: halo_min_rows)"""
    extra = max(0, kernel_rows - stride)
    return max(4, math.ceil(24 * extra / stride))


def balanced_row_chunks(outer: int, rows: int, min_rows: int = 1) -> int:
    """Chunks k (a divisor of `rows`, each of `min_rows` or more) to join the `outer` iterations
    of a parallel loop with (loop extent outer * k): 1 when outer already splits within
    MAX_IMBALANCE at 2 threads; else the fewest chunks that do (the fewest rows copied twice);
    else the most even split the divisors allow at 2 threads, then at 4 (a prime row count: 1 or
    the rows one by one)."""
    if split_imbalance(outer, 2) <= MAX_IMBALANCE:
        return 1
    choices = [k for k in range(1, rows + 1) if rows % k == 0 and rows // k >= min_rows]
    for k in choices:
        if split_imbalance(outer * k, 2) <= MAX_IMBALANCE:
            return k
    return min(choices, key=lambda k: (split_imbalance(outer * k, 2), split_imbalance(outer * k, 4), k), default=1)
