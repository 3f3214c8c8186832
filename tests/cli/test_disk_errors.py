"""A full disk and a read-only one, for real (a small tmpfs): `edit`, `rewrite` and `compile` exit 2
with one line naming the path, say nothing is done that is not, and leave nothing behind."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT, external_weights_cnn, run_cli

MLP = ROOT / "resources" / "models" / "mlp.onnx"  # 438 kB
CNN = ROOT / "resources" / "models" / "small_cnn.onnx"  # 44 kB; its artifact needs far more


class SmallDisk:
    """A tmpfs mounted on `path` (root only: CI runs as root), unmounted at the end of the test."""

    def __init__(self, path: Path):
        self.path = path
        self.mounted = False

    def mount(self, options: str) -> Path:
        self.path.mkdir(exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(self.path)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"a tmpfs cannot be mounted here ({r.stderr.strip() or 'mount refused'}), so a full disk cannot be made")
        self.mounted = True
        return self.path

    def read_only(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", str(self.path)], check=True, capture_output=True)

    def contents(self) -> list[str]:
        return sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*"))


@pytest.fixture
def disk(tmp_path):
    d = SmallDisk(tmp_path / "disk")
    yield d
    if d.mounted:
        subprocess.run(["umount", "-l", str(d.path)], check=False, capture_output=True)


def _refused(r, sentence: str) -> None:
    """Exit 2, and the one line the workbench wrote (progress lines aside) is `sentence` (a regex)."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    said = [ln for ln in r.stderr.splitlines() if not re.match(r"\[\s*[\d.]+%\]", ln)]
    assert len(said) == 1 and re.fullmatch(f"mlcwb: {sentence}", said[0]), r.stderr[-2000:]
    assert "done" not in r.stderr and "Traceback" not in r.stderr and not r.stdout.strip()


def test_edit_and_rewrite_onto_a_full_disk(disk):
    mnt = disk.mount("size=256k")
    _refused(run_cli("edit", MLP, "-o", mnt / "out" / "e.onnx"),
             rf"cannot write {re.escape(str(mnt))}/out/e\.onnx: the disk is full \(needs 438 kB, 262 kB free\)\.")
    _refused(run_cli("rewrite", MLP, "--rules", "eliminate-identity", "-o", mnt / "r.onnx"),
             rf"cannot write {re.escape(str(mnt))}/r\.onnx: the disk is full \(needs 438 kB, 262 kB free\)\.")
    assert disk.contents() == []  # no file, no temporary, not the folder `out` it would have made


def test_a_save_that_runs_out_of_room_halfway_takes_back_what_it_wrote(disk, tmp_path):
    """Room for one more file: the new weights are written, the model file cannot be."""
    src = external_weights_cnn(tmp_path / "src")
    mnt = disk.mount("size=1m,nr_inodes=2")  # the root folder takes one
    _refused(run_cli("edit", src, "-o", mnt / "e.onnx"),
             rf"cannot write {re.escape(str(mnt))}/e\.onnx: the file system is out of room \(1 MB free, but no more files or blocks for this one\)\.")
    assert disk.contents() == []


@pytest.mark.slow
def test_compile_onto_a_full_disk(disk):
    """The model fits (so the compile runs); the linker then finds no room for model.so."""
    mnt = disk.mount("size=64k")
    r = run_cli("compile", CNN, "-o", mnt / "art", timeout=300)
    _refused(r, rf"cannot write {re.escape(str(mnt))}/art: the disk is full \(\d+ kB free\)\.")
    assert "[ 80.0%] check against onnxruntime" in r.stderr  # it compiled: the failure is the export's
    assert disk.contents() == []  # no artifact folder, empty or partial


def test_a_read_only_disk(disk):
    mnt = disk.mount("size=1m")
    disk.read_only()
    ro = r"the file system is read-only\."
    _refused(run_cli("edit", MLP, "-o", mnt / "out" / "e.onnx"), rf"cannot write {re.escape(str(mnt))}/out/e\.onnx: {ro}")
    _refused(run_cli("rewrite", MLP, "--rules", "eliminate-identity", "-o", mnt / "r.onnx"), rf"cannot write {re.escape(str(mnt))}/r\.onnx: {ro}")
    _refused(run_cli("compile", CNN, "-o", mnt / "art"), rf"cannot write {re.escape(str(mnt))}/art: {ro}")  # before compiling
    assert disk.contents() == []
