"""The workbench's parallel launch for compiled CPU code (native_pool.c), built and loaded before TVM.

TVM's own pool polls with a sched_yield system call per look (slow on a VM; docs/performance.md:
"The workbench's parallel launch") and gives task i to thread i, so a worker whose core another process holds delays every kernel. native_pool.c defines
TVMBackendParallelLaunch with workers that poll with the pause instruction and tasks that any
thread may take. Loaded with RTLD_GLOBAL before libtvm_runtime.so, it is the definition the
dynamic linker gives libtvm_runtime's own reference to that symbol, which is what every compiled
module's __TVMBackendParallelLaunch pointer is set from; TVM itself is not changed.

`install()` builds the library once per source version with the C compiler TVM's export uses
(cc; the build is cached under $XDG_CACHE_HOME/mlc-workbench) and loads it; it must run before
`tvm` is imported (core.compiler.runtime.prepare calls it). When it cannot (no compiler, tvm already imported,
WORKBENCH_NATIVE_POOL=0) TVM's pool runs everything as before and `status()` says why.
An exported artifact carries the built library (ARTIFACT_FILE) and its run.py loads it the same way.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ARTIFACT_FILE", "NativePool", "build", "build_c_library", "install", "pool", "run_threads", "set_run_threads", "status"]

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("native_pool.c")
ARTIFACT_FILE = "threadpool.so"  # the built library's name inside an exported artifact
CFLAGS = ["-O2", "-shared", "-fPIC", "-pthread"]  # generic x86-64: the library travels with artifacts

_pool: NativePool | None = None
_status = "not installed"


class NativePool:
    """The loaded library's controls. Thread counts are per calling thread, like TVM's pools."""

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.lib = lib
        self.path = path
        lib.mlcwb_pool_launches.restype = ctypes.c_uint64
        lib.mlcwb_pool_pooled_launches.restype = ctypes.c_uint64
        lib.mlcwb_pool_one_thread_runs.restype = ctypes.c_uint64
        self._set_threads = lib.mlcwb_pool_set_threads
        self._threads = lib.mlcwb_pool_threads

    def set_threads(self, n: int) -> None:
        """Threads for this calling thread's parallel kernels (1: run them on this thread alone)."""
        self._set_threads(int(n))

    def threads(self) -> int:
        return int(self._threads())

    def set_chunks(self, n: int) -> None:
        """Tasks per thread a parallel loop is cut into (1-16; default 1, or WORKBENCH_POOL_CHUNKS):
        each thread runs its own share first and then takes the tail of a slower thread's (see
        native_pool.c). 1 cuts a loop into one task a thread, as TVM's pool does."""
        self.lib.mlcwb_pool_set_chunks(int(n))

    def chunks(self) -> int:
        return int(self.lib.mlcwb_pool_chunks())

    def run_state(self) -> ctypes.Array:
        """A fresh state for the library's mlcwb_pool_run_begin / mlcwb_pool_run_end, which
        core.compiler.runtime.threads.ThreadGovernor calls around each run (see native_pool.c, "one thread
        or all"): one per model and calling thread."""
        return ctypes.create_string_buffer(int(self.lib.mlcwb_pool_run_state_size()))

    def one_thread_runs(self) -> int:
        """Runs (between run_begin and run_end) that the measured choice gave one thread of several."""
        return int(self.lib.mlcwb_pool_one_thread_runs())

    def simulate_runs(self, many_ms, one_ms, gap_ms=None, allowed=None) -> list[int]:
        """The run-by-run choice on given timings, for tests: run i begins gap_ms[i] after the
        last one ended (default 0.01 ms) with allowed[i] threads allowed (default 2), and lasts
        many_ms[i] on them or one_ms[i] on one thread; returns the threads each run took."""
        n = len(many_ms)
        allowed = [2] * n if allowed is None else list(allowed)
        gap_ms = [0.01] * n if gap_ms is None else list(gap_ms)
        used = (ctypes.c_int * n)()
        d = ctypes.c_double * n
        self.lib.mlcwb_pool_simulate_runs(
            n, (ctypes.c_int * n)(*allowed), d(*[t * 1e6 for t in gap_ms]), d(*[t * 1e6 for t in many_ms]),
            d(*[t * 1e6 for t in one_ms]), used,
        )
        return list(used)

    def set_enabled(self, on: bool) -> None:
        """False hands every launch to TVM's own pool (for A/B measurements in one process)."""
        self.lib.mlcwb_pool_set_enabled(1 if on else 0)

    def enabled(self) -> bool:
        return bool(self.lib.mlcwb_pool_enabled())

    def launches(self) -> int:
        """Parallel launches through this library so far (every one, serial or pooled)."""
        return int(self.lib.mlcwb_pool_launches())

    def pooled_launches(self) -> int:
        """Launches whose tasks were shared with the workers."""
        return int(self.lib.mlcwb_pool_pooled_launches())


def _disabled() -> bool:
    return os.environ.get("WORKBENCH_NATIVE_POOL", "1").strip().lower() in ("0", "off", "false", "no")


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlc-workbench"


def build_c_library(source: Path, cflags: list[str], out: str | os.PathLike | None = None) -> Path:
    """A shared library built from the C file `source` with `cflags`: `out`, or a cached file
    named by the source's stem and the hash of its text and flags (built once; concurrent builders
    each write their own file and rename it in place). Raises OSError (no compiler, a failed
    build) with the compiler's first lines."""
    text = source.read_bytes()
    tag = hashlib.sha256(text + " ".join(cflags).encode()).hexdigest()[:16]
    path = Path(out) if out is not None else _cache_dir() / f"{source.stem}-{tag}.so"
    if out is None and path.exists():
        return path
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise OSError("no C compiler (cc or gcc) is on PATH")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    os.close(fd)
    try:
        run = subprocess.run([cc, *cflags, "-o", tmp, str(source)], capture_output=True, text=True, timeout=120, check=False)
        if run.returncode != 0:
            raise OSError(f"{cc} failed on {source.name}: {' '.join(run.stderr.strip().splitlines()[:3])}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def build(out: str | os.PathLike | None = None) -> Path:
    """The library built from native_pool.c (see build_c_library): `out`, or the cached build."""
    return build_c_library(SOURCE, CFLAGS, out)


def _load(path: str) -> NativePool:
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return NativePool(lib, path)


def install(path: str | os.PathLike | None = None) -> NativePool | None:
    """Load the pool (building it if need be) before TVM; None when it cannot be, see status()."""
    global _pool, _status
    if _pool is not None:
        return _pool
    if _disabled():
        _status = "off (WORKBENCH_NATIVE_POOL=0): TVM's thread pool runs the parallel kernels"
        return None
    if "tvm" in sys.modules or "tvm_ffi" in sys.modules:
        _status = "not installed: TVM was imported first, so its own pool runs the parallel kernels"
        return None
    try:
        built = Path(path) if path is not None else build()
        try:
            _pool = _load(str(built))
        except OSError:
            if path is not None:
                raise
            built.unlink(missing_ok=True)  # a cached build that no longer loads (cut short, another libc): once more
            _pool = _load(str(build()))
    except (OSError, AttributeError, subprocess.SubprocessError) as e:
        _status = f"not installed ({e}): TVM's thread pool runs the parallel kernels"
        logger.warning("the workbench's thread pool is %s", _status)
        return None
    _status = f"installed ({_pool.path})"
    return _pool


def pool() -> NativePool | None:
    """The installed pool, or None (TVM's pool runs the parallel kernels)."""
    return _pool


def status() -> str:
    """One line: whether the pool is installed, and why not."""
    return _status


def set_run_threads(n: int) -> None:
    """Run the calling thread's compiled CPU code on `n` threads (at most the pool's size,
    TVM_NUM_THREADS): the workbench's pool when it runs the launches, else TVM's. TVM's pool is
    left alone while it has nothing to run: resizing it starts its workers, which then poll with
    sched_yield for tens of milliseconds beside the run."""
    p = _pool
    if p is not None:
        p.set_threads(n)
        if p.enabled():
            return
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(1, int(n))  # 1: TVM's "big cores" mode, every core alike on x86


def run_threads() -> int:
    """The threads the calling thread's compiled CPU code runs on (see set_run_threads)."""
    p = _pool
    if p is not None and p.enabled():
        return p.threads()
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())
