"""The compiler follows the rewrite: torch-exported Llama and BERT, compiled as exported and
compiled after the transformer-block rules, side by side.

    .venv/bin/python benchmarks/rewrite_compile.py [--batch 2] [--seq 32] [--runs 200]

For each fixture of tests/rewrites/data (torch.onnx dynamo exports, scripts/make_dynamo_fixtures.py):
the original, and the original rewritten with `upgrade-opset` and the transformer-block rules
(each rule verified with onnxruntime as it is applied). Both are given the same fixed input sizes
and the same clean-up (onnxscript's optimizer: its shape arithmetic folded, so both are timed as
a fixed-size deployment would run them; either also compiles as exported, with symbolic batch and
sequence), then compiled for the CPU (compile_model verifies each against onnxruntime).
Both compiled models run on the same inputs (token ids, a mask with right padding) and are
compared to onnxruntime's outputs of the ORIGINAL file. Latency: Artifact.run of the two,
alternating in one loop after a warm-up, median ms. Not a pass/fail test: it prints a table.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.common  # noqa: E402,F401 - first: it prepares the process before anything imports tvm

import numpy as np  # noqa: E402

from benchmarks.common import ROOT  # noqa: E402

DATA = ROOT / "tests" / "rewrites" / "data"
TRANSFORMER_RULES = (
    "upgrade-opset", "fuse-rms-normalization", "fuse-rotary-embedding", "fuse-swiglu", "fuse-silu", "fuse-gelu",
    "fuse-attention", "eliminate-dead-code",
)
MODELS = {"llama (dynamo)": DATA / "llama_dynamo.onnx", "bert (dynamo)": DATA / "bert_dynamo.onnx"}

__all__ = ["TRANSFORMER_RULES", "rewritten", "static", "feeds", "reference", "compare"]


def rewritten(graph):
    """A copy of `graph` after the transformer-block rules, each verified; and their reports."""
    from core.rewrite import run_rules
    from rewrites import get_rules

    g = graph.clone()
    reports = run_rules(g, get_rules(list(TRANSFORMER_RULES)), verify=True)
    return g, reports


def static(graph, batch: int, seq: int):
    """A copy with inputs of [batch, seq], its shape arithmetic folded (onnxscript's optimizer)."""
    import onnxscript.optimizer

    from core.model.boundary_edits import SetInputShape
    from core.model.onnx_io import load_model_bytes

    g = graph.clone()
    for v in list(g.model.graph.inputs):
        if not v.is_initializer():
            SetInputShape(g, v.name, [batch, seq]).do(g)
    proto = onnxscript.optimizer.optimize(g.to_proto())
    return load_model_bytes(proto.SerializeToString(), "static.onnx")


def feeds(batch: int, seq: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids, and an attention mask whose last sample is right-padded by a quarter."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - seq // 4:] = 0
    return {"input_ids": rng.integers(0, 128, (batch, seq)).astype(np.int64), "attention_mask": mask}


def reference(path: Path, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of the original file."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, inputs)


def compare(label: str, path: Path, batch: int, seq: int, runs: int) -> dict:
    from core import load_model
    from core.compiler.compile import compile_model

    original = load_model(path)
    rewritten_graph, reports = rewritten(original)
    applied = {r.rule: r.applied for r in reports if r.applied}
    arts = [compile_model(static(g, batch, seq), "cpu") for g in (original, rewritten_graph)]
    x = feeds(batch, seq)
    want = reference(path, x)
    diffs = [max(float(np.abs(o - w).max()) for o, w in zip(a.run(x), want)) for a in arts]
    for a in arts:  # warm-up
        for _ in range(10):
            a.run(x)
    times: list[list[float]] = [[], []]
    for _ in range(runs):
        for i, a in enumerate(arts):
            t0 = time.perf_counter()
            a.run(x)
            times[i].append((time.perf_counter() - t0) * 1e3)
    ms = [statistics.median(t) for t in times]
    return {"model": label, "nodes": (len(list(original.model.graph)), len(list(rewritten_graph.model.graph))),
            "ms": ms, "ratio": ms[1] / ms[0], "diff": diffs, "applied": applied}


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args(argv)
    import os

    print(f"{cpu_name()}, {os.cpu_count()} CPUs; inputs [{args.batch}, {args.seq}]; median of {args.runs} alternating runs")
    print(f"{'model':16} {'nodes before->after':>20} {'ms original':>12} {'ms rewritten':>13} {'ratio':>6} {'max abs diff (orig / rewr.)':>28}")
    for label, path in MODELS.items():
        r = compare(label, path, args.batch, args.seq, args.runs)
        nodes = f"{r['nodes'][0]} -> {r['nodes'][1]}"
        print(f"{label:16} {nodes:>20} {r['ms'][0]:12.3f} {r['ms'][1]:13.3f} {r['ratio']:6.2f} {r['diff'][0]:13.2e} / {r['diff'][1]:.2e}")
        print(f"{'':16} rules applied: {', '.join(f'{k} x{v}' for k, v in r['applied'].items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
