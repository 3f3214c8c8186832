"""What one parallel region costs on this machine, in the workbench's launch and in TVM's pool, and where the time goes.

A kernel made for the purpose runs K regions in a row (a serial loop around a parallel loop, so one
TVMBackendParallelLaunch per iteration); the cost of one region is (t(K) - t(1)) / (K - 1), free of
the Python call. Each row is one amount of work per region (`--work`: passes over 480 floats; 1
is next to nothing), split over the threads 1:1 (`parallel(2)`) or 2:1 (`parallel(3)`: TVM gives
task 0, the calling thread's, ceil(3/2) = 2 of the 3 chunks), timed at 1 and at 2 threads, all variants in
alternating short blocks in one process, each through the workbench's launch (core.compiler.runtime.native_pool)
and through TVM's own pool (`--pools native,tvm`). Printed per row: the region's time at 1 thread and at 2
(from the fastest block of each kernel, and from the median blocks), the speed-up, and the calling
thread's CPU time per region at 2 threads (thread_time: it holds up on a loaded machine; it is
the caller's share of the work plus its time in the pool, since it polls rather than sleeps).

Why it costs what it costs (TVM 0.27's src/runtime/thread_pool.cc, no OpenMP in the wheel): a
launch writes the task into the worker's one-slot queue; the worker, between regions, polls that
queue with one sched_yield() system call per look (TVM_THREAD_POOL_SPIN_COUNT of them, then it
sleeps on a condition variable); the calling thread runs task 0 and then polls the pending count,
again one sched_yield() per look. So a region costs about one system call on each side: the
worker sees the task up to one sched_yield late, and the caller, done first with an even share,
pays at least one sched_yield before it sees the worker's end. A system call is slow in this
virtual machine, and sched_yield hands the CPU to any other runnable thread: on this project's
2-vCPU Zen 4 KVM guest (load 4-9, other engineers' processes) sched_yield() took 0.7-1.3 us in a C
loop (getpid 0.15-0.3 us), and a region cost 2.7-3.5 us at 2 threads in blocks of 2,000 calls
against 0.05-0.2 us at 1 thread, 1.4-1.5 us in the fastest of many short blocks. The same
handshake polling with the pause instruction instead took 0.07 us (a C model of the pool), and
such a launch patched into a loaded library's __TVMBackendParallelLaunch pointer ran this file's
kernel at 0.80 us a region against 2.75 us with TVM's pool (fastest blocks, alternating, load 9):
the cost is the runtime's polling, not the generated code. core.compiler.runtime.native_pool is that launch,
built into the workbench: on this project's quiet 2-vCPU Zen 5 KVM guest (sched_yield 0.5 us) a
region with next to no work cost 0.07 / 0.35 us (fastest / median blocks) against TVM's 0.66 / 1.76 us.
None of TVM's pool is changeable from Python: the spin count only sets how long the worker polls
before sleeping; TVM_BIND_THREADS, or pinning the caller and the worker to different CPUs with
os.sched_setaffinity, made it no cheaper; runtime.config_threadpool re-applies the affinity and the
count without restarting the workers (0.7 us a call). The 2:1 split lets the caller, with the
larger share, find the worker done without a sched_yield: for ~5 us of one-core work it was the
faster split here (fastest blocks 3.9-4.0 against 4.1-4.5 us), at ~10 us the slower (7.5 against
6.7 us); for a model's kernels see core.compiler.schedules.cpu_common.PARALLEL_LAUNCH_US.

    python benchmarks/parallel_launch.py [--work 1,64,256,512] [--launches 21] [--seconds 6]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

__all__ = ["ROW", "launch_kernel", "main", "syscall_us"]

ROW = 480  # floats per pass; divisible by 2 and 3, so both splits get whole chunks


def launch_kernel(launches: int, chunks: int, work: int, target=None):
    """A compiled PrimFunc main(A, B) of `launches` parallel regions in a row, each a parallel
    loop of `chunks` iterations that together make `work` passes of B = B * 0.999 + A over ROW
    floats (at least 1 pass: TVM drops a parallel loop with nothing in it)."""
    import tvm
    from tvm.script import tirx as T

    from core.compiler.target import make_target

    width, passes = ROW // chunks, max(1, int(work))

    @T.prim_func
    def regions(A: T.Buffer((chunks, width), "float32"), B: T.Buffer((chunks, width), "float32")):
        for _k in range(launches):
            for i in T.parallel(chunks):
                for _r in range(passes):
                    for j in range(width):
                        B[i, j] = B[i, j] * T.float32(0.999) + A[i, j]

    return tvm.compile(tvm.IRModule({"main": regions}), target or make_target("cpu"))


def syscall_us(calls: int = 20000) -> float:
    """Microseconds of one os.sched_yield() from Python, less the loop's own cost."""
    def loop(fn) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0

    noop = min(loop(lambda: None) for _ in range(3))
    return max(0.0, min(loop(os.sched_yield) for _ in range(3)) - noop) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="1,64,256,512", help="passes over 480 floats per region, comma-separated")
    parser.add_argument("--launches", type=int, default=21, help="regions per call of the long kernel (>= 2)")
    parser.add_argument("--seconds", type=float, default=6.0, help="timed seconds in all, about")
    parser.add_argument("--pools", default="native,tvm",
                        help="whose launch to time, alternating blocks: native (the workbench's, core.compiler.runtime.native_pool), tvm (TVM's own)")
    args = parser.parse_args(argv)
    pools = [p.strip() for p in args.pools.split(",") if p.strip()]
    if not pools or set(pools) - {"native", "tvm"}:
        print(f"--pools takes native and/or tvm, got '{args.pools}'", file=sys.stderr)
        return 2
    try:
        works = [int(w) for w in args.work.split(",") if w.strip()]
    except ValueError:
        print(f"--work must be whole numbers of passes, got '{args.work}'", file=sys.stderr)
        return 2
    if args.launches < 2 or not works or min(works) < 1:
        print("--launches must be at least 2 and --work numbers of at least 1", file=sys.stderr)
        return 2

    from core.compiler.runtime import native_pool

    import tvm

    from benchmarks.compiled_vs_onnxruntime import host_description
    from core.compiler.target import make_target, runtime_threads

    native = native_pool.pool()
    if "native" in pools and native is None:
        print(f"the workbench's pool is {native_pool.status()}; timing TVM's only")
        pools = ["tvm"]

    target = make_target("cpu")
    # (pool, work, chunks, threads, short kernel, long kernel, args, [(long, short) wall s], [(long, short) CPU s])
    cases = []
    for work in works:
        for chunks in (2, 3):
            short, long = launch_kernel(1, chunks, work, target), launch_kernel(args.launches, chunks, work, target)
            data = [tvm.runtime.tensor(np.full((chunks, ROW // chunks), v, "float32")) for v in (1.0, 0.0)]
            for pool in pools:
                for threads in (1, 2):
                    cases.append((pool, work, chunks, threads, short, long, data, [], []))

    def per_call(fn, data, n: int) -> tuple[float, float]:
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            fn(*data)
        return (time.perf_counter() - w0) / n, (time.thread_time() - c0) / n

    print(f"host {host_description(make_target('cpu', mcpu='host'))}  load average {os.getloadavg()[0]:.1f}")
    print(f"sched_yield() from Python: {syscall_us():.2f} us a call")
    deadline = time.perf_counter() + args.seconds
    while time.perf_counter() < deadline or not cases[-1][7]:
        for pool, work, chunks, threads, short, long, data, wall, cpu in cases:
            if native is not None:
                native.set_enabled(pool == "native")
            with runtime_threads(threads):
                per_call(long, data, 2)  # the worker awake, the data in cache
                lw, lc = per_call(long, data, 5)
                sw, sc = per_call(short, data, 5)  # as many calls as the long one: minima of like blocks
            wall.append((lw, sw))
            cpu.append((lc, sc))

    def region_us(pairs, pick) -> float:
        # the long kernel's and the short kernel's own fastest (or median) blocks: on a loaded
        # machine a difference taken block by block is mostly noise
        return max(0.0, pick([p[0] for p in pairs]) - pick([p[1] for p in pairs])) / (args.launches - 1) * 1e6

    if native is not None:
        native.set_enabled(True)
    print(f"per parallel region, us (fastest / median of {len(cases[0][7])} blocks); 'caller CPU': the calling thread's CPU time")
    print(f"{'pool':>7}{'work':>6}{'split':>7}{'1 thread':>16}{'2 threads':>16}{'1->2 (min)':>12}{'caller CPU 2t':>16}")
    by_key = {(c[0], c[1], c[2], c[3]): c for c in cases}
    for work in works:
        for chunks, split in ((2, "1:1"), (3, "2:1")):
            for pool in pools:
                one, two = by_key[(pool, work, chunks, 1)], by_key[(pool, work, chunks, 2)]
                m1, m2 = region_us(one[7], min), region_us(two[7], min)
                d1, d2 = region_us(one[7], np.median), region_us(two[7], np.median)
                c2, e2 = region_us(two[8], min), region_us(two[8], np.median)
                print(
                    f"{pool:>7}{work:>6}{split:>7}{f'{m1:.2f} / {d1:.2f}':>16}{f'{m2:.2f} / {d2:.2f}':>16}"
                    f"{(m1 / m2 if m2 else float('nan')):>12.2f}{f'{c2:.2f} / {e2:.2f}':>16}",
                    flush=True,
                )
    print(f"load average now {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
