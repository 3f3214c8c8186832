"""The kernels of depthwise + squeeze-excitation networks, one op (or block) at a time, compiled by the
workbench against onnxruntime: the depthwise conv shapes of EfficientNet-B0 / MobileNetV2 with their
SiLU or ReLU6 tail, global average pools, a squeeze-excitation block, 3x3 stride-2 pools and
ShuffleNet's channel shuffle (Reshape / Transpose / Reshape).

Each case is a one-node (or one-block) ONNX model compiled with core.compiler.compile (the default
CPU rules, core.compiler.schedules); both runtimes run in this process at the same thread count, one
after the other (never interleaved), each timed over >= 0.3 s after a warm-up. It prints median and
min ms for each and the ratio of the minimums (on a shared machine the fastest runs are the least
disturbed), the load average, and checks every output against onnxruntime.

    python benchmarks/mobile_kernels.py [--threads 1] [--only dw,gap,se,pool,shuffle] [--blocked]

--blocked also times each depthwise case in NCHW{b}c as a blocked network runs it
(core.compiler.schedules.cpu_depthwise_nchwc), alternately with the NCHW kernel.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import core  # noqa: E402,F401 - before tvm: its parallel launch (core.compiler.runtime.native_pool) must load first

__all__ = ["CASES", "build_case", "main"]

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
            started = started or spec.name == "LegalizeOps"
            if spec.enabled and started:
                mod = make_pass(spec, target)(mod)
    fn = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())["main"]

    def to_blocked(a):
        return tvm.runtime.tensor(np.ascontiguousarray(a.reshape(1, c // block, block, size, size).transpose(0, 1, 3, 4, 2)))

    def from_blocked(t):
        a = t.numpy()
        return a.transpose(0, 1, 4, 2, 3).reshape(1, c, a.shape[2], a.shape[3])

    return fn, to_blocked, from_blocked


def _time(fn, min_s: float = 0.3) -> tuple[float, float]:
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < 20 or (time.perf_counter() - start < min_s and len(times) < 5000):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), float(np.min(times))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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

    from benchmarks.compiled_vs_onnxruntime import host_description
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
                mins["nchw"].append(_time(lambda fn=fn, xt=xt: fn(xt), 0.1))
                mins["blk"].append(_time(lambda bfn=bfn, xb=xb: bfn(xb), 0.1))
            ours = min(mins["nchw"], key=lambda m: m[1])
            mine = min(mins["blk"], key=lambda m: m[1])
            blocked = f"{f'{mine[0]:.3f} ({mine[1]:.3f})':>18}{mine[1] / ours[1]:>9.2f}  {block}c"
        else:
            ours = _time(lambda fn=fn, xt=xt: fn(xt))
        theirs = _time(lambda session=session, x=x: session.run(None, {"x": x}))
        ratio = ours[1] / theirs[1]
        ratios.append(ratio)
        name = f"{kind} c{c} {size}x{size}" + (f" k{k} s{stride}" if k else "")
        print(f"{name:<34}{f'{ours[0]:.3f} ({ours[1]:.3f})':>18}{f'{theirs[0]:.3f} ({theirs[1]:.3f})':>18}{ratio:>8.2f}{blocked}  {'ok' if ok else 'MISMATCH'}", flush=True)
    print("-" * len(header))
    if ratios:
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"geomean x ort {geomean:.2f}, worst {max(ratios):.2f}  (load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
