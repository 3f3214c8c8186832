"""One tensor program measured alone: its time, its work (FLOPs, bytes) and the host's peak.

Why a kernel alone: the Schedule panel (core.compiler.manual.session) changes one kernel at a
time and wants its time on the spot, without compiling the model. The kernel is built by itself
(`tvm.compile` of a one-function IRModule) and timed on seeded random arguments with TVM's
`time_evaluator`, in this process: a fraction of a second for a small kernel, where
MetaSchedule's runner would first start worker processes.

As the tuning database measures (core.compiler.tuning.tune), weight repacking blocks are removed before
timing: a compiled model packs its weights once, at compile time, so a kernel is timed taking them
already packed.

The peak FMA rate is an estimate and says so: cores x float32 lanes (from the target's features:
AVX-512, AVX2, else 128-bit) x FMA issue per cycle x 2 FLOPs x a clock read from the OS (the
current clock of /proc/cpuinfo, or 3 GHz when it says nothing). AMD Zen 4 issues a 512-bit FMA
as two 256-bit halves, so its AVX-512 peak equals its AVX2 peak.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["PeakEstimate", "peak_estimate", "estimate_flops", "estimate_bytes", "time_kernel"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PeakEstimate:
    """The host's float32 FMA peak for a target, an estimate from its parts."""

    cores: int
    lanes: int  # float32 lanes per vector register
    fma_per_cycle: int  # vector FMAs issued per cycle per core
    ghz: float
    clock_source: str

    @property
    def gflops(self) -> float:
        return 2.0 * self.cores * self.lanes * self.fma_per_cycle * self.ghz

    def describe(self) -> str:
        return (f"estimated peak {self.gflops:.0f} GFLOP/s = {self.cores} cores x {self.lanes} float32 lanes x "
                f"{self.fma_per_cycle} FMA/cycle x 2 x {self.ghz:.2f} GHz ({self.clock_source})")

    def to_json(self) -> dict:
        return {"gflops": round(self.gflops, 1), "cores": self.cores, "lanes": self.lanes, "fma_per_cycle": self.fma_per_cycle,
                "ghz": round(self.ghz, 3), "clock_source": self.clock_source, "estimate": True}


def _clock_ghz() -> tuple[float, str]:
    """The CPU clock as the OS reports it: cpufreq's maximum, else the highest 'cpu MHz' of
    /proc/cpuinfo (the current clock, below the boost clock), else 3 GHz assumed."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return int(f.read().strip()) / 1e6, "cpufreq maximum"
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.lower().startswith("cpu mhz")]
        if mhz:
            return max(mhz) / 1e3, "current clock from /proc/cpuinfo"
    except (OSError, ValueError, IndexError):
        pass
    return 3.0, "3 GHz assumed"


def peak_estimate(target) -> PeakEstimate:
    """Estimated float32 FMA peak of the CPU `target` describes (cores and features from the target)."""
    from ..target import vector_lanes
    from ..target import host_cores

    attrs = target.attrs
    cores = int(attrs["num-cores"]) if attrs is not None and "num-cores" in attrs else host_cores()
    lanes = vector_lanes(target)
    mcpu = str(attrs["mcpu"]) if attrs is not None and "mcpu" in attrs else ""
    # two FMA pipes per core on the x86 cores of this project; Zen 4 double-pumps AVX-512
    fma = 1 if (lanes == 16 and mcpu == "znver4") else 2
    ghz, source = _clock_ghz()
    return PeakEstimate(cores=cores, lanes=lanes, fma_per_cycle=fma, ghz=ghz, clock_source=source)


_FLOAT_OPS = ("Add", "Sub", "Mul", "Div", "Max", "Min", "FloorDiv", "FloorMod")


def estimate_flops(func) -> int:
    """Floating-point operations of one call of `func` (TVM's own estimate: every float add,
    multiply, max... of every block, times its iterations); 0 when its shapes are symbolic (TVM
    would count a symbolic extent as 1)."""
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    if func.params and estimate_bytes(func) == 0:
        return 0

    try:
        return int(estimate_tir_flops(tvm.IRModule({"main": func})))
    except Exception as exc:  # noqa: BLE001 - symbolic extents: no figure rather than a wrong one
        logger.debug("no FLOP estimate: %s", exc)
        return 0


def estimate_bytes(func) -> int:
    """Bytes a call must move at least: every argument read or written once (intermediate
    buffers and re-reads not counted)."""
    import numpy as np

    total = 0
    for buf in func.params:  # TVM 0.27: a PrimFunc's parameters are its buffers
        shape = getattr(buf, "shape", None)
        if shape is None:
            continue
        n = 1
        for dim in shape:
            value = getattr(dim, "value", None)
            if not isinstance(value, int):
                return 0
            n *= value
        total += n * np.dtype(str(buf.dtype)).itemsize
    return total


def _random_args(func, seed: int):
    """Seeded random tensors for the kernel's arguments (floats in [-1, 1), small integers)."""
    import numpy as np
    import tvm

    rng = np.random.default_rng(seed)
    args = []
    for buf in func.params:
        shape = [int(d) for d in buf.shape]
        dtype = str(buf.dtype)
        if dtype.startswith("float"):
            a = rng.uniform(-1, 1, size=shape).astype(dtype)
        elif dtype == "bool":
            a = rng.integers(0, 2, size=shape).astype(bool)
        else:
            a = rng.integers(0, 4, size=shape).astype(dtype)
        args.append(tvm.runtime.tensor(a))
    return args


def time_kernel(func, target, *, min_repeat_ms: int = 40, repeat: int = 5, seed: int = 0) -> float:
    """Milliseconds of one call of PrimFunc `func` on `target`'s CPU: the median of `repeat`
    timings of >= `min_repeat_ms` each, after one warm-up call. A slow kernel (over 0.2 s a
    call) is timed 3 times, once each."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from ...errors import WorkbenchError
    from ..backend.fast_math import install as install_fast_math
    from ..target import cannot_run_here, target_cpu

    why = cannot_run_here(target_cpu(target)) if target.kind.name == "llvm" else None
    if why:  # code for a CPU this one lacks features of would die of an illegal instruction
        raise WorkbenchError(why.replace("this model", "this kernel"))
    install_fast_math()  # time the kernel as the compiled model runs it
    func = func.with_attr("global_symbol", "main")
    if func.attrs is not None and "tirx.is_scheduled" in func.attrs:
        func = func.without_attr("tirx.is_scheduled")
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(tvm.IRModule({"main": func}))
    lib = tvm.compile(mod, target=target).mod  # the runtime module (time_evaluator lives there)
    args = _random_args(mod["main"], seed)
    dev = tvm.cpu(0)
    once = lib.time_evaluator("main", dev, number=1, repeat=1)(*args).mean  # warm-up, and a first figure
    if once > 0.2:
        repeat, min_repeat_ms = 3, 0
    timer = lib.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    results = sorted(float(r) for r in timer(*args).results)
    return results[len(results) // 2] * 1e3

