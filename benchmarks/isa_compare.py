"""The same model compiled for several x86 ISAs on this host: is the host's default ever slower
than narrower code on the same machine?

On an AVX-512 host (Zen 4) the default target (`mcpu` = the host) must never lose to the AVX2
code the same host runs (`mattr=["-avx512f"]`, or `mcpu=znver3`). Besides latency (noisy on a
shared machine) it counts, in each variant's assembly, the `vinsertps`/`vextractps` instructions
LLVM emits when a vector accumulator is not kept in registers (a load-independent sign of a
schedule that does not fit the ISA), and the zmm registers used.

Every variant is built in this process and timed in alternating blocks (variant A's block, then
B's, then C's, repeated), one runtime only (TVM), so load on the machine hits all alike.

    python benchmarks/isa_compare.py [--models squeezenet,small_cnn] [--variants znver4,znver4-avx2,znver3]
        [--threads 1] [--blocks 5] [--seconds 4] [--pipeline workbench|own]

A variant is an LLVM CPU name, optionally followed by `-avx2` (that CPU with AVX-512 disabled).
Variants the host cannot run (AVX-512 code on an AVX2 host) are compiled and counted, not timed.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["variant_target", "assembly_counts", "main"]


def variant_target(variant: str, cores: int):
    """A tvm Target for 'znver4', 'znver4-avx2' (AVX-512 off) or any LLVM CPU name."""
    from core.compiler.target import make_target

    cpu, _, suffix = variant.partition("-avx2")
    mattr = ["-avx512f"] if variant.endswith("-avx2") else None
    return make_target("cpu", mcpu=cpu, mattr=mattr, cores=cores)


def assembly_counts(executable) -> dict[str, int]:
    """Counts of tell-tale instructions in a compiled executable's host code."""
    asm = "\n".join(m.inspect_source("asm") for m in executable.mod.imports if m.kind == "llvm")
    return {
        "insert/extract": len(re.findall(r"\bv(?:insert|extract)ps\b", asm)),
        "fma": len(re.findall(r"\bvfmadd\w*", asm)),
        "zmm": len(re.findall(r"%zmm", asm)),
        "spill": len(re.findall(r"\d+-byte (?:Spill|Reload)", asm)),
    }


def host_runs(target) -> bool:
    """Whether this host can execute code built for `target` (its features are a subset)."""
    from tvm.target import codegen

    from core.compiler.target import make_target

    host = make_target("cpu")
    for feature in ("avx512f", "avx512bw", "avx512vl", "avx2", "fma"):
        if codegen.target_has_features(feature, target) and not codegen.target_has_features(feature, host):
            return False
    return True


def _workbench_module(proto, target):
    """`proto` through the workbench's default pipeline for `target` (what compile_model runs for the host)."""
    import tempfile

    from core.compiler.compile import _resolve_graph, import_relax
    from core.compiler.pipeline import default_pipeline, make_pass

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        mod = import_relax(_resolve_graph(str(path))).mod
    with target:
        for spec in default_pipeline(target):
            if spec.enabled:
                mod = make_pass(spec, target)(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="small_cnn,squeezenet")
    parser.add_argument("--variants", default="", help="default: the host CPU, it with AVX-512 off, znver3")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pipeline", choices=("workbench", "own"), default="workbench",
                        help="workbench: the default pass pipeline for each variant's target (core.compiler.pipeline, NCHWc "
                             "layout included); own: this file's import + LegalizeOps + FuseOps + schedules only")
    parser.add_argument("--blocks", type=int, default=5, help="alternating timing blocks per variant")
    parser.add_argument("--seconds", type=float, default=4.0, help="timing budget per model and variant")
    args = parser.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", str(args.threads))

    import numpy as np
    import tvm
    from tvm import relax

    from benchmarks.compiled_vs_onnxruntime import _feeds, _load, light_models, relax_to_fused_tir, sample_models
    from core.compiler.schedules import schedule_pass
    from core.compiler.target import host_cpu

    host = host_cpu()
    variants = [v for v in args.variants.split(",") if v] or [host, f"{host}-avx2", "znver3"]
    models = {**light_models(), **sample_models()}
    print(f"host {host}  threads {args.threads}  pipeline {args.pipeline}  load {os.getloadavg()[0]:.1f}  (ratios to {variants[-1]})")
    header = f"{'model':<14}{'variant':<16}{'median ms':>10}{'p10':>9}{'p90':>9}{'x last':>8}{'ins/ext':>9}{'fma':>7}{'zmm':>7}{'spill':>7}"
    print(header)
    print("-" * len(header))
    for name in [m for m in args.models.split(",") if m]:
        proto = _load(models[name])
        feeds = _feeds(proto)
        built = {}
        for variant in variants:
            target = variant_target(variant, args.threads)
            if args.pipeline == "workbench":
                mod = _workbench_module(proto, target)
            else:
                mod = relax_to_fused_tir(proto)
                with target:
                    mod = schedule_pass(target)(mod)
            ex = tvm.compile(mod, target)
            counts = assembly_counts(ex)
            vm = relax.VirtualMachine(ex, tvm.cpu()) if host_runs(target) else None
            built[variant] = (vm, counts)
        tensors = [tvm.runtime.tensor(v) for v in feeds.values()]
        times: dict[str, list[float]] = {v: [] for v in variants}
        runnable = [v for v in variants if built[v][0] is not None]
        probe = {}
        for v in runnable:
            fn = built[v][0]["main"]
            fn(*tensors)
            t0 = time.perf_counter()
            fn(*tensors)
            probe[v] = time.perf_counter() - t0
        for _ in range(args.blocks):
            for v in runnable:
                fn = built[v][0]["main"]
                n = max(2, int(args.seconds / args.blocks / max(probe[v], 1e-5)))
                for _ in range(n):
                    t0 = time.perf_counter()
                    fn(*tensors)
                    times[v].append((time.perf_counter() - t0) * 1e3)
        last = statistics.median(times[variants[-1]]) if times[variants[-1]] else None
        for v in variants:
            counts = built[v][1]
            if times[v]:
                a = np.asarray(times[v])
                med = float(np.median(a))
                cells = f"{med:>10.3f}{np.percentile(a, 10):>9.3f}{np.percentile(a, 90):>9.3f}"
                cells += f"{med / last:>8.2f}" if last else f"{'-':>8}"
            else:
                cells = f"{'(cannot run here)':>36}"
            print(f"{name:<14}{v:<16}{cells}{counts['insert/extract']:>9}{counts['fma']:>7}{counts['zmm']:>7}{counts['spill']:>7}", flush=True)
    print(f"load after {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
