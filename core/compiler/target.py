"""Compilation targets that know the machine: the host CPU's name, features and core count."""
from __future__ import annotations

import functools
import os

__all__ = ["make_target", "host_cpu", "host_cores", "use_host_cores", "runtime_threads", "TARGET_KINDS", "SPIN_COUNT"]

TARGET_KINDS = ("cpu", "cuda")
# Yield-spins of an idle TVM worker before it sleeps (see use_host_cores; the exported run.py uses the same)
SPIN_COUNT = "20000"


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


def use_host_cores() -> None:
    """Make TVM's CPU thread pool run host_cores() threads, the count compiled code is built for
    (the target's num-cores).

    Why: on x86 TVM's runtime assumes every two CPUs are one hyperthreaded core and starts half
    as many threads as there are CPUs - one on a 2-CPU machine, which halved every measured
    latency's parallelism. The pool is created once, at the first parallel kernel (compile runs
    some: weight packing), so this runs when `core` is imported. A TVM_NUM_THREADS the user set
    wins.

    Also (unless set) TVM_BIND_THREADS=0: by default TVM pins each worker to one core, and when
    another process is busy on that core every parallel kernel waits for the pinned worker's
    next time slice (a small CNN measured 64-84 ms against 0.065 ms unpinned beside one busy
    process on 2 cores, 0.045-0.064 ms either way without it; a shared, noisy machine).
    """
    os.environ.setdefault("TVM_NUM_THREADS", str(host_cores()))
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    # And TVM_THREAD_POOL_SPIN_COUNT=20000 (the default is ~300,000): an idle worker calls
    # sched_yield about 20,000 times (~10 ms) before it sleeps, so the next parallel kernel of a
    # run finds it awake, and then sleeps instead of taking the cores from everything else. With 0
    # (sleep at once) every parallel kernel paid a wake-up and 1 -> 2 threads barely scaled:
    # quiet 2-core Zen 4, 2 threads, ours / onnxruntime medians, spin 0 vs 20000 in two runs each:
    # resnet50 1.26-1.48 vs 0.98-1.12, inception_v2 1.29-1.66 vs 0.89-1.41, mobilenet_v2 1.96-2.24 vs
    # 1.35-1.52. With the default count, one busy process beside took SqueezeNet from 9.8 to
    # 50-121 ms; now core.compiler.threads gives the pool only the cores other processes leave
    # free, and with one busy process the figures are the same with 20000 as with 0 (1.11 vs 1.07).
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", SPIN_COUNT)


class runtime_threads:
    """Run TVM's compiled code on `n` threads inside this `with` block (and restore the count
    it had before): the same executable measured at 1 and at 2 threads shows how its kernels
    scale. A count above the pool's size (TVM_NUM_THREADS, see use_host_cores) gets the pool's
    size. Works on this thread's pool, the one `vm["main"]` called from here uses."""

    def __init__(self, n: int):
        self.n = max(1, int(n))
        self._before = None

    @staticmethod
    def _funcs():
        import tvm

        return tvm.get_global_func("runtime.config_threadpool"), tvm.get_global_func("runtime.NumThreads")

    def __enter__(self) -> "runtime_threads":
        config, count = self._funcs()
        self._before = int(count())
        config(1, self.n)  # 1: TVM's "big cores" mode, all of them alike on x86
        return self

    def __exit__(self, *exc) -> None:
        config, _ = self._funcs()
        config(1, self._before)


def make_target(kind: str = "cpu", cuda_arch: str = "sm_80", *, mcpu: str | None = None, mattr: list[str] | None = None, cores: int | None = None):
    """A tvm.target.Target for 'cpu' (LLVM for this host) or 'cuda' (with this host as host).

    `mcpu` / `mattr` / `cores` describe another CPU than this one (code for a deployment host, or
    this host with AVX-512 off: mattr=["-avx512f"]); the schedules read vector width and register
    file from these, never from the machine compiling."""
    import tvm

    from ..errors import WorkbenchError

    spec = {"kind": "llvm", "mcpu": mcpu or host_cpu(), "num-cores": cores or host_cores()}
    if mattr:
        spec["mattr"] = list(mattr)
    cpu = tvm.target.Target(spec)
    if kind == "cpu":
        return cpu
    if kind == "cuda":
        return tvm.target.Target({"kind": "cuda", "arch": cuda_arch}, host=cpu)
    raise WorkbenchError(f"unknown target '{kind}': choose one of {', '.join(TARGET_KINDS)}.")


def gpu_present() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001
        return False
