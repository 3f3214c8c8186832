"""The same models compiled for several x86 CPUs / ISAs on this host: is the host's default ever
slower than narrower code on the same machine?

On an AVX-512 host (Zen 4) the default target (this host's CPU) must never lose to the AVX2 code
the same host runs (`--cpu-features -avx512f`, or `--cpu znver3`). Every variant is compiled the
way `compile` does (core.compiler.compile.compile_model with `cpu=` / `cpu_features=`: the
workbench's pass pipeline, NCHWc layout included), and each model's variants are timed in
alternating blocks (A's block, B's, ..., repeated; core.compiler.measure.alternation.alternate), at the
host's core count and at 1 thread (the same executables, core.compiler.runtime.threads.runtime_threads),
one runtime only (TVM), so load on the machine hits all alike. Besides latency it counts, in each variant's assembly, the `vinsertps`/`vextractps`
instructions LLVM emits when a vector accumulator is not kept in registers (a load-independent
sign of a schedule that does not fit the ISA), the gathers/scatters LLVM's own vectorizer emits
with AVX-512 for loops a schedule left alone when it cannot prove them contiguous (slow on Zen 4),
and the zmm registers used.

    python benchmarks/isa_compare.py [--models squeezenet,small_cnn] [--variants host,host:-avx512f,znver3]
        [--threads 2] [--blocks 5] [--seconds 4]

A variant is an LLVM CPU name ("host": this machine's), optionally followed by `:` and feature
changes (`znver4:-avx512f`). Variants the host cannot run (AVX-512 code on an AVX2 host) are
compiled and counted, not timed. The models are the benchmark models (benchmarks.common): the onnx
wheel's light models, core.model.samples and benchmarks.architectures.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import benchmark_models, feeds_for, load_proto, ours_runner  # noqa: E402 - first: it prepares the process before anything imports tvm

__all__ = ["parse_variant", "assembly_counts", "main"]


def parse_variant(variant: str) -> tuple[str, str]:
    """'znver4:-avx512f' -> ('znver4', '-avx512f'); 'host' -> ('host', '')."""
    cpu, _, features = variant.partition(":")
    return cpu.strip() or "host", features.strip()


def assembly_counts(executable) -> dict[str, int]:
    """Counts of tell-tale instructions in a compiled executable's host code."""
    def modules(m):
        yield m
        for child in m.imports:
            yield from modules(child)

    asm = "\n".join(m.inspect_source("asm") for m in modules(executable.mod) if m.kind == "llvm")
    return {
        "insert/extract": len(re.findall(r"\bv(?:insert|extract)ps\b", asm)),
        "gather/scatter": len(re.findall(r"\bv(?:gather|scatter)\w*ps\b", asm)),
        "fma": len(re.findall(r"\bvfmadd\w*", asm)),
        "zmm": len(re.findall(r"%zmm", asm)),
        "spill": len(re.findall(r"\d+-byte (?:Spill|Reload)", asm)),
    }


def _compile(proto, variant: str):
    from core.compiler.compile import compile_model

    cpu, features = parse_variant(variant)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        return compile_model(str(path), "cpu", cpu=cpu, cpu_features=features, verify=False)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    from core.compiler.target import cannot_run_here, host_cores, host_cpu, make_target, target_cpu

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="", help="comma-separated subset (default: every benchmark model)")
    parser.add_argument("--variants", default="", help="default: host, and host:-avx512f on an AVX-512 host (ratios are to the last)")
    parser.add_argument("--threads", type=int, default=host_cores(), help="the multi-thread column (a 1-thread column is timed too)")
    parser.add_argument("--blocks", type=int, default=5, help="alternating timing blocks per variant")
    parser.add_argument("--seconds", type=float, default=4.0, help="timing budget per model, variant and thread count")
    parser.add_argument("--slower", type=float, default=1.05, help="flag a variant whose median and p10 are both this much above the last's")
    args = parser.parse_args(argv)

    import numpy as np

    from core.compiler.measure.alternation import alternate, flatten

    host = host_cpu()
    has512 = "avx512f" in target_cpu(make_target("cpu", mcpu="host"))["requires"]
    variants = [v for v in args.variants.split(",") if v] or (["host", "host:-avx512f"] if has512 else ["host", "znver4"])
    models: dict[str, object] = benchmark_models()
    if args.models:
        models = {k: v for k, v in models.items() if k in {m.strip() for m in args.models.split(",")}}
    thread_counts = [args.threads] + ([1] if args.threads > 1 else [])
    print(f"host {host} ({'AVX-512' if has512 else 'no AVX-512'})  threads {'/'.join(map(str, thread_counts))}  "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}  (ratios: median / median of {variants[-1]}; p10 / p10 in brackets)")
    head = f"{'model':<22}{'variant':<18}" + "".join(f"{f'{t}t ms':>11}{f'x {t}t':>15}" for t in thread_counts) + f"{'ins/ext':>9}{'gath/sc':>9}{'fma':>7}{'zmm':>7}{'spill':>7}"
    print(head)
    print("-" * len(head))
    ratios: dict[tuple[str, int], list[float]] = {}
    slower: list[str] = []
    for name, model in models.items():
        proto = load_proto(model)
        feeds = feeds_for(proto)
        built = {}
        for v in variants:
            try:
                art = _compile(proto, v)
            except Exception as e:  # noqa: BLE001 - a model one variant cannot build is a row, not the end of the table
                print(f"{name:<22}{v:<18}  cannot compile: {str(e).splitlines()[0][:100]}", flush=True)
                continue
            runs = cannot_run_here(art.manifest.target.cpu) is None
            built[v] = (art.vm() if runs else None, assembly_counts(art.library))
        runnable = [v for v in variants if v in built and built[v][0] is not None]
        times: dict[tuple[str, int], list[float]] = {}
        for t in thread_counts:
            runners = [ours_runner(built[v][0], feeds, threads=t) for v in runnable]
            probe = min(runners[0](2)) if runners else 1.0
            runs_n = int(max(10, min(400, args.seconds * 1e3 / max(probe, 1e-3))))
            for v, blocks in zip(runnable, alternate(runners, blocks=args.blocks, runs=runs_n)):
                times[(v, t)] = flatten(blocks)
        last = variants[-1]
        for v in variants:
            if v not in built:
                continue
            cells = ""
            for t in thread_counts:
                if (v, t) not in times:
                    cells += f"{'(cannot run here)':>26}"
                    continue
                a = np.asarray(times[(v, t)])
                med, p10 = float(np.median(a)), float(np.percentile(a, 10))
                if (last, t) in times and v != last:
                    b = np.asarray(times[(last, t)])
                    r, r10 = med / float(np.median(b)), p10 / float(np.percentile(b, 10))
                    ratios.setdefault((v, t), []).append(r)
                    if r > args.slower and r10 > args.slower:
                        slower.append(f"{name} {v} {t}t {r:.2f}x ({r10:.2f}x)")
                    cells += f"{med:>11.3f}{f'{r:.2f} ({r10:.2f})':>15}"
                else:
                    cells += f"{med:>11.3f}{'':>15}"
            c = built[v][1]
            print(f"{name:<22}{v:<18}{cells}{c['insert/extract']:>9}{c['gather/scatter']:>9}{c['fma']:>7}{c['zmm']:>7}{c['spill']:>7}", flush=True)
    for (v, t), rs in ratios.items():
        print(f"geomean {v} / {variants[-1]} at {t} thread(s): {_geomean(rs):.3f} over {len(rs)} models (min {min(rs):.2f}, max {max(rs):.2f})")
    print("slower than " + variants[-1] + " (median and p10 both over " + f"{args.slower:g}x): " + ("; ".join(slower) or "none"))
    print(f"load after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
