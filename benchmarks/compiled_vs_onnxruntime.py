"""Latency of the workbench's compiled CPU code against onnxruntime, quiet and under background load.

For each model (the nine light models shipped in the onnx wheel, core.model.samples' models and
core.model.architectures' full-size MobileNet- and transformer-style networks, all with
seeded random weights) it prints onnxruntime ms, ours untuned ms (core.compiler.schedules' default CPU
rules), ours tuned ms (when a tuning database is given and holds records for the model's
kernels), their ratios to onnxruntime and the geometric means. Latencies are medians (with
p10-p90) of warmed-up runs at the same thread count. onnxruntime runs in a process of its own,
ours in this one, each with its default threading (spinning pools), timed in alternating blocks
with a pause between, so neither is timed while the other's threads spin and drifts of the
machine's load hit both alike. `--background-load N` repeats every measurement with N busy
processes beside it. The header names the host CPU and its ISA. Every compiled model is first
checked against onnxruntime (rtol 1e-3, atol 1e-4); a mismatch is reported in the table.

    python benchmarks/compiled_vs_onnxruntime.py [--models squeezenet,small_cnn] [--runs 20]
        [--tune-db DIR] [--tune-minutes 10] [--threads 2] [--background-load 1]

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

__all__ = ["light_models", "sample_models", "build_vm", "measure", "BackgroundLoad", "host_description", "main"]

RTOL, ATOL = 1e-3, 1e-4


def light_models() -> dict[str, Path]:
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {p.stem.removeprefix("light_"): p for p in sorted(folder.glob("light_*.onnx"))}


def sample_models() -> dict:
    from core.model import samples

    return {name: fn for name, fn in samples.SAMPLES.items()} if hasattr(samples, "SAMPLES") else {}


def architecture_models() -> dict:
    from core.model.architectures import ARCHITECTURES

    return dict(ARCHITECTURES)


def _load(model):
    import onnx

    return onnx.load(str(model)) if isinstance(model, (str, Path)) else model()


def _feeds(proto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    import onnx

    rng = np.random.default_rng(seed)
    init_names = {i.name for i in proto.graph.initializer}
    feeds = {}
    for vi in proto.graph.input:
        if vi.name in init_names:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 1) for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            # token ids and attention masks: 0 and 1 are valid for both (a mask with padding)
            feeds[vi.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
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


def measure(vm, ort_proc, feeds, runs: int, warmup: int = 3, blocks: int = 5) -> tuple[list[float], list[float]]:
    """(ours ms, onnxruntime ms) per run. onnxruntime runs in its own process (ort_proc, a
    core.compiler.ort_worker.OrtProcess), ours here; both with their default threading, timed in
    alternating blocks with a pause between, so neither is timed while the other's threads spin."""
    import tvm

    from core.compiler.bench import SETTLE_S, _block_sizes

    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    fn = vm["main"]
    for _ in range(warmup):
        fn(*args)
    ort_proc.run(warmup)
    ours, ort = [], []
    for size in _block_sizes(runs, blocks):
        for _ in range(size):
            t0 = time.perf_counter()
            fn(*args)
            ours.append((time.perf_counter() - t0) * 1e3)
        time.sleep(SETTLE_S)
        ort.extend(ort_proc.run(size))
        time.sleep(SETTLE_S)
    return ours, ort


def _spread(times: list[float]) -> str:
    """'median (p10-p90)' in ms."""
    a = np.asarray(times)
    return f"{np.median(a):.3g} ({np.percentile(a, 10):.3g}-{np.percentile(a, 90):.3g})"


def _busy(stop) -> None:  # pragma: no cover - runs in a child process
    x = 0
    while not stop.is_set():
        x += 1


class BackgroundLoad:
    """N processes that keep one core each busy (pure Python spin), for measurements under load."""

    def __init__(self, n: int):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._procs = [ctx.Process(target=_busy, args=(self._stop,), daemon=True) for _ in range(n)]

    def __enter__(self):
        for p in self._procs:
            p.start()
        time.sleep(0.5 if self._procs else 0)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()


def host_description(target) -> str:
    """'AMD EPYC 9xxx (znver4, AVX-512)': the CPU's model name, LLVM's name for it, its widest ISA."""
    import platform

    from tvm.target import codegen

    from core.compiler.target import host_cpu

    name = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    isa = "AVX-512" if codegen.target_has_features("avx512f", target) else "AVX2" if codegen.target_has_features("avx2", target) else "SSE/other"
    return f"{name or 'unknown CPU'} ({host_cpu()}, {isa})"


def _check(vm, ort_proc, feeds) -> float:
    ref = ort_proc.outputs()
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
    parser.add_argument("--background-load", type=int, default=0, metavar="N", help="also measure with N busy processes beside (the 'loaded' columns)")
    parser.add_argument("--ort-spinning", choices=("on", "off"), default="on", help="onnxruntime's spinning worker threads (default on, its default; off is its better setting on a busy machine)")
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))
    from core.compiler.ort_worker import OrtProcess

    target = make_target("cpu")
    models: dict[str, object] = dict(light_models())
    models.update(sample_models())
    models.update(architecture_models())
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        models = {k: v for k, v in models.items() if k in wanted}

    loads = [0] + ([args.background_load] if args.background_load > 0 else [])
    print(
        f"host {host_description(target)}  threads {args.threads}  pipeline {args.pipeline}  "
        f"onnxruntime spinning {args.ort_spinning}  load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "timing: onnxruntime in its own process, ours in this one, both with default threading, in "
        "alternating blocks with a pause between; ms as median (p10-p90); 'x ort' = median / median, "
        "'p10 x' = p10 / p10 (on a shared machine the fast runs are the least disturbed)"
    )
    cols = "".join(f"{'ort ms' + (f' +{n} busy' if n else ''):>24}{'ours ms':>24}{'x ort':>7}{'p10 x':>7}" for n in loads)
    header = f"{'model':<18}{cols}{'tuned ms':>10}{'x ort':>7}  check"
    print(header)
    print("-" * len(header))
    ratios: dict[int, list[float]] = {n: [] for n in loads}
    fast_ratios: dict[int, list[float]] = {n: [] for n in loads}  # p10 / p10
    tuned_ratios = []
    for name, model in models.items():
        proto = _load(model)
        feeds = _feeds(proto)
        t0 = time.perf_counter()
        build = build_vm_workbench if args.pipeline == "workbench" else build_vm
        vm = build(proto, target)
        build_s = time.perf_counter() - t0
        cells = ""
        with OrtProcess(proto.SerializeToString(), feeds, args.threads, spinning=args.ort_spinning == "on") as ort_proc:
            err = _check(vm, ort_proc, feeds)
            probe, _ = measure(vm, ort_proc, feeds, runs=1, warmup=1, blocks=1)
            runs = _runs_for(probe[0] * 20, args.seconds, args.runs)
            ours_quiet = None
            for n in loads:
                with BackgroundLoad(n):
                    ours, ort = measure(vm, ort_proc, feeds, runs=runs)
                ratio = statistics.median(ours) / statistics.median(ort)
                fast_ratio = float(np.percentile(ours, 10) / np.percentile(ort, 10))
                ratios[n].append(ratio)
                fast_ratios[n].append(fast_ratio)
                ours_quiet = ours_quiet or statistics.median(ours)
                cells += f"{_spread(ort):>24}{_spread(ours):>24}{ratio:>7.2f}{fast_ratio:>7.2f}"
            tuned_cell, tuned_ratio_cell, tuned_note = f"{'-':>10}", f"{'-':>7}", ""
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
                terr = _check(tvm_tuned, ort_proc, feeds)
                tuned, ort2 = measure(tvm_tuned, ort_proc, feeds, runs=_runs_for(ours_quiet, args.seconds, args.runs))
                tuned_ratio = statistics.median(tuned) / statistics.median(ort2)
                tuned_ratios.append(tuned_ratio)
                tuned_cell, tuned_ratio_cell = f"{statistics.median(tuned):>10.3g}", f"{tuned_ratio:>7.2f}"
                tuned_note = f" tuned {covered}/{kernels} kernels" + ("" if terr <= 0 else f" tuned MISMATCH {terr:.2e}")
            elif args.tune_db:
                # nothing tunable (symbolic shapes, no templated kernel): a tuned compile is this one,
                # and the tuned geometric mean counts it as such so both means cover the same models
                tuned_ratios.append(ratios[0][-1])
                tuned_cell, tuned_ratio_cell = f"{ours_quiet:>10.3g}", f"{ratios[0][-1]:>7.2f}"
                tuned_note = " tuned 0 kernels (= untuned)"
        check = (f"ok ({-err:.1e})" if err <= 0 else f"MISMATCH {err:.2e}") + tuned_note
        print(f"{name:<18}{cells}{tuned_cell}{tuned_ratio_cell}  {check}  (build {build_s:.0f}s)", flush=True)
        del vm
    print("-" * len(header))

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")

    line = f"{'geomean':<18}" + "".join(f"{'':>48}{geomean(ratios[n]):>7.2f}{geomean(fast_ratios[n]):>7.2f}" for n in loads)
    if tuned_ratios:
        line += f"{'':>10}{geomean(tuned_ratios):>7.2f}"
    print(line)
    worst = {n: max(ratios[n]) if ratios[n] else float("nan") for n in loads}
    print("worst x ort: " + ", ".join(f"{'quiet' if n == 0 else f'+{n} busy'} {worst[n]:.2f}" for n in loads) + f"  (load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
