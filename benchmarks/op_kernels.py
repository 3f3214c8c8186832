"""One operator (or one block) at a time: the workbench's kernel against onnxruntime's, or against
another algorithm for the same op. One `--mode` each.

    mobile    The kernels of depthwise + squeeze-excitation networks (EfficientNet-B0 / MobileNetV2
              depthwise convs with their SiLU or ReLU6 tail, global average pools, a
              squeeze-excitation block, 3x3 stride-2 pools, ShuffleNet's channel shuffle), ours
              against onnxruntime.
    winograd  3x3 stride-1 convs: Winograd F(4x4,3x3) and F(2x2,3x3) against the direct NCHWc
              conv, their times and their error.

    python benchmarks/op_kernels.py --mode mobile [--threads 1] [--only dw,gap,se,pool,shuffle] [--blocked]
    python benchmarks/op_kernels.py --mode winograd [--shapes 64x64x56,512x512x28] [--cpu-features=-avx512f]
        [--reps 5] [--block-seconds 0.3] [--depth 8]

`--mode MODE --help` lists a mode's options; each mode's entry point (mobile_main, winograd_main)
says what it measures and how.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import host_description  # noqa: E402 - first: it prepares the process before anything imports tvm

__all__ = ["CASES", "build_blocked_case", "build_case", "main", "mobile_main", "winograd_main"]

# -- mobile: depthwise, pool, squeeze-excitation and shuffle kernels against onnxruntime's

# (kind, channels, size, kernel, stride): EfficientNet-B0's depthwise convs (SiLU) and MobileNetV2's (ReLU6)
CASES = [
    ("dw_silu", 32, 112, 3, 1),
    ("dw_silu", 96, 112, 3, 2),
    ("dw_silu", 144, 56, 3, 1),
    ("dw_silu", 144, 56, 5, 2),
    ("dw_silu", 240, 28, 5, 1),
    ("dw_silu", 480, 14, 3, 1),
    ("dw_silu", 672, 14, 5, 1),
    ("dw_silu", 672, 14, 5, 2),
    ("dw_silu", 1152, 7, 5, 1),
    ("dw_relu6", 192, 28, 3, 2),
    ("dw_relu6", 384, 14, 3, 1),
    ("dw_relu6", 960, 7, 3, 1),
    ("gap", 96, 112, 0, 0),
    ("gap", 144, 56, 0, 0),
    ("gap", 672, 14, 0, 0),
    ("gap", 1152, 7, 0, 0),
    ("se", 240, 14, 0, 0),
    ("se", 672, 14, 0, 0),
    ("se", 1152, 7, 0, 0),
    ("maxpool", 24, 112, 3, 2),
    ("avgpool", 256, 28, 3, 2),
    ("shuffle", 112, 56, 0, 0),
    ("shuffle", 272, 14, 0, 0),
]


def build_case(kind: str, c: int, size: int, k: int, stride: int):
    """The ONNX model of one case (input 'x' of [1, c, size, size])."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    if kind.startswith("dw"):
        p = (k - 1) // 2
        w = const("w", (rng.standard_normal((c, 1, k, k)) / k).astype(np.float32))
        b = const("b", (rng.standard_normal(c) * 0.1).astype(np.float32))
        nodes.append(helper.make_node("Conv", ["x", w, b], ["c"], group=c, kernel_shape=[k, k], pads=[p] * 4, strides=[stride] * 2))
        if kind == "dw_silu":
            nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
        else:
            nodes.append(helper.make_node("Clip", ["c", const("lo", np.float32(0)), const("hi", np.float32(6))], ["y"]))
    elif kind == "gap":
        nodes.append(helper.make_node("GlobalAveragePool", ["x"], ["y"]))
    elif kind == "se":
        sq = max(8, c // 24)
        w1 = const("w1", (rng.standard_normal((sq, c, 1, 1)) / math.sqrt(c)).astype(np.float32))
        w2 = const("w2", (rng.standard_normal((c, sq, 1, 1)) / math.sqrt(sq)).astype(np.float32))
        b1, b2 = const("b1", np.zeros(sq, np.float32)), const("b2", np.zeros(c, np.float32))
        nodes += [
            helper.make_node("GlobalAveragePool", ["x"], ["g"]),
            helper.make_node("Conv", ["g", w1, b1], ["c1"]),
            helper.make_node("Sigmoid", ["c1"], ["s1"]),
            helper.make_node("Mul", ["c1", "s1"], ["a1"]),
            helper.make_node("Conv", ["a1", w2, b2], ["c2"]),
            helper.make_node("Sigmoid", ["c2"], ["s"]),
            helper.make_node("Mul", ["s", "x"], ["y"]),
        ]
    elif kind in ("maxpool", "avgpool"):
        op = "MaxPool" if kind == "maxpool" else "AveragePool"
        nodes.append(helper.make_node(op, ["x"], ["y"], kernel_shape=[k, k], strides=[stride] * 2, pads=[1, 1, 1, 1]))
    elif kind == "shuffle":
        groups = 4
        s1 = const("s1", np.array([1, groups, c // groups, size, size], np.int64))
        s2 = const("s2", np.array([1, c, size, size], np.int64))
        nodes += [
            helper.make_node("Reshape", ["x", s1], ["r"]),
            helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
            helper.make_node("Reshape", ["t", s2], ["y"]),
        ]
    else:
        raise ValueError(f"unknown case kind {kind}")
    graph = helper.make_graph(
        nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def build_blocked_case(kind: str, c: int, size: int, k: int, stride: int, target, block: int):
    """A depthwise case ("dw_silu" / "dw_relu6") in NCHW{block}c as the default CPU pipeline
    compiles it inside a blocked network (core.compiler.passes.layout.nchwc): input, weight and bias
    already blocked, the conv legalized as depthwise_conv2d_nchwc and scheduled by
    cpu_depthwise_nchwc. Returns (VM function, blocked input maker: NCHW numpy -> tensor,
    output -> NCHW numpy)."""
    import tvm
    from tvm import relax

    from core.compiler.pipeline.pass_list import default_pipeline, make_pass

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((c, 1, k, k)) / k).astype(np.float32)
    b = (rng.standard_normal(c) * 0.1).astype(np.float32)
    wb = np.ascontiguousarray(w.reshape(c // block, block, 1, k, k).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :])
    bb_ = np.ascontiguousarray(b.reshape(1, c // block, 1, 1, block))
    p = (k - 1) // 2
    x = relax.Var("x", relax.TensorType((1, c // block, size, size, block), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            conv = relax.op.nn.conv2d(
                x, relax.const(wb), strides=[stride] * 2, padding=[p] * 4, groups=c,
                data_layout=f"NCHW{block}c", kernel_layout=f"OIHW1i{block}o", out_layout=f"NCHW{block}c",
            )
            y = bb.emit(relax.op.add(conv, relax.const(bb_)))
            if kind == "dw_silu":
                y = bb.emit(relax.op.multiply(y, relax.op.sigmoid(y)))
            else:
                y = bb.emit(relax.op.minimum(relax.op.maximum(y, relax.const(0.0, "float32")), relax.const(6.0, "float32")))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = bb.get()
    started = False
    with target:
        for spec in default_pipeline(target):
            started = started or spec.info.legalizes
            if spec.enabled and started:
                mod = make_pass(spec, target)(mod)
    fn = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())["main"]

    def to_blocked(a):
        return tvm.runtime.tensor(np.ascontiguousarray(a.reshape(1, c // block, block, size, size).transpose(0, 1, 3, 4, 2)))

    def from_blocked(t):
        a = t.numpy()
        return a.transpose(0, 1, 4, 2, 3).reshape(1, c, a.shape[2], a.shape[3])

    return fn, to_blocked, from_blocked


def _ms_median_min(fn, min_s: float = 0.3) -> tuple[float, float]:
    """(median, min) ms of runs of `fn`: at least 20, over at least `min_s` seconds, after one warm-up."""
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 20 or (time.perf_counter() - start < min_s and len(times) < 5000):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), float(np.min(times))


def mobile_main(argv: list[str]) -> int:
    """The kernels of depthwise + squeeze-excitation networks, one op (or block) at a time, compiled by the
    workbench against onnxruntime: the depthwise conv shapes of EfficientNet-B0 / MobileNetV2 with their
    SiLU or ReLU6 tail, global average pools, a squeeze-excitation block, 3x3 stride-2 pools and
    ShuffleNet's channel shuffle (Reshape / Transpose / Reshape).

    Each case is a one-node (or one-block) ONNX model compiled with core.compiler.compile (the default
    CPU rules, core.compiler.schedules); both runtimes run in this process at the same thread count, one
    after the other (never interleaved), each timed over >= 0.3 s after a warm-up. It prints median and
    min ms for each and the ratio of the minimums (on a shared machine the fastest runs are the least
    disturbed), the load average, and checks every output against onnxruntime.

        python benchmarks/op_kernels.py --mode mobile [--threads 1] [--only dw,gap,se,pool,shuffle] [--blocked]

    --blocked also times each depthwise case in NCHW{b}c as a blocked network runs it
    (core.compiler.schedules.cpu_depthwise_nchwc), alternately with the NCHW kernel.
    """
    parser = argparse.ArgumentParser(prog="op_kernels.py --mode mobile", description=" ".join(mobile_main.__doc__.split("\n\n")[0].split()))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated case kinds (dw, gap, se, pool, shuffle)")
    parser.add_argument(
        "--blocked", action="store_true",
        help="depthwise cases only: also time the conv in NCHW{b}c (b: the vector width, or half of it where that does not divide"
        " the channels), as it runs inside a blocked network, alternately with the NCHW kernel: the 'blk ms' and 'blk/nchw' columns",
    )
    args = parser.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import onnx
    import onnxruntime as ort
    import tvm

    from core.compiler.compile import compile_model
    from core.compiler.passes.layout.nchwc import channel_block
    from core.compiler.target import make_target

    wanted = [w for w in args.only.split(",") if w]
    print(f"host {host_description(make_target('cpu'))}  threads {args.threads}  load average {os.getloadavg()[0]:.1f}")
    target = make_target("cpu")
    header = f"{'case':<34}{'ours ms (min)':>18}{'ort ms (min)':>18}{'x ort':>8}" + (f"{'blk ms (min)':>18}{'blk/nchw':>9}  block" if args.blocked else "") + "  check"
    print(header)
    print("-" * len(header))
    ratios = []
    for kind, c, size, k, stride in CASES:
        if wanted and not any(kind.startswith(w) or (w == "pool" and kind.endswith("pool")) for w in wanted):
            continue
        model = build_case(kind, c, size, k, stride)
        x = np.random.default_rng(1).standard_normal((1, c, size, size)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "case.onnx")
            onnx.save(model, path)
            vm = compile_model(path, "cpu", verify=False).vm()
        fn, xt = vm["main"], tvm.runtime.tensor(x)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        ref = session.run(None, {"x": x})[0]
        ok = np.allclose(fn(xt).numpy(), ref, rtol=1e-3, atol=1e-4)
        blocked = ""
        if args.blocked and kind.startswith("dw"):
            block = next(bw for bw in (channel_block(target), channel_block(target) // 2) if c % bw == 0)
            bfn, to_blocked, from_blocked = build_blocked_case(kind, c, size, k, stride, target, block)
            xb = to_blocked(x)
            ok = ok and np.allclose(from_blocked(bfn(xb)), ref, rtol=1e-3, atol=1e-4)
            # alternately, three rounds each: the lower minimum of each
            mins = {"nchw": [], "blk": []}
            for _ in range(3):
                mins["nchw"].append(_ms_median_min(lambda fn=fn, xt=xt: fn(xt), 0.1))
                mins["blk"].append(_ms_median_min(lambda bfn=bfn, xb=xb: bfn(xb), 0.1))
            ours = min(mins["nchw"], key=lambda m: m[1])
            mine = min(mins["blk"], key=lambda m: m[1])
            blocked = f"{f'{mine[0]:.3f} ({mine[1]:.3f})':>18}{mine[1] / ours[1]:>9.2f}  {block}c"
        else:
            ours = _ms_median_min(lambda fn=fn, xt=xt: fn(xt))
        theirs = _ms_median_min(lambda session=session, x=x: session.run(None, {"x": x}))
        ratio = ours[1] / theirs[1]
        ratios.append(ratio)
        name = f"{kind} c{c} {size}x{size}" + (f" k{k} s{stride}" if k else "")
        print(f"{name:<34}{f'{ours[0]:.3f} ({ours[1]:.3f})':>18}{f'{theirs[0]:.3f} ({theirs[1]:.3f})':>18}{ratio:>8.2f}{blocked}  {'ok' if ok else 'MISMATCH'}", flush=True)
    print("-" * len(header))
    if ratios:
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geomean x ort {geomean:.2f}, worst {max(ratios):.2f}  (load average now {os.getloadavg()[0]:.1f})")
    return 0


# -- winograd: Winograd against direct 3x3 convs

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


def _compile_variant(path: str, variant, cpu_features):
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


def _time_blocks(arts: dict, x: np.ndarray, reps: int, block_s: float) -> dict:
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


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def winograd_main(argv: list[str]) -> int:
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

        python benchmarks/op_kernels.py --mode winograd [--shapes 64x64x56,512x512x28] [--cpu-features=-avx512f]
            [--reps 5] [--block-seconds 0.3] [--depth 8]
    """
    parser = argparse.ArgumentParser(prog="op_kernels.py --mode winograd", description=winograd_main.__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="CxKxSIZE,... (input channels, output channels, height = width)")
    parser.add_argument("--cpu-features", default=None, help="LLVM features for the target, e.g. -avx512f (AVX2 code)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--block-seconds", type=float, default=0.3)
    parser.add_argument("--depth", type=int, default=8, help="convs in the error-growth stack (0: none)")
    args = parser.parse_args(argv)
    features = [f for f in args.cpu_features.split(",") if f] if args.cpu_features else None
    print(f"cpu features {features or 'host default'}  load {_loadavg()}")
    print(f"{'shape':>14} {'variant':>8} {'min ms':>9} {'median ms':>10} {'min x direct':>13} {'max abs err':>12} {'rel err':>9}")
    for shape in args.shapes.split(","):
        c, k, size = (int(v) for v in shape.split("x"))
        path = _stack([c, k], size)
        arts = {name: _compile_variant(path, v, features) for name, v in _variants(size).items()}
        x = np.random.default_rng(1).standard_normal((1, c, size, size)).astype(np.float32)
        errors = _errors(arts, path, x)
        times = _time_blocks(arts, x, args.reps, args.block_seconds)
        base = min(times["direct"])
        for name, ts in times.items():
            err, rel = errors[name]
            print(f"{shape:>14} {name:>8} {min(ts):9.3f} {sorted(ts)[len(ts) // 2]:10.3f} {min(ts) / base:13.2f} {err:12.2e} {rel:9.1e}")
        print(f"{'':>14} load {_loadavg()}")
    if args.depth:
        path = _stack([64] * (args.depth + 1), 32, seed=2)
        arts = {name: _compile_variant(path, v, features) for name, v in _variants(32).items()}
        x = np.random.default_rng(3).standard_normal((1, 64, 32, 32)).astype(np.float32)
        for name, (err, rel) in _errors(arts, path, x).items():
            print(f"stack of {args.depth} 64-channel convs at 32x32, {name}: max abs err {err:.2e}, relative {rel:.1e}")
    return 0


MODES = {"mobile": mobile_main, "winograd": winograd_main}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chooser = argparse.ArgumentParser(add_help=False)
    chooser.add_argument("--mode", choices=tuple(MODES))
    known, rest = chooser.parse_known_args(argv)
    if known.mode is None:
        parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()), epilog="A mode's own options: --mode MODE --help.")
        parser.add_argument("--mode", choices=tuple(MODES), required=True, help="mobile or winograd (module docstring)")
        parser.parse_args(argv)  # prints the help (exit 0) or says that --mode is missing (exit 2)
    return MODES[known.mode](rest)


if __name__ == "__main__":
    sys.exit(main())
