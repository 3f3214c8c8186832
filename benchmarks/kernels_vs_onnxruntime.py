"""Where a model's time goes, kernel by kernel: the workbench's compiled kernels against
onnxruntime's per-node profile, at 1 and 2 threads.

Ours: the model compiled with core.compiler.compile (the default CPU rules), run by the Relax VM
with an instrument around every kernel call; each kernel's time per model run is the minimum over
the runs (on a shared machine the fastest runs are the least disturbed). onnxruntime: a session
with profiling on (SessionOptions.enable_profiling, spinning off, intra-op threads as asked) and
each node's minimum over the runs. A kernel is compared with the onnxruntime nodes made from the
same ONNX nodes (the compiled model's lineage; onnxruntime names a node it fused or re-laid out
after one of them: '<output>_nchwc', '<Mul>/QuickGeluFusion/', a Conv fused with its Clip by the
Clip's name: `ort_node_key`). Nodes of onnxruntime's own (its layout reorders, nodes lineage cannot place)
are listed as 'unmatched' by op type. Both runtimes run in this process, one after the other.

It prints, per thread count, the largest gaps (ours - onnxruntime, ms), then the sums by kind of
kernel (depthwise conv, conv, global pool, layout transform, other) and the whole model's minimum
latency for both. The sum of per-kernel minimums is below any real run: compare kernels, not
totals, with it, and time totals with compiled_vs_onnxruntime.py.

`--clock cpu` measures in CPU time at one thread instead. Why: on a shared machine wall-clock
latency mostly measures the other processes (the same executable's medians moved 30 % between runs
on this project's 2-core host at load 3-6). The CPU time the running thread itself consumed
(`time.thread_time`) leaves out the time slices it waited, so 1-thread figures taken beside other
work agree with quiet ones to a few percent (it still counts cache and memory-bandwidth contention,
and a core's clock). Both runtimes run on the calling thread: ours on a pool of one thread,
onnxruntime with one intra-op thread; `--blocks` blocks of `--runs` runs alternate between the two,
and per model it prints the minimum and the median of the block averages and ours / onnxruntime
for both. Then (unless `--top 0`) ours per kernel: thread CPU time per call, the 25th percentile
over the runs, times calls per run (the instrument hook's own few microseconds per call included),
grouped into matmul / softmax / activation / layer norm / copies / other (`kernel_classes`), beside
onnxruntime's per-operator profile (wall time per node, which includes waits: read it as shares of
its total), and the `--top` largest kernels. Whether two threads pay off depends on the cores the
machine leaves free; compiled_vs_onnxruntime.py times that.

    python benchmarks/kernels_vs_onnxruntime.py --models efficientnet_b0,mobilenet_v2 [--threads 1,2] [--runs 40] [--top 20]
    python benchmarks/kernels_vs_onnxruntime.py --clock cpu --models bert_encoder,vit_encoder,gpt2_blocks [--blocks 8]
        [--runs 10] [--top 12]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import benchmark_models, feeds_for, load_proto  # noqa: E402 - first: it prepares the process before anything imports tvm

__all__ = ["compare", "cpu_clock_rows", "kernel_classes", "main", "ort_node_key", "ort_per_node", "ours_per_kernel"]

# activations onnxruntime fuses into the Conv before them, naming the fused node after them
_FUSED_ACTIVATIONS = ("Clip", "Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh")


def ort_node_key(name: str, model) -> str:
    """The ONNX node of `model` an onnxruntime profile node name stands for: its NCHWc nodes are
    named after the output they write plus '_nchwc', a SiLU it fused after the Mul plus
    '/QuickGeluFusion/', a Conv fused with its activation after the activation (mapped to the
    Conv). Other names (its layout reorders) are returned as they are."""
    producers = {out: node for node in model.graph.node for out in node.output}
    by_name = {node.name: node for node in model.graph.node}
    name = name.removesuffix("/QuickGeluFusion/")
    if name.endswith("_nchwc") and name.removesuffix("_nchwc") in producers:
        name = producers[name.removesuffix("_nchwc")].name
    node = by_name.get(name)
    if node is not None and node.op_type in _FUSED_ACTIVATIONS and node.input and node.input[0] in producers:
        before = producers[node.input[0]]
        if before.op_type == "Conv":
            name = before.name
    return name


def _kind(kernel: str) -> str:
    if "depthwise" in kernel:
        return "depthwise conv"
    if "conv2d" in kernel:
        return "conv"
    if kernel.startswith(("mean", "max")):
        return "global pool"
    if "layout_transform" in kernel:
        return "layout transform"
    return "other"


def ours_per_kernel(art, feeds: dict, threads: int, runs: int) -> tuple[dict[str, float], float]:
    """({kernel: min ms per model run}, min ms of a whole uninstrumented run) at `threads`."""
    import tvm

    from core.compiler.runtime.threads import runtime_threads

    vm = art.vm()
    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    current: dict[str, float] = defaultdict(float)
    starts: list[float] = []

    def instrument(func, name, before_run, ret_value, *rest):
        if name.startswith(("vm.builtin.", "__")) or name == "shape_func":
            return 0
        if before_run:
            starts.append(time.perf_counter())
        elif starts:
            current[name] += (time.perf_counter() - starts.pop()) * 1e3
        return 0

    with runtime_threads(threads):
        for _ in range(3):
            vm["main"](*args)
        totals = []
        for _ in range(runs):
            t0 = time.perf_counter()
            vm["main"](*args)
            totals.append((time.perf_counter() - t0) * 1e3)
        vm.set_instrument(instrument)
        per_run = []
        for _ in range(runs):
            current.clear()
            vm["main"](*args)
            per_run.append(dict(current))
    names = set().union(*per_run)
    return {k: min(r.get(k, 0.0) for r in per_run) for k in names}, min(totals)


def ort_per_node(model, feeds: dict, threads: int, runs: int) -> tuple[dict[str, float], dict[str, str], float]:
    """({ONNX node of `model`: min ms}, {ONNX node: onnxruntime op}, min ms of a whole run) at `threads`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for _ in range(3):
            session.run(None, feeds)
        totals = []
        for _ in range(runs):
            t0 = time.perf_counter()
            session.run(None, feeds)
            totals.append((time.perf_counter() - t0) * 1e3)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    times: dict[str, list[float]] = defaultdict(list)
    ops: dict[str, str] = {}
    for event in events:
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            name = event["name"][: -len("_kernel_time")]
            times[name].append(event["dur"] / 1e3)
            ops[name] = event.get("args", {}).get("op_name", "?")
    per_node: dict[str, float] = defaultdict(float)
    node_ops: dict[str, str] = {}
    for name, values in times.items():
        key = ort_node_key(name, model)
        per_node[key] += min(values[3:] or values)  # the 3 warm-up runs left out
        node_ops[key] = ops[name]
    return dict(per_node), node_ops, min(totals)


def compare(ours: dict[str, float], lineage: dict[str, list[str]], ort_nodes: dict[str, float]) -> tuple[list[tuple], dict[str, float]]:
    """([(kernel, ours ms, onnxruntime ms of its nodes, its nodes)], {unmatched node: ms})."""
    rows, used = [], set()
    for kernel, ms in ours.items():
        nodes = [n for n in lineage.get(kernel, []) if n in ort_nodes]
        used.update(nodes)
        rows.append((kernel, ms, sum(ort_nodes[n] for n in nodes), lineage.get(kernel, [])))
    return rows, {n: v for n, v in ort_nodes.items() if n not in used}


def kernel_classes(name: str) -> str:
    """A kernel's group by what FuseOps named it after (--clock cpu's groups)."""
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


def _ort_one_thread(proto, profile_prefix: str | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _ours_kernels_cpu(library, args, runs: int) -> list[tuple[float, int, str]]:
    """(CPU ms per run, calls per run, kernel name), largest first, at one thread."""
    import tvm

    vm = tvm.relax.VirtualMachine(library, tvm.cpu())
    per_call: dict[str, list[int]] = defaultdict(list)
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
    """onnxruntime's wall ms per run by operator type (its node profile), at one thread."""
    with tempfile.TemporaryDirectory() as tmp:
        sess = _ort_one_thread(proto, str(Path(tmp) / "ort"))
        for _ in range(runs):
            sess.run(None, feeds)
        path = sess.end_profiling()
        with open(path) as f:
            events = json.load(f)
    by_op: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            by_op[e.get("args", {}).get("op_name", "?")] += e.get("dur", 0) / 1e3
    return {op: ms / runs for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])}


def cpu_clock_rows(art, proto, feeds: dict, blocks: int, runs: int) -> tuple[list[float], list[float]]:
    """Thread CPU ms per run of ours and of onnxruntime at one thread, one figure per block of
    `runs` runs, the two runtimes taking turns block by block on this thread."""
    import tvm

    from core.compiler.runtime.threads import runtime_threads

    vm = art.vm()
    tvm_args = [tvm.runtime.tensor(v) for v in feeds.values()]
    sess = _ort_one_thread(proto)
    ours, ort = [], []
    with runtime_threads(1):
        vm["main"](*tvm_args)
        sess.run(None, feeds)
        for _ in range(blocks):
            ours.append(_cpu_ms(vm["main"], tvm_args, runs))
            ort.append(_cpu_ms(sess.run, (None, feeds), runs))
    return ours, ort


def _print_cpu_clock(name: str, art, proto, feeds: dict, args) -> None:
    """--clock cpu: one model's row of the table, then (with --top) its kernels and groups."""
    import tvm

    from core.compiler.runtime.threads import runtime_threads

    ours, ort = cpu_clock_rows(art, proto, feeds, args.blocks, args.runs)
    om, rm = min(ours), min(ort)
    od, rd = statistics.median(ours), statistics.median(ort)
    print(f"{name:16s} {om:6.2f} / {od:6.2f}  {rm:6.2f} / {rd:6.2f}  {om / rm:12.3f} {od / rd:12.3f}  {os.getloadavg()[0]:.1f}", flush=True)
    if not args.top:
        return
    with runtime_threads(1):
        rows = _ours_kernels_cpu(art.library, [tvm.runtime.tensor(v) for v in feeds.values()], max(10, args.runs))
    total = sum(r[0] for r in rows) or 1.0
    groups: dict[str, float] = defaultdict(float)
    for ms, _calls, kernel in rows:
        groups[kernel_classes(kernel)] += ms
    ort_ops = _ort_ops(proto, feeds, max(10, args.runs))
    ort_total = sum(ort_ops.values()) or 1.0
    print("  ours by group (CPU ms, share): " + ", ".join(f"{g} {ms:.2f} ({ms / total:.0%})" for g, ms in sorted(groups.items(), key=lambda kv: -kv[1])))
    print("  onnxruntime by op (wall ms, share): " + ", ".join(f"{op} {ms:.2f} ({ms / ort_total:.0%})" for op, ms in list(ort_ops.items())[:8]))
    for ms, calls, kernel in rows[: args.top]:
        print(f"    {ms:7.3f} ms  {calls:3d} x {ms / calls * 1e3:7.1f} us  {kernel}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", required=True, help="comma-separated names (the benchmark models, benchmarks.common)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: per-kernel minimums at each thread count (default); cpu: thread CPU time at one thread")
    parser.add_argument("--threads", default=None, help="comma-separated thread counts (default 1,2; --clock cpu: 1 only)")
    parser.add_argument("--runs", type=int, default=None, help="runs per thread count (default 40); --clock cpu: runs per block (default 10)")
    parser.add_argument("--blocks", type=int, default=8, help="--clock cpu: alternating blocks per runtime")
    parser.add_argument("--top", type=int, default=20, help="kernels listed per thread count (largest gaps first; --clock cpu: the largest)")
    args = parser.parse_args(argv)
    cpu_clock = args.clock == "cpu"
    if args.threads is None:
        args.threads = "1" if cpu_clock else "1,2"
    if cpu_clock and args.threads.strip() != "1":
        print(f"--clock cpu measures one thread, so --threads must be 1, got '{args.threads}'", file=sys.stderr)
        return 2
    if args.runs is None:
        args.runs = 10 if cpu_clock else 40

    from core.compiler.compile import compile_model

    models = benchmark_models()
    unknown = [name for name in args.models.split(",") if name not in models]
    if unknown:
        print(f"unknown model {unknown[0]!r}; known: {', '.join(sorted(models))}", file=sys.stderr)
        return 2
    if cpu_clock:
        print(f"thread CPU time at 1 thread, ms per run: min / median of {args.blocks} alternating blocks of {args.runs} runs")
        print(f"{'model':16s} {'ours':>15s} {'onnxruntime':>15s} {'x ort (min)':>12s} {'x ort (med)':>12s}  load")
    for name in args.models.split(","):
        proto = load_proto(models[name])
        feeds = feeds_for(proto)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            path.write_bytes(proto.SerializeToString())
            art = compile_model(str(path), "cpu", verify=False)
        if cpu_clock:
            _print_cpu_clock(name, art, proto, feeds, args)
            continue
        for threads in (int(t) for t in args.threads.split(",")):
            load_before = os.getloadavg()[0]
            ours, ours_total = ours_per_kernel(art, feeds, threads, args.runs)
            ort_nodes, ort_ops, ort_total = ort_per_node(proto, feeds, threads, args.runs)
            rows, unmatched = compare(ours, art.kernel_lineage, ort_nodes)
            print(f"\n{name}, {threads} thread(s), load average {load_before:.1f}-{os.getloadavg()[0]:.1f}: whole run min ours {ours_total:.2f} ms, "
                  f"onnxruntime {ort_total:.2f} ms ({ours_total / ort_total:.2f}x); per-kernel minimums summed: ours {sum(ours.values()):.2f}, "
                  f"onnxruntime {sum(ort_nodes.values()):.2f} ms")
            print(f"{'ours ms':>8} {'ort ms':>8} {'gap':>8}  kernel  [ONNX nodes]")
            for kernel, ms, ort_ms, nodes in sorted(rows, key=lambda r: r[2] - r[1])[: args.top]:
                shown = ", ".join(n.rsplit("/", 2)[-2] + "/" + n.rsplit("/", 1)[-1] if n.count("/") > 1 else n for n in nodes[:3])
                print(f"{ms:8.3f} {ort_ms:8.3f} {ms - ort_ms:+8.3f}  {kernel}  [{shown}{', ...' if len(nodes) > 3 else ''}]")
            kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
            for kernel, ms, ort_ms, _ in rows:
                kinds[_kind(kernel)][0] += ms
                kinds[_kind(kernel)][1] += ort_ms
                kinds[_kind(kernel)][2] += 1
            print("by kind (ours ms / onnxruntime ms of the same nodes, kernels):  " + ";  ".join(
                f"{k} {a:.2f} / {b:.2f} ({n})" for k, (a, b, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0])))
            by_op: dict[str, float] = defaultdict(float)
            for node, ms in unmatched.items():
                by_op[ort_ops.get(node, "?")] += ms
            print("onnxruntime, unmatched: " + ", ".join(f"{op} {ms:.2f}" for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
