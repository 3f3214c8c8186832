"""Compilation targets that know the machine: the host CPU's name, features and core count."""
from __future__ import annotations

import functools
import os

__all__ = ["make_target", "host_cpu", "host_cores", "TARGET_KINDS"]

TARGET_KINDS = ("cpu", "cuda")


@functools.lru_cache(maxsize=1)
def host_cpu() -> str:
    """LLVM's name for this CPU (e.g. 'znver3', 'skylake-avx512'); drives vector width and features."""
    import tvm

    return str(tvm.get_global_func("target.llvm_get_system_cpu")())


def host_cores() -> int:
    """Cores this process may use (respects affinity masks / containers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def make_target(kind: str = "cpu", cuda_arch: str = "sm_80"):
    """A tvm.target.Target for 'cpu' (LLVM for this host) or 'cuda' (with this host as host)."""
    import tvm

    from .errors import WorkbenchError

    cpu = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": host_cores()})
    if kind == "cpu":
        return cpu
    if kind == "cuda":
        return tvm.target.Target({"kind": "cuda", "arch": cuda_arch}, host=cpu)
    raise WorkbenchError(f"unknown target '{kind}': choose one of {', '.join(TARGET_KINDS)}.")
