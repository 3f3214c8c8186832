"""Latency of the workbench's compiled CPU code against onnxruntime, quiet and under background load.

For each model (the nine light models shipped in the onnx wheel, core.model.samples' models and
benchmarks.architectures' full-size MobileNet- and transformer-style networks, all with
seeded random weights) it prints onnxruntime ms, ours untuned ms (core.compiler.schedules' default CPU
rules), ours tuned ms (when a tuning database is given and holds records for the model's
kernels), their ratios to onnxruntime and the geometric means. Latencies are medians (with
p10-p90) of warmed-up runs at the same thread count, both sides numpy in and numpy out (ours as
Artifact.run, onnxruntime's session.run); 'dev ms' is ours device-resident (inputs converted once
before the timed runs, outputs left as TVM tensors) in the same quiet alternation, and 'dev x' its
ratio to onnxruntime's numpy-boundary median. onnxruntime runs in a process of its own,
ours in this one, each with its default threading (spinning pools), timed in alternating blocks
with a pause between, so neither is timed while the other's threads spin and drifts of the
machine's load hit both alike. `--background-load N` repeats every measurement with N busy
processes beside it. The quiet measurement also times both at 1 thread (ours: the same executable
on one thread of TVM's pool; onnxruntime: a second session with one thread) in the same
alternation, and prints each runtime's speed-up from 1 to --threads threads ('ours 1->2',
'ort 1->2'; --one-thread off leaves them out). The header names the host CPU and its ISA. Every compiled model is first
checked against onnxruntime (rtol 1e-3, atol 1e-4); a mismatch is reported in the table.

    python benchmarks/compiled_vs_onnxruntime.py [--models squeezenet,small_cnn] [--runs 20]
        [--tune-db DIR] [--tune-minutes 10] [--threads 2] [--background-load 1] [--one-thread off] [--blocks 10]
        [--as-avx2]

The symbolic-shape rows (benchmarks.common.dynamic_models; run only when named in --models):
`bert_dyn@2x96` and `bert_dyn@1x128` (the BERT encoder with dynamic batch and sequence, compiled
once with both shapes as shape buckets) and `mlp_dyn@N=8` (the MLC course's MLP, symbolic batch, a
bucket for 8). 'ours' runs the code Artifact.run picks for the row's inputs (the check column says
which: 'ran bucket ...'), and the same model compiled without buckets (the general kernels) is
timed in the same alternation and printed beside it ('general kernels X ms = Y x ort').

The int8 rows (benchmarks.common.quantized_models; run only when named): `resnet18_qdq` and
`small_cnn_qdq`, fp32 networks quantized by onnxruntime's quantize_static (QDQ, per-channel int8
weights, uint8 activations). Both runtimes run the quantized model (onnxruntime with its fused int8
kernels); our build of the same network in fp32 is timed in the same alternation ('our fp32 X ms,
int8/fp32 Y'), and the check column gives ours against onnxruntime in quantization steps (the scale
of the output's DequantizeLinear), as the compile check judges a quantized model.

`--as-avx2` measures AVX2 code against AVX2 code on an AVX-512 host: ours compiled with -avx512f,
onnxruntime's process with AVX-512 hidden from CPUID (core.compiler.measure.cpuid_mask), so its MLAS
takes the kernels it takes on an AVX2 CPU. The host's caches, clocks and datapath stay its own.
On a host without AVX-512 it changes nothing (both already run AVX2 code) and says so.

`--tune-minutes M` tunes each model for up to M minutes into --tune-db first (resumable: a
kernel already in the database is not tuned again), through the same compile that is timed, so
the records are those of the kernels that compile makes. `--tune-db DIR` alone (or with
`--tune-minutes 0`) searches nothing: the tuned column applies the records already in DIR. The
tuned build is timed in the same alternation as the untuned one ('tuned/untuned' in the check column).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (  # noqa: E402 - first: it prepares the process before anything imports tvm
    BackgroundLoad,
    benchmark_models,
    dynamic_models,
    quantized_models,
    feeds_for,
    host_description,
    host_has_avx512,
    load_proto,
    ours_runner,
)
from benchmarks.core_pair import core_pair_speedup  # noqa: E402

# host_has_avx512 is looked up here by main() (tests fake the host through this module)
__all__ = ["build_vm", "build_vm_workbench", "compile_workbench", "host_has_avx512", "main", "relax_to_fused_tir"]

RTOL, ATOL = 1e-3, 1e-4


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


def compile_workbench(proto, target, database: str | None = None, tune_s: float | None = None, trials: int = 0, shape_buckets=None):
    """core.compiler.compile's Artifact for `proto`, for `target`'s CPU: its pass pipeline, whose
    "scheduled TIR" step is core.compiler.schedules; with `database`, tuned for `tune_s` seconds
    (`trials` MetaSchedule trials per kernel after the template search) first when given, and the
    database applied. The tuning sees the kernels this very pipeline makes (graph-level NCHWc and
    all), so the records are the ones the tuned compile looks up."""
    import tempfile

    from core.compiler.compile import compile_model
    from core.compiler.target import NO_GATHER

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        attrs = target.attrs
        # the target's feature changes as the user wrote them: make_target adds its own
        # code-generation flags (NO_GATHER on AVX-512), which are no CPU features to ask for
        features = [str(f) for f in attrs["mattr"] if str(f) not in NO_GATHER] if "mattr" in attrs else []
        return compile_model(
            str(path),
            "cpu",
            verify=False,
            tune_db=database,
            tune_budget_s=tune_s,
            tune_trials=trials,
            cpu=str(attrs["mcpu"]),
            cpu_features=features or "",
            shape_buckets=list(shape_buckets) if shape_buckets else None,
        )


def build_vm_workbench(proto, target, database: str | None = None, shape_buckets=None, feeds=None):
    """Compile `proto` the way the workbench does (compile_workbench) and load it; the VM's
    `parallel_kernels` is the manifest's count (ours_runner, like Artifact.run_device, skips
    choosing threads for a model without one). With `shape_buckets`, `vm.entry` is the function
    Artifact.run picks for `feeds` (the matching bucket's, else main) and `vm.path` says which."""
    from core.compiler.runtime.artifact_check import path_text

    art = compile_workbench(proto, target, database, shape_buckets=shape_buckets)
    vm = art.vm()
    vm.parallel_kernels = art.manifest.parallel_kernels
    vm.input_specs = art.inputs  # ours_runner checks the inputs as Artifact.run does
    vm.library = art.library  # and hands out the outputs as Artifact.run does (its executable's bytecode says which)
    vm.input_alignment = art.manifest.input_alignment  # and reads them in place as it does
    bucket = art.bucket_for([np.shape(feeds[s.name]) for s in art.inputs]) if feeds is not None else None
    vm.entry = bucket.function if bucket is not None else "main"
    vm.path = path_text(bucket)
    return vm


def build_vm(proto, target, database: str | None = None, schedule: bool = True):
    """Compile `proto` for `target` with core.compiler.schedules (and a tuning database when given),
    through this file's own minimal pipeline (--pipeline own)."""
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_pass

    mod = relax_to_fused_tir(proto)
    with target:
        if database is not None:
            from core.compiler.tuning.tune import apply_database_pass

            mod = apply_database_pass(target, database)(mod)
        if schedule:
            mod = schedule_pass(target)(mod)
    from core.compiler.compile import parallel_kernel_count

    ex = tvm.compile(mod, target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    vm.parallel_kernels = parallel_kernel_count(mod) if schedule else None
    return vm


def _run_ours(vm, feeds):
    import tvm

    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    out = vm[getattr(vm, "entry", "main")](*args)
    return out


def _to_numpy(out):
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [o.numpy() for o in out]


def _spread(times: list[float]) -> str:
    """'median (p10-p90)' in ms."""
    a = np.asarray(times)
    return f"{np.median(a):.3g} ({np.percentile(a, 10):.3g}-{np.percentile(a, 90):.3g})"


def _steps_note(vm, ort_proc, feeds, proto) -> str:
    """Ours against onnxruntime's int8 kernels in quantization steps of each output."""
    from core.tolerances import output_step_scales, quantization_steps

    scales = output_step_scales(proto)
    ours, ref = _to_numpy(_run_ours(vm, feeds)), ort_proc.outputs()
    steps = [quantization_steps(a, b, *scales[o.name]) for o, a, b in zip(proto.graph.output, ours, ref) if o.name in scales]
    if not steps or any(x is None for x in steps):
        return ""
    return f"{max(steps):.3g} quantization steps from ort"


def _check(vm, ort_proc, feeds) -> float:
    ref = ort_proc.outputs()
    ours = _to_numpy(_run_ours(vm, feeds))
    worst = 0.0
    for a, b in zip(ours, ref):
        if not np.allclose(a, b, rtol=RTOL, atol=ATOL):
            return float(np.max(np.abs(a - b)))
        worst = max(worst, float(np.max(np.abs(a - b))) if a.size else 0.0)
    return -worst - 0.0  # negative or zero: passed (magnitude = worst error)


# Each block times at least this many ms of runs (budget permitting). With 12-run blocks, a 7 us
# model's block lasted 0.08 ms and one disturbed moment of the host (on this project's 2-vCPU
# Zen 4 guest, spells in which 2-thread runs take twice their time) moved a fifth of its runs:
# the MLP's 1 -> 2 thread figure, the same code at either count, read 0.79 in one run, 1.20 in the next.
MIN_BLOCK_MS = 5.0


def _runs_for(ms_all: float, ms_one: float, budget_s: float, cap: int, blocks: int = 1) -> int:
    """Timed runs per runner: `cap` (--runs), or enough for MIN_BLOCK_MS of runs in each of
    `blocks` blocks where that is more, at least 5, and no more than the budget fits (`ms_all`:
    one run of each runner together, `ms_one`: one of ours)."""
    fits = budget_s * 1e3 / max(ms_all, 1e-3)
    wanted = max(cap, blocks * math.ceil(MIN_BLOCK_MS / max(ms_one, 1e-4)))
    return int(max(5, min(wanted, fits)))


def main(argv: list[str] | None = None) -> int:
    from core.compiler.target import host_cores, make_target

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per model (capped by --seconds)")
    parser.add_argument("--seconds", type=float, default=6.0, help="time budget per model for timed runs")
    parser.add_argument("--blocks", type=int, default=10, help="blocks the runs are timed in, the runtimes taking turns block by block "
                        "(more average better over the host's short disturbances; each adds a 0.2 s pause per runner)")
    parser.add_argument("--threads", type=int, default=host_cores())
    parser.add_argument("--tune-db", default=None, help="tuning database folder (core.compiler.tuning.tune)")
    parser.add_argument("--tune-minutes", type=float, default=0.0, help="tune each model this long first")
    parser.add_argument("--tune-trials", type=int, default=0, help="MetaSchedule trials per kernel after the template search (0: template search only)")
    parser.add_argument(
        "--pipeline",
        choices=("workbench", "own"),
        default="workbench",
        help="workbench: compile with core.compiler.compile (what the app and CLI run); own: this file's minimal pass list",
    )
    parser.add_argument("--background-load", type=int, default=0, metavar="N", help="also measure with N busy processes beside (the 'loaded' columns)")
    parser.add_argument(
        "--adaptive-threads",
        choices=("on", "off"),
        default="on",
        help="ours on as many of --threads threads as other processes leave cores free, as the workbench runs "
        "(core.compiler.runtime.threads; default), or off: always --threads",
    )
    parser.add_argument(
        "--one-thread",
        choices=("on", "off"),
        default="on",
        help="also time both at 1 thread (quiet) and print each one's speed-up from 1 to --threads threads",
    )
    parser.add_argument("--cpu", default=None, metavar="NAME", help="compile ours for this LLVM CPU (default: MLCWB_CPU, else this host); "
                        "onnxruntime still runs its kernels for this host (with AVX-512 where it has it)")
    parser.add_argument("--cpu-features", default=None, metavar="FEATURES", help="feature changes for that CPU, e.g. --cpu-features=-avx512f")
    parser.add_argument(
        "--as-avx2",
        action="store_true",
        help="on an AVX-512 host, both sides as on an AVX2 one: ours compiled with -avx512f (unless --cpu-features says "
        "otherwise), onnxruntime's process under core.compiler.measure.cpuid_mask, so its MLAS takes its AVX2 kernels",
    )
    parser.add_argument("--ort-spinning", choices=("on", "off"), default="on", help="onnxruntime's spinning worker threads (default on, its default; off is its better setting on a busy machine)")
    args = parser.parse_args(argv)

    import os

    from core.compiler.measure.alternation import alternate, flatten

    # benchmarks.common's set-up sized TVM's pool to the host's cores already; ours runs on --threads of them
    # (core.compiler.runtime.threads.runtime_threads), as many as onnxruntime gets
    from core.compiler.measure.ort_worker import OrtProcess

    hide_avx512 = args.as_avx2 and host_has_avx512()  # on an AVX2 host both run AVX2 code as they are
    if hide_avx512:
        from core.compiler.measure import cpuid_mask

        why_not = cpuid_mask.probe()
        if why_not:
            print(f"--as-avx2: {why_not}", file=sys.stderr)
            return 2
        if args.cpu_features is None:
            args.cpu_features = "-avx512f"
    target = make_target("cpu", mcpu=args.cpu, mattr=args.cpu_features)
    # the symbolic-shape rows (a model, the dims it runs at, its shape buckets) run only when named
    models: dict[str, object] = benchmark_models()
    if args.models:
        models.update(dynamic_models())
        models.update(quantized_models())
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        models = {k: v for k, v in models.items() if k in wanted}

    loads = [0] + ([args.background_load] if args.background_load > 0 else [])
    one_thread = args.one_thread == "on" and args.threads > 1
    adaptive = args.adaptive_threads == "on"
    print(
        f"host {host_description(make_target('cpu', mcpu='host'))}  threads {args.threads}  pipeline {args.pipeline}  "
        f"onnxruntime spinning {args.ort_spinning}  ours adaptive threads {args.adaptive_threads}  TVM pool spin count {os.environ.get('TVM_THREAD_POOL_SPIN_COUNT', 'default')}  "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "timing: onnxruntime in its own process, ours in this one, both with default threading, in "
        "alternating blocks with a pause between; ms as median (p10-p90); 'x ort' = median / median, "
        "'p10 x' = p10 / p10 (on a shared machine the fast runs are the least disturbed)"
        + (
            f"; '1t' columns: the same executables on 1 thread, timed in the same alternation as the quiet "
            f"{args.threads}-thread ones; 'ours 1->{args.threads}' / 'ort 1->{args.threads}' = 1-thread median / "
            f"{args.threads}-thread median (the speed-up from the extra threads); 'p10 ours/ort': the same from the p10s"
            if one_thread
            else ""
        )
        + ("; 'cores a/b': two pinned processes' work together over one alone, probed before/after the model's "
           "timed runs (~2: two cores; ~1: the virtual CPUs shared one core, and 2-thread figures are 1-core "
           "figures: benchmarks/core_pair.py)" if args.threads > 1 else "")
        + (f"; 'fewer threads q/b': our {args.threads}-thread runs, quiet / per load, that the thread governor "
           "gave fewer threads because it saw other work runnable; 'one faster q/b': those the pool ran on one "
           "thread because one measured faster, trials included (core.compiler.runtime.threads)"
           if adaptive and args.threads > 1 else "")
    )
    from tvm.target import codegen

    from core.compiler.target import target_cpu

    built = target_cpu(target)
    if built != target_cpu(make_target("cpu", mcpu="host")):
        isa = "AVX-512" if codegen.target_has_features("avx512f", target) else "AVX2" if codegen.target_has_features("avx2", target) else "SSE/other"
        ort_kernels = "its AVX2 kernels: AVX-512 hidden from its process (core.compiler.measure.cpuid_mask)" if hide_avx512 else "its own kernels for this host"
        print(f"ours compiled for {' '.join([built['name'], *built['features']])} ({isa}); onnxruntime runs {ort_kernels}")
    elif hide_avx512:
        print("onnxruntime runs its AVX2 kernels: AVX-512 hidden from its process (core.compiler.measure.cpuid_mask)")
    elif args.as_avx2:
        print("--as-avx2: this host has no AVX-512, so both runtimes run their AVX2 code as they are")
    cols = "".join(f"{'ort ms' + (f' +{n} busy' if n else ''):>24}{'ours ms':>24}{'x ort':>7}{'p10 x':>7}" for n in loads)
    cols += f"{'dev ms':>9}{'dev x':>7}"
    if one_thread:
        cols += f"{'ort 1t':>9}{'ours 1t':>9}{'x 1t':>6}{f'ours 1->{args.threads}':>11}{f'ort 1->{args.threads}':>10}{'p10 ours/ort':>14}"
    header = f"{'model':<18}{cols}{'tuned ms':>10}{'x ort':>7}  check"
    print(header)
    print("-" * len(header))
    ratios: dict[int, list[float]] = {n: [] for n in loads}
    fast_ratios: dict[int, list[float]] = {n: [] for n in loads}  # p10 / p10
    # x ort at 1 thread, speed-ups 1 -> N (medians; and p10s: the runs the host disturbed least)
    single: dict[str, list[float]] = {"x": [], "ours": [], "ort": [], "ours_p10": [], "ort_p10": []}
    tuned_ratios = []
    dev_ratios = []  # ours device-resident / onnxruntime numpy-boundary (quiet)
    for name, model in models.items():
        proto = load_proto(model)
        row_dims = getattr(model, "dims", None)  # a DynamicRow: its shape, its buckets
        feeds = feeds_for(proto, row_dims)
        t0 = time.perf_counter()
        build = build_vm_workbench if args.pipeline == "workbench" else build_vm
        buckets = getattr(model, "buckets", ()) if args.pipeline == "workbench" else ()
        vm = build(proto, target, shape_buckets=buckets, feeds=feeds) if buckets else build(proto, target)
        # beside a bucket, the general kernels at the same shape (timed in the same alternation)
        general = build(proto, target) if buckets else None
        # beside a quantized model, our build of the same network in fp32
        fp32_vm = build(model.fp32(), target) if getattr(model, "fp32", None) is not None else None
        build_s = time.perf_counter() - t0
        cells = ""
        tvm_tuned, tuned_note = None, ""
        if args.tune_db:
            tune_s = args.tune_minutes * 60 if args.tune_minutes > 0 else None
            chosen = 0
            if args.pipeline == "workbench":
                # tuned (when asked) and compiled in one go, on the workbench's own kernels; with
                # --tune-minutes 0 the records already in the database are only applied
                artifact = compile_workbench(proto, target, args.tune_db, tune_s, args.tune_trials if tune_s else 0)
                from core.compiler.runtime.manifest import TuningRecord

                tuning = artifact.manifest.tuning or TuningRecord()
                if tuning.summary:
                    print(f"  tuning {name}: {tuning.summary}", flush=True)
                if tuning.model_ab:
                    from core.compiler.tuning.ab import describe_ab

                    print(f"  tuning {name}: {describe_ab(tuning.model_ab)}", flush=True)
                covered, kernels = tuning.kernels_from_database, tuning.kernels
                chosen = tuning.winograd_choices_from_database  # convs direct/Winograd otherwise than the rule
                tvm_tuned = artifact.vm() if covered or chosen else None
                if tvm_tuned is not None:
                    tvm_tuned.input_specs, tvm_tuned.library = artifact.inputs, artifact.library
                    tvm_tuned.input_alignment = artifact.manifest.input_alignment
            else:
                if tune_s:
                    from core.compiler.tuning.tune import tune_module

                    report = tune_module(relax_to_fused_tir(proto), target, args.tune_db, budget_s=tune_s, trials_per_task=args.tune_trials)
                    print(f"  tuning {name}: {report.summary()}", flush=True)
                from core.compiler.tuning.tune import database_coverage

                covered, kernels = database_coverage(relax_to_fused_tir(proto), target, args.tune_db)
                tvm_tuned = build(proto, target, database=args.tune_db) if covered else None
            if covered or chosen:
                tuned_note = f" tuned {covered}/{kernels} kernels" + (f", {chosen} Winograd choices" if chosen else "")
            else:
                # nothing tunable (symbolic shapes, no templated kernel): a tuned compile is this one,
                # and the tuned geometric mean counts it as such so both means cover the same models
                tuned_note = " tuned 0 kernels (= untuned)"
        spinning = args.ort_spinning == "on"
        general_note = ""
        model_bytes = proto.SerializeToString()
        hide = hide_avx512
        with OrtProcess(model_bytes, feeds, args.threads, spinning=spinning, hide_avx512=hide) as ort_proc, contextlib.ExitStack() as stack:
            ort_one = stack.enter_context(OrtProcess(model_bytes, feeds, 1, spinning=spinning, hide_avx512=hide)) if one_thread else None
            err = _check(vm, ort_proc, feeds)
            steps_note = _steps_note(vm, ort_proc, feeds, proto) if fp32_vm is not None else ""
            if steps_note:
                err = -0.0  # judged in quantization steps (the note), as the compile check judges it
            if general is not None:
                gerr = _check(general, ort_proc, feeds)
                general_note += "" if gerr <= 0 else f" general MISMATCH {gerr:.2e}"
            if tvm_tuned is not None:
                terr = _check(tvm_tuned, ort_proc, feeds)
                tuned_note += "" if terr <= 0 else f" tuned MISMATCH {terr:.2e}"
            ours_n = ours_runner(vm, feeds, args.threads, adaptive=adaptive)
            probe, _ = alternate([ours_n, ort_proc.run], blocks=1, runs=1, warmup=1)
            runs = _runs_for(probe[0][0] * (30 + 20 * one_thread + 10 * (tvm_tuned is not None) + 10 * (general is not None)), probe[0][0], args.seconds, args.runs, args.blocks)
            single_cells = ""
            dev_cells = f"{'-':>9}{'-':>7}"
            tuned_cell, tuned_ratio_cell = f"{'-':>10}", f"{'-':>7}"
            pair_before = core_pair_speedup() if args.threads > 1 else None
            fewer_cells: list[str] = []  # per load: our runs the governor gave fewer threads (other work)
            one_cells: list[str] = []  # per load: our runs on one thread because it measured faster
            for n in loads:
                # quiet: the 1-thread runs and the tuned build take turns with the others, so every
                # ratio in the row compares runs made under the same conditions
                runners = [ours_n, ort_proc.run]
                extra = {}
                if n == 0 and one_thread:
                    extra["ours1"], extra["ort1"] = len(runners), len(runners) + 1
                    runners += [ours_runner(vm, feeds, 1), ort_one.run]
                if n == 0:
                    extra["dev"] = len(runners)
                    runners.append(ours_runner(vm, feeds, args.threads, adaptive=adaptive, boundary="device"))
                if n == 0 and tvm_tuned is not None:
                    extra["tuned"] = len(runners)
                    runners.append(ours_runner(tvm_tuned, feeds, args.threads, adaptive=adaptive))
                if n == 0 and general is not None:
                    extra["general"] = len(runners)
                    runners.append(ours_runner(general, feeds, args.threads, adaptive=adaptive))
                if n == 0 and fp32_vm is not None:
                    extra["fp32"] = len(runners)
                    runners.append(ours_runner(fp32_vm, feeds, args.threads, adaptive=adaptive))
                ours_n.fewer_threads = ours_n.one_thread = ours_n.runs = 0
                with BackgroundLoad(n):
                    # core.compiler.measure.alternation: a pause between blocks, each started with untimed runs
                    timed = [flatten(blocks) for blocks in alternate(runners, blocks=args.blocks, runs=runs)]
                if adaptive and args.threads > 1:
                    runs_n = max(1, ours_n.runs)
                    fewer_cells.append(f"{100 * ours_n.fewer_threads / runs_n:.0f}%")
                    one_cells.append(f"{100 * ours_n.one_thread / runs_n:.0f}%")
                ours, ort = timed[0], timed[1]
                ratio = statistics.median(ours) / statistics.median(ort)
                fast_ratio = float(np.percentile(ours, 10) / np.percentile(ort, 10))
                ratios[n].append(ratio)
                fast_ratios[n].append(fast_ratio)
                cells += f"{_spread(ort):>24}{_spread(ours):>24}{ratio:>7.2f}{fast_ratio:>7.2f}"
                if "dev" in extra:
                    dev_ms = statistics.median(timed[extra["dev"]])
                    dev_ratios.append(dev_ms / statistics.median(ort))
                    dev_cells = f"{dev_ms:>9.3g}{dev_ratios[-1]:>7.2f}"
                if "ours1" in extra:
                    ours1, ort1 = statistics.median(timed[extra["ours1"]]), statistics.median(timed[extra["ort1"]])
                    row = {"x": ours1 / ort1, "ours": ours1 / statistics.median(ours), "ort": ort1 / statistics.median(ort),
                           "ours_p10": float(np.percentile(timed[extra["ours1"]], 10) / np.percentile(ours, 10)),
                           "ort_p10": float(np.percentile(timed[extra["ort1"]], 10) / np.percentile(ort, 10))}
                    for key, value in row.items():
                        single[key].append(value)
                    single_cells = (f"{ort1:>9.3g}{ours1:>9.3g}{row['x']:>6.2f}{row['ours']:>11.2f}{row['ort']:>10.2f}"
                                    f"{f'{row['ours_p10']:.2f}/{row['ort_p10']:.2f}':>14}")
                if "tuned" in extra:
                    tuned_ms = statistics.median(timed[extra["tuned"]])
                    tuned_ratio = tuned_ms / statistics.median(ort)
                    tuned_ratios.append(tuned_ratio)
                    tuned_cell, tuned_ratio_cell = f"{tuned_ms:>10.3g}", f"{tuned_ratio:>7.2f}"
                    tuned_note += f" (tuned/untuned {tuned_ms / statistics.median(ours):.2f})"
                elif n == 0 and args.tune_db:
                    tuned_ratios.append(ratio)
                    tuned_cell, tuned_ratio_cell = f"{statistics.median(ours):>10.3g}", f"{ratio:>7.2f}"
                if "general" in extra:
                    general_ms = statistics.median(timed[extra["general"]])
                    general_note += (f"; ran {vm.path}, general kernels {general_ms:.3g} ms = "
                                     f"{general_ms / statistics.median(ort):.2f}x ort")
                if "fp32" in extra:
                    fp32_ms = statistics.median(timed[extra["fp32"]])
                    general_note += f"; our fp32 {fp32_ms:.3g} ms, int8/fp32 {statistics.median(ours) / fp32_ms:.2f}"
            cells += dev_cells + single_cells
            pair_after = core_pair_speedup() if pair_before is not None else None
        check = (steps_note or (f"ok ({-err:.1e})" if err <= 0 else f"MISMATCH {err:.2e}")) + tuned_note + general_note
        if pair_before is not None and pair_after is not None:
            check += f"  cores {pair_before:.1f}/{pair_after:.1f}"
        if fewer_cells:
            check += f"  fewer threads {'/'.join(fewer_cells)}  one faster {'/'.join(one_cells)}"
        print(f"{name:<18}{cells}{tuned_cell}{tuned_ratio_cell}  {check}  (build {build_s:.0f}s)", flush=True)
        del vm, general, fp32_vm
    print("-" * len(header))

    def geomean(values: list[float]) -> float:
        return math.exp(sum(map(math.log, values)) / len(values)) if values else float("nan")

    line = f"{'geomean':<18}" + "".join(f"{'':>48}{geomean(ratios[n]):>7.2f}{geomean(fast_ratios[n]):>7.2f}" for n in loads)
    line += f"{'':>9}{geomean(dev_ratios):>7.2f}"
    if one_thread:
        line += (f"{'':>18}{geomean(single['x']):>6.2f}{geomean(single['ours']):>11.2f}{geomean(single['ort']):>10.2f}"
                 f"{f'{geomean(single['ours_p10']):.2f}/{geomean(single['ort_p10']):.2f}':>14}")
    if tuned_ratios:
        line += f"{'':>10}{geomean(tuned_ratios):>7.2f}"
    print(line)
    worst = {n: max(ratios[n]) if ratios[n] else float("nan") for n in loads}
    print("worst x ort: " + ", ".join(f"{'quiet' if n == 0 else f'+{n} busy'} {worst[n]:.2f}" for n in loads) + f"  (load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
