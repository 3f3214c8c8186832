"""History ▸ Copy as Python: the script for the edits up to the current undo entry lands on the
clipboard (and reproduces the model the window holds, run without the workbench); an edit that
cannot be written is named in the status bar and nothing is copied."""
from __future__ import annotations

from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QToolButton, QUndoView

from core.model.edits import InsertNode, RenameNode, SetAttribute
from core.model.history import Edit
from core.rewrite.engine import RewriteEdit, preview
from rewrites import get_rule
from tests.conftest import sample
from tests.core.rewrite.test_as_python import run_blocked, same_model


def _action(window) -> QAction:
    view = window.findChild(QUndoView, "history-view")
    action = view.findChild(QAction, "history-copy-python")
    assert action in view.actions()  # the view's context menu
    assert window.findChild(QToolButton, "history-copy-python-button").defaultAction() is action
    return action


def test_copy_as_python_reproduces_the_window_model(window, qtbot, tmp_path):
    src = sample("small_cnn")
    assert window.open_model(src, wait=True)
    doc = window.document
    g = doc.graph
    doc.push(SetAttribute(g, g.find_node("pool1").id, "strides", [1, 1]))
    doc.push(InsertNode(g, "LeakyRelu", ["gap_out"], {"alpha": 0.2}, insert_on="gap_out"))
    doc.push(RewriteEdit(preview(g, get_rule("fold-conv-bn"))))
    doc.push(RenameNode(g, g.find_node("fc").id, "undone"))
    doc.undo_stack.undo()  # the script stops at the current entry
    QGuiApplication.clipboard().setText("")
    _action(window).trigger()  # the script is written on a worker: the UI stays live meanwhile
    qtbot.waitUntil(lambda: "Copied 3 edits as Python" in window.statusBar().currentMessage(), timeout=60_000)
    text = QGuiApplication.clipboard().text()
    assert "# 3. fold-conv-bn (4 matches)" in text and "undone" not in text
    script = tmp_path / "history.py"
    script.write_text(text)
    window.document.save(tmp_path / "saved.onnx")
    assert same_model(tmp_path / "saved.onnx", run_blocked(script, src, tmp_path / "from_script.onnx"))


class _Opaque(Edit):
    description = "an opaque edit"

    def do(self, graph):
        pass

    def undo(self, graph):
        pass


def test_an_edit_that_cannot_be_written_copies_nothing(window):
    assert window.open_model(sample("small_cnn"), wait=True)
    doc = window.document
    doc.push(SetAttribute(doc.graph, doc.graph.find_node("pool1").id, "strides", [1, 1]))
    doc.push(_Opaque())
    QGuiApplication.clipboard().setText("before")
    _action(window).trigger()
    assert QGuiApplication.clipboard().text() == "before"
    message = window.statusBar().currentMessage()
    assert message.startswith("Copy as Python: nothing copied:") and "_Opaque ('an opaque edit')" in message
