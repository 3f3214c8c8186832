"""3x3 stride-1 convs: Winograd F(4x4,3x3) and F(2x2,3x3) against the direct NCHWc conv, and their error.

For each shape (input channels, output channels, size) a model of one 3x3 conv (padding 1) +
bias + ReLU with seeded random normal weights is compiled three ways through the default
pipeline (core.compiler.compile): direct (core.compiler.passes.layout.winograd's rule switched off), F(2,3)
and F(4,3) (where 4 divides the size), and the compiled models are timed in alternating blocks in
this one process (min and median ms over the blocks; each block runs for --block-seconds after 3
warm-up runs); the times include the two layout transforms at the model's edges, the same in
every variant. Each variant's output is compared with onnxruntime's (max abs error and max abs
error / max |output|). A stack of --depth such convs at 32x32 shows how the error grows with
depth.

    python benchmarks/winograd_vs_direct.py [--shapes 64x64x56,512x512x28] [--cpu-features=-avx512f]
        [--reps 5] [--block-seconds 0.3] [--depth 8]
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

DEFAULT_SHAPES = "32x32x56,64x64x56,64x64x224,128x128x112,256x256x56,512x512x28,256x256x14,512x512x14,128x32x28"


def _stack(channels: list[int], size: int, seed: int = 0):
    """Conv(3x3, pad 1) + bias + ReLU layers through `channels` (He-initialized normal weights)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i, (c, k) in enumerate(itertools.pairwise(channels)):
        w = (rng.standard_normal((k, c, 3, 3)) * np.sqrt(2.0 / (c * 9))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array((0.1 * rng.standard_normal(k)).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels[0], size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels[-1], size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = Path(tempfile.mkdtemp()) / "convs.onnx"
    onnx.save(model, str(path))
    return str(path)


def _variants(size: int) -> dict:
    """name -> (WINOGRAD_MIN_CHANNELS, WINOGRAD_TILES): each variant forced, whatever the default
    rule would choose."""
    out = {"direct": (1 << 30, (4, 2)), "F(2,3)": (1, (2,))}
    if size % 4 == 0:
        out["F(4,3)"] = (1, (4,))
    return out


def _compile(path: str, variant, cpu_features):
    from core.compiler.passes.layout import winograd
    from core.compiler.compile import compile_model

    names = ("WINOGRAD_MIN_CHANNELS", "WINOGRAD_TILES")
    saved = [getattr(winograd, n) for n in names]
    for n, v in zip(names, variant):
        setattr(winograd, n, v)
    try:
        return compile_model(path, "cpu", verify=False, cpu_features=cpu_features)
    finally:
        for n, v in zip(names, saved):
            setattr(winograd, n, v)


def _errors(arts: dict, path: str, x: np.ndarray) -> dict:
    import onnxruntime as ort

    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    scale = float(np.abs(ref).max()) or 1.0
    out = {}
    for name, art in arts.items():
        err = float(np.abs(art.run({"x": x})[0] - ref).max())
        out[name] = (err, err / scale)
    return out


def _time(arts: dict, x: np.ndarray, reps: int, block_s: float) -> dict:
    import tvm

    xt = tvm.runtime.tensor(x)
    times = {name: [] for name in arts}
    mains = {name: art.vm()["main"] for name, art in arts.items()}
    for _ in range(reps):
        for name, f in mains.items():
            for _ in range(3):
                f(xt)
            n, t0 = 0, time.perf_counter()
            while n == 0 or time.perf_counter() - t0 < block_s:
                f(xt)
                n += 1
            times[name].append((time.perf_counter() - t0) / n * 1e3)
    return times


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="CxKxSIZE,... (input channels, output channels, height = width)")
    parser.add_argument("--cpu-features", default=None, help="LLVM features for the target, e.g. -avx512f (AVX2 code)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    parser.add_argument("--depth", type=int, default=8, help="convs in the error-growth stack (0: none)")
    args = parser.parse_args(argv)
    features = [f for f in args.cpu_features.split(",") if f] if args.cpu_features else None
    print(f"cpu features {features or 'host default'}  load {_load()}")
    print(f"{'shape':>14} {'variant':>8} {'min ms':>9} {'median ms':>10} {'min x direct':>13} {'max abs err':>12} {'rel err':>9}")
    for shape in args.shapes.split(","):
        c, k, size = (int(v) for v in shape.split("x"))
        path = _stack([c, k], size)
        arts = {name: _compile(path, v, features) for name, v in _variants(size).items()}
        x = np.random.default_rng(1).standard_normal((1, c, size, size)).astype(np.float32)
        errors = _errors(arts, path, x)
        times = _time(arts, x, args.reps, args.block_seconds)
        base = min(times["direct"])
        for name, ts in times.items():
            err, rel = errors[name]
            print(f"{shape:>14} {name:>8} {min(ts):9.3f} {sorted(ts)[len(ts) // 2]:10.3f} {min(ts) / base:13.2f} {err:12.2e} {rel:9.1e}")
        print(f"{'':>14} load {_load()}")
    if args.depth:
        path = _stack([64] * (args.depth + 1), 32, seed=2)
        arts = {name: _compile(path, v, features) for name, v in _variants(32).items()}
        x = np.random.default_rng(3).standard_normal((1, 64, 32, 32)).astype(np.float32)
        for name, (err, rel) in _errors(arts, path, x).items():
            print(f"stack of {args.depth} 64-channel convs at 32x32, {name}: max abs err {err:.2e}, relative {rel:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
