"""Run an artifact built for another ISA (an AArch64 build on an x86-64 machine) under user-mode emulation.

The artifact's own run.py runs, unchanged, under qemu-user: an AArch64 Python (Debian's) with the
AArch64 wheels of numpy and TVM's runtime (TVM_USE_RUNTIME_LIB=1: run.py needs no compiler), which
`scripts/setup_emulation.py` builds once into a cache folder (`emulation_dir`, recorded by its
stamp.json). The inputs go in as a .npz file, the outputs come back as one (`run.py --inputs IN.npz
-o OUT.npz` in a temporary folder). This checks what the device computes; it measures nothing (an
emulated run is many times slower than the device's), and the callers say that it ran emulated.

Where emulation is not set up, `not_set_up` is the one sentence that says how.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import WorkbenchError
from ..target import host_arch
from .artifact_check import RUNNER, ArtifactRefused, check_folder, read_npz

__all__ = [
    "Emulator",
    "emulator",
    "emulation_dir",
    "not_set_up",
    "run_emulated",
    "device_server",
    "artifact_triple",
    "DIR_ENV",
    "SETUP_COMMAND",
    "DEFAULT_TRIPLE",
]

DIR_ENV = "MLCWB_EMULATION_DIR"  # the cache's root (one folder per triple under it), as scripts/setup_emulation.py reads it
DEFAULT_TRIPLE = "aarch64-linux-gnu"
SETUP_COMMAND = "python scripts/setup_emulation.py"
STAMP = "stamp.json"


def emulation_dir(triple: str) -> Path:
    """Where scripts/setup_emulation.py puts the emulation of `triple`: $MLCWB_EMULATION_DIR/<triple>,
    else ~/.cache/mlc-workbench/emulation/<triple>."""
    root = os.environ.get(DIR_ENV)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "mlc-workbench" / "emulation"
    return base / triple


@dataclass(frozen=True)
class Emulator:
    """A set-up emulation of `triple`: the qemu-user binary, the AArch64 Python in `root`/sysroot
    and its packages in `root`/site."""

    triple: str
    qemu: str
    root: Path
    python: Path

    @property
    def name(self) -> str:
        """How a message names it: 'qemu-aarch64'."""
        return os.path.basename(self.qemu).removesuffix("-static")

    def command(self, *args: str) -> list[str]:
        """The command line that runs the emulated Python with `args`."""
        return [self.qemu, "-L", str(self.root / "sysroot"), str(self.python), *args]

    def environment(self) -> dict[str, str]:
        """This process's environment for the emulated Python: its own packages only (site/), the
        TVM runtime library without the compiler."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QEMU_"))}
        env.update(PYTHONPATH=str(self.root / "site"), PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", TVM_USE_RUNTIME_LIB="1")
        return env


def emulator(triple: str) -> Emulator | None:
    """The emulation of `triple` that scripts/setup_emulation.py set up (its stamp, the Python and
    the packages there, qemu-user on PATH), or None where it is not set up."""
    root = emulation_dir(triple)
    try:
        stamp = json.loads((root / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or not isinstance(stamp.get("python"), str):
        return None
    arch = triple.split("-", 1)[0]
    qemu = next((q for q in (stamp.get("qemu"), f"qemu-{arch}-static", f"qemu-{arch}") if isinstance(q, str) and shutil.which(q)), None)
    python = root / stamp["python"]
    if qemu is None or not python.is_file() or not (root / "site" / "tvm").is_dir():
        return None
    return Emulator(triple, shutil.which(qemu), root, python)


def not_set_up(what: str, triple: str) -> str:
    """The one sentence for `what` (an artifact, a model) built for `triple`, which this machine
    can check only under emulation that is not set up."""
    option = "" if triple == DEFAULT_TRIPLE else f" --triple {triple}"
    return f"{what} is built for {triple}; to check it on this {host_arch()} machine, set up emulation once: {SETUP_COMMAND}{option}"


def artifact_triple(manifest: dict) -> str | None:
    """The triple an artifact's code is for (its manifest's target.cpu.triple; None: this machine's)."""
    cpu = (manifest.get("target") or {}).get("cpu") or {}
    triple = cpu.get("triple") if isinstance(cpu, dict) else None
    return str(triple) if triple else None


def _sentence(stderr: str, returncode: int, inputs: str) -> str:
    """run.py's own sentence from its stderr ('run.py: ...'), else the last line there, else the exit
    status; the temporary `inputs` file it names is 'the inputs file'."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and "Scope Loaded" not in ln]
    said = [ln.removeprefix("run.py: ") for ln in lines if ln.startswith("run.py: ")]
    if said or lines:
        return (said or lines)[-1].replace(inputs, "the inputs file").rstrip(".")
    return f"it ended with exit status {returncode}"


def run_emulated(artifact_dir: str | os.PathLike, feeds: dict[str, np.ndarray], dims: dict[str, int] | None = None, *,
                 timeout: float | None = None) -> dict[str, np.ndarray]:
    """Run the artifact in `artifact_dir` (built for another architecture) on `feeds` under
    emulation: its own run.py with `--inputs IN.npz -o OUT.npz`; returns the outputs by name.
    `dims`: values for symbolic dims (run.py's --dim; they matter only for inputs it makes up).
    A refusal or failure of run.py is a WorkbenchError carrying its sentence; emulation that is not
    set up, the sentence saying how (not_set_up)."""
    folder = Path(artifact_dir)
    try:
        manifest, _man_path, _lib = check_folder(folder)  # the paths, fields and checksums, before anything runs
    except ArtifactRefused as e:
        raise WorkbenchError(str(e)) from None
    triple = artifact_triple(manifest) or DEFAULT_TRIPLE
    emu = emulator(triple)
    if emu is None:
        raise WorkbenchError(not_set_up(f"the artifact {folder}", triple))
    with tempfile.TemporaryDirectory(prefix="mlcwb-emulated-") as tmp:
        inputs, outputs = os.path.join(tmp, "inputs.npz"), os.path.join(tmp, "outputs.npz")
        np.savez(inputs, **{k: np.asarray(v) for k, v in feeds.items()})
        extra = [x for name, n in (dims or {}).items() for x in ("--dim", f"{name}={int(n)}")]
        cmd = emu.command(str(folder.resolve() / RUNNER), "--inputs", inputs, "-o", outputs, *extra)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=emu.environment(), cwd=tmp, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise WorkbenchError(f"{folder / RUNNER} did not finish within {timeout:g} s under {emu.name} emulation; "
                                 f"emulation runs many times slower than the device, so try smaller inputs or the device itself.") from None
        except OSError as e:
            raise WorkbenchError(f"{emu.qemu} cannot be started ({e.strerror or e}); set up emulation again: {SETUP_COMMAND}.") from None
        if p.returncode != 0:
            raise WorkbenchError(f"{folder / RUNNER} under {emu.name} emulation: {_sentence(p.stderr, p.returncode, inputs)}.")
        try:
            return read_npz(outputs)
        except ArtifactRefused as e:
            raise WorkbenchError(f"{folder / RUNNER} under {emu.name} emulation wrote no outputs ({e}).") from None


# TVM's RPC server in the emulated Python's own process (TVM's runtime alone, with its extra
# functions loaded as the full wheel does): tvm.rpc.Server starts it in a child
# interpreter (exec of an AArch64 binary, which the kernel refuses without binfmt_misc), so the
# server's state is made here instead; each session is still served in a forked process.
_DEVICE_SERVER = """
import ctypes, os, sys, time
import tvm
from tvm.rpc import server
# the runtime's extra functions (random fill, which tuning over RPC asks for), as the full wheel has them
ctypes.CDLL(os.path.join(os.path.dirname(tvm.__file__), "lib", "libtvm_runtime_extra.so"), ctypes.RTLD_GLOBAL)
host, port, key, tracker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
addr = (tracker.rsplit(":", 1)[0], int(tracker.rsplit(":", 1)[1])) if tracker else None
port = getattr(server, "{start}")(host, port, port + 1, key=key, tracker_addr=addr, silent=True)
print("serving", port, flush=True)
while True:
    time.sleep(3600)
"""


def device_server(triple: str, port: int, key: str = "", tracker: str | None = None, host: str = "127.0.0.1") -> subprocess.Popen:
    """An emulated device: TVM's RPC server in the AArch64 Python under qemu, listening on
    host:port (registered with the tracker HOST:PORT under `key` when given), to try `bench --rpc`
    and tuning over RPC without the device. Its latencies are the emulator's, not the device's.
    The caller stops it (terminate()); it has printed 'serving PORT' once it listens."""
    emu = emulator(triple)
    if emu is None:
        raise WorkbenchError(not_set_up("an emulated RPC device", triple))
    from ..tvm_compat import RPC_SERVER_START

    code = _DEVICE_SERVER.replace("{start}", RPC_SERVER_START)
    return subprocess.Popen(emu.command("-c", code, host, str(port), key, tracker or ""), env=emu.environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
