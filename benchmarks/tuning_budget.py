"""Where the time of `compile --tune-minutes M` goes: wall time of each phase, on a fresh database.

Prints, per model, when each phase starts and ends (seconds since the compile started): the
tuning (core.compiler.tuning.tune.tune_module), each kernel's template search, the model-level A/B
(core.compiler.tuning.ab.model_ab) with its settle() waits and timings, and the end of the
compile; then the tuning summary and the A/B's outcome. `--tune-minutes M` should end within
about M minutes plus the compile's own build time (the tuner starts no step that would end past
its share, core.compiler.tuning.runners.Pace; the A/B keeps core.compiler.tuning.ab.ab_reserve_s).
The models are the benchmark models (benchmarks.common).

    python benchmarks/tuning_budget.py [--models mobilenet_v3_small,squeezenet] [--tune-minutes 1]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import benchmark_models, load_proto  # noqa: E402 - first: it prepares the process before anything imports tvm

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mobilenet_v3_small,squeezenet")
    parser.add_argument("--tune-minutes", type=float, default=1.0)
    args = parser.parse_args(argv)

    from core.compiler.tuning import tune as tuning, ab as tuning_ab
    from core.compiler.compile import compile_model
    from core.compiler.tuning.ab import describe_ab

    models = benchmark_models()
    clock = {"start": time.monotonic()}

    def mark(label: str) -> None:
        print(f"{time.monotonic() - clock['start']:8.1f} s  {label}", flush=True)

    def wrap(module, name: str) -> None:
        real = getattr(module, name)

        def timed(*a, **k):
            mark(f"{name} starts")
            started = time.monotonic()
            try:
                return real(*a, **k)
            finally:
                mark(f"{name} ends ({time.monotonic() - started:.1f} s)")

        setattr(module, name, timed)

    for module, name in ((tuning, "tune_module"), (tuning, "_tune_template"), (tuning_ab, "model_ab"), (tuning_ab, "settle"),
                         (tuning_ab, "time_builds")):
        wrap(module, name)
    print(f"compile --tune-minutes {args.tune_minutes:g}, fresh database; load average {os.getloadavg()[0]:.1f}")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name not in models:
            print(f"{name}: no such benchmark model", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            path.write_bytes(load_proto(models[name]).SerializeToString())
            print(f"== {name}")
            clock["start"] = time.monotonic()
            art = compile_model(str(path), "cpu", verify=False, tune_db=str(Path(tmp) / "db"), tune_budget_s=args.tune_minutes * 60)
            mark("compile ends")
            report = art.manifest.tuning
            print(f"  {report.summary if report else None}")
            if report and report.model_ab:
                print(f"  {describe_ab(report.model_ab)}")
            print(f"  total {time.monotonic() - clock['start']:.1f} s for a budget of {args.tune_minutes * 60:.0f} s; "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
