"""How fast a compile stops when cancelled, step by step, and what cancellable code generation costs.

    .venv/bin/python benchmarks/cancel_latency.py                    # SqueezeNet (light, random weights), CPU
    .venv/bin/python benchmarks/cancel_latency.py --model M.onnx --steps "code generation,FuseTIR"

First one plain compile records when each step starts and how long it runs. Then, for each step,
a compile is cancelled part-way into it (`--at`, a fraction of the step's duration) and the table
shows the latency: from `cancel()` turning true to compile_model raising CompileCancelled (goal:
<= 0.5 s), and for code generation also when its last background build thread ended (groups
already building finish their kernels). Last, code generation is timed side by side: plain
`tvm.compile` against core.compiler.backend.codegen.build_executable on the same scheduled module.
On a shared machine wall times are noisy; run it twice.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.common  # noqa: E402,F401 - first: it prepares the process before anything imports tvm

GOAL_S = 0.5


def _graph(model: str | None):
    import onnx

    from core import load_model
    from core.verify import with_random_weights

    if model:
        return load_model(model)
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    return with_random_weights(load_model(light), seed=0)


def _timeline(graph, verify: bool) -> list[tuple[str, float]]:
    from core.compiler.compile import compile_model

    marks: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    compile_model(graph, "cpu", verify=verify, progress=lambda event: marks.append((event.message, time.perf_counter() - t0)))
    return [(name, marks[i + 1][1] - t) for i, (name, t) in enumerate(marks[:-1])]


def _cancel_in(graph, step: str, delay: float, verify: bool) -> tuple[float, float | None]:
    from core.compiler.compile import CompileCancelled, compile_model

    flag = {"at": None}

    def progress(event):
        if event.message == step and flag["at"] is None:
            def fire():
                flag["at"] = time.perf_counter()
            threading.Timer(delay, fire).start()

    try:
        compile_model(graph, "cpu", verify=verify, progress=progress, cancel=lambda: flag["at"] is not None)
    except CompileCancelled:
        stopped = time.perf_counter()
    else:
        return float("nan"), None
    builders = [t for t in threading.enumerate() if t.name.startswith("codegen")]
    for t in builders:
        t.join()
    idle = time.perf_counter() if builders else None
    return stopped - flag["at"], (idle - flag["at"]) if idle is not None else None


def _codegen_side_by_side(graph, repeats: int) -> None:
    import tvm

    from core.compiler.backend.codegen import build_executable
    from core.compiler.pipeline.runner import Pipeline

    pipe = Pipeline("cpu")
    target = pipe.target
    mod = pipe.run(pipe.import_graph(graph).mod)  # every step: what code generation starts from
    from core.compiler.runtime.artifact import Artifact, specs_from_proto
    from core.compiler.check.reference import random_feeds

    inputs, outputs = specs_from_proto(graph.to_proto())
    feeds = random_feeds(inputs, seed=0)

    def first_run(ex) -> None:  # LLVM makes machine code at the first lookup: count it on both sides
        Artifact(library=ex, target="cpu", inputs=inputs, outputs=outputs).run(feeds)

    rows = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        first_run(tvm.compile(mod, target, relax_pipeline=None))
        plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        first_run(build_executable(mod, target))
        ours = time.perf_counter() - t0
        rows.append((plain, ours))
    print("\ncode generation + first run (machine code), same module after every step (seconds):")
    print(f"{'tvm.compile':>12} {'build_executable':>17} {'ratio':>7}")
    for plain, ours in rows:
        print(f"{plain:>12.2f} {ours:>17.2f} {ours / plain:>7.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--steps", help="comma-separated step names (default: every step over 0.05 s)")
    ap.add_argument("--at", type=float, default=0.3, help="cancel this far into the step (fraction of its duration)")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    graph = _graph(args.model)
    import tvm  # noqa: F401 - loaded once, as in the GUI

    _timeline(graph, verify=False)  # warm caches (first-time imports inside TVM)
    steps = _timeline(graph, verify=True)
    wanted = [s.strip() for s in args.steps.split(",")] if args.steps else [n for n, d in steps if d > 0.05]
    print(f"{graph.path.name if graph.path else 'model'}: compile for cpu, cancel {args.at:.0%} into the step")
    print(f"{'step':<28} {'step s':>7} {'stopped after s':>16} {'threads idle after s':>21}  goal <= {GOAL_S} s")
    worst = 0.0
    for name, dur in steps:
        if name not in wanted:
            continue
        verify = name == "check against onnxruntime"
        lat, idle = _cancel_in(graph, name, dur * args.at, verify)
        worst = max(worst, lat)
        idle_text = f"{idle:.3f}" if idle is not None else "-"
        print(f"{name:<28} {dur:>7.3f} {lat:>16.3f} {idle_text:>21}  {'OK' if lat <= GOAL_S else 'OVER'}")
    print(f"worst: {worst:.3f} s")
    _codegen_side_by_side(graph, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
