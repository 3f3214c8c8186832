"""How long step-through lowering takes, stage by stage, and which models lower at all.

    .venv/bin/python benchmarks/lowering.py                  # ResNet-50, every stage, CPU (goal: <= 10 s)
    .venv/bin/python benchmarks/lowering.py --model M.onnx --target cuda
    .venv/bin/python benchmarks/lowering.py --sweep          # the nine light models + the samples, CPU and CUDA
    .venv/bin/python benchmarks/lowering.py --disable ScheduleTIR   # what the rest costs

The end-to-end figure is wall time around core.compiler.lowering.lower (ONNX listing, import, every pass,
TVMScript printing of every stage, target code); graph views are built on demand by the GUI and are
timed separately. CPU time is printed too: on a shared 2-core machine wall time includes waiting.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT  # noqa: E402 - first: it prepares the process before anything imports tvm

GOAL_SECONDS = 10.0


def _light_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def one(model: Path, target: str, views: bool = True, disable: frozenset[str] = frozenset()) -> float:
    from core import load_model
    from core.compiler.lowering import lower
    from core.compiler.pipeline.pass_list import default_pipeline

    graph = load_model(model)
    specs = [s.toggled(False) if s.name in disable else s for s in default_pipeline(target)]
    t_import = time.perf_counter()
    import tvm  # noqa: F401 - once per process (the GUI has it loaded): not part of lowering
    from tvm.relax.frontend.onnx import from_onnx  # noqa: F401

    print(f"importing TVM: {time.perf_counter() - t_import:.2f} s (once per process, not counted below)")
    t0, c0 = time.perf_counter(), time.process_time()
    stages = lower(graph, target, specs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{model.name} -> {target}: {len(stages)} stages")
    print(f"{'#':>2}  {'stage':<26} {'level':<15} {'seconds':>8} {'lines':>8}")
    for s in stages:
        print(f"{s.index:>2}  {s.name:<26} {s.level:<15} {s.seconds:>8.3f} {s.text.count(chr(10)) + 1:>8}{'' if s.changed else '  (unchanged)'}")
    print(f"end to end: {wall:.2f} s wall, {cpu:.2f} s CPU (goal <= {GOAL_SECONDS:.0f} s): {'OK' if wall <= GOAL_SECONDS else 'OVER'}")
    if views:
        t1 = time.perf_counter()
        nodes = sum(len(s.view.nodes) for s in stages)
        print(f"graph views of all stages (built on demand in the GUI): {time.perf_counter() - t1:.2f} s, {nodes} nodes")
    return wall


def sweep() -> int:
    from core import load_model
    from core.compiler.lowering import lower

    models = sorted(_light_dir().glob("light_*.onnx")) + sorted((ROOT / "resources" / "models").glob("*.onnx"))
    print(f"{'model':<28} {'target':<6} {'stages':>6} {'seconds':>8}  last stage")
    failures = 0
    for path in models:
        graph = load_model(path)
        for target in ("cpu", "cuda"):
            t0 = time.perf_counter()
            try:
                stages = lower(graph, target)
                last = stages[-1] if target == "cpu" else next(s for s in stages if s.name == "CUDA C")
                marker = "define " if target == "cpu" else "__global__"
                ok = marker in last.text
                note = f"{last.name} ({len(last.text) // 1024} KiB){'' if ok else ' MISSING ' + marker}"
                failures += 0 if ok else 1
            except Exception as e:  # noqa: BLE001 - the sweep reports every failure and goes on
                stages, note = [], f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                failures += 1
            print(f"{path.stem:<28} {target:<6} {len(stages):>6} {time.perf_counter() - t0:>8.2f}  {note}", flush=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--disable", default="", help="passes to switch off, e.g. ScheduleTIR (to see what one step costs)")
    args = p.parse_args()
    if args.sweep:
        return sweep()
    model = args.model or (_light_dir() / "light_resnet50.onnx")
    one(model, args.target, disable=frozenset(x for x in args.disable.split(",") if x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
