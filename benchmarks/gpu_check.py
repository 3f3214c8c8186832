"""Compile the light models (and the bundled samples) for CUDA, run them on the GPU, compare with
onnxruntime on the CPU, print latency. Skips cleanly (exit 0, one line) where no CUDA GPU is.

Each model goes through the deployable path: compile for CUDA -> export (kernels compiled to a
fatbin by nvcc) -> load_artifact -> run, so what is checked is what a user ships.

    .venv/bin/python benchmarks/gpu_check.py [--runs N] [--models squeezenet,resnet50,...] [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    import numpy as np
    import onnx

    from core import load_model
    from core.compiler.artifact import load_artifact
    from core.compiler.compile import compile_model
    from core.compiler.reference import compare_outputs, ort_run, random_feeds
    from core.compiler.target import gpu_present
    from core.errors import WorkbenchError
    from core.verify import with_random_weights

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--models", default="")
    ap.add_argument("--out", default="", help="keep the exported artifacts here (default: a temporary folder)")
    args = ap.parse_args()
    if not gpu_present():
        print("gpu_check: no CUDA GPU visible to TVM here; skipped.")
        return 0
    import tvm

    dev = tvm.cuda(0)
    print(f"GPU: {dev.device_name}, compute {dev.compute_version}; TVM {tvm.__version__}")
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    models = [(p.stem.removeprefix("light_"), p, True) for p in sorted(light.glob("light_*.onnx"))]
    models += [(p.stem, p, False) for p in sorted((ROOT / "resources" / "models").glob("*.onnx"))]
    if args.models:
        wanted = set(args.models.split(","))
        models = [m for m in models if m[0] in wanted]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    print(f"{'model':18s} {'compile s':>9s} {'export s':>8s} {'max abs err':>11s} {'match':>5s} {'gpu ms':>8s} {'ort cpu ms':>10s}")
    bad = 0
    for name, path, randomize in models:
        graph = load_model(path)
        if randomize:
            graph = with_random_weights(graph, seed=0)
        try:
            t0 = time.perf_counter()
            art = compile_model(graph, "cuda", verify=False)
            t1 = time.perf_counter()
            folder = art.export(out / name)
            t2 = time.perf_counter()
            loaded = load_artifact(folder)
            feeds = random_feeds(loaded.inputs, seed=0, dims={"batch": 2})
            ours = loaded.run(feeds)
            t_ort = time.perf_counter()
            ref = ort_run(loaded.model_bytes, feeds)
            ort_ms = (time.perf_counter() - t_ort) * 1000
            ok, err, _ = compare_outputs(ours, ref)
            args_dev = loaded.to_device(feeds)
            for _ in range(3):
                loaded.run_device(args_dev)
            dev.sync()
            times = []
            for _ in range(args.runs):
                s = time.perf_counter()
                loaded.run_device(args_dev)
                dev.sync()
                times.append((time.perf_counter() - s) * 1000)
            print(f"{name:18s} {t1 - t0:9.1f} {t2 - t1:8.1f} {err:11.3g} {'yes' if ok else 'NO':>5s} {float(np.median(times)):8.3f} {ort_ms:10.2f}", flush=True)
            bad += 0 if ok else 1
        except WorkbenchError as e:
            bad += 1
            print(f"{name:18s} FAILED: {e}", flush=True)
    print(f"artifacts in {out}; {bad} model(s) failed or mismatched")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
