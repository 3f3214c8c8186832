"""`import core` only imports: it sets no environment variable and builds or loads no thread pool;
core.compiler.runtime.prepare() does both, and the CLI calls it only for commands that run TVM.

Each case runs in a fresh process with its own empty cache folder (XDG_CACHE_HOME), since this
suite's own process has already been prepared (tests/conftest.py)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "resources" / "models" / "small_cnn.onnx"

# what a process reports about itself: environment variables added or changed since `before`,
# whether a native pool library is mapped, and what the pool module says
REPORT = """
import json, os
from core.compiler.runtime import native_pool
maps = open("/proc/self/maps").read()
print(json.dumps({
    "added": sorted(set(os.environ) - set(before)),
    "changed": sorted(k for k in before if os.environ.get(k) != before[k]),
    "tvm_env": {k: v for k, v in os.environ.items() if k.startswith("TVM_")},
    "mapped": "native_pool-" in maps,
    "installed": native_pool.pool() is not None,
    "status": native_pool.status(),
}))
"""


def _clean_env(cache: Path) -> dict[str, str]:
    """This environment without the TVM_* and pool settings the suite's prepare() made, and with
    an empty cache folder, so that a build would show."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TVM_") and k != "WORKBENCH_NATIVE_POOL"}
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def _report(code: str, cache: Path) -> dict:
    script = "import os\nbefore = dict(os.environ)\n" + code + REPORT
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_clean_env(cache), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_core_sets_nothing_and_loads_no_pool(tmp_path):
    """Checked against the import-time use_host_cores() and native_pool.install() core/__init__ ran before."""
    cache = tmp_path / "cache"
    seen = _report("import core, core.model.graph, core.compiler.target, core.compiler.compile\n", cache)
    assert seen["added"] == [] and seen["changed"] == [] and seen["tvm_env"] == {}
    assert not seen["mapped"] and not seen["installed"] and seen["status"] == "not installed"
    assert not cache.exists() or not any(cache.rglob("*"))


def test_inspect_builds_no_pool(tmp_path):
    cache = tmp_path / "cache"
    out = subprocess.run([sys.executable, str(ROOT / "main.py"), "inspect", str(MODEL)], cwd=ROOT, env=_clean_env(cache),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not cache.exists() or not any(cache.rglob("*")), sorted(str(p) for p in cache.rglob("*"))


def test_prepare_sets_the_defaults_and_installs_the_pool(tmp_path):
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler (cc or gcc) on PATH: the workbench's pool cannot be built here")
    from core.compiler.target import host_cores

    cache = tmp_path / "cache"
    seen = _report("from core.compiler.runtime import prepare\nprepare()\n", cache)
    assert seen["tvm_env"] == {"TVM_NUM_THREADS": str(host_cores()), "TVM_BIND_THREADS": "0", "TVM_THREAD_POOL_SPIN_COUNT": "20000"}
    assert seen["mapped"] and seen["installed"] and seen["status"].startswith("installed")
    assert any(cache.rglob("native_pool-*.so"))  # built into the cache folder it was given
