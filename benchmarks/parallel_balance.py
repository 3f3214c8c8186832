"""How evenly the default CPU schedules split each kernel over the threads: structure only, nothing runs.

TVM lowers a parallel loop of extent n over T threads into T tasks of ceil(n/T) iterations
(src/target/llvm/codegen_cpu.cc, the parallel For in CreateParallelLaunch's task: `step =
ceil(n / num_task)`), and the region lasts as long as its longest task. A loop of 3, 5 or 7
iterations at 2 threads is split 2:1, 3:2, 4:3: its 1 -> 2 thread gain is capped at 1.5x, 1.67x,
1.75x. This script compiles every model of benchmarks/compiled_vs_onnxruntime.py up to the
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

    python benchmarks/parallel_balance.py [--models squeezenet,small_cnn] [--cpus default,znver3]
        [--threads 2] [--kernels] [--min-us 5]
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

__all__ = ["Region", "Kernel", "kernel_splits", "main", "model_kernels", "scheduled_module", "split_loss_us"]

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
        last = next(i for i, s in enumerate(steps) if s.name == "ScheduleTIR")
        return pipe.run(pipe.import_graph(graph).mod, steps=steps[: last + 1])


def model_kernels(proto, target) -> list[Kernel]:
    import tvm

    mod = scheduled_module(proto, target)
    return [kernel_splits(f, g.name_hint) for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]


def _target(cpu: str):
    from core.compiler.target import make_target

    return make_target("cpu") if cpu == "default" else make_target("cpu", mcpu=cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: every model of compiled_vs_onnxruntime)")
    parser.add_argument("--cpus", default="default,znver3", help="'default' (this host's target) or LLVM CPU names")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kernels", action="store_true", help="list every kernel of at least --min-us estimated work")
    parser.add_argument("--min-us", type=float, default=5.0)
    args = parser.parse_args(argv)

    from benchmarks import compiled_vs_onnxruntime as bench
    from core.compiler.schedules.cpu_balance import split_imbalance
    from core.compiler.schedules.cpu_common import PARALLEL_MIN_US

    models = {**bench.light_models(), **bench.sample_models(), **bench.architecture_models()}
    names = [m.strip() for m in args.models.split(",") if m.strip()] or list(models)
    unknown = [n for n in names if n not in models]
    if unknown:
        print(f"unknown model '{unknown[0]}' (known: {', '.join(models)})", file=sys.stderr)
        return 2
    t = args.threads
    for cpu in [c.strip() for c in args.cpus.split(",") if c.strip()]:
        target = _target(cpu)
        print(f"== {cpu}: {bench.host_description(target)}  threads {t}")
        print(f"{'model':<20}{'kernels':>8}{'parallel':>9}{'work us':>10}{'parallel us':>12}{'loss us':>9}{'loss %':>8}"
              f"{'uneven':>8}{'serial>=' + format(PARALLEL_MIN_US, 'g') + 'us':>14}")
        for name in names:
            kernels = model_kernels(bench._load(models[name]), target)
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


if __name__ == "__main__":
    sys.exit(main())
