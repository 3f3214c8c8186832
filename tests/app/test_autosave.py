"""Autosave and recovery: unsaved edits reach the per-user folder periodically and before a
compile, never the user's file; a process killed mid-edit leaves an autosave that the next start
offers, and recovering it gives the original file's model with the edits, unsaved."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app import autosave
from core import load_model
from core.model.edits import RenameNode
from tests.conftest import ROOT, sample


@pytest.fixture
def autosave_dir(monkeypatch, tmp_path):
    folder = tmp_path / "autosave"
    monkeypatch.setenv("MLCWB_AUTOSAVE_DIR", str(folder))
    return folder


def _model_copy(tmp_path):
    src = tmp_path / "model.onnx"
    src.write_bytes(sample("small_cnn").read_bytes())
    return src


def test_autosave_periodic_then_removed_on_save_and_close(autosave_dir, window, qtbot, tmp_path):
    src = _model_copy(tmp_path)
    original = src.read_bytes()
    assert window.open_model(str(src), wait=True)
    saver = window.autosaver
    assert saver.folder == autosave_dir
    saver.timer.setInterval(50)
    qtbot.wait(200)
    assert not saver.model_path.exists()  # nothing to save while the model is clean
    g = window.document.graph
    window.document.push(RenameNode(g, g.find_node("stem.relu").id, "edited_relu"))
    qtbot.waitUntil(saver.model_path.exists, timeout=5000)
    info = json.loads(saver.info_path.read_text())
    assert info["original"] == str(src) and info["pid"] == os.getpid() and info["edits"] == 1
    assert load_model(saver.model_path).find_node("edited_relu") is not None
    assert src.read_bytes() == original  # never the user's file
    assert autosave.pending_recoveries(autosave_dir) == []  # this process is alive: not a crash
    # saving makes the autosave pointless
    window.edit_actions.ask = lambda *a: "Overwrite"  # the "overwrite the original?" question
    assert window.save()
    assert not saver.model_path.exists() and not saver.info_path.exists()
    # edit again, then a clean close removes it
    window.document.push(RenameNode(g, g.find_node("edited_relu").id, "edited_twice"))
    assert saver.save_now("test")
    window.document.undo_stack.setClean()  # as if saved: closing asks nothing
    window.document.push(RenameNode(g, g.find_node("edited_twice").id, "edited_thrice"))
    assert saver.save_now("test") and saver.model_path.exists()
    window.close()  # the `messages` fixture answers Discard to "save first?"
    assert list(autosave_dir.glob("session-*")) == []


def test_autosave_before_compile(autosave_dir, window, qtbot, tmp_path, monkeypatch):
    src = _model_copy(tmp_path)
    assert window.open_model(str(src), wait=True)
    g = window.document.graph
    window.document.push(RenameNode(g, g.find_node("stem.relu").id, "edited_relu"))
    panel = window.panels["compile"].widget()
    started = []
    monkeypatch.setattr("app.panels.compile.Job.start", lambda job: started.append(job))
    panel.start()
    assert started and window.autosaver.model_path.exists()
    assert json.loads(window.autosaver.info_path.read_text())["reason"] == "before compile"
    panel.job = None


CRASHING_SESSION = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from app.main_window import MainWindow
    from core.model.edits import RenameNode
    app = QApplication([])
    w = MainWindow(settings=QSettings({settings!r}, QSettings.IniFormat))
    assert w.open_model({model!r}, wait=True)
    g = w.document.graph
    w.document.push(RenameNode(g, g.find_node("stem.relu").id, "edited_before_the_crash"))
    w.autosaver.save_now("periodic")
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: no close, no cleanup
""")


@pytest.mark.slow
def test_autosave_recovery_after_a_crash(autosave_dir, window, qtbot, tmp_path):
    src = _model_copy(tmp_path)
    original = src.read_bytes()
    script = CRASHING_SESSION.format(root=str(ROOT), settings=str(tmp_path / "crashed.ini"), model=str(src))
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    pending = autosave.pending_recoveries(autosave_dir)
    assert len(pending) == 1 and pending[0].original == str(src) and pending[0].edits == 1

    prompts = []

    def answer():  # the recovery prompt is modal: read it and click Recover
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        prompts.append(box.text() + "\n" + box.informativeText())
        next(b for b in box.buttons() if b.text() == "Recover").click()

    QTimer.singleShot(0, answer)
    assert autosave.offer_recovery(window)
    assert "did not close cleanly" in prompts[0] and "model.onnx with 1 unsaved edit" in prompts[0]
    doc = window.document
    assert doc.graph.find_node("edited_before_the_crash") is not None  # the edit is back
    assert doc.path == src and doc.is_dirty and window.isWindowModified()  # as the original, unsaved
    assert "model.onnx" in window.windowTitle()
    assert src.read_bytes() == original
    assert str(pending[0].model.resolve()) not in window.recent_files()
    # the crashed session's autosave is replaced by this window's own
    assert not pending[0].model.exists() and window.autosaver.model_path.exists()
    assert autosave.pending_recoveries(autosave_dir) == []
    # saving writes the recovered edits to the original file
    window.edit_actions.ask = lambda *a: "Overwrite"
    assert window.save()
    assert load_model(src).find_node("edited_before_the_crash") is not None


def test_autosave_discard_choice_removes_it(autosave_dir, window, qtbot, tmp_path):
    folder = autosave_dir
    folder.mkdir(parents=True)
    (folder / "session-1-1.onnx").write_bytes(sample("small_cnn").read_bytes())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (folder / "session-1-1.json").write_text(json.dumps({"original": "/nowhere/m.onnx", "saved_at": 0, "pid": dead.pid,
                                                          "process_start": 1.0, "edits": 3}))
    assert [r.edits for r in autosave.pending_recoveries(folder)] == [3]

    def answer():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        next(b for b in box.buttons() if b.text() == "Discard").click()

    QTimer.singleShot(0, answer)
    assert not autosave.offer_recovery(window)
    assert list(folder.iterdir()) == [] and window.document.graph is None
