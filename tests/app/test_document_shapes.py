"""The Document re-infers shapes only after edits that can change them (renames cannot)."""
from __future__ import annotations

from app.document import Document, changes_shapes
from core import load_model
from core.model.edits import CompoundEdit, RenameNode, RenameTensor, SetAttribute
from tests.conftest import sample


def test_renames_skip_shape_inference_and_keep_shapes(qtbot, monkeypatch):
    doc = Document()
    doc.set_graph(load_model(sample("small_cnn")), sample("small_cnn"))
    g = doc.graph
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    out = conv.output_values[0]
    shape = out.shape
    assert shape is not None
    calls = []
    real = type(g).infer_shapes
    monkeypatch.setattr(type(g), "infer_shapes", lambda self, *a, **k: (calls.append(1), real(self, *a, **k))[1])

    rename = CompoundEdit("rename both", [RenameNode(g, conv.id, "renamed_conv"), RenameTensor(g, out.name, "renamed_out")])
    assert not changes_shapes(rename)
    assert doc.push(rename, show_errors=False)
    doc.undo_stack.undo()
    doc.undo_stack.redo()
    assert calls == []
    assert g.find_node("renamed_conv").output_values[0].shape == shape

    strides = SetAttribute(g, conv.id, "strides", [2, 2])
    assert changes_shapes(strides)
    assert doc.push(strides, show_errors=False)
    assert calls == [1]
    assert g.find_node("renamed_conv").output_values[0].shape != shape  # the stride halved the output
    doc.undo_stack.undo()
    assert calls == [1, 1] and g.find_node("renamed_conv").output_values[0].shape == shape
