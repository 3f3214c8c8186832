"""core.compiler.runtime.setup: prepare() gives TVM's pool the host's cores, unpinned, with a short
spin, unless the user chose; runtime_threads sets and restores a run's thread count."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
PREPARE = "from core.compiler.runtime import prepare; prepare(); "
TVM_KEYS = ("TVM_NUM_THREADS", "TVM_BIND_THREADS", "TVM_THREAD_POOL_SPIN_COUNT")


def _run(code: str, env_extra: dict[str, str] | None = None) -> str:
    """The last line `code` prints in a fresh process whose environment has no TVM_* setting of
    ours (the suite's own prepare() set them in this process) but `env_extra`'s."""
    env = {k: v for k, v in os.environ.items() if k not in TVM_KEYS}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_prepare_gives_tvm_the_host_cores():
    from core.compiler.target import host_cores

    code = PREPARE + "import tvm; print(tvm.get_global_func('runtime.NumThreads')())"
    # TVM alone halves the CPU count on x86; after prepare() the pool has every core we may use
    assert int(_run(code)) == host_cores()


def test_user_thread_count_wins():
    code = PREPARE + "import tvm; print(tvm.get_global_func('runtime.NumThreads')())"
    assert int(_run(code, {"TVM_NUM_THREADS": "1"})) == 1


def test_prepare_unpins_and_bounds_spinning_unless_the_user_chose():
    """A worker pinned to a core another process keeps busy, or idle workers yield-spinning for
    long, make every parallel kernel wait on a busy machine; workers that sleep at once make every
    parallel kernel pay a wake-up (core.compiler.runtime.setup.use_host_cores)."""
    code = PREPARE + "import os; print(os.environ['TVM_BIND_THREADS'] + os.environ['TVM_THREAD_POOL_SPIN_COUNT'])"
    assert _run(code) == "020000"
    assert _run(code, {"TVM_BIND_THREADS": "1", "TVM_THREAD_POOL_SPIN_COUNT": "7"}) == "17"


def test_prepare_runs_once_and_says_how_the_pool_stands():
    code = (
        "import os\n"
        "from core.compiler.runtime import native_pool, prepare, setup\n"
        "before = setup.prepared()\n"
        "first = prepare()\n"
        "del os.environ['TVM_BIND_THREADS']\n"  # a second call sets nothing again
        "print(before, setup.prepared(), first == native_pool.status() == prepare(), 'TVM_BIND_THREADS' in os.environ)"
    )
    assert _run(code) == "False True True False"


def test_runtime_threads_sets_and_restores_the_pool_size():
    """The benchmark's 1-thread columns run the same executable on one thread of the pool."""
    code = (
        PREPARE + "import tvm\n"
        "from core.compiler.runtime.threads import runtime_threads\n"
        "from core.compiler.runtime.native_pool import run_threads as n\n"
        "with runtime_threads(1):\n"
        "    inside = n()\n"
        "print(inside, n())"
    )
    assert _run(code, {"TVM_NUM_THREADS": "2"}) == "1 2"
