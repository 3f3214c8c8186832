"""Save ONNX… in the Compile & Run panel: the model is written where the dialog says, and a file
that cannot be written is refused in one sentence naming it, without touching the compile's
status, progress or controls."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx
import pytest
from PySide6.QtWidgets import QFileDialog

from tests.conftest import sample


def _dialog_returns(monkeypatch, path: Path) -> None:
    """The real save_file runs; only the modal dialog is answered."""
    monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, **k: (str(path), "ONNX models (*.onnx)")))


def _refuses_new_files(folder: Path) -> bool:
    try:
        fd, name = tempfile.mkstemp(dir=folder)
    except OSError:
        return True
    os.close(fd)
    os.unlink(name)
    return False


@pytest.fixture
def unwritable_folder(tmp_path):
    """A folder no file can be created in: read-only by its mode, or /sys where the mode does not
    stop this user (root)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    found = next((f for f in (folder, Path("/sys")) if f.is_dir() and _refuses_new_files(f)), None)
    if found is None:
        pytest.skip("no folder here refuses new files")
    yield found
    folder.chmod(0o700)


def test_save_onnx_writes_the_model(window, monkeypatch, tmp_path):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = window.panels["compile"].widget()
    out = tmp_path / "mlp_optimized.onnx"
    _dialog_returns(monkeypatch, out)
    panel.save_onnx_btn.click()
    onnx.checker.check_model(onnx.load(str(out)))
    assert str(out) in panel.status.text()


def test_unwritable_file_is_refused_in_one_sentence(window, messages, monkeypatch, unwritable_folder):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = window.panels["compile"].widget()
    status, progress = panel.status.text(), panel.progress.format()
    out = unwritable_folder / "mlp_optimized.onnx"
    _dialog_returns(monkeypatch, out)
    panel.save_onnx_btn.click()
    assert len(messages) == 1
    text = messages[0]
    assert str(out) in text and "not saved" in text and "internal error" not in text and ".tmp" not in text
    assert text.count(". ") == 0 and text.endswith(".")
    # the compile's own failure path is not taken: its status line, bar and controls are as they were
    assert panel.status.text() == status and panel.progress.format() == progress
    assert panel.compile_btn.isEnabled()
    assert not out.exists()
