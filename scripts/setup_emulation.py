#!/usr/bin/env python3
"""Set up user-mode emulation once, so that this machine can check artifacts built for another ISA.

`main.py run` and `bench --check-only` run an artifact compiled for AArch64 (`--triple
aarch64-linux-gnu`) on an x86-64 machine under qemu-user: the artifact's own run.py, started by an
AArch64 Python from Debian with the AArch64 wheels of numpy and TVM's runtime
(core.compiler.runtime.emulation). This script builds that once, without touching the system's
packages: Debian's arm64 packages of Python are fetched with apt-get using a private apt state
and unpacked into `sysroot/`, and the wheels (pip download for that Python and platform) into
`site/`; TVM's compiler library is left out (run.py needs the runtime alone). A stamp records what
was built; run again, it is a no-op while the stamp matches.

    python scripts/setup_emulation.py [--triple aarch64-linux-gnu] [--force]

Cache: $MLCWB_EMULATION_DIR/<triple>/, else ~/.cache/mlc-workbench/emulation/<triple>/
(sysroot/, site/, stamp.json; ~150 MB). Needs a Debian host with apt-get and dpkg-deb,
qemu-user (apt-get install qemu-user-static) and network access; stdlib only. Exit status 0 when
set up, 2 when something this script cannot install is missing (one sentence says what).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

FORMAT = 2  # 2: the RPC server's packages too
STAMP = "stamp.json"
DIR_ENV = "MLCWB_EMULATION_DIR"
# What each triple needs: Debian's architecture name, qemu's, the wheel platform tags pip may take.
TRIPLES = {
    "aarch64-linux-gnu": {
        "deb_arch": "arm64",
        "qemu": "aarch64",
        "platforms": ["manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux_2_24_aarch64",
                      "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
    },
}
# Packages of the recursive dependencies that a Python interpreter never needs (tools of dpkg itself).
SKIP_DEBS = ("perl", "libperl", "dpkg", "tar", "install-info", "mailcap")
# The runtime-only TVM: its compiler library and third-party sources stay out (~100 MB less).
SKIP_IN_TVM = ("tvm/lib/libtvm_compiler.so", "tvm/3rdparty/")


class Refused(Exception):
    """Something this script cannot install itself is missing: one sentence."""


def cache_dir(triple: str) -> Path:
    root = os.environ.get(DIR_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "mlc-workbench" / "emulation"
    return base / triple


def say(text: str) -> None:
    print(f"setup_emulation: {text}", flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a command; a failure raises Refused with the command's last line of stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        lines = [ln for ln in (p.stderr or p.stdout or "").splitlines() if ln.strip()]
        raise Refused(f"`{' '.join(cmd[:3])} ...` failed ({lines[-1].strip() if lines else f'exit status {p.returncode}'}).")
    return p


def host_versions() -> dict[str, str]:
    """The host's TVM and TVM-FFI versions, which the emulated runtime is pinned to."""
    from importlib import metadata

    wanted = {"apache-tvm": "0.27.0", "apache-tvm-ffi": "0.1.14"}
    for name in wanted:
        try:
            wanted[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return wanted


def check_host(triple: str) -> str:
    """The qemu-user binary for `triple`, or Refused naming what to install."""
    if triple not in TRIPLES:
        raise Refused(f"no emulation is known for '{triple}'; the workbench emulates {', '.join(TRIPLES)}.")
    spec = TRIPLES[triple]
    qemu = shutil.which(f"qemu-{spec['qemu']}-static") or shutil.which(f"qemu-{spec['qemu']}")
    if qemu is None:
        raise Refused(f"qemu-{spec['qemu']} is not installed; install it once (sudo apt-get install qemu-user-static) and run this script again.")
    try:
        release = Path("/etc/os-release").read_text()
    except OSError:
        release = ""
    if not re.search(r"^ID=\"?debian\"?$", release, re.M) or not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        raise Refused("this script fetches Debian's arm64 Python with apt-get and dpkg-deb and needs a Debian host; "
                      "on another system, put an AArch64 sysroot with Python and its site-packages there by hand.")
    return qemu


def apt_options(apt: Path, deb_arch: str) -> list[str]:
    """A private apt state for `deb_arch`: the system's sources and keys, nothing of its dpkg."""
    opts = [f"APT::Architecture={deb_arch}", f"APT::Architectures={deb_arch}", f"Dir::State::Lists={apt}/lists",
            f"Dir::Cache={apt}", "Dir::State::status=/dev/null", "Debug::NoLocking=1"]
    if os.geteuid() == 0:
        opts.append("APT::Sandbox::User=root")  # no '_apt' user reading our private folders
    return [x for o in opts for x in ("-o", o)]


def build_sysroot(root: Path, deb_arch: str) -> str:
    """Debian's Python for `deb_arch` unpacked into root/sysroot; returns its version ("3.11")."""
    apt = root / "apt"
    for sub in ("lists/partial", "archives/partial", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    o = apt_options(apt, deb_arch)
    say(f"apt-get update for {deb_arch} (private state in {apt})")
    run(["apt-get", *o, "update"])
    depends = run(["apt-cache", *o, "depends", "python3"]).stdout
    m = re.search(r"Depends: python3\.(\d+)\b", depends)
    if m is None:
        raise Refused(f"Debian's python3 for {deb_arch} names no python3.X package (apt-cache depends python3).")
    version = f"3.{m.group(1)}"
    roots = [f"python{version}-minimal", f"libpython{version}-stdlib", "libstdc++6"]
    listing = run(["apt-cache", *o, "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
                   "--no-replaces", "--no-enhances", "--no-pre-depends", *roots]).stdout
    names = sorted({ln.strip() for ln in listing.splitlines() if ln.strip() and not ln.startswith(" ") and "<" not in ln})
    names = [n for n in names if not n.split(":")[0].startswith(SKIP_DEBS)]
    say(f"downloading {len(names)} Debian packages (python{version} and its libraries)")
    run(["apt-get", *o, "download", *names], cwd=apt / "debs")
    sysroot = root / "sysroot"
    for deb in sorted((apt / "debs").glob("*.deb")):
        run(["dpkg-deb", "-x", str(deb), str(sysroot)])
    if not (sysroot / "usr" / "bin" / f"python{version}").is_file():
        raise Refused(f"Debian's packages did not hold usr/bin/python{version} ({sysroot}).")
    return version


def install_wheels(root: Path, python: str, platforms: list[str], versions: dict[str, str]) -> dict[str, str]:
    """The wheels of TVM's runtime and numpy for that Python unpacked into root/site; returns name -> version."""
    wheels = root / "wheels"
    wheels.mkdir(exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--implementation", "cp",
            "--python-version", python, *[x for p in platforms for x in ("--platform", p)], "-d", str(wheels), "-q"]
    # numpy and TVM's dependencies; cloudpickle, psutil and tornado are TVM's RPC server's (an emulated device)
    for name in ("numpy", "ml_dtypes", "typing_extensions", "cloudpickle", "psutil", "tornado"):
        say(f"pip download {name} for Python {python}")
        run([*base, name])
    for name, version in versions.items():  # pinned to the host's; a post-release may have no wheel for this platform
        tries = [version] + ([re.sub(r"\.post\d+$", "", version)] if ".post" in version else [])
        for i, v in enumerate(tries):
            say(f"pip download {name}=={v} for {platforms[0]}")
            try:
                run([*base, f"{name}=={v}"])
                break
            except Refused:
                if i == len(tries) - 1:
                    raise
    site = root / "site"
    installed = {}
    for whl in sorted(wheels.glob("*.whl")):
        name, version = whl.name.split("-")[:2]
        with zipfile.ZipFile(whl) as z:
            members = [m for m in z.namelist() if not (name == "apache_tvm" and m.startswith(SKIP_IN_TVM))]
            z.extractall(site, members)
        installed[name] = version
    return installed


def smoke_test(qemu: str, root: Path, python_rel: str) -> str:
    """Import numpy and TVM's runtime under emulation; returns what they report."""
    code = "import numpy, tvm; print(numpy.__version__, tvm.__version__)"
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(root / "site"), PYTHONNOUSERSITE="1")
    env.pop("PYTHONHOME", None)
    say("importing numpy and TVM's runtime under emulation (~10 s)")
    return run([qemu, "-L", str(root / "sysroot"), str(root / python_rel), "-c", code], env=env).stdout.strip()


def setup(triple: str, force: bool = False) -> Path:
    qemu = check_host(triple)
    spec = TRIPLES[triple]
    root = cache_dir(triple)
    versions = host_versions()
    key = {"format": FORMAT, "triple": triple, "versions": versions}
    stamp = root / STAMP
    if not force and stamp.is_file():
        try:
            old = json.loads(stamp.read_text())
        except (OSError, ValueError):
            old = {}
        if old.get("key") == key and (root / str(old.get("python", "-"))).is_file() and (root / "site" / "tvm").is_dir():
            say(f"emulation for {triple} is set up in {root} (Python {old.get('python_version')}, "
                f"apache-tvm {old.get('installed', {}).get('apache_tvm')}); nothing to do.")
            return root
    started = time.monotonic()
    say(f"setting up emulation for {triple} in {root}")
    root.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    for sub in ("sysroot", "site", "apt", "wheels"):
        shutil.rmtree(root / sub, ignore_errors=True)
    python = build_sysroot(root, spec["deb_arch"])
    installed = install_wheels(root, python, spec["platforms"], versions)
    python_rel = f"sysroot/usr/bin/python{python}"
    reported = smoke_test(qemu, root, python_rel)
    for sub in ("apt", "wheels"):  # the downloads: the stamp says what they were
        shutil.rmtree(root / sub, ignore_errors=True)
    record = {"key": key, "python": python_rel, "python_version": python, "installed": installed, "qemu": os.path.basename(qemu),
              "smoke_test": reported, "seconds": round(time.monotonic() - started, 1)}
    with tempfile.NamedTemporaryFile("w", dir=root, delete=False, suffix=".tmp") as f:
        json.dump(record, f, indent=2)
    os.replace(f.name, stamp)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    say(f"done in {record['seconds']} s: {size / 1e6:.0f} MB in {root} (numpy and TVM under emulation: {reported}).")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="setup_emulation.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--triple", default="aarch64-linux-gnu", help="the target triple to emulate (default aarch64-linux-gnu)")
    parser.add_argument("--force", action="store_true", help="build again even when the stamp matches")
    args = parser.parse_args(argv)
    if args.triple in TRIPLES and platform.machine() == TRIPLES[args.triple]["qemu"]:
        say(f"this machine is {platform.machine()}: artifacts for {args.triple} run natively, no emulation needed.")
        return 0
    try:
        setup(args.triple, args.force)
    except Refused as e:
        print(f"setup_emulation: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
