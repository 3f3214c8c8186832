"""What a device must have to run an exported artifact, and what each part weighs: the manifest's
`deploy` record (the course's "dependency minimisation" as a figure).

The artifact runs with Python, numpy and TVM's runtime alone: run.py loads model.so with
`TVM_USE_RUNTIME_LIB=1` semantics where the compiler library is absent, so of the apache-tvm wheel
only libtvm_runtime.so and the Python package are needed, not the compiler (libtvm_compiler.so,
the bulk of the wheel). The runtime's sizes are measured on the installed packages of the
architecture the code is for: this machine's, or the AArch64 ones of the emulation cache
(core.compiler.runtime.emulation) when that is set up; else they are left out and say so."""
from __future__ import annotations

import functools
import importlib.metadata
import os
from pathlib import Path

__all__ = ["deploy_for", "deploy_record", "deploy_summary", "runtime_sizes"]

# Parts of an installed apache-tvm that a CPU artifact never loads (the compiler, CUDA, headers)
_NOT_RUNTIME = ("lib/libtvm_compiler.so", "lib/libtvm_runtime_cuda.so", "3rdparty", "include", "contrib/cutlass")
# Files of an artifact a device needs to run it; the others are for checking and rebuilding it
_CHECK_ONLY = {"model.onnx": "checks it against onnxruntime", "recipe": "rebuilds it with TVM"}


def _tree_bytes(path: Path, skip: tuple[str, ...] = ()) -> int:
    total = 0
    for root, dirs, files in os.walk(path):
        rel = Path(root).relative_to(path).as_posix()
        dirs[:] = [d for d in dirs if (f"{rel}/{d}" if rel != "." else d) not in skip and d != "__pycache__"]
        for name in files:
            if (f"{rel}/{name}" if rel != "." else name) in skip:
                continue
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                continue
    return total


def _this_site() -> Path:
    """This interpreter's site-packages holding tvm, tvm_ffi and numpy."""
    import tvm

    return Path(tvm.__file__).resolve().parent.parent


@functools.lru_cache(maxsize=4)
def runtime_sizes(site: Path) -> dict[str, int]:
    """Bytes of each package the device installs, measured in the site-packages folder `site`
    (walked once per process: the installed packages do not change between exports)."""
    tvm_dir = site / "tvm"
    sizes = {
        "libtvm_runtime.so": (tvm_dir / "lib" / "libtvm_runtime.so").stat().st_size if (tvm_dir / "lib" / "libtvm_runtime.so").exists() else 0,
        "tvm (runtime part of apache-tvm)": _tree_bytes(tvm_dir, _NOT_RUNTIME),
        "tvm_ffi (apache-tvm-ffi)": _tree_bytes(site / "tvm_ffi"),
        "numpy": _tree_bytes(site / "numpy") + _tree_bytes(site / "numpy.libs"),
    }
    if (tvm_dir / "lib" / "libtvm_compiler.so").exists():
        sizes["apache-tvm as installed (with the compiler)"] = _tree_bytes(tvm_dir)
    return sizes


def _version(name: str, site: Path | None = None) -> str | None:
    """The installed version of distribution `name`: in `site` (unpacked wheels) or this interpreter's."""
    try:
        if site is not None:
            found = next(importlib.metadata.distributions(name=name, path=[str(site)]), None)
            return found.version if found is not None else None
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def deploy_record(folder: Path, arch: str, site: Path | None) -> dict:
    """The manifest's `deploy` record for the artifact files in `folder`: the platform, the
    packages to install and the bytes of each part, measured on the packages in `site` (that
    architecture's site-packages; None: not at hand, sizes and versions left out)."""
    folder = Path(folder)
    needed, check_only = {}, {}
    for entry in sorted(folder.iterdir()):
        size = _tree_bytes(entry) if entry.is_dir() else entry.stat().st_size
        (check_only if entry.name in _CHECK_ONLY else needed)[entry.name + ("/" if entry.is_dir() else "")] = size
    here = site is not None and site == _this_site()
    runtime = runtime_sizes(site) if site is not None else None
    record = {
        "platform": f"linux-{arch}",
        "packages": {name: _version(name, None if here else site) if site is not None else None for name in ("apache-tvm", "apache-tvm-ffi", "numpy")},
        "artifact_bytes": needed,
        "check_only_bytes": check_only,
        "runtime_bytes": None,
        "runtime_measured_on": None,
    }
    if runtime is not None:
        record["runtime_bytes"] = runtime
        record["runtime_measured_on"] = f"the linux-{arch} packages " + ("installed here" if here else "of the emulation cache")
    return record


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.0f} kB"


def deploy_summary(record: dict | None) -> str:
    """Two lines for `compile`'s output and the Compile panel: what the device installs, and sizes."""
    if not record:
        return ""
    pk = record.get("packages") or {}
    artifact = sum((record.get("artifact_bytes") or {}).values())
    parts = ", ".join(f"{k} {_mb(v)}" for k, v in (record.get("artifact_bytes") or {}).items())
    line1 = (f"the device ({record.get('platform')}) needs Python with numpy {pk.get('numpy') or ''} and apache-tvm {pk.get('apache-tvm') or ''} "
             f"(its runtime only); the artifact's own files: {_mb(artifact)} ({parts})").replace("  ", " ")
    runtime = record.get("runtime_bytes")
    if not runtime:
        return line1 + "; the runtime's size on that platform is unknown here (set up emulation: python scripts/setup_emulation.py)."
    base = {k: v for k, v in runtime.items() if not k.startswith("apache-tvm as installed") and k != "libtvm_runtime.so"}
    full = runtime.get("apache-tvm as installed (with the compiler)")
    line2 = (f"runtime {_mb(sum(base.values()))}: " + ", ".join(f"{k} {_mb(v)}" for k, v in base.items())
             + (f" (libtvm_runtime.so {_mb(runtime['libtvm_runtime.so'])})" if runtime.get("libtvm_runtime.so") else "")
             + (f"; apache-tvm with its compiler takes {_mb(full)}" if full else "") + f", measured on {record.get('runtime_measured_on')}.")
    return line1 + "\n" + line2


def deploy_for(folder: Path, manifest) -> dict | None:
    """deploy_record for an exported CPU artifact (None for CUDA, whose device needs a CUDA-enabled
    TVM build): the runtime measured on this machine's packages, or on the emulation cache's for
    another architecture's code."""
    from ..target import TargetKind, code_arch, host_arch

    if manifest.target.kind != TargetKind.CPU:
        return None
    cpu = manifest.target.cpu
    arch = code_arch(cpu)
    if arch == host_arch():
        return deploy_record(folder, arch, _this_site())
    from .emulation import emulation_dir

    site = emulation_dir(str(cpu["triple"])) / "site"
    return deploy_record(folder, arch, site if (site / "tvm").is_dir() else None)
