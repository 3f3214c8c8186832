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

    python benchmarks/parallel_split.py --models small_cnn,mm_relu --variants default,min-us=12,matmul-serial
        [--pause 0] [--seconds 3] [--blocks 8]
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

__all__ = ["main", "parallel_rules"]


@contextlib.contextmanager
def parallel_rules(variant: str):
    """The schedule rules as `variant` (module docstring) sets them, inside the block."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="small_cnn,mm_relu")
    parser.add_argument("--variants", default="default,matmul-serial")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between blocks (0: the worker keeps spinning)")
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per model and variant, about")
    parser.add_argument("--blocks", type=int, default=8)
    args = parser.parse_args(argv)

    import os

    import tvm

    from benchmarks.compiled_vs_onnxruntime import (
        _feeds,
        _load,
        architecture_models,
        host_description,
        light_models,
        sample_models,
    )
    from core.compiler.runtime import native_pool
    from core.compiler.measure.alternation import alternate, flatten, timed
    from core.compiler.target import make_target, runtime_threads

    models = {**light_models(), **sample_models(), **architecture_models()}
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
        proto = _load(models[name])
        feeds = _feeds(proto)
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


if __name__ == "__main__":
    sys.exit(main())
