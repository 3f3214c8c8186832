"""core.compiler.target: the compiled code runs as many threads as the target was built for."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _threads_after(code: str, env_extra: dict[str, str] | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_importing_core_gives_tvm_the_host_cores():
    from core.compiler.target import host_cores

    code = "import core, tvm; print(tvm.get_global_func('runtime.NumThreads')())"
    # TVM alone halves the CPU count on x86; after `import core` the pool has every core we may use
    assert _threads_after(code) == host_cores()


def test_user_thread_count_wins():
    code = "import core, tvm; print(tvm.get_global_func('runtime.NumThreads')())"
    assert _threads_after(code, {"TVM_NUM_THREADS": "1"}) == 1


def test_importing_core_unpins_and_bounds_spinning_unless_the_user_chose():
    """A worker pinned to a core another process keeps busy, or idle workers yield-spinning for
    long, make every parallel kernel wait on a busy machine; workers that sleep at once make every
    parallel kernel pay a wake-up (core.compiler.target.use_host_cores)."""
    code = "import core, os; print(os.environ['TVM_BIND_THREADS'] + os.environ['TVM_THREAD_POOL_SPIN_COUNT'])"
    clean = {k: v for k, v in os.environ.items() if k not in ("TVM_BIND_THREADS", "TVM_THREAD_POOL_SPIN_COUNT")}
    run = lambda env: subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert run(clean).stdout.strip().splitlines()[-1] == "020000"
    assert run({**clean, "TVM_BIND_THREADS": "1", "TVM_THREAD_POOL_SPIN_COUNT": "7"}).stdout.strip().splitlines()[-1] == "17"


def test_runtime_threads_sets_and_restores_the_pool_size():
    """The benchmark's 1-thread columns run the same executable on one thread of the pool."""
    code = (
        "import core, tvm\n"
        "from core.compiler.target import runtime_threads\n"
        "from core.compiler.runtime.native_pool import run_threads as n\n"
        "with runtime_threads(1):\n"
        "    inside = n()\n"
        "print(inside, n())"
    )
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    env["TVM_NUM_THREADS"] = "2"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().splitlines()[-1] == "1 2"
