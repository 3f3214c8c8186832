"""Big graphs through the chain: inspect, lower and compile a chain of Relu by size.

    .venv/bin/python benchmarks/big_graph.py [--sizes 2000,10000,60000] [--steps inspect,lower,compile]

Each step runs as the CLI in its own process (as a user runs it); the table gives wall seconds and
the process's CPU seconds (on a shared machine wall time includes waiting for a core; CPU time
does not). Targets (issue 16): a 60,000-node chain `inspect` <= 2 s; `lower` / `compile` <= 60 s
or a clear refusal (MLCWB_MAX_NODES, core.compiler.pipeline.size_limit). Prints a table, not pass/fail.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT  # noqa: E402 - first: it prepares the process before anything imports tvm

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402


def chain_model(n: int, path: Path) -> Path:
    """n Relu nodes in a row on a [1, 16] tensor: the simplest big graph."""
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu_{i}") for i in range(n)]
    g = helper.make_graph(nodes, f"chain_{n}", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 16])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def run_step(args: list[str], env: dict | None = None, timeout: float = 900) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the child, exit status, last stderr line) of `python main.py ARGS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, str(ROOT / "main.py"), *args], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})}, cwd=str(ROOT))
        rc, err = r.returncode, (r.stderr.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired:
        rc, err = -1, f"timed out after {timeout:.0f} s"
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc, err


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,10000,60000")
    parser.add_argument("--steps", default="inspect,lower,compile")
    parser.add_argument("--no-limit", action="store_true", help="MLCWB_MAX_NODES=0: run lower/compile past the limit")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    steps = args.steps.split(",")
    env = {"MLCWB_MAX_NODES": "0"} if args.no_limit else {}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall includes waiting for a core)")
    print(f"{'nodes':>8}  {'step':<8}{'wall s':>9}{'cpu s':>8}{'target':>8}  outcome")
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            path = chain_model(n, Path(d) / f"chain_{n}.onnx")
            for step in steps:
                cmd = {"inspect": ["inspect", str(path)], "lower": ["lower", str(path)],
                       "compile": ["compile", str(path), "--target", "cpu", "-o", str(Path(d) / f"art_{n}")]}[step]
                wall, cpu, rc, err = run_step(cmd, env)
                target = "2" if step == "inspect" else "60"
                outcome = "ok" if rc == 0 else (f"refused: {err[:90]}" if rc == 2 else f"exit {rc}: {err[:90]}")
                print(f"{n:>8}  {step:<8}{wall:>9.1f}{cpu:>8.1f}{target:>8}  {outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
