"""Reading numpy's arrays in place (ReadInputsInPlace, core.compiler.passes.input_alignment): tiny
models at the numpy boundary (Artifact.run's), with and without the pass, on inputs at a 64-byte
boundary and 16 bytes past one (numpy's malloc gives either), against onnxruntime's session.run in
its own process; the runtimes take turns block by block.

    .venv/bin/python benchmarks/input_alignment.py [--models mlp,mm_relu] [--blocks 10] [--runs 300]

Prints a table of medians (us) and ratios; not pass/fail. Issue 40's target: any model of <= 30
nodes <= 1.3x onnxruntime at the numpy boundary.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.common  # noqa: E402,F401 - first: it prepares the process before anything imports tvm

import numpy as np  # noqa: E402

MODELS = ("small_cnn", "mlp", "mm_relu", "tiny_transformer")
SAMPLES = Path(__file__).resolve().parents[1] / "resources" / "models"


def _at(a: np.ndarray, offset: int) -> np.ndarray:
    """A copy of `a` whose data starts `offset` bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, dtype=np.uint8)
    start = -raw.ctypes.data % 64 + offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _medians(times) -> list[float]:
    return [1e3 * statistics.median(statistics.median(b) for b in r) for r in times]


def _vm(art):
    vm = art.vm()
    vm.parallel_kernels = art.manifest.parallel_kernels
    vm.input_specs, vm.library, vm.input_alignment = art.inputs, art.library, art.manifest.input_alignment
    return vm


def main(argv=None) -> int:
    from benchmarks.common import feeds_for, host_description, ours_runner
    from core.compiler.compile import compile_model
    from core.compiler.measure.alternation import alternate
    from core.compiler.measure.ort_worker import OrtProcess
    from core.compiler.pipeline.pass_list import default_pipeline
    from core.compiler.runtime.boundary import NumpyBoundary
    from core.compiler.target import host_cores, make_target

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--runs", type=int, default=300, help="timed runs per runner in all")
    args = parser.parse_args(argv)
    threads = host_cores()
    target = make_target("cpu")
    without = [s.toggled(False) if s.name == "ReadInputsInPlace" else s for s in default_pipeline(target)]
    print(f"host: {host_description(target)}; load average {os.getloadavg()[0]:.1f} at the start; {threads} threads each")
    print("medians of the blocks' medians, us. 'before': ReadInputsInPlace off (inputs not 64-byte aligned copied), timed in turns with")
    print(f"'after' (the default), ours alone on {threads} threads; then 'after' choosing its threads as Artifact.run does, in turns with")
    print("onnxruntime's session.run in its own process ('ort')")
    print(f"{'model':<18}{'inputs at':>10}{'before':>9}{'after':>9}{'after/before':>14}{'after':>9}{'ort':>9}{'x ort':>7}{'read in place':>15}")
    for name in [m for m in args.models.split(",") if m]:
        path = SAMPLES / f"{name}.onnx"
        proto_bytes = Path(path).read_bytes()
        import onnx

        proto = onnx.load_from_string(proto_bytes)
        base = feeds_for(proto)  # symbolic dims 1
        new = compile_model(str(path), "cpu", verify=False)
        old = compile_model(str(path), "cpu", pipeline=without, verify=False)
        vm_new, vm_old = _vm(new), _vm(old)
        with OrtProcess(proto_bytes, base, threads) as ort:
            for offset in (0, 16):
                feeds = {k: _at(v, offset) for k, v in base.items()}
                # the pair on a fixed thread count (the governor's choice of 1 or 2 threads would be the difference)
                ours = [ours_runner(vm_old, feeds, threads), ours_runner(vm_new, feeds, threads)]
                pair = _medians(alternate(ours, blocks=args.blocks, runs=args.runs, warmup=20, mirror=True))
                adaptive = ours_runner(vm_new, feeds, threads, adaptive=True)  # as Artifact.run chooses threads
                vs = _medians(alternate([adaptive, ort.run], blocks=args.blocks, runs=args.runs, warmup=20, mirror=True))
                boundary = NumpyBoundary(new.inputs, new.library, new.manifest.input_alignment or 64)  # Artifact.run's
                in_place = all(boundary.tensor(i, a).data_ptr() == a.ctypes.data for i, a in enumerate(boundary.arrays(feeds)))
                print(f"{name:<18}{offset:>8} B{pair[0]:>9.1f}{pair[1]:>9.1f}{pair[1] / pair[0]:>14.2f}{vs[0]:>9.1f}{vs[1]:>9.1f}"
                      f"{vs[0] / vs[1]:>7.2f}{'yes' if in_place else 'no':>15}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
