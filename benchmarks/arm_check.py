"""Every light model, bundled sample, a BERT encoder and a QDQ (int8) CNN built for ARM64
(aarch64-linux-gnu) and checked under emulation: compile for each CPU (generic NEON, and
Cortex-A76 with +dotprod) -> export (model.so cross-linked) -> run the artifact's own run.py under
qemu-user (core.compiler.runtime.emulation.run_emulated) -> compare with onnxruntime on this host,
on the same seeded inputs, with the compile check's tolerances (core.compiler.check.reference).

    .venv/bin/python benchmarks/arm_check.py [--models squeezenet,mlp,...] [--quick] [--cpus generic,cortex-a76+dotprod]
                                             [--jobs J] [--out DIR] [--json FILE]

`--quick`: the bundled samples only. The light models get seeded random weights and their final
Softmax cut off, as in benchmarks/gpu_check.py (their ConstantOfShape weights make outputs nearly
input-independent, and a softmax of random logits saturates). Columns: compile s (compile and
export, on this host), model.so size, whether the emulated run finished, max abs error against
onnxruntime, verdict (match: within the tolerances the compile's own check uses). Emulated runs
measure nothing (no latency column). Emulation needs `python scripts/setup_emulation.py` once; where
it is not set up, the script says so in one sentence and only compiles.
Exit status: 0 when every artifact compiled and matched (or compiled, where nothing can run), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT  # noqa: E402 - first: it prepares the process before anything imports tvm

TRIPLE = "aarch64-linux-gnu"
# name -> (LLVM CPU, feature changes)
CPUS = {"generic": ("generic", []), "cortex-a76+dotprod": ("cortex-a76", ["+dotprod"])}
EXTRA = ("bert_encoder", "small_cnn_qdq")  # built here, not read from a file


def model_list(wanted: str = "", quick: bool = False) -> list[tuple[str, str, bool]]:
    """(name, path or builder name, light?) of the set: light models, samples, the extra builds."""
    from benchmarks.gpu_check import model_list as files

    samples = [(n, str(p), light) for n, p, light in files() if not light]
    models = samples if quick else [(n, str(p), light) for n, p, light in files()] + [(n, n, False) for n in EXTRA]
    if wanted:
        names = wanted.split(",")
        known = {m[0]: m for m in [(n, str(p), light) for n, p, light in files()] + [(n, n, False) for n in EXTRA]}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"arm_check: unknown model(s) {', '.join(unknown)}; known: {', '.join(known)}.")
        models = [known[n] for n in names]
    return models


def _graph(name: str, source: str, light: bool):
    """The workbench Graph of one model of the set."""
    from core import load_model
    from core.model.onnx_io import load_model_bytes
    from core.verify import with_random_weights

    from benchmarks.gpu_check import logits

    if source == "bert_encoder":
        from benchmarks.architectures.transformers import bert_encoder

        return load_model_bytes(bert_encoder().SerializeToString(), "bert_encoder.onnx")
    if source == "small_cnn_qdq":
        from benchmarks.common import quantized_models

        return load_model_bytes(quantized_models()["small_cnn_qdq"]().SerializeToString(), "small_cnn_qdq.onnx")
    graph = load_model(source)
    if light:  # one constant in every weight: random ones make the comparison mean something
        graph = logits(with_random_weights(graph, seed=0))
    return graph


def check(name: str, source: str, light: bool, cpu_name: str, out: str, emulate: bool) -> dict:
    """Compile one model for one ARM64 CPU, export it, run it under emulation and compare it with
    onnxruntime (runs in a worker process)."""
    import numpy as np
    import onnx

    from core.compiler.check.reference import compare_outputs, random_feeds, reference_run
    from core.compiler.compile import compile_model
    from core.errors import WorkbenchError

    row = {"model": name, "cpu": cpu_name}
    cpu, features = CPUS[cpu_name]
    try:
        t0 = time.perf_counter()
        art = compile_model(_graph(name, source, light), "cpu", triple=TRIPLE, cpu=cpu, cpu_features=features)
        folder = art.export(Path(out) / f"{name}-{cpu_name}")
        row.update(compile_s=round(time.perf_counter() - t0, 1), so_bytes=os.path.getsize(Path(folder) / "model.so"))
    except WorkbenchError as e:
        return {**row, "error": f"compile: {e}"}
    except Exception as e:  # noqa: BLE001 - one model's crash is a row of the table, not the end of the run
        return {**row, "error": f"compile: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"}
    if not emulate:
        return row
    from core.compiler.runtime.emulation import run_emulated

    proto = onnx.load_from_string(art.model_bytes)
    feeds = random_feeds(art.inputs, seed=0, model=proto)
    t1 = time.perf_counter()
    try:
        outs = run_emulated(folder, feeds)
    except WorkbenchError as e:
        return {**row, "ran": False, "error": f"emulated run: {e}"}
    row["emulated_s"] = round(time.perf_counter() - t1, 1)
    ref, reference = reference_run(art.model_bytes, feeds)
    ours = [np.asarray(outs[o.name]) if o.name in outs else np.zeros(0) for o in art.outputs]
    ok, err, _ = compare_outputs(ours, ref)
    row.update(ran=True, match=bool(ok), max_abs_err=float(err), reference=reference)
    return row


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _verdict(r: dict) -> str:
    if "error" in r:
        return "FAILED: " + r["error"]
    if "match" not in r:
        return "compiled (not run)"
    return "match" if r["match"] else "MISMATCH"


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table (the form docs/performance.md takes)."""
    lines = ["| model | cpu | compile s | model.so | emulated run | max abs err | verdict |", "|---|---|---:|---:|---|---:|---|"]
    for r in rows:
        ran = "-" if "ran" not in r else ("ok" if r["ran"] else "failed")
        err = f"{r['max_abs_err']:.2g}" if "max_abs_err" in r else "-"
        so = _size(r["so_bytes"]) if "so_bytes" in r else "-"
        comp = f"{r['compile_s']:.1f}" if "compile_s" in r else "-"
        lines.append(f"| {r['model']} | {r['cpu']} | {comp} | {so} | {ran} | {err} | {_verdict(r)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated names (default: the whole set)")
    ap.add_argument("--quick", action="store_true", help="the bundled samples only")
    ap.add_argument("--cpus", default=",".join(CPUS), help=f"comma-separated, of {', '.join(CPUS)} (default: both)")
    ap.add_argument("--jobs", type=int, default=0, help="models checked at a time (default: this host's cores, at most 4)")
    ap.add_argument("--out", default="", help="keep the exported artifacts here (default: a temporary folder)")
    ap.add_argument("--json", default="", help="also write the rows as JSON to this file")
    args = ap.parse_args(argv)

    from core.compiler.target import host_cores, host_cpu

    try:
        models = model_list(args.models, args.quick)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    cpus = [c for c in args.cpus.split(",") if c]
    if any(c not in CPUS for c in cpus):
        print(f"arm_check: unknown --cpus entry; choose from {', '.join(CPUS)}.", file=sys.stderr)
        return 2
    try:
        from core.compiler.runtime.emulation import emulator, not_set_up

        emulate = emulator(TRIPLE) is not None
        why = None if emulate else not_set_up("the set", TRIPLE)
    except ImportError:
        emulate, why = False, "this checkout has no core.compiler.runtime.emulation"
    if not emulate:
        print(f"arm_check: {why}; compiling only.")
    import multiprocessing

    import tvm

    print(f"host: {host_cpu()}, {host_cores()} cores; TVM {tvm.__version__}; target {TRIPLE}, CPUs {', '.join(cpus)}; "
          f"{'emulated with qemu-user' if emulate else 'no emulation'}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="arm_check_"))
    jobs = args.jobs or max(1, min(4, host_cores()))
    t_start = time.perf_counter()
    rows: list[dict] = []
    tasks = [(n, s, light, c) for n, s, light in models for c in cpus]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(check, n, s, light, c, str(out), emulate): (n, c) for n, s, light, c in tasks}
        for f in as_completed(futures):
            try:
                r = f.result()
            except Exception as e:  # noqa: BLE001 - a worker that died (a crash in native code) fails its row only
                n, c = futures[f]
                r = {"model": n, "cpu": c, "error": f"the worker process failed: {type(e).__name__}: {e}"}
            rows.append(r)
            print(f"  {r['model']:18s} {r['cpu']:20s} {_verdict(r)}" + (f" (max abs err {r['max_abs_err']:.2g})" if "max_abs_err" in r else ""), flush=True)
    order = {(n, c): i for i, (n, _, _, c) in enumerate(tasks)}
    rows.sort(key=lambda r: order[(r["model"], r["cpu"])])
    wall = time.perf_counter() - t_start
    print()
    print(table(rows))
    bad = sum(1 for r in rows if "error" in r or r.get("match") is False)
    print(f"\n{len(rows) - bad}/{len(rows)} artifacts {'compiled, ran under emulation and matched onnxruntime' if emulate else 'compiled'}; "
          f"{wall:.0f} s in all ({jobs} at a time); artifacts in {out}")
    if args.json:
        Path(args.json).write_text(json.dumps({"host": host_cpu(), "cores": host_cores(), "tvm": tvm.__version__, "triple": TRIPLE,
                                               "emulated": emulate, "wall_s": round(wall, 1), "rows": rows}, indent=2) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
