"""`schedule MODEL --list [--json]` | `--kernel NAME [--start naive|default] [--steps STEPS.json] [--measure] [--json]
[--save-trace OUT.json] [--use-in-compile] [--tune-db DIR]`: schedule one kernel by hand.

The headless twin of the Schedule panel (core.compiler.manual.session). `--list` prints the
model's kernels as FuseTIR leaves them (name, ONNX nodes, FLOPs, blocks and loops with name,
extent and kind). `--kernel` opens one, begins from `--start` (naive: the kernel as written;
default: the default schedule's steps), applies the steps of STEPS.json in order (a list such as
`[{"primitive": "split", "loop": "j", "factors": [null, 4]}]`, or a file --save-trace wrote;
loading one executes nothing), prints the loop nest and TIR, and with `--measure` times it alone
beside its default schedule and tuned record. `--use-in-compile` files the trace in the tuning
database (`--tune-db DIR`, default the shared one) where `compile MODEL --tune-db DIR` uses it
if it measured fastest. An unknown kernel or loop, or a step TVM refuses, exits 2 with one
sentence naming it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HELP = "schedule one kernel by hand: list kernels, apply TensorIR steps from JSON, measure, file the trace for compile"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--list", action="store_true", help="list the kernels with their blocks and loops")
    what.add_argument("--kernel", metavar="NAME", help="the kernel to schedule (a name --list shows)")
    p.add_argument("--start", choices=("naive", "default"), default="naive",
                   help="begin from the kernel as written (naive, the MLC course's exercise) or from the default schedule "
                        "compile gives it, as steps that can be edited or undone (default)")
    p.add_argument("--steps", metavar="STEPS.json", help="steps to apply, in order (a JSON list, or a file --save-trace wrote)")
    p.add_argument("--measure", action="store_true", help="time the kernel alone, beside its default schedule and tuned record")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--save-trace", metavar="OUT.json", help="write the steps and TVM's trace (JSON and Python) to OUT.json")
    p.add_argument("--use-in-compile", action="store_true",
                   help="file the trace in the tuning database; compile --tune-db uses it where it measured fastest")
    p.add_argument("--tune-db", metavar="DIR", help="tuning database folder for --measure's tuned record and --use-in-compile")


def _list(args) -> int:
    from core.compiler.manual.session import list_kernels
    from core.compiler.manual.nest import loop_nest

    kernels = list_kernels(args.model)
    if args.json:
        print(json.dumps({"model": args.model, "kernels": [k.to_json() for k in kernels]}))
        return 0
    for k in kernels:
        j = k.to_json()
        nodes = ", ".join(k.onnx_nodes[:6]) + (" ..." if len(k.onnx_nodes) > 6 else "")
        work = f"{j['flops'] / 1e6:.1f} MFLOP" if j["flops"] else "FLOPs unknown: symbolic shapes"
        print(f"{k.name}  ({work}; ONNX: {nodes or '-'})")
        for line in loop_nest(k.func).describe():
            print(f"    {line}")
    return 0


def run(args) -> int:
    from core.errors import WorkbenchError

    if args.list:
        if args.steps or args.measure or args.save_trace or args.use_in_compile:
            raise WorkbenchError("--list lists kernels only; give --kernel NAME to apply steps, measure or save a trace.")
        return _list(args)

    from core.compiler.manual.session import load_steps, open_session

    steps = load_steps(args.steps) if args.steps else []
    session = open_session(args.model, args.kernel, database=args.tune_db)
    session.start_from(args.start)
    session.apply_all(steps)
    measured = session.measure() if args.measure or args.use_in_compile else None
    filed = session.use_in_compile(args.tune_db) if args.use_in_compile else None
    if args.save_trace:
        out = Path(args.save_trace)
        try:
            out.write_text(json.dumps(session.to_json(), indent=1), encoding="utf-8")
        except OSError as exc:
            raise WorkbenchError(f"cannot write trace file '{out}': {exc.strerror}.") from None
    if args.json:
        obj = {"kernel": session.name, "start": session.start, "steps": session.steps, "tir": session.script(), "nest": session.nest().to_json(),
               "flops": session.flops, "bytes": session.bytes}
        if measured is not None:
            obj.update({"default_ms": measured.default_ms, "naive_ms": measured.naive_ms, "ms": measured.ms, "gflops": measured.gflops,
                        "peak_fraction": measured.peak_fraction, "tuned_ms": measured.tuned_ms, "tuned_kind": measured.tuned_kind,
                        "peak": session.peak.to_json()})
        if filed is not None:
            obj["use_in_compile"] = filed
        print(json.dumps(obj))
        return 0
    work = f"{session.flops / 1e6:.1f} MFLOP, {session.bytes / 1e6:.2f} MB moved at least" if session.flops else "symbolic shapes"
    print(f"kernel {session.name}: {len(session.steps)} steps applied; {work}")
    if args.start == "default":
        print(f"started from the default schedule: {session.default_plan().describe()}")
    for line in session.nest().describe():
        print(f"    {line}")
    if measured is not None:
        tuned = f", tuned record ({measured.tuned_kind}) {measured.tuned_ms:.4f} ms" if measured.tuned_ms is not None else ", no tuned record"
        print(f"measured alone: {measured.ms:.4f} ms, {measured.gflops:.2f} GFLOP/s = {measured.peak_fraction * 100:.1f}% of the "
              f"{session.peak.describe()}; default schedule {measured.default_ms:.4f} ms, naive {measured.naive_ms:.4f} ms{tuned}")
    if filed is not None:
        weighed = ", ".join(f"{o['kind']} {o['ms']:.4f} ms" for o in filed["options"] if o["ms"] is not None)
        from core.compiler.tuning.tune import default_database_root

        root = args.tune_db or default_database_root()
        print(f"filed in the tuning database {filed['database']}: `compile {args.model} --tune-db {root}` gives this kernel "
              f"the {filed['choice']} schedule ({weighed})")
    if not args.measure and not args.save_trace and not args.use_in_compile:
        print(session.script())
    if args.save_trace:
        print(f"trace written to {args.save_trace}", file=sys.stderr)
    return 0
