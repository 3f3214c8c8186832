"""`lower MODEL [--target cpu|cuda] [--cpu NAME] [--cpu-features F] [--triple T] [--preset DEVICE] [--dump DIR] [--json]`: the model, one lowering step at a time.

Runs core.compiler.lowering.lower (the same stages the GUI's Lowering panel shows) and prints each stage's
name, abstraction level, pass and seconds; with --dump, writes one numbered text file per stage
(`00_ONNX_graph.txt`, `01_Relax_import.py`, ..., `19_LLVM_IR.ll`). When a step fails (an op TVM
cannot import, a pass that breaks), the stages before it are still printed and dumped, then the
command exits 2 with one sentence naming the op/node or the pass.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from cli.compile_cmd import add_cpu_arguments, add_target_argument

HELP = "step the model down through TVM's abstraction levels, printing (and dumping) every stage"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    add_target_argument(p, "target (default: cpu; cuda needs no GPU)")
    add_cpu_arguments(p)
    p.add_argument("--dump", metavar="DIR", help="write one numbered text file per stage into DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object: {model, target, stages: [...]}")
    p.add_argument("--disable", metavar="P1,P2", default="", help="passes to switch off (see --list-passes)")
    p.add_argument("--asm", action="store_true", help="also show CPU assembly (a second codegen, slower)")
    p.add_argument("--list-passes", action="store_true", help="print the default pipeline for the target and exit")


def _report(args, stages, error: str | None) -> None:
    from core.compiler.lowering import stage_filename
    from core.files import atomic_write

    files: dict[int, str] = {}
    if args.dump:
        out = Path(args.dump)
        out.mkdir(parents=True, exist_ok=True)
        for s in stages:
            path = out / stage_filename(s)
            atomic_write(path, s.text.encode("utf-8"))  # a full disk: one sentence naming the file, no half of one
            files[s.index] = str(path)
    rows = []
    for s in stages:
        row = {"index": s.index, "name": s.name, "level": s.level, "pass": s.pass_name, "seconds": round(s.seconds, 4),
               "changed": s.changed, "lines": s.text.count("\n") + 1}
        if args.dump:
            row["file"] = files[s.index]
        rows.append(row)
    if args.json:
        obj = {"model": args.model, "target": args.target, "stages": rows,
               "total_seconds": round(sum(s.seconds for s in stages), 4)}
        if error:
            obj["error"] = error
        print(json.dumps(obj))
        return
    width = max((len(r["name"]) for r in rows), default=10)
    print(f"{'#':>2}  {'stage':<{width}}  {'level':<14}  {'seconds':>8}  {'lines':>8}  file")
    for r in rows:
        mark = "" if r["changed"] else "  (unchanged)"
        print(f"{r['index']:>2}  {r['name']:<{width}}  {r['level']:<14}  {r['seconds']:>8.3f}  {r['lines']:>8}  {r.get('file', '')}{mark}")
    print(f"total {sum(r['seconds'] for r in rows):.2f} s over {len(rows)} stages")


def _progress(args):
    """Step-by-step progress on a terminal (a big model lowers for a minute); none when piped."""
    if args.json or not sys.stderr.isatty():
        return None

    def report(event) -> None:  # a core.progress.Progress, as each step starts
        print(f"[{event.fraction:4.0%}] {event.message}", file=sys.stderr, flush=True)

    return report


def run(args) -> int:
    from core import load_model
    from core.errors import WorkbenchError
    from core.compiler.lowering import lower
    from core.compiler.pipeline.pass_list import PASSES, default_pipeline

    from cli.compile_cmd import cpu_target

    if args.list_passes:
        for spec in default_pipeline(args.target):
            info = PASSES[spec.name]
            print(f"{spec.name:<26} {info.level:<14} {'required ' if info.required else ''}{info.description}")
        return 0
    target = cpu_target(args, args.target)
    graph = load_model(args.model)
    specs = default_pipeline(args.target)
    disable = {p.strip() for p in args.disable.split(",") if p.strip()}
    unknown = disable - {s.name for s in specs}
    if unknown:
        raise WorkbenchError(f"unknown pass '{sorted(unknown)[0]}' in --disable: the pipeline has {', '.join(s.name for s in specs)}.")
    specs = [s.toggled(False) if s.name in disable else s for s in specs]
    try:
        stages = lower(graph, target, specs, assembly=args.asm, progress=_progress(args))
    except WorkbenchError as e:  # core.errors.Cancelled (with the stages done) is one too
        partial = getattr(e, "stages", []) or []
        if partial:
            _report(args, partial, str(e))
        if not args.json and partial:
            print(f"stopped after stage {partial[-1].index} ({partial[-1].name}).", file=sys.stderr)
        raise
    _report(args, stages, None)
    return 0
