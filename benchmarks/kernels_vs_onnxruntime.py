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

    python benchmarks/kernels_vs_onnxruntime.py --models efficientnet_b0,mobilenet_v2 [--threads 1,2] [--runs 40] [--top 20]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

__all__ = ["compare", "main", "ort_node_key", "ort_per_node", "ours_per_kernel"]

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

    from core.compiler.target import runtime_threads

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


def main(argv: list[str] | None = None) -> int:
    from benchmarks.compiled_vs_onnxruntime import (
        _feeds,
        _load,
        architecture_models,
        light_models,
        sample_models,
    )

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", required=True, help="comma-separated names (those of compiled_vs_onnxruntime.py)")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--top", type=int, default=20, help="kernels listed per thread count (largest gaps first)")
    args = parser.parse_args(argv)

    from core.compiler.compile import compile_model

    models = {**light_models(), **sample_models(), **architecture_models()}
    for name in args.models.split(","):
        if name not in models:
            print(f"unknown model {name!r}; known: {', '.join(sorted(models))}", file=sys.stderr)
            return 2
        proto = _load(models[name])
        feeds = _feeds(proto)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            path.write_bytes(proto.SerializeToString())
            art = compile_model(str(path), "cpu", verify=False)
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
