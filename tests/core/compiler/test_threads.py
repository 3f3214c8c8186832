"""core.compiler.threads: a run uses the cores other work leaves free (TVM's static parallel split
makes every kernel wait for a worker whose core another process holds)."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.compiler.threads import ThreadGovernor, runnable_elsewhere

ROOT = Path(__file__).resolve().parents[3]


def test_governor_gives_the_pool_the_cores_left_free():
    # in a child with a 2-thread pool, whatever this host has
    code = (
        "import core, tvm\n"
        "from core.compiler.threads import ThreadGovernor\n"
        "busy = [0]\n"
        "g = ThreadGovernor(cores=2, others=lambda: busy[0], recheck_s=0)\n"
        "n = tvm.get_global_func('runtime.NumThreads')\n"
        "seen = []\n"
        "for b in (0, 1, 3, 0):\n"
        "    busy[0] = b\n"
        "    seen.append((g.before_run(), n()))\n"
        "off = ThreadGovernor(cores=2, others=lambda: 1, recheck_s=0, enabled=False)\n"
        "seen.append((off.before_run(), n()))\n"
        "print(seen)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "WORKBENCH_ADAPTIVE_THREADS")}
    env["TVM_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    # quiet: 2; one busy: 1; three busy: still 1; quiet again: 2; turned off: the pool's 2 whatever the load
    assert out.stdout.strip().splitlines()[-1] == "[(2, 2), (1, 1), (1, 1), (2, 2), (2, 2)]"


def test_governor_rechecks_at_most_every_recheck_s():
    calls = []
    g = ThreadGovernor(max_threads=1, cores=2, others=lambda: calls.append(1) or 0, recheck_s=60)
    for _ in range(5):
        assert g.before_run() == 1
    assert len(calls) == 1  # one look at the machine; tiny models' runs do not pay for it each time


def test_runnable_elsewhere_reads_the_kernel_count():
    n = runnable_elsewhere()
    assert isinstance(n, int) and n >= 0
    if Path("/proc/loadavg").exists():
        assert n <= int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])


@contextlib.contextmanager
def _busy_thread_of_our_own():
    """A thread of this process that stays runnable without the GIL (hashing a large buffer
    releases it), like TVM's workers yield-spinning after a run."""
    stop = threading.Event()
    data = b"x" * (8 << 20)

    def spin():
        while not stop.is_set():
            hashlib.sha256(data).digest()

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def _fake_loadavg(runnable: int):
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path) == "/proc/loadavg":
            return io.BytesIO(f"0.50 0.40 0.30 {runnable}/200 12345\n".encode())
        return real_open(path, *args, **kwargs)

    return fake_open


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("where", ["workbench", "exported run.py"])
def test_our_own_spinning_threads_are_not_taken_for_another_process(monkeypatch, where):
    """The kernel counts 2 runnable threads: the caller and a worker of this very process (TVM's
    pool spins after a run). That is no other process's work, so both cores stay ours: counting it
    made every other run on a quiet machine drop to one thread."""
    if where == "workbench":
        import core.compiler.threads as module

        measure = module.runnable_elsewhere
    else:
        import core.compiler.runner_template as module

        measure = module._runnable_elsewhere
    monkeypatch.setattr(module, "open", _fake_loadavg(2), raising=False)
    with _busy_thread_of_our_own():
        seen = set()
        for _ in range(200):
            seen.add(measure())
            if 0 in seen:
                break
            time.sleep(0.001)
    assert 0 in seen  # at least once both runnable threads were seen to be ours
    monkeypatch.setattr(module, "open", _fake_loadavg(3), raising=False)
    assert measure() >= 1  # a third runnable thread is someone else's (the spinner has stopped)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux's /proc")
def test_runnable_here_counts_this_process_threads():
    from core.compiler.threads import runnable_here

    assert runnable_here() >= 1  # the caller
    with _busy_thread_of_our_own():
        counts = [runnable_here() for _ in range(200)]
    assert max(counts) >= 2
