"""Compile every light model (onnx wheel) and every bundled sample for CPU; check against onnxruntime.

Prints one row per model: compile seconds, max abs error against onnxruntime, whether it matches
at rtol 1e-3 / atol 1e-4, the output's spread (std), our latency, the onnxruntime latency and the
ratio (medians of interleaved warmed-up runs). Two things keep the check meaningful: the light
models get seeded random weights (their ConstantOfShape weights make outputs nearly
input-independent), and a final Softmax is cut off (`--keep-softmax` keeps it) so the logits are
compared: with random weights a softmax saturates to one-hot and any two models "match".

    .venv/bin/python benchmarks/compile_check.py [--runs N] [--models squeezenet,mlp,...]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    import onnx

    from core import load_model
    from core.compiler.measure.bench import benchmark
    import numpy as np

    from core.compiler.compile import compile_model

    from core.compiler.check.reference import ort_run, random_feeds
    from core.errors import WorkbenchError
    from core.verify import with_random_weights

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", default="", help="comma-separated subset (light model or sample names)")
    ap.add_argument("--keep-softmax", action="store_true", help="compare the final softmax, not the logits")
    args = ap.parse_args()
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    models = [(p.stem.removeprefix("light_"), p, True) for p in sorted(light.glob("light_*.onnx"))]
    models += [(p.stem, p, False) for p in sorted((ROOT / "resources" / "models").glob("*.onnx"))]
    if args.models:
        wanted = set(args.models.split(","))
        models = [m for m in models if m[0] in wanted]
    print(f"{'model':18s} {'compile s':>9s} {'max abs err':>11s} {'match':>5s} {'out std':>8s} {'ours ms':>9s} {'ort ms':>8s} {'ratio':>7s}")
    ratios, failures = [], 0
    for name, path, randomize in models:
        graph = load_model(path)
        if randomize:
            graph = with_random_weights(graph, seed=0)
        if not args.keep_softmax:
            graph = _logits(graph)
        dims = {"batch": 2}
        t0 = time.perf_counter()
        try:
            art = compile_model(graph, "cpu", verify_dims=dims)
        except WorkbenchError as e:
            failures += 1
            print(f"{name:18s} REFUSED: {e}", flush=True)
            continue
        secs = time.perf_counter() - t0
        res = benchmark(art, runs=args.runs, warmup=1, vs_ort=True, dims=dims, kernels=False)
        ratios.append(res.ratio)
        spread = float(np.std(ort_run(art.model_bytes, random_feeds(art.inputs, seed=0, dims=dims))[0]))
        print(
            f"{name:18s} {secs:9.1f} {res.max_abs_err_vs_ort:11.3g} {'yes' if res.outputs_match_ort else 'NO':>5s} {spread:8.3g} "
            f"{res.latency_ms['median']:9.2f} {res.ort_latency_ms['median']:8.2f} {res.ratio:7.2f}",
            flush=True,
        )
        failures += 0 if res.outputs_match_ort else 1
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geometric mean ratio ours/onnxruntime: {geo:.2f}x over {len(ratios)} models; {failures} refused or mismatched")
    return 1 if failures else 0


def _logits(graph):
    """The graph with a final Softmax removed (its input becomes the graph output)."""
    from core.model.onnx_io import load_model_bytes

    proto = graph.to_proto()
    g = proto.graph
    outs = {o.name for o in g.output}
    last = [n for n in g.node if n.op_type == "Softmax" and n.output[0] in outs]
    if not last:
        return graph
    for n in last:
        for o in g.output:
            if o.name == n.output[0]:
                o.name = n.input[0]
        g.node.remove(n)
    return load_model_bytes(proto.SerializeToString(), graph.path or "model.onnx")


if __name__ == "__main__":
    sys.exit(main())
