"""Edits go through the Document's undo stack; the canvas, title and undo menu follow."""
from __future__ import annotations

from core.model.edits import DeleteNode, RenameNode
from tests.conftest import sample


def test_push_undo_redo_redraws_and_marks_dirty(window, qtbot):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    doc, canvas = window.document, window.canvas
    g = doc.graph
    relu = next(n for n in g.nodes if n.op_type == "Relu")
    before = len(canvas.node_items)
    assert not window.isWindowModified()
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        assert doc.push(DeleteNode(g, relu.id, bridge=True))
    assert len(canvas.node_items) == before - 1 and relu.id not in canvas.node_items
    assert window.isWindowModified() and doc.is_dirty
    assert window.undo_action.text().startswith("&Undo Delete and reconnect")
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        doc.undo_stack.undo()
    assert relu.id in canvas.node_items and len(canvas.node_items) == before
    assert not doc.is_dirty and not window.isWindowModified()
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        doc.undo_stack.redo()
    assert relu.id not in canvas.node_items


def test_failed_edit_leaves_no_command(window, messages):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    doc = window.document
    g = doc.graph
    convs = [n for n in g.nodes if n.op_type == "Conv"]
    revision = g.revision
    assert not doc.push(RenameNode(g, convs[0].id, convs[1].name))  # names must stay unique
    assert doc.undo_stack.count() == 0 and not doc.is_dirty
    assert g.revision == revision
    assert messages and convs[1].name in messages[-1]


def test_save_as_clears_dirty_and_reopens(window, tmp_path, qtbot):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    doc = window.document
    relu = next(n for n in doc.graph.nodes if n.op_type == "Relu")
    doc.push(DeleteNode(doc.graph, relu.id, bridge=True))
    out = tmp_path / "edited.onnx"
    doc.save(out)
    assert not doc.is_dirty and "edited.onnx" in window.windowTitle()
    n = len(doc.graph)
    assert window.open_model(str(out), wait=True)
    assert len(window.document.graph) == n


def test_closing_with_unsaved_edits_asks(window, messages):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    doc = window.document
    relu = next(n for n in doc.graph.nodes if n.op_type == "Relu")
    doc.push(DeleteNode(doc.graph, relu.id, bridge=True))
    assert window.close()  # the fixture answers Discard
    assert messages and "Save the changes to small_cnn.onnx" in messages[-1]


def test_document_records_applied_rewrites_and_undo_takes_them_back(window):
    from core.rewrite.engine import RewriteEdit, preview
    from rewrites import get_rule

    assert window.open_model(str(sample("small_cnn")), wait=True)
    doc = window.document
    assert doc.applied_rewrites == []
    assert doc.push(RewriteEdit(preview(doc.graph, get_rule("fold-conv-bn"))))
    assert doc.applied_rewrites == ["fold-conv-bn (4 matches)"]
    doc.undo_stack.undo()
    assert doc.applied_rewrites == []
    doc.undo_stack.redo()
    assert doc.graph.clone().applied_rewrites == ["fold-conv-bn (4 matches)"]  # what a compile of it sees
