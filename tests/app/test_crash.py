"""The exception hook: an error escaping a Qt slot (or a thread) shows the error dialog, the
unsaved edits are autosaved, and the application goes on with the model and its undo history."""
from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app import crash
from core.model.edits import RenameNode
from tests.conftest import sample


@pytest.fixture
def hook(monkeypatch, tmp_path):
    monkeypatch.setenv("MLCWB_AUTOSAVE_DIR", str(tmp_path / "autosave"))
    crash.install()
    yield crash
    crash.uninstall()


def _edit(window):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    g = window.document.graph
    node = g.find_node("stem.relu")
    assert window.document.push(RenameNode(g, node.id, "renamed_relu"))
    return g, node.id


@pytest.mark.qt_no_exception_capture
def test_crash_exception_in_slot_shows_dialog_and_app_survives(hook, window, qtbot, tmp_path):
    g, node_id = _edit(window)
    assert window.document.is_dirty

    def broken_slot():
        raise ZeroDivisionError("a bug in some panel")

    QTimer.singleShot(0, broken_slot)  # raised from inside the Qt event loop, as a slot would
    qtbot.waitUntil(lambda: crash.current_dialog() is not None, timeout=5000)
    dialog = crash.current_dialog()
    assert dialog.isVisible()
    assert "ZeroDivisionError: a bug in some panel" in dialog.message.text()
    assert "broken_slot" in dialog.details.toPlainText()  # the traceback is in the details
    dialog.copy_button.click()
    report = QApplication.clipboard().text()
    assert "ZeroDivisionError" in report and "Python" in report and "Traceback" in report
    # the unsaved edit was autosaved on the way, and the window still has it
    assert window.autosaver.model_path.is_file() and window.autosaver.folder == tmp_path / "autosave"
    assert "autosaved" in dialog.message.text()
    assert window.document.graph is g and g.node(node_id).name == "renamed_relu"
    assert window.document.is_dirty and window.document.undo_stack.count() == 1

    # a second error while the dialog is open is added to it, not a second dialog
    QTimer.singleShot(0, broken_slot)
    qtbot.waitUntil(lambda: len(dialog.reports) == 2, timeout=5000)
    assert crash.current_dialog() is dialog
    dialog.accept()
    qtbot.waitUntil(lambda: crash.current_dialog() is None, timeout=5000)

    # the app goes on: undo, redo and another edit work
    window.undo_action.trigger()
    assert g.node(node_id).name != "renamed_relu"
    window.redo_action.trigger()
    assert g.node(node_id).name == "renamed_relu"
    assert window.document.push(RenameNode(g, node_id, "renamed_again"))


@pytest.mark.qt_no_exception_capture
def test_crash_exception_in_a_thread_reaches_the_dialog(hook, window, qtbot):
    def worker():
        raise KeyError("from a worker thread")

    t = threading.Thread(target=worker, name="hostile-thread")
    t.start()
    t.join()
    qtbot.waitUntil(lambda: crash.current_dialog() is not None, timeout=5000)
    dialog = crash.current_dialog()
    assert "KeyError" in dialog.message.text() and "hostile-thread" in dialog.report_text()
    dialog.accept()
    assert window.isVisible()
