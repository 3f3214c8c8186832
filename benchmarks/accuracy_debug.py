"""The accuracy debugger (core.accuracy, issue 42) on real networks: what it finds, how long it takes
and the memory it holds.

    .venv/bin/python benchmarks/accuracy_debug.py [--quick] [--budget-mib 4]

Three tables, on seeded random inputs:

a. The compiled CPU program against onnxruntime (`debug_compiled`) for ResNet-50 (the onnx wheel's
   light model), the BERT encoder of benchmarks/architectures/transformers.py and ResNet-18
   (benchmarks/architectures/resnet.py): tensors compared (those the fused kernels write out),
   beyond tolerance, the first divergence, chunks, seconds and peak RSS growth. Every compared
   tensor should agree.
b. An onnxruntime-quantized ResNet-18 (QDQ: per-channel int8 weights, uint8 activations, 8 seeded
   random calibration images) against its fp32 source (`debug_models`): the 10 worst tensors, in
   quantization steps, the counts and the first divergence. The quantizer is given the source with
   its BatchNormalizations folded into the convs by the workbench's `fold-conv-bn` (onnxruntime's
   pre-processing would fold them too) and that folded model is the reference; a last line
   compares the same QDQ model with the source as built (BatchNormalizations not folded).
c. Bounded memory: `debug_models` of (b) at the default chunk budget and at a small one (--budget-mib):
   chunks, seconds and peak RSS growth.

Each row of (a) and (c) runs in a fresh child process, which loads its models, resets its peak RSS
(`/proc/self/clear_refs`) and reports the peak (VmHWM) less the RSS before the debug run: rows do not
inherit one another's memory. `--quick` (under a minute): a 2-layer BERT at sequence 32 is the only
compiled model (compiling a ResNet takes 20-40 s at any size), ResNet-18 at 64x64 in (b) and (c),
and a 0.25 MiB small budget. Not a pass/fail test: it prints tables.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import host_description, light_models  # noqa: E402 - first: it prepares the process before anything imports tvm

import numpy as np  # noqa: E402
import onnx  # noqa: E402

__all__ = ["compiled_case", "main", "memory_case", "qdq_models", "qdq_report", "run_child"]

TOP = 10  # rows of the QDQ table
CALIBRATION_IMAGES = 8


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Set VmHWM (the peak RSS) to the RSS now; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _measured(fn) -> tuple[object, float]:
    """(fn(), peak RSS growth in MiB while it ran)."""
    import gc

    gc.collect()
    _reset_peak()
    before = _status_kib("VmRSS")
    out = fn()
    return out, (_status_kib("VmHWM") - before) / 1024


def _load(path: str):
    from core import load_model

    return load_model(path)


def _first(report) -> dict | None:
    f = report.first
    return None if f is None else {"node": f.node, "op": f.op, "kernel": f.kernel, "steps": f.steps, "tol_units": f.tol_units}


def _counts(report, growth: float) -> dict:
    return {"compared": len(report.tensors), "beyond": len(report.beyond), "not_compared": report.not_compared,
            "first": _first(report), "chunks": report.chunks, "seconds": report.seconds, "rss_mib": growth,
            "runtime": report.runtime}


def compiled_case(model: str) -> dict:
    """debug_compiled of the model file `model` on this CPU (run it in a child: `run_child`)."""
    from core.accuracy.debug import debug_compiled

    graph = _load(model)
    report, growth = _measured(lambda: debug_compiled(graph, "cpu"))
    return _counts(report, growth)


def memory_case(reference: str, subject: str, budget: int | None) -> dict:
    """debug_models(reference, subject) (model files) at chunk budget `budget` bytes (None: the
    default) (run it in a child: `run_child`)."""
    from core.accuracy.debug import debug_models

    a, b = _load(reference), _load(subject)
    report, growth = _measured(lambda: debug_models(a, b, budget=budget))
    return _counts(report, growth)


def run_child(kind: str, *args) -> dict:
    """compiled_case or memory_case in a fresh Python process: its figures (a dict)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps([kind, *args])]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=str(Path(__file__).resolve().parents[1]))
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the {kind} child failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def _child(spec: str) -> int:
    kind, *args = json.loads(spec)
    fn = {"compiled": compiled_case, "memory": memory_case}[kind]
    print(json.dumps(fn(*args)))
    return 0


def qdq_models(size: int, seed: int = 18) -> tuple[onnx.ModelProto, onnx.ModelProto, onnx.ModelProto]:
    """(ResNet-18 as built, the same with its BatchNormalizations folded by fold-conv-bn, the folded
    one quantized to QDQ by onnxruntime) at `size` x `size`."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from benchmarks.architectures.resnet import resnet18
    from core.model.onnx_io import load_model_bytes
    from core.rewrite import run_rules
    from rewrites import get_rule

    source = resnet18(seed=seed, size=size)
    graph = load_model_bytes(source.SerializeToString(), "resnet18.onnx")
    run_rules(graph, [get_rule("fold-conv-bn")])
    from core.model.external_data import self_contained_proto

    folded = self_contained_proto(graph)

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(seed + 1000)
            self._it = iter([{"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(CALIBRATION_IMAGES)])

        def get_next(self):
            return next(self._it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, pre, out = (os.path.join(tmp, n) for n in ("folded.onnx", "pre.onnx", "qdq.onnx"))
        onnx.save(folded, src)
        quant_pre_process(src, pre)
        quantize_static(pre, out, Images(), quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
        qdq = onnx.load(out)
    return source, folded, qdq


def qdq_report(reference: onnx.ModelProto, qdq: onnx.ModelProto):
    """debug_models(reference, qdq) in this process: the DebugReport."""
    from core.accuracy.debug import debug_models
    from core.model.onnx_io import load_model_bytes

    a = load_model_bytes(reference.SerializeToString(), "fp32.onnx")
    b = load_model_bytes(qdq.SerializeToString(), "qdq.onnx")
    return debug_models(a, b, reference="fp32", subject="QDQ")


def _fmt(x, spec: str = ".3g") -> str:
    if x is None:
        return "-"
    return format(x, spec) if math.isfinite(x) else str(x)


def _first_text(first: dict | None) -> str:
    if first is None:
        return "none"
    where = f" ({first['kernel']})" if first.get("kernel") else ""
    return f"{first['op']} '{first['node']}'{where}"


def _table(head: list[str], rows: list[list], right: set[int] = frozenset()) -> None:
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller models: ResNet-18 at 64x64, a 2-layer BERT; no compiled ResNets")
    ap.add_argument("--budget-mib", type=float, help="the small chunk budget of table c (default 4 MiB; 0.25 with --quick)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child)

    from benchmarks.architectures.resnet import resnet18
    from benchmarks.architectures.transformers import bert_encoder
    from core.accuracy.capture import chunk_budget
    from core.accuracy.report import describe
    from core.compiler.target import make_target

    size = 64 if args.quick else 224
    budget_mib = args.budget_mib or (0.25 if args.quick else 4.0)
    bert = dict(layers=2, hidden=128, heads=2, mlp=512, seq=32) if args.quick else {}
    print(f"host {host_description(make_target('cpu', mcpu='host'))}  {os.cpu_count()} CPUs  "
          f"load average {os.getloadavg()[0]:.1f}{'  (--quick)' if args.quick else ''}")
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        if not args.quick:
            files["ResNet-50 (light, 224)"] = str(light_models()["resnet50"])
        name = "BERT encoder (" + ("2 layers, hidden 128, seq 32" if args.quick else "4 layers, hidden 256, seq 128") + ")"
        files[name] = os.path.join(tmp, "bert.onnx")
        onnx.save(bert_encoder(**bert), files[name])
        if not args.quick:  # compiling ResNet-18 (twice) takes 20-40 s at any size
            files[f"ResNet-18 ({size})"] = os.path.join(tmp, "resnet18.onnx")
            onnx.save(resnet18(size=size), files[f"ResNet-18 ({size})"])

        print("\na. Compiled CPU program against onnxruntime (debug_compiled; tensors the fused kernels write out)")
        rows = []
        for label, path in files.items():
            r = run_child("compiled", path)
            rows.append([label, r["compared"], r["beyond"], r["not_compared"], _first_text(r["first"]), r["chunks"],
                         f"{r['seconds']:.1f}", f"{r['rss_mib']:.0f}"])
        _table(["model", "compared", "beyond tol.", "not compared", "first divergence", "chunks", "seconds", "peak RSS +MiB"], rows,
               right={1, 2, 3, 5, 6, 7})

        t0 = time.perf_counter()
        source, folded, qdq = qdq_models(size)
        quant_s = time.perf_counter() - t0
        report = qdq_report(folded, qdq)
        print(f"\nb. QDQ ResNet-18 ({size}x{size}; onnxruntime quantize_static: per-channel int8 weights, uint8 activations, "
              f"{CALIBRATION_IMAGES} calibration images; {quant_s:.1f} s) against its fp32 source (BatchNormalization folded)")
        print(f"   {len(report.tensors)} tensors compared, {report.not_compared} not compared, {len(report.beyond)} beyond tolerance, "
              f"{report.chunks} chunk(s), {report.seconds:.2f} s; the {TOP} worst, in quantization steps:")
        rows = [[i + 1, t.node, t.op, t.output if t.other is None else f"{t.output} ~ {t.other}", _fmt(t.max_abs), _fmt(t.steps, ".1f"),
                 _fmt(t.tol_units, ".0f")] for i, t in enumerate(report.ranked()[:TOP])]
        _table(["#", "node", "op", "tensor (~ QDQ's)", "max abs", "steps", "× tol"], rows, right={0, 4, 5, 6})
        f = report.first
        print("   first divergence: " + ("none" if f is None else f"{f.op} '{f.node}' ({f.output}): {describe(f)}"))
        for note in report.notes:
            print(f"   note: {note}")
        unfolded = qdq_report(source, qdq)
        worst = unfolded.ranked()[0] if unfolded.tensors else None
        print(f"   the same QDQ model against the source as built (BatchNormalization not folded): {len(unfolded.tensors)} compared, "
              f"{unfolded.not_compared} not compared" + (f"; worst {worst.op} '{worst.node}' ({worst.output} ~ {worst.other}) at "
                                                         f"{_fmt(worst.steps, '.1f')} steps" if worst else ""))

        ref, sub = os.path.join(tmp, "fp32.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save(folded, ref)
        onnx.save(qdq, sub)
        small = int(budget_mib * (1 << 20))
        print(f"\nc. Bounded memory: debug_models of (b), ResNet-18 at {size}x{size}, each budget in a fresh process "
              f"(budget: tensor bytes one chunk holds per side)")
        rows = []
        for label, budget in ((f"small ({budget_mib:g} MiB)", small), (f"default ({chunk_budget() / (1 << 20):.0f} MiB here)", None)):
            r = run_child("memory", ref, sub, budget)
            rows.append([label, r["compared"], r["chunks"], f"{r['seconds']:.2f}", f"{r['rss_mib']:.0f}"])
        _table(["budget", "compared", "chunks", "seconds", "peak RSS +MiB"], rows, right={1, 2, 3, 4})
    print("\npeak RSS +MiB: the child's peak RSS during the debug run less its RSS before it (models loaded).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
