"""Parallel loops on the CPU's threads, three questions, one `--mode` each.

    balance  How evenly do the default CPU schedules split each kernel over the threads? Structure
             only: scheduled TIR for named CPUs, nothing runs.
    launch   What does one parallel region cost on this machine, in the workbench's launch and in
             TVM's pool, and where does the time go?
    split    Does splitting a model's kernels over 2 threads pay? The same model built under
             different parallel rules, each timed at 1 and at 2 threads.

    python benchmarks/parallel.py --mode balance [--models squeezenet,small_cnn] [--cpus default,znver3]
        [--threads 2] [--kernels] [--min-us 5]
    python benchmarks/parallel.py --mode launch [--work 1,64,256,512] [--launches 21] [--seconds 6]
        [--pools native,tvm]
    python benchmarks/parallel.py --mode split --models small_cnn,mm_relu --variants default,min-us=12,matmul-serial
        [--pause 0] [--seconds 3] [--blocks 8]

`--mode MODE --help` lists a mode's options; each mode's entry point (balance_main, launch_main, split_main) says
what it measures and why.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402 - first: it prepares the process before anything imports tvm
    benchmark_models,
    feeds_for,
    host_description,
    load_proto,
)

__all__ = [
    "Kernel",
    "ROW",
    "Region",
    "balance_main",
    "kernel_splits",
    "launch_kernel",
    "launch_main",
    "main",
    "model_kernels",
    "parallel_rules",
    "scheduled_module",
    "split_loss_us",
    "split_main",
    "syscall_us",
]

# -- balance: how evenly the schedules split each kernel over the threads

# Reduction blocks that are depthwise windows or pools (one multiply-add per tap and output, no
# channel reduction kept in registers): estimated at the depthwise rate
WINDOW_BLOCK_WORDS = ("depthwise", "pool", "adaptive")


def split_loss_us(work_us: float, n: int, threads: int = 2) -> float:
    """Estimated microseconds a region of `work_us` one-core work, split into `n` equal iterations,
    runs beyond an even split over `threads`: work x (ceil(n/T)/n - 1/T)."""
    return work_us * (math.ceil(n / threads) / n - 1 / threads)


@dataclass
class Region:
    """One parallel loop of a kernel: its extent and the estimated one-core work under it."""

    extent: int
    work_us: float
    blocks: list[str] = field(default_factory=list)


@dataclass
class Kernel:
    """A scheduled kernel: its parallel regions and the estimated one-core work outside them."""

    name: str
    regions: list[Region]
    serial_us: float

    @property
    def work_us(self) -> float:
        return self.serial_us + sum(r.work_us for r in self.regions)

    def loss_us(self, threads: int = 2) -> float:
        return sum(split_loss_us(r.work_us, r.extent, threads) for r in self.regions)


def _block_work_us(name: str, reductions: list[int], iterations: int) -> float:
    from core.compiler.schedules.cpu_common import FMA_MACS_PER_US
    from core.compiler.schedules.cpu_depthwise import (
        DEPTHWISE_BYTES_PER_US,
        DEPTHWISE_MACS_PER_US,
    )

    if reductions:
        # a window: named so, or a grouped conv with one input channel per group (n, c, h, w | 1, kh, kw)
        window = any(w in name for w in WINDOW_BLOCK_WORDS) or (len(reductions) == 3 and reductions[0] == 1)
        return iterations / (DEPTHWISE_MACS_PER_US if window else FMA_MACS_PER_US)
    return iterations * 4 / DEPTHWISE_BYTES_PER_US


def kernel_splits(func, name: str = "") -> Kernel:
    """The parallel regions of a scheduled PrimFunc and each one's estimated one-core work: every
    block's iterations (the product of the loops around it) at the rate of its kind (module
    docstring), summed under the parallel loop that encloses it. Walks the statements itself (a
    kernel TVM's Schedule refuses as ill-formed is still read)."""
    import tvm
    from tvm.s_tir.stmt import SBlockRealize

    from core.compiler.schedules.cpu_common import const_int

    regions: dict[int, Region] = {}
    serial = 0.0

    def visit(stmt, loops: tuple) -> None:
        nonlocal serial
        if stmt is None:
            return
        if isinstance(stmt, tvm.tirx.For):
            visit(stmt.body, (*loops, stmt))
        elif isinstance(stmt, SBlockRealize):
            block = stmt.block
            iterations = 1
            for loop in loops:
                iterations *= const_int(loop.extent) or 1
            reductions = [const_int(iv.dom.extent) or 1 for iv in block.iter_vars if iv.iter_type == tvm.tirx.IterVar.CommReduce]
            work = _block_work_us(block.name_hint, reductions, iterations) if block.name_hint != "root" else 0.0
            parallel = [loop for loop in loops if loop.kind == tvm.tirx.ForKind.PARALLEL]
            if not parallel:
                serial += work
            else:
                region = regions.setdefault(id_of[parallel[0]], Region(const_int(parallel[0].extent) or 1, 0.0))
                region.work_us += work
                if work:
                    region.blocks.append(block.name_hint)
            visit(block.init, loops)
            visit(block.body, loops)
        elif isinstance(stmt, tvm.tirx.SeqStmt):
            for child in stmt.seq:
                visit(child, loops)
        else:
            for attr in ("body", "then_case", "else_case"):
                visit(getattr(stmt, attr, None), loops)

    class _Ids(dict):  # one Region per parallel For node (tvm objects hash by handle)
        def __missing__(self, loop):
            self[loop] = len(self)
            return self[loop]

    id_of = _Ids()
    visit(func.body, ())
    return Kernel(name, list(regions.values()), serial)


def scheduled_module(proto, target):
    """`proto` through the default pipeline for `target` up to and including ScheduleTIR."""
    from core.compiler.pipeline.runner import Pipeline
    from core.model.onnx_io import load_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        graph = load_model(path)
        pipe = Pipeline(target)
        steps = pipe.steps()
        last = next(i for i, s in enumerate(steps) if s.info.schedules)
        return pipe.run(pipe.import_graph(graph).mod, steps=steps[: last + 1])


def model_kernels(proto, target) -> list[Kernel]:
    import tvm

    mod = scheduled_module(proto, target)
    return [kernel_splits(f, g.name_hint) for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _target(cpu: str):
    from core.compiler.target import make_target

    return make_target("cpu") if cpu == "default" else make_target("cpu", mcpu=cpu)


def balance_main(argv: list[str]) -> int:
    """How evenly the default CPU schedules split each kernel over the threads: structure only, nothing runs.

    TVM lowers a parallel loop of extent n over T threads into T tasks of ceil(n/T) iterations
    (src/target/llvm/codegen_cpu.cc, the parallel For in CreateParallelLaunch's task: `step =
    ceil(n / num_task)`), and the region lasts as long as its longest task. A loop of 3, 5 or 7
    iterations at 2 threads is split 2:1, 3:2, 4:3: its 1 -> 2 thread gain is capped at 1.5x, 1.67x,
    1.75x. This mode compiles every benchmark model (benchmarks.common) up to the
    scheduled TIR (core.compiler.pipeline.runner.Pipeline, every pass through ScheduleTIR, no code generation)
    for one or more CPUs (this host's default target and `znver3`, AVX2, by default: codegen targets,
    so any host can analyse any CPU), and lists, per kernel, its parallel regions: the loop's extent,
    the region's estimated one-core work and the predicted imbalance ceil(n/T) / (n/T).

    What it found (2026-12-02, AVX-512 and AVX2 code alike): at 2 threads the CNNs' parallel kernels
    split evenly already, all but light ShuffleNet within 0.3% of an even split in estimated work
    (squeezenet's convs on 13-, 39- and 55-iteration loops of odd maps: within 1.03x each, so the
    1.6-1.8x they gain from the second core is not the split). ShuffleNet lost 3.7%: its 24-channel
    max pool split 2:1 and a 112-channel depthwise conv 4:3 over their channel blocks
    (schedules.cpu_balance now adds chunks of rows: 0.4%). At 4 threads the light models lose up to
    0.4% and efficientnet_b0, mobilenet_v3_small and shufflenet 0.9%, 1.2% and 4.4%.

    The work estimate is the rules' own (core.compiler.schedules.cpu_common / cpu_depthwise): a block
    that reduces over input channels (conv, Winograd GEMM, matmul) at FMA_MACS_PER_US multiply-adds per
    us, a depthwise conv or pool window at DEPTHWISE_MACS_PER_US, everything else (copies, padding,
    transforms, elementwise) as 4 bytes (the store) per iteration at DEPTHWISE_BYTES_PER_US. What the split loses
    at T threads is work x (ceil(n/T)/n - 1/T): the time beyond an even split. Weighted by that work,
    the table says which models lose the most to uneven splits and which large kernels stay serial.

        python benchmarks/parallel.py --mode balance [--models squeezenet,small_cnn] [--cpus default,znver3]
            [--threads 2] [--kernels] [--min-us 5]
    """
    parser = argparse.ArgumentParser(prog="parallel.py --mode balance", description=balance_main.__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every benchmark model)")
    parser.add_argument("--cpus", default="default,znver3", help="'default' (this host's target) or LLVM CPU names")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kernels", action="store_true", help="list every kernel of at least --min-us estimated work")
    parser.add_argument("--min-us", type=float, default=5.0)
    args = parser.parse_args(argv)

    from core.compiler.schedules.cpu_balance import split_imbalance
    from core.compiler.schedules.cpu_common import PARALLEL_MIN_US

    models = benchmark_models()
    names = [m.strip() for m in args.models.split(",") if m.strip()] or list(models)
    unknown = [n for n in names if n not in models]
    if unknown:
        print(f"unknown model '{unknown[0]}' (known: {', '.join(models)})", file=sys.stderr)
        return 2
    t = args.threads
    for cpu in [c.strip() for c in args.cpus.split(",") if c.strip()]:
        target = _target(cpu)
        print(f"== {cpu}: {host_description(target)}  threads {t}")
        print(f"{'model':<20}{'kernels':>8}{'parallel':>9}{'work us':>10}{'parallel us':>12}{'loss us':>9}{'loss %':>8}"
              f"{'uneven':>8}{'serial>=' + format(PARALLEL_MIN_US, 'g') + 'us':>14}")
        for name in names:
            kernels = model_kernels(load_proto(models[name]), target)
            work = sum(k.work_us for k in kernels)
            parallel = [k for k in kernels if k.regions]
            par_work = sum(r.work_us for k in parallel for r in k.regions)
            loss = sum(k.loss_us(t) for k in kernels)
            uneven = sum(1 for k in kernels for r in k.regions if split_imbalance(r.extent, t) > 1.0)
            big_serial = [k for k in kernels if not k.regions and k.work_us >= PARALLEL_MIN_US]
            # loss as a share of what an even split of the parallel work would take
            share = 100 * loss / (par_work / t) if par_work else 0.0
            print(f"{name:<20}{len(kernels):>8}{len(parallel):>9}{work:>10.0f}{par_work:>12.0f}{loss:>9.1f}{share:>7.1f}%"
                  f"{uneven:>8}{len(big_serial):>14}", flush=True)
            if args.kernels:
                for k in sorted(kernels, key=lambda k: -k.work_us):
                    if k.work_us < args.min_us:
                        continue
                    splits = " ".join(f"{r.extent}:{r.work_us:.0f}us:x{split_imbalance(r.extent, t):.2f}" for r in k.regions) or "serial"
                    print(f"    {k.name[:56]:<56}{k.work_us:>9.1f} us  loss {k.loss_us(t):6.1f}  {splits}")
    return 0


# -- launch: what one parallel region costs

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


def launch_main(argv: list[str]) -> int:
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

        python benchmarks/parallel.py --mode launch [--work 1,64,256,512] [--launches 21] [--seconds 6]
    """
    parser = argparse.ArgumentParser(prog="parallel.py --mode launch", description=launch_main.__doc__.splitlines()[0])
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

    from core.compiler.runtime.threads import runtime_threads
    from core.compiler.target import make_target

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


# -- split: whether splitting a model's kernels over 2 threads pays

@contextlib.contextmanager
def parallel_rules(variant: str):
    """The schedule rules as `variant` (split_main's docstring) sets them, inside the block."""
    from core.compiler.schedules import cpu_common, cpu_conv_nchwc, cpu_depthwise, cpu_depthwise_nchwc, cpu_matmul

    saved = (cpu_common.PARALLEL_MIN_US, cpu_matmul.runs_parallel, cpu_depthwise.DEPTHWISE_PARALLEL_MIN_US, cpu_conv_nchwc.AVX2_TWO_BLOCKS,
             cpu_common.PARALLEL_PADDING, cpu_conv_nchwc.ROWS_FIRST, cpu_depthwise_nchwc.ROWS_FIRST,
             cpu_conv_nchwc.LARGE_WEIGHT_BANDS)
    saved_work: list = []
    try:
        if variant.startswith("min-work="):  # every rule's copy of the threshold (imported by value)
            import importlib
            import pkgutil

            from core.compiler import schedules

            for info in pkgutil.iter_modules(schedules.__path__):
                module = importlib.import_module(f"{schedules.__name__}.{info.name}")
                if hasattr(module, "PARALLEL_MIN_WORK"):
                    saved_work.append((module, module.PARALLEL_MIN_WORK))
                    module.PARALLEL_MIN_WORK = int(variant.split("=", 1)[1])
        elif variant.startswith("min-us="):
            cpu_common.PARALLEL_MIN_US = float(variant.split("=", 1)[1])
        elif variant.startswith("dw-min-us="):
            cpu_depthwise.DEPTHWISE_PARALLEL_MIN_US = float(variant.split("=", 1)[1])
        elif variant == "one-block":
            cpu_conv_nchwc.AVX2_TWO_BLOCKS = False
        elif variant == "serial-padding":
            cpu_common.PARALLEL_PADDING = False
        elif variant == "chunks-first":
            cpu_conv_nchwc.ROWS_FIRST = cpu_depthwise_nchwc.ROWS_FIRST = False
        elif variant == "no-conv-bands":
            cpu_conv_nchwc.LARGE_WEIGHT_BANDS = 1
        elif variant == "matmul-serial":
            cpu_matmul.runs_parallel = lambda *args, **kwargs: False
        elif variant not in ("default", "tvm-pool"):
            raise SystemExit(f"unknown variant '{variant}' (default, min-us=N, dw-min-us=N, min-work=N, matmul-serial, one-block, serial-padding, chunks-first, no-conv-bands, tvm-pool)")
        yield
    finally:
        (cpu_common.PARALLEL_MIN_US, cpu_matmul.runs_parallel, cpu_depthwise.DEPTHWISE_PARALLEL_MIN_US, cpu_conv_nchwc.AVX2_TWO_BLOCKS,
         cpu_common.PARALLEL_PADDING, cpu_conv_nchwc.ROWS_FIRST, cpu_depthwise_nchwc.ROWS_FIRST,
         cpu_conv_nchwc.LARGE_WEIGHT_BANDS) = saved
        for module, value in saved_work:
            module.PARALLEL_MIN_WORK = value


def _build(proto, variant: str):
    """(artifact, names of its parallel kernels) of `proto` compiled under `variant`."""
    import tvm

    from core.compiler.compile import compile_model

    with parallel_rules(variant), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        art = compile_model(str(path), "cpu", verify=False)
    funcs = art.scheduled_mod.functions.items()
    parallel = sorted(gv.name_hint for gv, f in funcs if isinstance(f, tvm.tirx.PrimFunc) and "T.parallel" in f.script())
    return art, parallel


def split_main(argv: list[str]) -> int:
    """Does splitting a model's kernels over 2 threads pay? The same model built with different parallel
    rules, each timed at 1 and at 2 threads, in one process, in alternating blocks.

    Why: a parallel region costs ~3 us at 2 threads on this project's 2-core Zen 4 KVM guest (TVM's
    launch and closing barrier, see core.compiler.schedules.cpu_common.PARALLEL_LAUNCH_US), and the
    data the two cores share must move between them. Whether a kernel of 10-40 us gains from the split
    is a measurement, and it only means something on a quiet machine (beside other processes the second
    core is not free). This script makes it one command. A variant is one of:

        default          the rules as they are
        min-us=N         cpu_common.PARALLEL_MIN_US = N (the estimated one-core microseconds from which
                         a conv is split; see conv_runs_parallel)
        dw-min-us=N      cpu_depthwise.DEPTHWISE_PARALLEL_MIN_US = N (the same for depthwise convs and
                         pools; see depthwise_runs_parallel)
        min-work=N       PARALLEL_MIN_WORK = N in every rule that splits copies, elementwise, pools and
                         row kernels from that many elements (cpu_common's 16 Ki; 64 Ki before)
        matmul-serial    no matmul/GEMV split (cpu_matmul.runs_parallel always False)
        one-block        AVX2 code's channel-blocked convs with one channel block per register tile
                         (cpu_conv_nchwc.AVX2_TWO_BLOCKS = False), as before two became the default
        serial-padding   a split conv's (direct or Winograd) padded copy made by the calling thread
                         alone when under PARALLEL_MIN_WORK elements (cpu_common.PARALLEL_PADDING =
                         False), as before
        chunks-first     channel-blocked convs and depthwise convs split by channel blocks first, as
                         before rows came first (cpu_conv_nchwc.ROWS_FIRST and
                         cpu_depthwise_nchwc.ROWS_FIRST = False)
        no-conv-bands    channel-blocked convs with weights over 256 KiB split by channel blocks
                         first, as before the two bands of rows (cpu_conv_nchwc.LARGE_WEIGHT_BANDS = 1)
        tvm-pool         the default build, its parallel kernels launched by TVM's own thread pool
                         instead of the workbench's (core.compiler.runtime.native_pool)

    `--pause S` is the pause between blocks: 0 keeps the pool's worker spinning between blocks (steady
    state), 0.2 is what `bench --vs-ort` and benchmarks/compiled_vs_onnxruntime.py pause (the worker
    sleeps, and each block starts with core.compiler.measure.alternation.block_warm_runs untimed runs). Prints,
    per model and variant, the kernels that run parallel, median and p10 at 1 and 2 threads, and the
    1->2 speed-up of both.

        python benchmarks/parallel.py --mode split --models small_cnn,mm_relu --variants default,min-us=12,matmul-serial
            [--pause 0] [--seconds 3] [--blocks 8]
    """
    parser = argparse.ArgumentParser(prog="parallel.py --mode split", description=split_main.__doc__.splitlines()[0])
    parser.add_argument("--models", default="small_cnn,mm_relu")
    parser.add_argument("--variants", default="default,matmul-serial")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between blocks (0: the worker keeps spinning)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per model and variant, about")
    parser.add_argument("--blocks", type=int, default=8)
    args = parser.parse_args(argv)

    import tvm

    from core.compiler.runtime import native_pool
    from core.compiler.measure.alternation import alternate, flatten, timed
    from core.compiler.runtime.threads import runtime_threads
    from core.compiler.target import make_target

    models = benchmark_models()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    pool = native_pool.pool()
    if "tvm-pool" in variants and pool is None:
        print(f"the workbench's pool is {native_pool.status()}: variant tvm-pool would be the default", file=sys.stderr)
        return 2
    print(f"host {host_description(make_target('cpu', mcpu='host'))}  pause {args.pause} s  load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':<20}{'variant':<15}{'parallel':>9}{'1t ms (p10)':>22}{'2t ms (p10)':>22}{'1->2':>6}{'p10 1->2':>9}")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name not in models:
            print(f"unknown model '{name}'", file=sys.stderr)
            return 2
        proto = load_proto(models[name])
        feeds = feeds_for(proto)
        runners, kernels = [], {}
        for variant in variants:
            art, parallel = _build(proto, variant)
            kernels[variant] = parallel
            fn, dev_args = art.vm()["main"], [tvm.runtime.tensor(v) for v in feeds.values()]
            for threads in (1, 2):

                def run(n, fn=fn, dev_args=dev_args, threads=threads, native=variant != "tvm-pool"):
                    if pool is not None:
                        pool.set_enabled(native)
                    with runtime_threads(threads):
                        return timed(lambda: fn(*dev_args))(n)

                runners.append(run)
        per_runner_s = args.seconds / 2
        times = alternate(runners, blocks=args.blocks, block_s=per_runner_s / args.blocks, settle_s=args.pause, warm_blocks=args.pause > 0)
        for i, variant in enumerate(variants):
            one, two = np.asarray(flatten(times[2 * i])), np.asarray(flatten(times[2 * i + 1]))
            m1, m2, p1, p2 = np.median(one), np.median(two), np.percentile(one, 10), np.percentile(two, 10)
            print(
                f"{name:<20}{variant:<15}{len(kernels[variant]):>9}{f'{m1:.4g} ({p1:.4g})':>22}{f'{m2:.4g} ({p2:.4g})':>22}"
                f"{m1 / m2:>6.2f}{p1 / p2:>9.2f}",
                flush=True,
            )
    print(f"load average now {os.getloadavg()[0]:.1f}")
    return 0


MODES = {"balance": balance_main, "launch": launch_main, "split": split_main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chooser = argparse.ArgumentParser(add_help=False)
    chooser.add_argument("--mode", choices=tuple(MODES))
    known, rest = chooser.parse_known_args(argv)
    if known.mode is None:
        parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="A mode's own options: --mode MODE --help.")
        parser.add_argument("--mode", choices=tuple(MODES), required=True, help="balance, launch or split (module docstring)")
        parser.parse_args(argv)  # prints the help (exit 0) or says that --mode is missing (exit 2)
    return MODES[known.mode](rest)


if __name__ == "__main__":
    sys.exit(main())
