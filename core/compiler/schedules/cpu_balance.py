"""Even parallel splits: how many chunks a CNN kernel's output rows join its parallel loop in.

TVM splits a parallel loop of n iterations statically over the pool's T threads: T tasks of
ceil(n/T) iterations (tirx codegen_cpu.cc, CreateParallelLaunch), and the region lasts as long as
its longest task. A depthwise conv or pool parallel over its channel blocks alone has few of them
(light ShuffleNet's 24-channel max pool: 3 blocks of 8, split 2:1 at 2 threads, so at most 1.5x
from the second core; efficientnet_b0's 240-channel depthwise conv: 15 blocks of 16, 8:7). Joined
with a few chunks of output rows the same loop has 12 or 30 iterations, even at 2 and at 4 threads.
The code is the same whatever the host's core count (a model built here runs on a 16-core host as
well), so the choice looks at 2 and 4 threads, not at the target's num-cores.

benchmarks/parallel_balance.py lists every kernel's split for the benchmark models.
"""
from __future__ import annotations

import logging
import math

__all__ = ["BALANCE_THREADS", "MAX_IMBALANCE", "balanced_row_chunks", "halo_min_rows", "split_imbalance"]

logger = logging.getLogger(__name__)

# Thread counts whose split is judged, and the longest task against an even share that passes at
# each: 12 or 16 iterations split evenly at both; 15 (8:7 at 2 threads) and 14 (4:4:3:3 at 4) do
# not, 27 does (14:13, 7:7:7:6).
BALANCE_THREADS = (2, 4)
MAX_IMBALANCE = {2: 1.04, 4: 1.1}


def split_imbalance(n: int, threads: int = 2) -> float:
    """The longest task of a parallel loop of `n` iterations over `threads` (ceil(n/T)
    iterations) against an even share n/T: 1.0 for an even split, 1.5 for 3 at 2 threads."""
    return math.ceil(n / threads) / (n / threads)


def _balanced(n: int) -> bool:
    return all(split_imbalance(n, t) <= MAX_IMBALANCE[t] for t in BALANCE_THREADS)


def halo_min_rows(kernel_rows: int, stride: int, taps: int) -> int:
    """Output rows a chunk needs at least when each chunk copies its own padded input rows: a
    chunk of r rows copies (r - 1) * stride + kernel_rows input rows, kernel_rows - stride more
    than its share, about (kernel_rows - stride) * stride * out_w values against the chunk's
    r * out_w * taps multiply-adds. From r >= 32 (kernel_rows - stride) stride / taps (and at
    least 4) they are 1/32 of them or less (3x3 stride 1: 8 rows; 5x5 stride 1: 6; 3x3 stride 2: 8)."""
    extra = max(0, kernel_rows - stride)
    return max(4, math.ceil(32 * extra * stride / max(1, taps)))


def balanced_row_chunks(outer: int, rows: int, min_rows: int = 1) -> int:
    """Chunks k (a divisor of `rows`, each of `min_rows` or more) to join the `outer` iterations
    of a parallel loop with (loop extent outer * k): 1 when outer already splits within
    MAX_IMBALANCE at BALANCE_THREADS; else the fewest chunks that do, else the most even split
    the divisors allow at 2 threads first, then at 4 (7 channel blocks and 28 rows of at least
    8: 14 iterations, even at 2 threads, 4:4:3:3 at 4)."""
    if _balanced(outer):
        return 1
    choices = [k for k in range(1, rows + 1) if rows % k == 0 and rows // k >= min_rows]
    for k in choices:
        if _balanced(outer * k):
            return k
    return min(choices, key=lambda k: (*(split_imbalance(outer * k, t) for t in BALANCE_THREADS), k), default=1)
