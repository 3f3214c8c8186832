"""Crash recovery of a model with external weights keeps the undo history: edit, crash, recover
(Undo and Redo work), crash again (the count of unsaved edits stays true), save to a new
folder, reopen, compile from another working directory. An autosave that cannot be loaded is
reported once and moved aside."""
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
from tests.conftest import ROOT, sample
from tests.helpers import external_weights_cnn


@pytest.fixture
def autosave_dir(monkeypatch, tmp_path):
    folder = tmp_path / "autosave"
    monkeypatch.setenv("MLCWB_AUTOSAVE_DIR", str(folder))
    return folder


SESSION = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    os.chdir({cwd!r})
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication
    from app import autosave
    from app.main_window import MainWindow
    from core.model.edits import InsertNode, RenameNode
    app = QApplication([])
    w = MainWindow(settings=QSettings({settings!r}, QSettings.IniFormat))
    doc = w.document
    if {recover!r}:
        assert autosave.recover(w, autosave.pending_recoveries()[0])
        assert doc.undo_stack.count() == 3 and doc.undo_stack.index() == 2
        g = doc.graph
        doc.push(RenameNode(g, g.find_node("pool").id, "pool_after_recovery"))
    else:
        assert w.open_model({model!r}, wait=True)
        g = doc.graph
        doc.push(RenameNode(g, g.find_node("relu").id, "renamed_relu"))
        doc.push(InsertNode(g, "Relu", ["r"], name="inserted", insert_on="r"))
        doc.push(RenameNode(g, g.find_node("inserted").id, "inserted_then_undone"))
        doc.undo_stack.undo()  # the rename is undone: Redo must still offer it after recovery
    w.autosaver.save_now("before compile")
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: no close, no cleanup
""")


def _crash(tmp_path, model, recover=False):
    cwd = tmp_path / "somewhere_else"
    cwd.mkdir(exist_ok=True)
    script = SESSION.format(root=str(ROOT), settings=str(tmp_path / "crashed.ini"), model=str(model), recover=recover, cwd=str(cwd))
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ), capture_output=True, text=True, timeout=180)
    assert proc.returncode == -9, proc.stderr[-2000:]


def _click_later(text, prompts):
    def answer():  # the prompt is modal: read it and click
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        prompts.append(box.text() + "\n" + box.informativeText())
        next(b for b in box.buttons() if b.text() == text).click()

    QTimer.singleShot(0, answer)


@pytest.mark.slow
def test_external_weights_survive_crash_recover_undo_save_reopen_compile(autosave_dir, window, qtbot, tmp_path):
    src = external_weights_cnn(tmp_path / "models")
    original = src.read_bytes()
    _crash(tmp_path, src)
    pending = autosave.pending_recoveries(autosave_dir)
    assert len(pending) == 1 and pending[0].edits == 2 and pending[0].journal is not None
    assert not (autosave_dir / f"{pending[0].model.name}.data").exists()  # the weights were referenced, not copied

    # a second crash, after recovering: the edits are still counted, the history still there
    _crash(tmp_path, src, recover=True)
    pending = autosave.pending_recoveries(autosave_dir)
    assert len(pending) == 1 and pending[0].edits == 3, [(p.model, p.edits) for p in pending]

    prompts = []
    _click_later("Recover", prompts)
    assert autosave.offer_recovery(window)
    assert "cnn_bn_ext.onnx with 3 unsaved edits" in prompts[0] and "with its undo history" in prompts[0]
    doc, stack = window.document, window.document.undo_stack
    assert doc.path == src and doc.is_dirty and src.read_bytes() == original
    assert [stack.text(i) for i in range(stack.count())] == [
        "Rename Relu 'relu' to 'renamed_relu'", "Insert Relu 'inserted' after 'r'", "Rename GlobalAveragePool 'pool' to 'pool_after_recovery'"]
    g = doc.graph
    assert g.find_node("pool_after_recovery") and g.find_node("inserted") and g.find_node("renamed_relu")
    stack.undo()
    assert g.find_node("pool") and not g.find_node("pool_after_recovery")
    stack.redo()
    stack.undo()
    stack.undo()
    assert not g.find_node("inserted") and stack.canRedo() and stack.canUndo()
    assert window.autosaver.unsaved_edits() == 1
    assert autosave.pending_recoveries(autosave_dir) == []

    # save to a new folder: the weights go with it; reopen from there
    new = tmp_path / "saved" / "edited.onnx"
    assert doc.save(new) == new and not doc.is_dirty
    assert (tmp_path / "saved" / "edited.onnx.data").is_file()
    assert "copied into edited.onnx.data beside it" in doc.last_save.describe()
    assert window.open_model(str(new), wait=True)
    assert window.document.graph.find_node("renamed_relu") is not None
    assert load_model(new).find_node("inserted") is None  # saved after the undo

    # compile it from yet another working directory
    other = tmp_path / "other"
    other.mkdir()
    r = subprocess.run([sys.executable, str(ROOT / "main.py"), "compile", str(new), "--target", "cpu", "-o", str(tmp_path / "art")],
                       capture_output=True, text=True, timeout=300, cwd=str(other))
    assert r.returncode == 0, r.stderr[-1500:]
    assert "matches onnxruntime" in r.stdout


def test_recovery_without_a_usable_journal_says_so_and_keeps_the_edits(autosave_dir, window, qtbot, tmp_path):
    src = tmp_path / "model.onnx"
    src.write_bytes(sample("small_cnn").read_bytes())
    assert window.open_model(str(src), wait=True)
    doc = window.document
    from core.model.edits import RenameNode

    doc.push(RenameNode(doc.graph, doc.graph.find_node("stem.relu").id, "edited"))
    saver = window.autosaver
    assert saver.save_now("test") and saver.journal_path.exists()
    info = json.loads(saver.info_path.read_text())
    info["pid"] = 1 << 22  # as if its process had died
    saver.info_path.write_text(json.dumps(info))
    os.utime(src, ns=(0, 0))  # the original changed since: the journal cannot replay on it
    saver.session += "-old"  # this window's autosaver must not remove the "crashed" files
    doc.undo_stack.clear()
    pending = autosave.pending_recoveries(autosave_dir)
    assert len(pending) == 1
    assert autosave.recover(window, pending[0])
    assert doc.graph.find_node("edited") is not None and doc.is_dirty and doc.path == src
    assert "changed on disk" in window.last_recovery_note
    assert doc.undo_stack.count() == 0  # without history, said so
    assert json.loads(saver.info_path.read_text())["edits"] == 1  # still counted


def test_an_unloadable_autosave_is_reported_once_and_set_aside(autosave_dir, window, qtbot, messages):
    autosave_dir.mkdir(parents=True)
    (autosave_dir / "session-1-1.onnx").write_bytes(b"\x08\x07garbage")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (autosave_dir / "session-1-1.json").write_text(json.dumps({"original": "/nowhere/m.onnx", "saved_at": 0, "pid": dead.pid,
                                                                "process_start": 1.0, "edits": 2}))
    prompts = []
    _click_later("Recover", prompts)
    assert not autosave.offer_recovery(window)
    assert len(messages) == 1 and "cannot be loaded" in messages[0] and "session-1-1.onnx" in messages[0]
    assert "moved to" in messages[0] and str(autosave_dir / "failed") in messages[0]
    assert (autosave_dir / "failed" / "session-1-1.onnx").is_file()
    assert autosave.pending_recoveries(autosave_dir) == []  # not offered again
