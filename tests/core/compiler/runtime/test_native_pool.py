"""The workbench's parallel launch (core.compiler.runtime.native_pool): it is the one TVM's compiled code
calls, it computes what TVM's pool computes, and it falls back to TVM's pool when it cannot load.

Each case runs in a fresh process: the launch is chosen when TVM's runtime library is loaded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]

# A kernel of parallel regions in a row (parallel loops of 7, 2 and 1 iterations), and a
# reference computed by numpy; prints a JSON line of what the launch counters saw.
KERNEL = '''
import json, os, sys, threading
sys.path.insert(0, {root!r})
{first}
import numpy as np
import tvm
from tvm.script import tirx as T
from core.compiler.runtime import native_pool
from core.compiler.runtime.threads import runtime_threads
from core.compiler.target import make_target

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


PREPARE = "from core.compiler.runtime import prepare\nprepare()"


def _run(tmp_path, *, first: str = PREPARE, extra: str = "", env: dict | None = None) -> dict:
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
    out = _run(tmp_path, first="import tvm\n" + PREPARE)
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
    from core.compiler.runtime import native_pool

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cached = native_pool.build()
    cached.write_bytes(b"not a shared object")  # a build cut short
    out = _run(tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert out["installed"] and out["two"] and out["launches_2t"] == [100, 100]
    assert cached.read_bytes()[:4] == b"\x7fELF"


def test_loops_cut_into_more_tasks_than_threads_compute_the_same(tmp_path):
    """A parallel loop is cut into `chunks` tasks a thread (loops of 7, 2 and 1 iterations over 2
    and 3 threads): every cut computes what numpy does."""
    extra = (
        "out['chunks'] = {}\n"
        "for c in (1, 2, 3, 4, 16):\n"
        "    pool.set_chunks(c)\n"
        "    out['chunks'][c] = [check(2, runs=20), check(3, runs=20), pool.chunks()]\n"
    )
    out = _run(tmp_path, extra=extra, env={"TVM_NUM_THREADS": "3"})
    assert out["chunks"] == {str(c): [True, True, c] for c in (1, 2, 3, 4, 16)}


# A parallel lambda for TVMBackendParallelLaunch that records which thread ran each task, and
# sleeps in every task a worker runs: a worker that stops in the middle of its share.
SLOW_WORKER = r'''
#include <pthread.h>
#include <unistd.h>
typedef struct { void* sync_handle; int num_task; } Env;
static pthread_t caller;
int ran_by_caller[1024], ran_by_worker[1024], tasks_seen;
int slow_worker(int task, Env* env, void* cdata) {
  (void)cdata;
  tasks_seen = env->num_task;
  if (pthread_equal(pthread_self(), caller)) { __atomic_fetch_add(&ran_by_caller[task], 1, __ATOMIC_RELAXED); return 0; }
  __atomic_fetch_add(&ran_by_worker[task], 1, __ATOMIC_RELAXED);
  usleep(50000);
  return 0;
}
void set_caller(void) { caller = pthread_self(); }
'''


def test_the_caller_takes_the_tasks_a_slow_worker_has_not_started(tmp_path):
    """Each thread runs its own share of the tasks first, then takes what is left of the others'
    from the back: with a worker stuck 50 ms in every task, the caller runs all but the one the
    worker began, each task exactly once."""
    import shutil as _shutil

    from core.compiler.runtime import native_pool

    cc = _shutil.which("cc") or _shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    source = tmp_path / "slow.c"
    source.write_text(SLOW_WORKER)
    lib_path = tmp_path / "slow.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-pthread", "-o", str(lib_path), str(source)], check=True)
    script = tmp_path / "steal.py"
    script.write_text(
        "import ctypes, json, sys\n"
        f"pool = ctypes.CDLL({str(native_pool.build())!r}, mode=ctypes.RTLD_GLOBAL)\n"
        f"lib = ctypes.CDLL({str(lib_path)!r})\n"
        "lib.set_caller()\n"
        "out = []\n"
        "for chunks in (1, 4):\n"
        "    pool.mlcwb_pool_set_chunks(chunks)\n"
        "    for array in ('ran_by_caller', 'ran_by_worker'):\n"
        "        ctypes.memset(ctypes.addressof((ctypes.c_int * 1024).in_dll(lib, array)), 0, 4096)\n"
        "    pool.mlcwb_pool_set_threads(2)\n"
        "    rc = pool.TVMBackendParallelLaunch(ctypes.cast(lib.slow_worker, ctypes.c_void_p), None, 0)\n"
        "    n = ctypes.c_int.in_dll(lib, 'tasks_seen').value\n"
        "    by_caller = list((ctypes.c_int * 1024).in_dll(lib, 'ran_by_caller'))[:n]\n"
        "    by_worker = list((ctypes.c_int * 1024).in_dll(lib, 'ran_by_worker'))[:n]\n"
        "    out.append([rc, n, by_caller, by_worker])\n"
        "print(json.dumps(out))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    (rc1, n1, caller1, worker1), (rc4, n4, caller4, worker4) = json.loads(run.stdout.strip().splitlines()[-1])
    assert rc1 == rc4 == 0 and n1 == 2 and n4 == 8  # one task a thread, then four
    for caller, worker in ((caller1, worker1), (caller4, worker4)):
        assert [a + b for a, b in zip(caller, worker)] == [1] * len(caller)  # every task once
        assert sum(worker) <= 1  # the worker began one task at most; the caller took the rest
    assert caller4[:4] == [1, 1, 1, 1]  # the caller's own share, front to back


def test_the_run_choice_keeps_all_threads_where_they_pay_and_one_where_it_is_faster():
    """mlcwb_pool_run_begin / run_end's choice (native_pool.c, "one thread or all") on given run
    times: a model 1.85x faster on two threads runs on two, untried on one while its runs keep
    their speed, single slow runs (a preemption) included; when two threads stop paying (a spell:
    2.7 -> 5.5 ms, one thread 5.0 ms), runs take one thread within a few dozen runs and all
    threads again after the spell, with rare trials of one thread from then on; a model under
    1 ms is tried on one thread after its warm-up, and runs there if it is faster; one thread
    allowed is one thread."""
    from core.compiler.runtime import native_pool

    pool = native_pool.pool()
    if pool is None:
        pytest.skip(native_pool.status())

    def simulate(many, one, allowed=None, gaps=None):
        return pool.simulate_runs(many, one, gaps, allowed)

    assert simulate([2.7] * 7000, [5.0] * 7000).count(1) == 0  # ~19 s

    noisy = [2.7] * 7000
    for i in range(50, 7000, 97):
        noisy[i] = 9.0  # a preempted run now and then
    assert simulate(noisy, [5.0] * 7000).count(1) == 0

    spell = [2.7] * 2000 + [5.5] * 2000 + [2.7] * 3000
    used = simulate(spell, [5.0] * 7000)
    assert used[:2000].count(1) == 0
    assert used[2000:2150].count(1) >= 100  # switched within 50 runs
    assert used[2150:4000].count(2) <= 0.02 * 1850  # then trials of two threads only
    assert used[5000:].count(1) <= 0.01 * 2000  # back on two threads after the spell, rare trials of one

    serial_faster = simulate([0.05] * 20000, [0.04] * 20000)  # a split that never pays
    assert serial_faster[1000:].count(1) >= 0.95 * 19000
    assert simulate([0.05] * 20000, [0.09] * 20000).count(1) <= 0.01 * 20000  # one that does

    assert set(simulate([2.7] * 100, [5.0] * 100, allowed=[1] * 100)) == {1}

    # after each pause (0.2 s) the first runs of a 21 us model are slow (142, 125, 51 us): not
    # taken for what two threads take, so it is not switched to one thread (40 us)
    many, gaps = [], []
    for _ in range(20):
        many += [0.142, 0.125, 0.051] + [0.021] * 2000
        gaps += [200.0] + [0.005] * 2002
    used = simulate(many, [0.040] * len(many), gaps=gaps)
    assert used.count(1) <= 0.01 * len(used)


def test_governed_runs_leave_the_thread_count_as_it_was(tmp_path):
    """The thread governor brackets each run for the pool to time (a model this small is tried on
    one thread after its warm-up); what it computes is right, and once its run is over a run
    outside it takes the thread count set for the thread: every launch pooled at 2 threads. A run
    whose after_run never came (the first here) and a second after_run change none of that."""
    extra = (
        "import time\n"
        "from core.compiler.runtime.threads import ThreadGovernor\n"
        "g = ThreadGovernor(max_threads=2, enabled=True, others=lambda: 0)\n"
        "x, y = tvm.runtime.tensor(a), tvm.runtime.tensor(np.zeros((7, 96), 'float32'))\n"
        "g.before_run()\n"
        "kernel(x, y)  # and no after_run\n"
        "used = []\n"
        "t = time.monotonic()\n"
        "while len(used) < 200 or time.monotonic() - t < 0.1:  # past the untimed first 10 ms\n"
        "    used.append(g.before_run())\n"
        "    kernel(x, y)\n"
        "    g.after_run()\n"
        "g.after_run()\n"
        "out['governed'] = bool(np.array_equal(y.numpy(), want))\n"
        "out['used'] = sorted(set(used))\n"
        "out['one_thread_runs'] = pool.one_thread_runs()\n"
        "b = pool.pooled_launches()\n"
        "out['after'] = check(2)\n"
        "out['pooled_after'] = pool.pooled_launches() - b\n"
    )
    out = _run(tmp_path, extra=extra)
    assert out["governed"] and out["after"]
    assert out["one_thread_runs"] >= 4 and 1 in out["used"]  # the trial of one thread
    assert out["pooled_after"] == 100


def test_workers_sleep_at_once_when_runs_go_on_one_thread(tmp_path):
    """When a run goes on one thread the pool's idle workers stop polling at once (a polling
    worker takes from the caller what a hyperthread sibling does): with workers told to poll for
    10 s, a pooled kernel leaves its worker polling, and mlcwb_pool_quiesce puts it to sleep."""
    extra = (
        "import time\n"
        "lib = pool.lib\n"
        "check(2, runs=3)\n"
        "time.sleep(0.2)\n"
        "out['polling'] = lib.mlcwb_pool_sleeping_workers()\n"
        "lib.mlcwb_pool_quiesce()\n"
        "t = time.monotonic()\n"
        "while lib.mlcwb_pool_sleeping_workers() < 1 and time.monotonic() - t < 5:\n"
        "    time.sleep(0.001)\n"
        "out['asleep'] = lib.mlcwb_pool_sleeping_workers()\n"
        "out['waited'] = time.monotonic() - t\n"
        "out['again'] = check(2)\n"
    )
    out = _run(tmp_path, extra=extra, env={"WORKBENCH_POOL_SPIN_US": "10000000"})
    assert out["polling"] == 0 and out["asleep"] == 1 and out["waited"] < 2.0
    assert out["again"]  # a sleeping worker wakes for the next pooled launch
