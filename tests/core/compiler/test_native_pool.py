"""The workbench's parallel launch (core.compiler.native_pool): it is the one TVM's compiled code
calls, it computes what TVM's pool computes, and it falls back to TVM's pool when it cannot load.

Each case runs in a fresh process: the launch is chosen when TVM's runtime library is loaded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# A kernel of parallel regions in a row (parallel loops of 7, 2 and 1 iterations), and a
# reference computed by numpy; prints a JSON line of what the launch counters saw.
KERNEL = '''
import json, os, sys, threading
sys.path.insert(0, {root!r})
{first}
import numpy as np
import tvm
from tvm.script import tirx as T
from core.compiler import native_pool
from core.compiler.target import make_target, runtime_threads

@T.prim_func
def f(A: T.Buffer((7, 96), "float32"), B: T.Buffer((7, 96), "float32")):
    for i in T.parallel(7):
        for j in range(96):
            B[i, j] = A[i, j] * T.float32(2) + T.float32(i)
    for i in T.parallel(2):
        for j in range(48):
            B[0, i * 48 + j] = B[0, i * 48 + j] + T.float32(1)
    for i in T.parallel(1):
        B[6, 95] = T.float32(-1)

kernel = tvm.compile(tvm.IRModule({{"main": f}}), make_target("cpu"))
a = np.random.default_rng(0).standard_normal((7, 96)).astype("float32")
want = a * 2 + np.arange(7, dtype="float32")[:, None]
want[0] += 1
want[6, 95] = -1

def check(threads, runs=50):
    x, y = tvm.runtime.tensor(a), tvm.runtime.tensor(np.zeros((7, 96), "float32"))
    with runtime_threads(threads):
        for _ in range(runs):
            kernel(x, y)
    return bool(np.array_equal(y.numpy(), want))

pool = native_pool.pool()
out = {{"status": native_pool.status(), "installed": pool is not None}}
before = (pool.launches(), pool.pooled_launches()) if pool else (0, 0)
out["one"] = check(1)
mid = (pool.launches(), pool.pooled_launches()) if pool else (0, 0)
out["two"] = check(2)
after = (pool.launches(), pool.pooled_launches()) if pool else (0, 0)
out["launches_1t"] = [mid[0] - before[0], mid[1] - before[1]]
out["launches_2t"] = [after[0] - mid[0], after[1] - mid[1]]
{extra}
print(json.dumps(out))
'''


def _run(tmp_path, *, first: str = "import core", extra: str = "", env: dict | None = None) -> dict:
    script = tmp_path / "kernel.py"  # TVMScript reads the function's source: a file, not -c
    script.write_text(KERNEL.format(root=str(ROOT), first=first, extra=extra))
    clean = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "WORKBENCH_NATIVE_POOL", "WORKBENCH_ADAPTIVE_THREADS")}
    clean.update({"TVM_NUM_THREADS": "2", **(env or {})})
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compiled_code_launches_through_the_workbench_pool(tmp_path):
    out = _run(tmp_path)
    assert out["installed"] and out["status"].startswith("installed")
    assert out["one"] and out["two"]  # the same values as numpy at 1 and at 2 threads
    # 50 runs of 2 regions (TVM makes the loop of 1 iteration serial): every launch came here;
    # at 1 thread none woke a worker, at 2 every one did
    assert out["launches_1t"] == [100, 0]
    assert out["launches_2t"] == [100, 100]


def test_tvm_pool_runs_when_the_workbench_pool_is_turned_off_in_process(tmp_path):
    extra = (
        "pool.set_enabled(False)\n"
        "b = (pool.launches(), pool.pooled_launches())\n"
        "out['tvm_two'] = check(2)\n"
        "out['tvm_launches'] = [pool.launches() - b[0], pool.pooled_launches() - b[1]]\n"
        "pool.set_enabled(True)\n"
        "out['again'] = check(2)\n"
    )
    out = _run(tmp_path, extra=extra)
    assert out["tvm_two"] and out["again"]
    assert out["tvm_launches"] == [100, 0]  # handed on to TVM's own launch


def test_tvm_imported_first_or_turned_off_falls_back_to_tvm_pool(tmp_path):
    out = _run(tmp_path, first="import tvm\nimport core")
    assert not out["installed"] and "TVM was imported first" in out["status"]
    assert out["one"] and out["two"]
    out = _run(tmp_path, env={"WORKBENCH_NATIVE_POOL": "0"})
    assert not out["installed"] and "WORKBENCH_NATIVE_POOL=0" in out["status"]
    assert out["two"]


def test_concurrent_callers_and_a_forked_child_compute_the_same(tmp_path):
    """Two Python threads launching at once (one finds the pool held and runs its tasks itself),
    and a child forked after the workers started (it starts its own)."""
    extra = (
        "results = []\n"
        "def many():\n"
        "    results.append(check(2, runs=300))\n"
        "threads = [threading.Thread(target=many) for _ in range(3)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "out['threads'] = results\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.close(r)\n"
        "    b = pool.pooled_launches()\n"
        "    ok = check(2)\n"
        "    os.write(w, json.dumps([ok, pool.pooled_launches() - b]).encode())\n"
        "    os._exit(0)\n"
        "os.close(w)\n"
        "os.waitpid(pid, 0)\n"
        "out['child'] = json.loads(os.read(r, 100))\n"
    )
    out = _run(tmp_path, extra=extra)
    assert out["threads"] == [True, True, True]
    assert out["child"] == [True, 100]


def test_a_build_failure_says_why_and_leaves_tvm_pool(tmp_path):
    """No C compiler (and nothing cached): TVM's pool runs the kernels, and the status says why."""
    out = _run(tmp_path, env={"CC": str(tmp_path / "no-such-cc"), "XDG_CACHE_HOME": str(tmp_path / "empty"), "PATH": "/nonexistent"})
    assert not out["installed"] and out["status"].startswith("not installed (") and "no-such-cc" in out["status"]
    assert out["one"] and out["two"]


def test_a_cached_build_that_does_not_load_is_built_again(tmp_path, monkeypatch):
    from core.compiler import native_pool

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = native_pool.build()
    cached.write_bytes(b"not a shared object")  # a build cut short
    out = _run(tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert out["installed"] and out["two"] and out["launches_2t"] == [100, 100]
    assert cached.read_bytes()[:4] == b"\x7fELF"
