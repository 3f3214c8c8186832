"""Where a model's time goes, ours against onnxruntime, measured in CPU time at one thread.

Why CPU time: on a shared machine (this project's 2-core host runs several engineers' jobs, load
average 3-6) wall-clock latency mostly measures the other processes: the same executable's
medians move 30 % between runs, and 2-thread figures say more about who held the second core than
about the code. The CPU time the running thread itself consumed (`time.thread_time`) leaves out
the time slices it waited, so 1-thread figures taken beside other work agree with quiet ones to a
few percent. (It still counts cache and memory-bandwidth contention, and a core's clock.)

Both runtimes run in this process on the calling thread: ours on a pool of one thread (TVM runs
the one share of every parallel loop on the caller), onnxruntime with intra_op_num_threads = 1
(its work runs on the caller too). Blocks of runs alternate between the two; per model it prints
the minimum and the median of the block averages, and ours / onnxruntime for both.

`--kernels K` adds, per model, ours per kernel (the VM's instrument hook around every call: thread
CPU time per call, the 25th percentile over the runs, times calls per run; the hook's own cost,
a few microseconds per call, included) grouped into matmul / softmax / activation / layer norm /
copies / other, beside onnxruntime's per-operator profile (SessionOptions.enable_profiling: wall time per
node, which includes waits; read it as shares of its total, not as absolute figures).

    python benchmarks/cpu_time_profile.py [--models bert_encoder,vit_encoder,gpt2_blocks] [--blocks 8]
        [--runs 10] [--kernels 12]

This measures one thread only: whether two threads pay off depends on the cores the machine
leaves free (core.compiler.runtime.threads); compiled_vs_onnxruntime.py times that.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

__all__ = ["kernel_classes", "main"]

DEFAULT_MODELS = "bert_encoder,vit_encoder,gpt2_blocks"


def kernel_classes(name: str) -> str:
    """A kernel's group by what FuseOps named it after."""
    if "matmul" in name or "conv2d" in name:
        return "matmul / conv"
    if "softmax" in name:
        return "softmax"
    if "erf" in name or "tanh" in name or "sigmoid" in name:
        return "activation"
    if "layer_norm" in name or "mean" in name or "power" in name:
        return "layer norm"
    if any(w in name for w in ("transpose", "reshape", "split", "concatenate", "layout_transform", "pad", "slice", "take")):
        return "copies"
    return "other"


def _cpu_ms(fn, fn_args, runs: int) -> float:
    start = time.thread_time_ns()
    for _ in range(runs):
        fn(*fn_args)
    return (time.thread_time_ns() - start) / runs / 1e6


def _ort_session(proto, profile_prefix: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _ours_kernels(library, args, runs: int) -> list[tuple[float, int, str]]:
    """(ms per run, calls per run, kernel name), largest first, at one thread."""
    import tvm

    vm = tvm.relax.VirtualMachine(library, tvm.cpu())
    per_call: dict[str, list[int]] = collections.defaultdict(list)
    starts: list[int] = []

    def instrument(_func, name, before_run, _ret, *_rest):
        if name.startswith(("vm.builtin.", "__")) or name == "shape_func":
            return 0
        if before_run:
            starts.append(time.thread_time_ns())
        elif starts:
            per_call[name].append(time.thread_time_ns() - starts.pop())
        return 0

    vm["main"](*args)
    vm.set_instrument(instrument)
    for _ in range(runs):
        vm["main"](*args)
    rows = []
    for name, times in per_call.items():
        calls = len(times) // runs
        quartile = sorted(times)[len(times) // 4] / 1e6
        rows.append((quartile * calls, calls, name))
    return sorted(rows, reverse=True)


def _ort_ops(proto, feeds, runs: int) -> dict[str, float]:
    """onnxruntime's wall ms per run by operator type (its node profile)."""
    with tempfile.TemporaryDirectory() as tmp:
        sess = _ort_session(proto, str(Path(tmp) / "ort"))
        for _ in range(runs):
            sess.run(None, feeds)
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
    by_op: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            by_op[e.get("args", {}).get("op_name", "?")] += e.get("dur", 0) / 1e3
    return {op: ms / runs for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])}


def main(argv: list[str] | None = None) -> int:
    import tvm

    from benchmarks.compiled_vs_onnxruntime import (
        _feeds,
        _load,
        architecture_models,
        compile_workbench,
        light_models,
    )
    from core.compiler.target import make_target, runtime_threads

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS, help="comma-separated names (benchmarks.architectures, or the onnx wheel's light models)")
    parser.add_argument("--blocks", type=int, default=8, help="alternating blocks per runtime")
    parser.add_argument("--runs", type=int, default=10, help="runs per block")
    parser.add_argument("--kernels", type=int, default=0, help="also list this many of our kernels and the per-group shares")
    args = parser.parse_args(argv)

    models = {**light_models(), **architecture_models()}
    unknown = [m for m in args.models.split(",") if m not in models]
    if unknown:
        print(f"unknown model '{unknown[0]}': choose from {', '.join(models)}.", file=sys.stderr)
        return 2
    target = make_target("cpu")
    print(f"thread CPU time at 1 thread, ms per run: min / median of {args.blocks} alternating blocks of {args.runs} runs")
    print(f"{'model':16s} {'ours':>15s} {'onnxruntime':>15s} {'x ort (min)':>12s} {'x ort (med)':>12s}  load")
    for name in args.models.split(","):
        proto = _load(models[name])
        feeds = _feeds(proto)
        art = compile_workbench(proto, target)
        vm = art.vm()
        tvm_args = [tvm.runtime.tensor(v) for v in feeds.values()]
        sess = _ort_session(proto)
        ours, ort = [], []
        with runtime_threads(1):
            vm["main"](*tvm_args)
            sess.run(None, feeds)
            for _ in range(args.blocks):
                ours.append(_cpu_ms(vm["main"], tvm_args, args.runs))
                ort.append(_cpu_ms(sess.run, (None, feeds), args.runs))
        om, rm = min(ours), min(ort)
        od, rd = statistics.median(ours), statistics.median(ort)
        load = os.getloadavg()[0]
        print(f"{name:16s} {om:6.2f} / {od:6.2f}  {rm:6.2f} / {rd:6.2f}  {om / rm:12.3f} {od / rd:12.3f}  {load:.1f}", flush=True)
        if args.kernels:
            with runtime_threads(1):
                rows = _ours_kernels(art.library, tvm_args, max(10, args.runs))
            total = sum(r[0] for r in rows) or 1.0
            groups: dict[str, float] = collections.defaultdict(float)
            for ms, _calls, kernel in rows:
                groups[kernel_classes(kernel)] += ms
            ort_ops = _ort_ops(proto, feeds, max(10, args.runs))
            ort_total = sum(ort_ops.values()) or 1.0
            print("  ours by group (CPU ms, share): " + ", ".join(f"{g} {ms:.2f} ({ms / total:.0%})" for g, ms in sorted(groups.items(), key=lambda kv: -kv[1])))
            print("  onnxruntime by op (wall ms, share): " + ", ".join(f"{op} {ms:.2f} ({ms / ort_total:.0%})" for op, ms in list(ort_ops.items())[:8]))
            for ms, calls, kernel in rows[: args.kernels]:
                print(f"    {ms:7.3f} ms  {calls:3d} x {ms / calls * 1e3:7.1f} us  {kernel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
