"""Latency of the workbench's compiled CPU code against onnxruntime, side by side in one process.

For each model (the nine light models shipped in the onnx wheel, and core.model.samples' models with
seeded random weights) it prints onnxruntime ms, ours untuned ms (core.compiler.schedules' default CPU
rules), ours tuned ms (when a tuning database is given and holds records for the model's
kernels), their ratios to onnxruntime and the geometric means. Latencies are medians of
warmed-up runs, ours and onnxruntime alternating run by run with the same thread count, so
that other load on the machine hits both alike. Every compiled model is first checked against
onnxruntime (rtol 1e-3, atol 1e-4); a mismatch is reported in the table.

    python benchmarks/compiled_vs_onnxruntime.py [--models squeezenet,small_cnn] [--runs 20]
        [--tune-db DIR] [--tune-minutes 10] [--threads 2]

`--tune-minutes M` tunes each model for up to M minutes into --tune-db first (resumable: a
kernel already in the database is not tuned again).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["light_models", "sample_models", "build_vm", "measure", "main"]

RTOL, ATOL = 1e-3, 1e-4


def light_models() -> dict[str, Path]:
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {p.stem.removeprefix("light_"): p for p in sorted(folder.glob("light_*.onnx"))}


def sample_models() -> dict:
    from core.model import samples

    return {name: fn for name, fn in samples.SAMPLES.items()} if hasattr(samples, "SAMPLES") else {}


def _load(model):
    import onnx

    return onnx.load(str(model)) if isinstance(model, (str, Path)) else model()


def _feeds(proto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    init_names = {i.name for i in proto.graph.initializer}
    feeds = {}
    for vi in proto.graph.input:
        if vi.name in init_names:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 1) for d in vi.type.tensor_type.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def relax_to_fused_tir(proto):
    """ONNX -> Relax -> fused TIR, the default zero pipeline minus its schedule step."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(proto, keep_params_in_input=False)
    return tvm.transform.Sequential(
        [
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(),
        ]
    )(mod)


def build_vm_workbench(proto, target, database: str | None = None):
    """Compile `proto` the way the workbench does (core.compiler.compile: its pass pipeline, whose
    "scheduled TIR" step is core.compiler.schedules, and a tuning database when given)."""
    import tempfile

    from core.compiler.compile import compile_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        artifact = compile_model(str(path), "cpu", verify=False, tune_db=database)
    return artifact.vm()


def build_vm(proto, target, database: str | None = None, schedule: bool = True):
    """Compile `proto` for `target` with core.compiler.schedules (and a tuning database when given),
    through this file's own minimal pipeline (--pipeline own)."""
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_pass

    mod = relax_to_fused_tir(proto)
    with target:
        if database is not None:
            from core.compiler.tuning import tuning_pass

            mod = tuning_pass(target, trials=0, database=database)(mod)
        if schedule:
            mod = schedule_pass(target)(mod)
    ex = tvm.compile(mod, target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm


def _run_ours(vm, feeds):
    import tvm

    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    out = vm["main"](*args)
    return out


def _to_numpy(out):
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [o.numpy() for o in out]


def measure(vm, session, feeds, runs: int, warmup: int = 3) -> tuple[float, float]:
    """(ours median ms, onnxruntime median ms), alternating the two run by run."""
    import tvm

    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    fn = vm["main"]
    for _ in range(warmup):
        fn(*args)
        session.run(None, feeds)
    ours, ort = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*args)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        session.run(None, feeds)
        ort.append(time.perf_counter() - t0)
    return statistics.median(ours) * 1e3, statistics.median(ort) * 1e3


def _check(vm, session, feeds) -> float:
    ref = session.run(None, feeds)
    ours = _to_numpy(_run_ours(vm, feeds))
    worst = 0.0
    for a, b in zip(ours, ref):
        if not np.allclose(a, b, rtol=RTOL, atol=ATOL):
            return float(np.max(np.abs(a - b)))
        worst = max(worst, float(np.max(np.abs(a - b))) if a.size else 0.0)
    return -worst - 0.0  # negative or zero: passed (magnitude = worst error)


def _runs_for(ms: float, budget_s: float, cap: int) -> int:
    return int(max(5, min(cap, budget_s * 1e3 / max(ms, 1e-3))))


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    from core.compiler.target import host_cores, make_target

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per model (capped by --seconds)")
    parser.add_argument("--seconds", type=float, default=6.0, help="time budget per model for timed runs")
    parser.add_argument("--threads", type=int, default=host_cores())
    parser.add_argument("--tune-db", default=None, help="tuning database folder (core.compiler.tuning)")
    parser.add_argument("--tune-minutes", type=float, default=0.0, help="tune each model this long first")
    parser.add_argument("--tune-trials", type=int, default=0, help="MetaSchedule trials per kernel after the template search (0: template search only)")
    parser.add_argument(
        "--pipeline",
        choices=("workbench", "own"),
        default="workbench",
        help="workbench: compile with core.compiler.compile (what the app and CLI run); own: this file's minimal pass list",
    )
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
    target = make_target("cpu")
    models: dict[str, object] = dict(light_models())
    models.update(sample_models())
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        models = {k: v for k, v in models.items() if k in wanted}

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    # Both runtimes keep their worker threads spinning after a run; alternating them on a few
    # cores, one's spinners would steal the other's cores. Neither spins here (TVM's pool is
    # told the same through TVM_THREAD_POOL_SPIN_COUNT=0 below), so each is timed on its own.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    header = f"{'model':<18}{'ort ms':>10}{'untuned ms':>12}{'x ort':>8}{'tuned ms':>10}{'x ort':>8}  check"
    print(f"target {target}  threads {args.threads}  pipeline {args.pipeline}")
    print(header)
    print("-" * len(header))
    untuned_ratios, tuned_ratios = [], []
    for name, model in models.items():
        proto = _load(model)
        feeds = _feeds(proto)
        session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        t0 = time.perf_counter()
        build = build_vm_workbench if args.pipeline == "workbench" else build_vm
        vm = build(proto, target)
        build_s = time.perf_counter() - t0
        err = _check(vm, session, feeds)
        _, probe = measure(vm, session, feeds, runs=1, warmup=1)
        ours_ms, ort_ms = measure(vm, session, feeds, runs=_runs_for(probe * 20, args.seconds, args.runs))
        ratio = ours_ms / ort_ms
        untuned_ratios.append(ratio)
        tuned_cell, tuned_ratio_cell, tuned_note = f"{'-':>10}", f"{'-':>8}", ""
        if args.tune_db:
            if args.tune_minutes > 0:
                from core.compiler.tuning import tune_module

                report = tune_module(
                    relax_to_fused_tir(proto), target, args.tune_db, budget_s=args.tune_minutes * 60, trials_per_task=args.tune_trials
                )
                print(f"  tuning {name}: {report.summary()}", flush=True)
            from core.compiler.tuning import database_coverage

            covered, kernels = database_coverage(relax_to_fused_tir(proto), target, args.tune_db)
        if args.tune_db and covered:
            tvm_tuned = build(proto, target, database=args.tune_db)
            terr = _check(tvm_tuned, session, feeds)
            tuned_ms, ort_ms2 = measure(tvm_tuned, session, feeds, runs=_runs_for(ours_ms, args.seconds, args.runs))
            tuned_ratios.append(tuned_ms / ort_ms2)
            tuned_cell, tuned_ratio_cell = f"{tuned_ms:>10.2f}", f"{tuned_ms / ort_ms2:>8.2f}"
            tuned_note = f" tuned {covered}/{kernels} kernels" + ("" if terr <= 0 else f" tuned MISMATCH {terr:.2e}")
        elif args.tune_db:
            # nothing tunable (symbolic shapes, no templated kernel): a tuned compile is this one,
            # and the tuned geometric mean counts it as such so both means cover the same models
            tuned_ratios.append(ratio)
            tuned_cell, tuned_ratio_cell = f"{ours_ms:>10.2f}", f"{ratio:>8.2f}"
            tuned_note = " tuned 0 kernels (= untuned)"
        check = (f"ok ({-err:.1e})" if err <= 0 else f"MISMATCH {err:.2e}") + tuned_note
        print(f"{name:<18}{ort_ms:>10.2f}{ours_ms:>12.2f}{ratio:>8.2f}{tuned_cell}{tuned_ratio_cell}  {check}  (build {build_s:.0f}s)", flush=True)
        del vm, session
    print("-" * len(header))
    geo = math.exp(sum(map(math.log, untuned_ratios)) / len(untuned_ratios)) if untuned_ratios else float("nan")
    line = f"{'geomean':<18}{'':>10}{'':>12}{geo:>8.2f}"
    if tuned_ratios:
        tgeo = math.exp(sum(map(math.log, tuned_ratios)) / len(tuned_ratios))
        line += f"{'':>10}{tgeo:>8.2f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
