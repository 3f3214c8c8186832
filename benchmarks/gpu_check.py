"""Every light model and bundled sample through the deployable CUDA path on a real GPU: compile for
CUDA -> export (kernels compiled to a fatbin by nvcc) -> load_artifact -> run, compared with
onnxruntime's outputs; latency per model and the fraction of the GPU's peak FP32 FLOP/s it reaches.

    .venv/bin/python benchmarks/gpu_check.py [--models squeezenet,mlp,...] [--runs N] [--batch B]
                                             [--jobs J] [--out DIR] [--json FILE] [--target cpu] [--keep-softmax]

`--target cpu` runs the same path on the CPU (no peak figure; the geometric mean of ours / onnxruntime
instead): the CPU compile check, and a check of this script where no GPU is. Where no CUDA GPU is
visible (or nvcc is missing) it says so in one sentence and exits 0. Builds run in parallel (J
processes, each model's nvcc passes in parallel too); the GPU runs one model at a time. Two things
keep the comparison meaningful: the light models get seeded random weights (their ConstantOfShape
weights make outputs nearly input-independent), and a final Softmax is cut off (`--keep-softmax`
keeps it) so the logits are compared: with random weights a softmax saturates to one-hot and any
two models "match". Figures:

* GFLOP: multiply-accumulate work of one run, counted from the ONNX graph (core.model.flops:
  Conv, ConvTranspose, Gemm, MatMul at 2 FLOPs per multiply-add; elementwise work not counted);
* GPU ms: median latency of `main` on device-resident inputs (synchronised), after warm-up;
* % peak: GFLOP / GPU time / the GPU's dense FP32 peak from NVIDIA's spec sheet
  (benchmarks.gpu_peaks; '-' for a GPU the table does not know);
* out std: the spread of onnxruntime's first output (near 0: a comparison that says little);
* ORT ms: onnxruntime on this machine's CPU, median, for scale (not a GPU baseline).
Exit status: 0 when every model matched onnxruntime (or nothing could run here), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT  # noqa: E402 - first: it prepares the process before anything imports tvm


def model_list(wanted: str = "") -> list[tuple[str, Path, bool]]:
    """(name, path, light?) of the onnx wheel's light models and the bundled samples."""
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    models = [(p.stem.removeprefix("light_"), p, True) for p in sorted(light.glob("light_*.onnx"))]
    models += [(p.stem, p, False) for p in sorted((ROOT / "resources" / "models").glob("*.onnx"))]
    if wanted:
        names = set(wanted.split(","))
        unknown = names - {m[0] for m in models}
        if unknown:
            raise ValueError(f"gpu_check: unknown model(s) {', '.join(sorted(unknown))}; known: {', '.join(m[0] for m in models)}.")
        models = [m for m in models if m[0] in names]
    return models


def build(name: str, path: str, light: bool, out: str, target: str = "cuda", keep_softmax: bool = False) -> dict:
    """Compile one model for `target` (its final Softmax cut off unless `keep_softmax`) and export
    it (runs in a worker process)."""
    from core import load_model
    from core.compiler.compile import compile_model
    from core.errors import WorkbenchError
    from core.verify import with_random_weights

    t0 = time.perf_counter()
    try:
        graph = load_model(path)
        if light:  # one constant in every weight: random ones make the comparison mean something
            graph = with_random_weights(graph, seed=0)
        if not keep_softmax:
            graph = logits(graph)
        art = compile_model(graph, target, verify=False)
        t1 = time.perf_counter()
        folder = art.export(Path(out) / name)
        t2 = time.perf_counter()
    except WorkbenchError as e:
        return {"model": name, "error": str(e)}
    except Exception as e:  # noqa: BLE001 - one model's crash is a row of the table, not the end of the run
        return {"model": name, "error": f"{type(e).__name__}: {e}"}
    return {"model": name, "folder": str(folder), "compile_s": round(t1 - t0, 1), "export_s": round(t2 - t1, 1)}


def logits(graph):
    """The graph with a final Softmax removed (its input becomes the graph output)."""
    from core.model.onnx_io import load_model_bytes

    proto = graph.to_proto()
    g = proto.graph
    outs = {o.name for o in g.output}
    last = [n for n in g.node if n.op_type == "Softmax" and n.output[0] in outs]
    if not last:
        return graph
    for n in last:
        for o in g.output:
            if o.name == n.output[0]:
                o.name = n.input[0]
        g.node.remove(n)
    return load_model_bytes(proto.SerializeToString(), graph.path or "model.onnx")


def _median_ms(fn, runs: int, max_s: float, sync=None) -> float:
    import numpy as np

    times: list[float] = []
    t_end = time.perf_counter() + max_s
    while len(times) < runs and (not times or time.perf_counter() < t_end):
        s = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append((time.perf_counter() - s) * 1000)
    return float(np.median(times))


def measure(row: dict, runs: int, batch: int, dev, peak) -> dict:
    """Load an exported artifact, check it against onnxruntime, time it on the GPU."""
    from core.compiler.runtime.artifact import load_artifact
    from core.compiler.check.reference import compare_outputs, ort_session, random_feeds
    from core.model.flops import count_flops

    loaded = load_artifact(row["folder"])
    dims = {d: batch for s in loaded.inputs for d in s.shape if isinstance(d, str)}
    feeds = random_feeds(loaded.inputs, seed=0, dims=dims)
    ours = loaded.run(feeds)
    sess = ort_session(loaded.model_bytes)
    ref = sess.run(None, feeds)
    ok, err, _ = compare_outputs(ours, ref)
    args = loaded.to_device(feeds)
    for _ in range(3):
        loaded.run_device(args)
    dev.sync()
    gpu_ms = _median_ms(lambda: loaded.run_device(args), runs, 5.0, dev.sync)
    ort_ms = _median_ms(lambda: sess.run(None, feeds), max(3, runs // 5), 3.0)
    flops = count_flops(_proto(loaded.model_bytes), dims=dims)
    achieved = flops.total / (gpu_ms / 1000)
    import numpy as np

    row.update({"match": ok, "max_abs_err": float(err), "out_std": float(np.std(ref[0])), "gpu_ms": round(gpu_ms, 4), "ort_cpu_ms": round(ort_ms, 3),
                "gflop": round(flops.total / 1e9, 4), "tflops": round(achieved / 1e12, 3),
                "peak_fraction": round(achieved / peak.fp32_flops, 5) if peak else None})
    return row


def _proto(model_bytes: bytes):
    import onnx

    return onnx.load_from_string(model_bytes)


def _print_row(r: dict) -> None:  # columns as in main's header
    if "error" in r:
        print(f"{r['model']:18s} FAILED: {r['error']}", flush=True)
        return
    pct = f"{100 * r['peak_fraction']:7.2f}" if r.get("peak_fraction") is not None else f"{'-':>7s}"
    print(f"{r['model']:18s} {r['gflop']:8.4g} {r['compile_s']:8.1f} {r['export_s']:7.1f} {'yes' if r['match'] else 'NO':>5s} "
          f"{r['max_abs_err']:9.2g} {r['out_std']:8.3g} {r['gpu_ms']:9.4g} {r['tflops']:8.4g} {pct} {r['ort_cpu_ms']:8.3g}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: every light model and sample)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per model (at most ~5 s each)")
    ap.add_argument("--batch", type=int, default=1, help="value of every symbolic input dim")
    ap.add_argument("--jobs", type=int, default=0, help="parallel builds (default: half the cores, at most 8)")
    ap.add_argument("--out", default="", help="keep the exported artifacts here (default: a temporary folder)")
    ap.add_argument("--json", default="", help="also write the rows as JSON to this file")
    ap.add_argument("--target", choices=("cuda", "cpu"), default="cuda", help="cpu: the same path on the CPU (the CPU compile check)")
    ap.add_argument("--keep-softmax", action="store_true", help="compare a final softmax, not the logits before it")
    args = ap.parse_args(argv)

    from core.compiler.target import gpu_present, host_cores, host_cpu

    try:
        models = model_list(args.models)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if args.target == "cuda" and not gpu_present():
        print("gpu_check: no CUDA GPU is visible to TVM on this machine, so there is nothing to run; skipped.")
        return 0
    if args.target == "cuda" and shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"):
        print("gpu_check: this machine has a GPU but no nvcc (the CUDA toolkit), which CUDA export needs; skipped.")
        return 0
    import tvm

    from benchmarks.gpu_peaks import gpu_peak

    if args.target == "cuda":
        dev = tvm.cuda(0)
        name = dev.device_name
        peak = gpu_peak(name)
        print(f"GPU: {name}, compute {dev.compute_version}, {dev.multi_processor_count} SMs, driver API {dev.driver_version}; "
              f"TVM {tvm.__version__}; host {host_cores()} cores")
        print(f"peak (reference): {f'{peak.fp32_tflops} TFLOP/s dense FP32, {peak.model}, {peak.source}' if peak else 'unknown GPU, no spec-sheet figure'}")
    else:
        dev, name, peak = tvm.cpu(0), f"CPU {host_cpu()}", None
        print(f"{name}, {host_cores()} cores (no peak figure; the GPU columns are this CPU's); TVM {tvm.__version__}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    jobs = args.jobs or max(1, min(8, host_cores() // 2, len(models)))
    t_start = time.perf_counter()
    built: list[dict] = []
    import multiprocessing

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        # the biggest graphs first: the longest builds start at once and set the wall time
        by_size = sorted(models, key=lambda m: -m[1].stat().st_size)
        futures = {pool.submit(build, n, str(p), light, str(out), args.target, args.keep_softmax): n for n, p, light in by_size}
        for f in as_completed(futures):
            try:
                built.append(f.result())
            except Exception as e:  # noqa: BLE001 - a worker that died (a crash in native code) fails its model only
                built.append({"model": futures[f], "error": f"the build process failed: {type(e).__name__}: {e}"})
    print(f"built {sum('error' not in r for r in built)}/{len(built)} artifacts in {time.perf_counter() - t_start:.0f} s ({jobs} at a time)\n")
    order = {n: i for i, (n, _, _) in enumerate(models)}
    built.sort(key=lambda r: order[r["model"]])
    where = "GPU" if args.target == "cuda" else "CPU"
    print(f"{'model':18s} {'GFLOP':>8s} {'compile':>8s} {'export':>7s} {'match':>5s} {'max err':>9s} {'out std':>8s} {where + ' ms':>9s} {'TFLOP/s':>8s} {'% peak':>7s} {'ORT ms':>8s}")
    rows = []
    for r in built:
        if "error" not in r:
            try:
                r = measure(r, args.runs, args.batch, dev, peak)
            except Exception as e:  # noqa: BLE001 - a load or run failure is this model's row
                r = {"model": r["model"], "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"}
        rows.append(r)
        _print_row(r)
    bad = sum(1 for r in rows if "error" in r or not r.get("match"))
    if args.target == "cpu":
        ratios = [r["gpu_ms"] / r["ort_cpu_ms"] for r in rows if "error" not in r and r["ort_cpu_ms"] > 0]
        if ratios:
            print(f"\ngeometric mean ours / onnxruntime on this CPU: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x over {len(ratios)} models")
    print(f"\n{len(rows) - bad}/{len(rows)} models ran on the {where} ({name}) and matched onnxruntime; {time.perf_counter() - t_start:.0f} s in all; artifacts in {out}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "target": args.target,
                                               "peak_fp32_tflops": peak.fp32_tflops if peak else None,
                                               "tvm": tvm.__version__, "batch": args.batch, "rows": rows}, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
