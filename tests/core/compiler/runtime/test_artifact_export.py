"""Export writes into a hidden folder beside the target and puts the artifact in place only once
every file is written: a failed export (a full disk) leaves no folder, no hidden folder and an
earlier artifact as it was; a folder that holds more than an artifact keeps what else it holds."""
from __future__ import annotations

import errno
import json
import shutil

import pytest

from core.compiler.compile import compile_model
from core.compiler.runtime import artifact as artifact_mod
from core.compiler.runtime.artifact import Artifact, check_artifact_folder
from core.compiler.runtime.manifest import LatencyStats, Manifest, Measured
from tests.conftest import sample


@pytest.fixture(scope="module")
def compiled():
    return compile_model(sample("mlp"), "cpu", verify=False)


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}  # recipe/ included


def _measured(ms: float) -> Measured:
    return Measured(latency_ms=LatencyStats(median=ms, runs=1))


def test_an_artifact_is_replaced_only_once_the_new_one_is_complete(compiled, tmp_path, monkeypatch):
    target = tmp_path / "art"
    compiled.export(target, measured=_measured(1.0))
    assert [p.name for p in tmp_path.iterdir()] == ["art"]
    before = _snapshot(target)
    seen = {}
    real = artifact_mod._put_in_place

    def put_in_place(staging, folder):  # the moment the new artifact goes in place
        seen["target then"] = _snapshot(folder)
        seen["staging"] = (staging.parent, staging.name, sorted(p.name for p in staging.iterdir()))
        real(staging, folder)

    monkeypatch.setattr(artifact_mod, "_put_in_place", put_in_place)
    compiled.export(target, measured=_measured(2.0))
    assert seen["target then"] == before  # untouched while the new files were written
    parent, name, staged = seen["staging"]
    assert parent == tmp_path and name.startswith(".art.") and staged == sorted({n.split("/")[0] for n in before})  # complete, beside it, hidden
    assert [p.name for p in tmp_path.iterdir()] == ["art"]  # no hidden folder left, and no old one
    assert json.loads((target / "manifest.json").read_text())["measured"]["latency_ms"]["median"] == 2.0
    check_artifact_folder(target)


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_export_leaves_nothing_behind(compiled, tmp_path, monkeypatch, existing):
    target = tmp_path / "art" if existing else tmp_path / "new" / "deeper" / "art"
    if existing:
        compiled.export(target)
    before = sorted(p.name for p in tmp_path.iterdir())
    kept = _snapshot(target) if existing else None
    real_copy = shutil.copy2

    def copy2(src, dst, **kw):  # the disk fills while the runner's checks are written
        if str(dst).endswith("artifact_check.py"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_copy(src, dst, **kw)

    monkeypatch.setattr(artifact_mod.shutil, "copy2", copy2)
    with pytest.raises(OSError) as e:
        compiled.export(target)
    assert e.value.errno == errno.ENOSPC and e.value.filename.endswith("artifact_check.py")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no hidden folder, no half artifact, no new parents
    if existing:
        assert _snapshot(target) == kept


class _LibraryOnAFullDisk:
    def export_library(self, path):
        raise RuntimeError(f"Compilation error:\n/usr/bin/ld: final link failed: No space left on device\ncollect2: error writing {path}")


def test_a_full_disk_while_tvm_writes_the_library_is_an_oserror_naming_it(compiled, tmp_path):
    art = Artifact(library=_LibraryOnAFullDisk(), target=compiled.target, inputs=compiled.inputs, outputs=compiled.outputs,
                   manifest=Manifest())
    with pytest.raises(OSError) as e:
        art.export(tmp_path / "art")
    assert e.value.errno == errno.ENOSPC and e.value.filename.endswith("model.so") and ".art.export-" in e.value.filename
    assert list(tmp_path.iterdir()) == []


def test_a_folder_with_other_files_keeps_them(compiled, tmp_path):
    """A folder that is not an artifact is written into, as before; an artifact the user put files
    beside (its outputs, say) keeps them, and loses only the files of its own it no longer has."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    compiled.export(mine)
    assert (mine / "notes.txt").read_text() == "mine"
    check_artifact_folder(mine)

    art = tmp_path / "art"
    compiled.export(art)
    (art / "out.npz").write_bytes(b"the user's outputs")
    man = json.loads((art / "manifest.json").read_text())
    man["files"].append("kernels.cu")  # a file of the earlier artifact the new one does not have
    (art / "manifest.json").write_text(json.dumps(man))
    (art / "kernels.cu").write_text("// old")
    compiled.export(art)
    assert (art / "out.npz").read_bytes() == b"the user's outputs" and not (art / "kernels.cu").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art", "mine"]
    check_artifact_folder(art)
