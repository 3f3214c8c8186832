"""Run a process as if this AVX-512 host were an AVX2 one: a CPUID mask (cpuid_mask.c) preloaded into it.

What it is for: a fair comparison of AVX2 code on an AVX-512 machine. Our side is compiled
without AVX-512 (`cpu_features="-avx512f"`); onnxruntime picks its MLAS kernels from CPUID when
it loads, so its process gets this library in LD_PRELOAD and picks the AVX2 ones (checked: the
hot loops of a masked session use ymm registers where an unmasked one uses zmm).
`benchmarks/compiled_vs_onnxruntime.py --as-avx2` measures that way. It is not an AVX2 CPU:
caches, clocks and the 256-bit datapath stay the host's.

The mask needs Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID): Intel CPUs since Ivy Bridge and
KVM guests have it (KVM emulates it, on AMD hosts too); bare-metal AMD CPUs may not. `probe()`
says whether it works here. glibc picks its own string functions before any library loads, so
`environment()` also sets GLIBC_TUNABLES to drop its AVX-512 variants. SIGSEGV handlers the
process installs later (TVM's, Python's faulthandler) get the other faults; the mask keeps the
CPUID ones (cpuid_mask.c).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ENV", "SOURCE", "build", "environment", "probe", "report"]

SOURCE = Path(__file__).with_name("cpuid_mask.c")
CFLAGS = ["-O2", "-shared", "-fPIC"]
ENV = "MLCWB_CPUID_MASK"  # set in a masked process's environment: the library's path
GLIBC_NO_AVX512 = "glibc.cpu.hwcaps=-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512VL,-AVX512ER,-AVX512PF"


def build() -> Path:
    """The mask library (built once per source version, cached like core.compiler.runtime.native_pool)."""
    # imported here, not at the top: ort_worker's child imports this module without the workbench
    from core.compiler.runtime.native_pool import build_c_library

    return build_c_library(SOURCE, CFLAGS)


def environment(base: dict | None = None) -> dict:
    """`base` (default os.environ) with the mask preloaded: for subprocess's `env=`."""
    env = dict(os.environ if base is None else base)
    lib = str(build())
    env["LD_PRELOAD"] = " ".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)
    tunables = env.get("GLIBC_TUNABLES", "")
    env["GLIBC_TUNABLES"] = f"{tunables}:{GLIBC_NO_AVX512}" if tunables else GLIBC_NO_AVX512
    env[ENV] = lib
    return env


def report() -> dict | None:
    """In a process started with environment(): {"active": the mask answers CPUID, "avx512f":
    what CPUID now says of AVX512F, "answered": CPUIDs answered so far}; None in any other process."""
    path = os.environ.get(ENV)
    if not path:
        return None
    import ctypes

    lib = ctypes.CDLL(path)  # already loaded by LD_PRELOAD: the same copy
    lib.mlcwb_cpuid_mask_answered.restype = ctypes.c_ulong
    lib.mlcwb_cpuid_leaf7_ebx.restype = ctypes.c_uint
    return {
        "active": bool(lib.mlcwb_cpuid_mask_active()),
        "avx512f": bool(lib.mlcwb_cpuid_leaf7_ebx() & (1 << 16)),
        "answered": int(lib.mlcwb_cpuid_mask_answered()),
    }


def probe() -> str | None:
    """None when a masked process sees no AVX512F here, else one sentence why not."""
    try:
        env = environment()
    except OSError as e:
        return f"the CPUID mask could not be built: {e}"
    code = "import json, core.compiler.measure.cpuid_mask as m; print(json.dumps(m.report()))"
    root = Path(__file__).resolve().parents[3]
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, timeout=120, check=False)
    if run.returncode != 0:
        tail = run.stderr.strip().splitlines()[-1:] or [f"exit status {run.returncode}"]
        return f"a process with the CPUID mask failed: {tail[0]}"
    import json

    seen = json.loads(run.stdout.strip().splitlines()[-1])
    if not seen["active"]:
        return "this host has no CPUID faulting (arch_prctl ARCH_SET_CPUID), so AVX-512 cannot be hidden from a process"
    if seen["avx512f"]:
        return "the CPUID mask is active but CPUID still reports AVX512F"
    return None
