"""Getting this process ready to run compiled CPU code: TVM's thread settings and the workbench's pool.

Nothing here runs at import: `import core` sets no variable and builds nothing. `prepare()` is
called by the entry points that compile or run (the GUI, the CLI's lower/compile/bench/run/schedule,
the tests' conftest, the benchmarks) and, as a safety net, by the core functions that first need
TVM; once done it costs a flag check. It must run before `tvm` is imported for the pool to load
(native_pool.install refuses after, and its status() says so).
"""
from __future__ import annotations

import logging
import os
import threading

from . import native_pool
from ..target import host_cores

__all__ = ["SPIN_COUNT", "prepare", "prepared", "use_host_cores"]

logger = logging.getLogger(__name__)

# Yield-spins of an idle TVM worker before it sleeps (see use_host_cores; the exported run.py uses the same)
SPIN_COUNT = "20000"

_lock = threading.Lock()
_prepared = False


def use_host_cores() -> None:
    """Default TVM's CPU thread pool (created at the first parallel kernel) to host_cores() threads,
    unpinned, with a short spin; a value the user set wins.

    TVM alone starts half as many threads as CPUs on x86 (one on a 2-CPU machine); a worker pinned
    to a core another process keeps busy stalls every parallel kernel; a long spin takes the cores
    from other work, none makes every kernel pay a wake-up (docs/performance.md: TVM thread pool
    settings)."""
    os.environ.setdefault("TVM_NUM_THREADS", str(host_cores()))
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", SPIN_COUNT)


def prepare() -> str:
    """Set TVM's thread defaults (use_host_cores), then load the workbench's thread pool
    (native_pool.install); once per process, later calls return at once. Returns the pool's
    status line (native_pool.status())."""
    global _prepared
    if not _prepared:
        with _lock:
            if not _prepared:
                use_host_cores()
                native_pool.install()
                logger.debug("runtime prepared: the workbench's thread pool is %s", native_pool.status())
                _prepared = True
    return native_pool.status()


def prepared() -> bool:
    """Whether prepare() has run in this process."""
    return _prepared
