"""`debug MODEL [--against OTHER.onnx] [--inputs IN.npz] [--target cpu|cuda] [--tune-db DIR] [--per-node] [--json]`:
where numbers go wrong, tensor by tensor (core.accuracy).

Without --against: the compiled program against onnxruntime, read at its kernels' outputs. With
--against: OTHER against MODEL (the reference), tensors paired through the diff's node matching.
Prints the first divergence (the earliest node that differs while its inputs agree) and the worst
tensors; --json prints one object `{"tensors": [{"node", "op", "output", "max_abs", "max_rel",
"range", "tol_units", ...}], "first_divergence": {...} or null, ...}`. Exit 0 when the run completes,
divergence or not."""
from __future__ import annotations

import json
import math
import sys

from .compile_cmd import add_cpu_arguments, add_target_argument, cpu_target, parse_dims

HELP = "find where numbers go wrong: compare the compiled program (or another model) with the reference, tensor by tensor"

TOP = 12  # tensors listed in the text output, worst first


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file (the reference side)")
    p.add_argument("--against", metavar="OTHER.onnx", help="compare this model with MODEL instead of MODEL's compiled program")
    p.add_argument("--inputs", metavar="IN.npz", help="inputs (an .npz keyed by input name) instead of seeded random ones")
    add_target_argument(p, "the compiled program's target: cpu (this host) or cuda (needs a GPU)")
    add_cpu_arguments(p)
    p.add_argument("--tune-db", metavar="DIR", help="apply this tuning database's records to the compiled program (a tuned build against the reference)")
    p.add_argument("--per-node", action="store_true", help="read every float tensor of the compiled program (splits its fused kernels)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="value of a symbolic dim for random inputs (repeatable; default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--rtol", metavar="R", help="relative tolerance (default 1e-3)")
    p.add_argument("--atol", metavar="A", help="absolute tolerance (default 1e-4)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from core import load_model
    from core.accuracy.debug import debug_compiled, debug_models
    from core.compiler.check.user_inputs import parse_tolerance, read_npz
    from core.tolerances import ATOL, RTOL

    parse_dims(args.dim)
    rtol, atol = parse_tolerance(args.rtol, "--rtol", RTOL), parse_tolerance(args.atol, "--atol", ATOL)
    inputs = read_npz(args.inputs) if args.inputs else None
    graph = load_model(args.model)
    dims = parse_dims(args.dim, graph)
    if args.against:
        other = load_model(args.against)
        report = debug_models(graph, other, inputs=inputs, seed=args.seed, dims=dims, rtol=rtol, atol=atol,
                              reference=args.model, subject=args.against)
    else:
        from core.compiler.target import cannot_run_here, target_cpu
        from core.errors import WorkbenchError

        why = cannot_run_here(target_cpu(cpu_target(args)))  # an unknown CPU is refused before anything is compiled
        if why and (args.triple or args.preset):
            raise WorkbenchError(f"debug runs the compiled model here, step by step; {why[0].lower()}{why[1:]}")
        report = debug_compiled(graph, args.target, inputs=inputs, seed=args.seed, dims=dims, rtol=rtol, atol=atol,
                                cpu=args.cpu, tune_db=args.tune_db, per_node=args.per_node,
                                progress=None if args.json else _progress)
    if args.json:
        print(json.dumps(report.to_json()))
        return 0
    _print(report)
    return 0


def _progress(fraction: float, message: str) -> None:
    if fraction < 1.0:
        print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if math.isfinite(x) else str(x)


def _print(report) -> None:
    from core.accuracy.report import describe

    print(f"reference: {report.reference}" + (f" (run by {report.runtime})" if report.runtime and report.runtime != report.reference else ""))
    print(f"checked:   {report.subject}")
    print(report.summary())
    for note in report.notes:
        print(f"note: {note}")
    if not report.tensors:
        return
    rows = report.ranked()[:TOP]
    print(f"\nworst {len(rows)} of {len(report.tensors)} (error in units of the tolerance; quantization steps where a scale applies):")
    head = ["node", "op", "output", "max abs", "× tol", "steps", "range", "kernel" if report.mode == "compiled" else ""]
    table = [[t.node, t.op, t.output, _fmt(t.max_abs), _fmt(t.tol_units), _fmt(t.steps),
              f"{t.range[0]:.3g}..{t.range[1]:.3g}" if t.range else "-", t.kernel or ""] for t in rows]
    widths = [max(len(str(r[i])) for r in [head, *table]) for i in range(len(head))]
    for r in [head, *table]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    if report.first is not None:
        print(f"\nfirst divergence: {report.first.op} '{report.first.node}': {describe(report.first)}")
