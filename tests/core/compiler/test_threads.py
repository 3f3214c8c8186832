"""core.compiler.threads: a run uses the cores other work leaves free (TVM's static parallel split
makes every kernel wait for a worker whose core another process holds)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
