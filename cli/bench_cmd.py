"""`bench MODEL|ARTIFACT_DIR [--target cpu] [--cpu NAME] [--cpu-features F] [--triple T] [--preset DEVICE] [--shape-buckets NAME=N,...] [--runs N] [--vs-ort] [--check-only] [--json]`."""
from __future__ import annotations

import json
import os
import sys

from cli.compile_cmd import add_bucket_argument, add_cpu_arguments, add_target_argument

HELP = "measure latency, memory and per-kernel time of a compiled model (optionally beside onnxruntime)"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file (compiled first) or an exported artifact folder (its compiled library is executed: use only artifacts you built or trust)")
    add_target_argument(p, "target when compiling a model (cuda needs a GPU to run)")
    add_cpu_arguments(p)
    p.add_argument("--runs", type=int, default=20, metavar="N", help="timed runs after warm-up (default 20)")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed warm-up runs (default 3)")
    p.add_argument("--vs-ort", action="store_true", help="time onnxruntime on the same inputs, interleaved, and report the ratio")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="value of a symbolic dim (repeatable; default 1)")
    add_bucket_argument(p)
    p.add_argument("--top", type=int, default=10, metavar="K", help="kernels listed in the text output (default 10)")
    from cli import bench_remote

    bench_remote.add_arguments(p)
    p.add_argument("--check-only", action="store_true", help="measure nothing: run it once on seeded inputs and compare with onnxruntime "
                   "(an ARM64 build runs under emulation here: python scripts/setup_emulation.py sets it up)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _mb(n) -> str:
    return "?" if n is None else f"{n / 2**20:.2f} MB"


def run(args) -> int:
    from cli.compile_cmd import cpu_options, cpu_target, parse_buckets, parse_dims
    from core import load_model
    from core.compiler.runtime.artifact import load_artifact
    from core.compiler.measure.bench import benchmark, spread_warning, threads_text
    from core.compiler.compile import compile_model
    from core.errors import WorkbenchError

    from cli import bench_remote

    parse_dims(args.dim)  # a malformed value is refused before anything is loaded; the names once it is
    if args.runs < 1:
        raise WorkbenchError(f"--runs must be at least 1, not {args.runs}.")
    if args.rpc is not None and args.check_only:
        raise WorkbenchError("--check-only runs the model here (emulated for another architecture) and --rpc times it on a device; give one of them.")
    if args.rpc is not None:
        from core.compiler.measure.remote import parse_device_address

        parse_device_address(args.rpc)  # a malformed address is refused before anything is compiled
    if os.path.isdir(args.model):
        if args.cpu or args.cpu_features or args.triple or args.preset:
            raise WorkbenchError(f"{args.model} is an artifact folder, compiled already; --cpu, --cpu-features, --triple and --preset apply when compiling a model.")
        if args.shape_buckets:
            raise WorkbenchError(f"{args.model} is an artifact folder, compiled already; --shape-buckets applies when compiling a model.")
        if args.rpc is not None:
            return bench_remote.run(args, args.model)  # the folder's model.so is never loaded here (it may be for another CPU)
        art = load_artifact(args.model)
        dims = parse_dims(args.dim, art)
    else:
        from core.compiler.target import cannot_run_here, code_arch, host_arch, target_cpu

        built_for = target_cpu(cpu_target(args, args.target))
        why = cannot_run_here(built_for)
        # refused before the compile, which would only be thrown away (another architecture's code
        # can still be checked under emulation; a device runs what this machine cannot)
        if why and args.rpc is None and not (args.check_only and code_arch(built_for) != host_arch()):
            raise WorkbenchError(why)
        graph = load_model(args.model)
        dims = parse_dims(args.dim, graph)  # before the compile, which a misspelt dim would waste
        if not args.json:
            print(f"compiling {args.model} for {args.target}...", file=sys.stderr)
        buckets = parse_buckets(args.shape_buckets, graph)
        art = compile_model(graph, args.target, verify_dims=dims or None, **cpu_options(args),
                            shape_buckets=buckets or None)
    if args.check_only:
        return _check_only(art, dims, args.json)
    if args.rpc is not None:
        return bench_remote.run(args, art)
    res = benchmark(art, runs=args.runs, warmup=args.warmup, vs_ort=args.vs_ort, dims=dims or None)
    if args.json:
        print(json.dumps(res.to_json()))
        return 0
    lat = res.latency_ms
    print(f"latency ({art.target}, {lat.runs} runs): median {lat.median:.3f} ms, p10-p90 {lat.p10:.3f}-{lat.p90:.3f} ms, min {lat.min:.3f} ms")
    if res.path:
        print(f"code: {res.path}")
    if res.threads:
        print(f"threads: {threads_text(res.threads)}" + (f"; onnxruntime {res.threads.ort}" if res.threads.ort is not None else ""))
    if spread_warning(lat):
        print(f"  warning: {spread_warning(lat)}")
    if res.ort_latency_ms is not None:
        o = res.ort_latency_ms
        print(f"onnxruntime (CPU):       median {o.median:.3f} ms, p10-p90 {o.p10:.3f}-{o.p90:.3f} ms, min {o.min:.3f} ms")
        if spread_warning(o):
            print(f"  warning (onnxruntime): {spread_warning(o)}")
        print(f"ratio ours/onnxruntime: {res.ratio}x; outputs {'match' if res.outputs_match_ort else 'DIFFER'} (max abs error {res.max_abs_err_vs_ort:.3g})")
    m = res.memory
    print(f"memory: params {_mb(m.params_bytes)}, activations planned {_mb(m.planned_bytes)} vs unplanned {_mb(m.unplanned_bytes)}, peak RSS {_mb(m.peak_rss_bytes)}")
    if res.kernels:
        print("kernels (ms per run, share, ONNX nodes):")
        for k in res.kernels[: args.top]:
            nodes = ", ".join(k.onnx_nodes[:4]) + (" ..." if len(k.onnx_nodes) > 4 else "")
            print(f"  {k.ms:9.3f}  {k.share * 100:5.1f}%  {k.name}  [{nodes}]")
    return 0


def _check_only(art, dims: dict, as_json: bool) -> int:
    """bench --check-only: one run on seeded inputs against onnxruntime (emulated for another
    architecture's code); exit status 0 when the outputs match, 1 when they differ."""
    from core.compiler.check.artifact_run_check import check_artifact

    if not as_json and art.foreign:
        print("running it under emulation (no latency is measured; importing TVM alone takes ~10 s emulated)...", file=sys.stderr)
    result = check_artifact(art, dims=dims or None)
    if as_json:
        print(json.dumps(result.to_json()))
    else:
        print(result.sentence)
    return 0 if result.match else 1
