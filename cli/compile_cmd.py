"""`compile MODEL --target cpu|cuda -o ARTIFACT_DIR [--cpu NAME] [--cpu-features F] [--triple T] [--preset DEVICE] [--tune-trials N] [--tune-minutes M] [--tune-db DIR] [--tune-rpc HOST:PORT:KEY] [--shape-buckets NAME=N,NAME=N ...] [--verify-inputs IN.npz] [--rtol R] [--atol A]`."""
from __future__ import annotations

import argparse
import json
import sys

HELP = "compile a model for CPU or CUDA, check it against onnxruntime, and export a deployable artifact folder"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    add_target_argument(p, "cpu (LLVM for this host) or cuda (no GPU needed to compile)")
    p.add_argument("-o", "--output", required=True, metavar="ARTIFACT_DIR", help="folder to write the artifact into")
    add_cpu_arguments(p)
    p.add_argument("--tune-trials", type=int, default=0, metavar="N", help="tune, with N MetaSchedule trials per kernel after the template search (cuda: on a GPU here, search only; budget 10 minutes unless --tune-minutes)")
    # read as text and checked in run(): a bad value is one sentence and exit 2, not argparse's usage dump
    p.add_argument("--tune-minutes", metavar="M", help="tune for up to M minutes for the whole model: template search, then --tune-trials N MetaSchedule trials per kernel if given (cuda: on a GPU here)")
    p.add_argument("--tune-db", metavar="DIR", help="tuning database folder (reused across runs)")
    p.add_argument("--tune-rpc", metavar="HOST:PORT:KEY", help="measure tuning candidates on the devices registered under KEY with the TVM RPC tracker at HOST:PORT (with --tune-minutes or --tune-trials)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="value of a symbolic dim for the onnxruntime check (repeatable; default 1)")
    add_bucket_argument(p)
    p.add_argument("--verify-inputs", metavar="IN.npz", help="check against the reference on these inputs (an .npz keyed by input name) instead of seeded random ones")
    p.add_argument("--rtol", metavar="R", help="relative tolerance of that check (default 1e-3)")
    p.add_argument("--atol", metavar="A", help="absolute tolerance of that check (default 1e-4); a refusal whose error is small against the values says which value would accept it")
    p.add_argument("--no-verify", action="store_true", help="skip the check against onnxruntime (not recommended)")
    p.add_argument("--bench-runs", type=int, default=0, metavar="N", help="also measure N runs and record latency and memory in the manifest")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _target_kind(text: str):
    """--target's text as a core.compiler.target.TargetKind, parsed once here; argparse reports an
    unknown one with TargetKind's sentence naming it (exit 2)."""
    from core.compiler.target import TargetKind
    from core.errors import WorkbenchError

    try:
        return TargetKind.parse(text)
    except WorkbenchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_target_argument(p, text: str) -> None:
    """--target cpu|cuda (default cpu), a TargetKind in `args.target` (compile, lower, bench)."""
    from core.compiler.target import TargetKind

    p.add_argument("--target", type=_target_kind, choices=list(TargetKind), default=TargetKind.CPU.value, help=text)


def add_cpu_arguments(p) -> None:
    """--cpu / --cpu-features / --triple / --preset: the CPU the code is for (compile, lower, bench)."""
    from core.compiler.target import DEVICE_PRESETS

    p.add_argument("--cpu", metavar="NAME", help="LLVM CPU to compile for, e.g. znver3, skylake-avx512, haswell, or host "
                   "(default: $MLCWB_CPU, else this machine); with --triple aarch64-linux-gnu e.g. cortex-a76, neoverse-n1, "
                   "generic (the default there); code this machine cannot run is compiled and exported, not run")
    p.add_argument("--cpu-features", metavar="FEATURES", help="LLVM feature changes for that CPU, e.g. -avx512f, or +dotprod on ARM "
                   "(default: $MLCWB_CPU_FEATURES when --cpu is not given)")
    p.add_argument("--triple", metavar="TRIPLE", help="build for another architecture: aarch64-linux-gnu (ARM64 Linux; "
                   "the artifact is cross-linked with aarch64-linux-gnu-gcc)")
    p.add_argument("--preset", metavar="DEVICE", help="a device's CPU, features and cores: " + ", ".join(DEVICE_PRESETS)
                   + " (--cpu, --cpu-features and --triple override its parts)")


def cpu_options(args) -> dict:
    """compile_model's cpu, cpu_features, triple and cores from --cpu, --cpu-features, --triple and
    --preset (a preset fills what the others leave out)."""
    from core.compiler.target import device_preset

    preset = device_preset(args.preset) if getattr(args, "preset", None) else None
    triple = getattr(args, "triple", None) or (preset.triple if preset else None)
    return {
        "cpu": args.cpu or (preset.cpu if preset and triple == preset.triple else None),
        "cpu_features": args.cpu_features if args.cpu_features is not None or not preset else list(preset.features),
        "triple": triple,
        "cores": preset.cores if preset else None,
    }


def cpu_target(args, kind: str = "cpu"):
    """The tvm Target of --target with --cpu / --cpu-features / --triple / --preset (checked: one
    sentence when unknown)."""
    from core.compiler.target import make_target

    o = cpu_options(args)
    return make_target(kind, mcpu=o["cpu"], mattr=o["cpu_features"], triple=o["triple"], cores=o["cores"])


def parse_dims(items: str | list[str], model=None) -> dict[str, int]:
    """--dim NAME=N values (core.model.dims, the parser the GUI's dims field uses too). With
    `model` (a Graph or an Artifact) a name that is not one of its symbolic dims is refused: its
    value would be ignored, and the dim checked and measured at 1."""
    from core.model.dims import parse_dims as parse
    from core.model.dims import symbolic_dims

    return parse(items, known=symbolic_dims(model) if model is not None else None)


def add_bucket_argument(p) -> None:
    """--shape-buckets NAME=N,NAME=N (repeatable): main compiled again for each such shape (compile, bench)."""
    p.add_argument("--shape-buckets", action="append", default=[], metavar="NAME=N,NAME=N",
                   help="also compile the model for these sizes of its symbolic dims (every one named), with the "
                   "static shapes' schedules; a run whose inputs have exactly these sizes uses them, others the "
                   "general kernels (repeatable: one bucket each)")


def parse_buckets(items: list[str], model=None) -> list[dict[str, int]]:
    """--shape-buckets values as dicts (each parsed as --dim's NAME=N list; with `model`, names it
    lacks are refused). That every symbolic dim is named is checked by compile_model."""
    return [parse_dims(item, model) for item in items]


def parse_tune_minutes(text: str | None, trials: int) -> float | None:
    """--tune-minutes as seconds (None: compile's default budget); one sentence when it is wrong."""
    import math

    from core.errors import WorkbenchError

    if text is None:
        return None
    try:
        minutes = float(text)
    except ValueError:
        minutes = float("nan")
    if not math.isfinite(minutes) or minutes <= 0:
        raise WorkbenchError(f"--tune-minutes must be a positive number of minutes, not '{text}'.")
    return minutes * 60.0


def _artifact_lower_bound(model: str, graph) -> int:
    """Bytes the artifact needs at least: its model.onnx holds the model with every weight inline."""
    import os

    from core.model.external_data import external_tensors

    return os.path.getsize(model) + sum(t.length or 0 for _, t in external_tensors(graph.model))


def run(args) -> int:
    from core.compiler.target import TargetKind
    from core.errors import WorkbenchError

    parse_dims(args.dim)  # a malformed value is refused before anything is loaded; the names once it is
    parse_buckets(args.shape_buckets)
    if args.tune_trials < 0:
        raise WorkbenchError(f"--tune-trials must be 0 or more, not {args.tune_trials}.")
    if (args.tune_trials > 0 or args.tune_minutes is not None) and args.target is TargetKind.CUDA:
        from core.compiler.target import gpu_present

        if not gpu_present():
            raise WorkbenchError("tuning (--tune-trials, --tune-minutes) for --target cuda measures every candidate on a GPU, and this "
                                 "machine has none; compile without them (a database tuned on a GPU machine still applies with --tune-db).")
    budget_s = parse_tune_minutes(args.tune_minutes, args.tune_trials)
    if args.tune_rpc is not None:
        from core.compiler.tuning.tune import parse_rpc_address

        parse_rpc_address(args.tune_rpc)
        if args.tune_trials == 0 and args.tune_minutes is None:
            raise WorkbenchError("--tune-rpc measures tuning candidates: give --tune-minutes M or --tune-trials N with it.")
    from core.compiler.check.user_inputs import parse_tolerance, read_npz

    verify_inputs = read_npz(args.verify_inputs) if args.verify_inputs else None
    from core.compiler.check.reference import ATOL, RTOL

    rtol, atol = parse_tolerance(args.rtol, "--rtol", RTOL), parse_tolerance(args.atol, "--atol", ATOL)
    cpu_target(args)  # an unknown CPU or feature is refused before anything is loaded

    from core import load_model
    from core.compiler.compile import compile_model
    from core.files import check_writable, writing

    graph = load_model(args.model)
    dims = parse_dims(args.dim, graph)
    buckets = parse_buckets(args.shape_buckets, graph)
    # a folder that cannot take the artifact is refused before minutes of compiling, not after
    check_writable(args.output, needed=_artifact_lower_bound(args.model, graph))
    if args.tune_db is not None and (args.tune_trials > 0 or args.tune_minutes is not None):
        check_writable(args.tune_db)
    finished = []

    def progress(event) -> None:  # a core.progress.Progress
        if args.json:
            return
        if event.fraction >= 1.0:
            finished.append(event)  # "done" is said once the artifact is in place
            return
        print(f"[{event.fraction * 100:5.1f}%] {event.detail or event.message}", file=sys.stderr)

    art = compile_model(
        graph,
        args.target,
        verify=not args.no_verify,
        verify_dims=dims or None,
        verify_inputs=verify_inputs,
        shape_buckets=buckets or None,
        tune_trials=args.tune_trials,
        tune_db=args.tune_db,
        tune_budget_s=budget_s,
        tune_rpc=args.tune_rpc,
        **cpu_options(args),
        progress=progress,
        rtol=rtol,
        atol=atol,
    )
    measured = None
    if args.bench_runs > 0 and args.target is TargetKind.CPU:
        art.check_runs_here()
        from core.compiler.measure.bench import benchmark, measured_for_manifest

        measured = measured_for_manifest(benchmark(art, runs=args.bench_runs, dims=dims or None, vs_ort=True, kernels=False))
    with writing(args.output):  # the linker's "No space left on device" too
        folder = art.export(args.output, measured=measured)
    for event in finished:
        print(f"[{event.fraction * 100:5.1f}%] {event.detail or event.message}", file=sys.stderr)
    m = art.manifest
    if args.json:
        d = m.to_json()  # the manifest's own records, as manifest.json holds them
        print(json.dumps({"artifact": str(folder), "target": args.target, "cpu": m.target.cpu, "files": m.files, "verification": d.get("verification"),
                          "compile_seconds": m.compile_seconds, "memory_estimate": d.get("memory_estimate"), "measured": d.get("measured"),
                          "tuning": d["tuning"], "shape_buckets": d.get("shape_buckets", []), "deploy": d.get("deploy")}))
    else:
        v = m.verification
        check = (f"matches {v.reference} on {v.inputs} inputs (max abs error {v.max_abs_err:.3g})" if v is not None and v.checked
                 else f"not checked against onnxruntime ({v.reason if v is not None else 'no record'})")
        print(f"compiled {args.model} for {args.target} ({m.built_for}) in {m.compile_seconds} s; {check}")
        from core.compiler.passes.integer_conv import int8_path

        quantized = int8_path(m.kernel_lineage, (n.op_type for n in graph.nodes))
        if quantized:
            print(f"int8: {quantized}")
        for b in m.shape_buckets:
            bv = b.verification
            checked = f"matches {bv.reference} (max abs error {bv.max_abs_err:.3g})" if bv is not None and bv.checked else "not checked"
            print(f"shape bucket {b.label}: function {b.function}, {checked}; the general kernels at that shape "
                  + ("match too" if b.general_verification is not None and b.general_verification.checked else "not checked"))
        tuning = m.tuning
        if tuning:
            done = f"{tuning.summary}; " if tuning.summary else ""
            print(f"tuning: {done}{tuning.kernels_from_database}/{tuning.kernels} kernels use tuned schedules (database {tuning.database})")
            if tuning.model_ab:
                from core.compiler.tuning.ab import describe_ab

                print(describe_ab(tuning.model_ab))
        top = [n for n in m.files if "/" not in n]
        recipe = [n for n in m.files if n.startswith("recipe/")]
        listed = ", ".join(top + ([f"recipe/ ({len(recipe)} files)"] if recipe else []))
        print(f"artifact: {folder} ({listed})")
        print(f"run it: python {folder}/run.py --inputs IN.npz -o OUT.npz")
        from core.compiler.runtime.deploy import deploy_summary

        if m.deploy:
            print(deploy_summary(m.deploy))
        if (m.target.cpu or {}).get("triple"):
            print(f"check it here under emulation: main.py bench {folder} --check-only; "
                  f"time it on the device: main.py bench {folder} --rpc HOST:PORT:KEY")
        if recipe:
            print(f"rebuild it with TVM alone: python {folder}/recipe/rebuild.py -o NEW_FOLDER")
    return 0
