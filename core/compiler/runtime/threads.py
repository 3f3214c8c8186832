"""How many threads a model run uses: as many as the cores other work leaves free.

Why: TVM's thread pool splits every parallel loop statically, one equal share per thread, and the
call returns when the last share is done. When another process keeps one of the cores busy, the
worker thread holding a share waits for that core (up to a scheduler time slice, milliseconds),
while the calling thread, its own share done, waits for the worker: every parallel kernel takes
the time of the slower core: beside one busy process a model ran slower at 2 threads than at 1
(docs/performance.md: ThreadGovernor). onnxruntime does not suffer this: its main thread
takes the blocks of a parallel loop the workers have not started.

The workbench's own launch (core.compiler.runtime.native_pool) lets the calling thread take the tasks a
late worker has not started, so such a worker delays only the task it began; but a worker sharing a
core with another process still halves that task's speed and takes time from the other process.

So before a run, `ThreadGovernor` looks at how many threads are runnable elsewhere (the kernel's
instantaneous count in /proc/loadavg, less this process's own runnable threads, e.g. TVM's
workers still spinning after the last run; read through files kept open, see ProcCounts; at most
every `recheck_s`, so runs of tiny models do not pay for it each time) and gives the pool (the workbench's, or TVM's
when that one is not loaded) the cores left, at least one and at most the pool's size. On a quiet machine that is every core; beside N busy processes,
N fewer. WORKBENCH_ADAPTIVE_THREADS=0 turns it off (the pool keeps its size).

It gives threads back at once, but takes them away only when two looks in a row (`confirm`) see
the other work: a kernel thread or another process's thread that runs for microseconds (an idle
machine has them: kworkers, RCU, DAMON) is runnable at the instant of one look now and then, and
each such sighting ran one whole model on one core (docs/performance.md: ThreadGovernor). A busy
process is runnable at every look, so beside one the pool shrinks one look later (at most
`recheck_s` plus a run).

Other work is not the only thing that takes the second core away. On this project's 2-vCPU Zen 4
guest there are spells of seconds in which 2-thread runs take twice their time while 1-thread runs
take theirs, and nothing in /proc shows them (docs/performance.md: ThreadGovernor). So with the
workbench's pool the governor brackets each run (before_run ... after_run) and the pool times it,
tries one thread now and then, and runs on one thread while that measures faster
(core/compiler/runtime/native_pool.c, "one thread or all"). The caller must call after_run when the
run is over.

The thread count belongs to the thread that calls the compiled code (a worker thread of the GUI
has its own, as with TVM's thread-local pools), so the governor sets the count of the thread it is
called from, remembering per thread what it set.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable

_monotonic = time.monotonic

__all__ = ["ProcCounts", "ThreadGovernor", "adaptive_threads_enabled", "runnable_elsewhere", "runnable_here", "runtime_threads"]

logger = logging.getLogger(__name__)


class ProcCounts:
    """Runnable-thread counts from /proc, read through files kept open (os.pread at offset 0).

    Why: opening and reading /proc/loadavg and each /proc/self/task/TID/stat afresh costs several
    times as much a check, in the run that pays for it (docs/performance.md: ThreadGovernor). The
    task list is read at every check (threads come and go), the descriptor of a task kept while it
    lives. After a fork the child opens its own.
    `loadavg` and `tasks` name other files for tests."""

    def __init__(self, loadavg: str = "/proc/loadavg", tasks: str = "/proc/self/task"):
        self.loadavg = loadavg
        self.tasks = tasks
        self._lock = threading.Lock()
        self._pid = -1
        self._loadavg_fd: int | None = None
        self._task_fds: dict[str, int] = {}

    def _reset_if_forked(self) -> None:
        pid = os.getpid()
        if pid != self._pid:  # a forked child: the parent's descriptors name the parent's tasks
            for fd in self._task_fds.values():
                _close(fd)
            self._task_fds = {}
            self._pid = pid

    def total(self) -> int | None:
        """Threads runnable on this machine now, this process's included (the kernel's
        instantaneous count in /proc/loadavg: b"3/105", runnable / all); None when it does not say."""
        with self._lock:
            try:
                if self._loadavg_fd is None:
                    self._loadavg_fd = os.open(self.loadavg, os.O_RDONLY)
                field = os.pread(self._loadavg_fd, 128, 0).split()[3]
                return int(field.split(b"/")[0])
            except (OSError, IndexError, ValueError):
                return None

    def here(self) -> int:
        """This process's threads that are runnable now (state R in its task's stat), the caller
        included; at least 1."""
        with self._lock:
            self._reset_if_forked()
            try:
                tids = os.listdir(self.tasks)
            except OSError:
                return 1
            fds = self._task_fds
            for gone in set(fds) - set(tids):
                _close(fds.pop(gone))
            count = 0
            for tid in tids:
                try:
                    fd = fds.get(tid)
                    if fd is None:
                        fd = fds[tid] = os.open(f"{self.tasks}/{tid}/stat", os.O_RDONLY)
                    stat = os.pread(fd, 512, 0)
                except OSError:  # the thread ended meanwhile
                    if tid in fds:
                        _close(fds.pop(tid))
                    continue
                end = stat.rfind(b")")  # the name, in parentheses, may hold spaces
                if stat[end + 2:end + 3] == b"R":
                    count += 1
            return max(1, count)

    def elsewhere(self) -> int:
        """Threads runnable outside this process (0 when the kernel does not say); see
        runnable_elsewhere."""
        total = self.total()
        if total is None or total <= 1:
            return 0
        return max(0, total - self.here())  # the tasks are read only when something besides the caller runs


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


_PROC = ProcCounts()


def runnable_here() -> int:
    """This process's threads that are runnable now (state R in /proc/self/task/*/stat), the
    caller included; at least 1."""
    return _PROC.here()


def runnable_elsewhere() -> int:
    """Threads runnable on this machine outside this process (0 when the kernel does not say).

    This process's own runnable threads are not counted: after a run, TVM's idle workers
    yield-spin for tens of ms (TVM_THREAD_POOL_SPIN_COUNT sched_yields) and show as runnable; counting them as
    another process's work made every other run drop to one thread on a quiet machine
    (docs/performance.md: ThreadGovernor)."""
    return _PROC.elsewhere()


def adaptive_threads_enabled() -> bool:
    return os.environ.get("WORKBENCH_ADAPTIVE_THREADS", "1").strip() not in ("0", "off", "false", "no")


def _pool_size() -> int:
    """The threads TVM's pool was started with: TVM_NUM_THREADS (core.compiler.runtime.setup.use_host_cores
    sets it to the host's cores unless the user did)."""
    from ..target import host_cores

    try:
        return max(1, int(os.environ.get("TVM_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or host_cores()))
    except ValueError:
        return host_cores()


class ThreadGovernor:
    """Call `before_run()` before each run of compiled CPU code (see the module docstring).

    `max_threads`: the most threads to use (default: the pool's size, TVM_NUM_THREADS, which
    core.compiler.runtime.setup.use_host_cores made the host's cores unless the user set it). `cores`: the
    cores this process may use (default core.compiler.target.host_cores()). `others`: how many
    threads are runnable elsewhere (default runnable_elsewhere; tests pass their own). `confirm`:
    looks in a row that must want fewer threads before the pool shrinks (1: the first does).
    `measure`: with the workbench's pool, have it time the runs (before_run to after_run) and run
    them on one thread while one measures faster (native_pool.c, "one thread or all").
    """

    def __init__(
        self,
        max_threads: int | None = None,
        *,
        cores: int | None = None,
        others: Callable[[], int] = runnable_elsewhere,
        recheck_s: float = 0.002,
        enabled: bool | None = None,
        confirm: int = 2,
        measure: bool = True,
    ):
        from ..target import host_cores

        self.measure = measure
        self.confirm = max(1, int(confirm))
        self.max_threads = max_threads
        self.cores = cores or host_cores()
        self.others = others
        self.recheck_s = recheck_s
        self.enabled = adaptive_threads_enabled() if enabled is None else enabled
        self._state = threading.local()  # per calling thread: pool size, what we set, when checked

    def threads_now(self, limit: int) -> int:
        """Threads worth using now: the cores not taken by other runnable threads, in [1, limit]."""
        return max(1, min(limit, self.cores - self.others()))

    def before_run(self) -> int:
        """Size the calling thread's pool for the next run; returns the threads it will use.
        Call after_run() when the run is over (also when it failed).

        Kept lean: it runs before every run; now a time read and the pool's two calls
        (docs/performance.md: ThreadGovernor). A run whose after_run never came is left untimed
        by the pool itself (native_pool.c, begin_at)."""
        state = self._state
        try:
            checked = state.checked
        except AttributeError:
            checked = self._start(state)
        if self.enabled:
            now = _monotonic()
            if now - checked >= self.recheck_s:
                state.checked = now
                self._size(state, self.threads_now(state.limit))
        else:
            self._size(state, state.limit)
        begin = state.begin
        return state.current if begin is None else begin(state.arg)

    def after_run(self) -> None:
        """After the run before_run began: the workbench's pool times it (see measure)."""
        state = self._state
        end = getattr(state, "end", None)
        if end is not None:
            end(state.arg)

    def _start(self, state) -> float:
        """The calling thread's first run: its state (see before_run); returns when it last looked."""
        from .native_pool import pool, run_threads, set_run_threads

        state.config = set_run_threads
        state.limit = max(1, self.max_threads or _pool_size())
        state.current = run_threads()
        state.fewer_seen = 0  # looks in a row that wanted fewer threads than the pool has
        state.begin = state.end = state.arg = None
        p = pool()
        if p is not None and p.enabled() and self.enabled and self.measure:
            # this model's state on this thread, and the pool's calls
            state.run_state = p.run_state()
            state.arg = ctypes.byref(state.run_state)
            state.begin, state.end = p.lib.mlcwb_pool_run_begin, p.lib.mlcwb_pool_run_end
        state.checked = float("-inf")
        return state.checked

    def _size(self, state, wanted: int) -> None:
        """Give the calling thread's pool `wanted` threads (the limit, or the cores others leave)."""
        if self.enabled:
            if wanted < min(state.current, state.limit):  # other work seen (not a pool above the limit)
                state.fewer_seen += 1
                if state.fewer_seen < self.confirm:
                    return  # maybe a blip: shrink only if the next look sees it too
            state.fewer_seen = 0
        if wanted != state.current:
            state.config(wanted)
            logger.debug("TVM pool: %d -> %d threads", state.current, wanted)
            state.current = wanted


class runtime_threads:
    """Run TVM's compiled code on `n` threads inside this `with` block (and restore the count
    it had before): the same executable measured at 1 and at 2 threads shows how its kernels
    scale. A count above the pool's size (TVM_NUM_THREADS, see setup.use_host_cores) gets the
    pool's size. Works for the calling thread, the one `vm["main"]` called from here runs on
    (native_pool.set_run_threads)."""

    def __init__(self, n: int):
        self.n = max(1, int(n))
        self._before = None

    def __enter__(self) -> "runtime_threads":
        from .native_pool import run_threads, set_run_threads

        self._before = run_threads()
        set_run_threads(self.n)
        return self

    def __exit__(self, *exc) -> None:
        from .native_pool import set_run_threads

        set_run_threads(self._before)
