"""Inspector: the model's properties when nothing is selected, values shown whole (wrapped, never
cut in the middle), and the tensor viewer for weights and constants."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper
from PySide6.QtWidgets import QApplication

from tests.conftest import sample


def _inspector(window):
    return window.panels["inspector"].widget()


def test_model_properties_when_nothing_is_selected(window, tmp_path):
    x = helper.make_tensor_value_info("gpu_0/data_0_with_a_long_name", TensorProto.FLOAT, [1, 3, 224, 224])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 224, 224])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", [x.name], ["y"], name="r")], "tiny", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch", producer_version="2.4")
    helper.set_model_props(m, {"author": "someone", "license": "MIT"})
    onnx.save(m, tmp_path / "m.onnx")
    assert window.open_model(str(tmp_path / "m.onnx"), wait=True)
    rows = {(s, k): v for s, k, v in _inspector(window).rows()}
    assert rows[("Model", "producer")] == "pytorch 2.4" and rows[("Model", "opset")] == "17"
    assert rows[("Model", "IR version")] == str(m.ir_version)
    assert rows[("Metadata", "author")] == "someone" and rows[("Metadata", "license")] == "MIT"
    assert rows[("Inputs", "gpu_0/data_0_with_a_long_name")] == "float32 [1, 3, 224, 224]"
    assert rows[("Outputs", "y")] == "float32 [1, 3, 224, 224]"


def test_long_values_wrap_instead_of_being_cut(window, qtbot):
    assert window.open_model(str(sample("tiny_transformer")), wait=True)
    tree = _inspector(window)
    tree.setColumnWidth(0, 100)
    window.panels["inspector"].setFixedWidth(280)
    qtbot.wait(50)
    item = next(tree.topLevelItem(i) for i in range(tree.topLevelItemCount()) if tree.topLevelItem(i).text(0) == "Model")
    row = next(item.child(j) for j in range(item.childCount()) if item.child(j).text(0) == "file")
    assert tree.textElideMode().name != "ElideMiddle" and tree.wordWrap()
    # the whole path is there, and its row is taller than one line where the column is narrow
    assert row.text(1) == str(sample("tiny_transformer")) and row.toolTip(1) == row.text(1)
    one_line = tree.fontMetrics().height()
    qtbot.waitUntil(lambda: tree.visualItemRect(row).height() > 1.5 * one_line, timeout=3000)


def test_tensor_viewer_shows_every_value_histogram_copy_and_npy(window, qtbot, tmp_path):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    g = window.document.graph
    conv = g.find_node("stem.conv")
    weight = conv.inputs[1]
    window.document.set_selected_tensor(weight)
    tree = _inspector(window)
    rows = tree.rows()
    assert ("Values", "all values", "") in rows
    viewer = tree.view_tensor(weight)
    qtbot.addWidget(viewer)
    data = g.value(weight).numpy()
    assert viewer.model.rowCount() * viewer.model.columnCount() == data.size
    assert viewer.model.row_label(1) == "[0, 0, 1, :]"  # the last axis across, other indices down
    assert int(viewer.histogram.counts.sum()) == data.size
    assert f"{data.size:,} values" in viewer.summary_text() and "std" in viewer.summary_text()
    viewer.copy()
    text = QApplication.clipboard().text()
    assert len(text.split()) == data.size and float(text.split()[0]) == float(f"{data.reshape(-1)[0]:.6g}")
    viewer.save(str(tmp_path / "w.npy"))
    assert np.array_equal(np.load(tmp_path / "w.npy", allow_pickle=False), data)


def test_double_click_on_a_weight_badge_opens_the_viewer(window, qtbot):
    from PySide6.QtCore import QPointF, Qt

    assert window.open_model(str(sample("small_cnn")), wait=True)
    canvas = window.canvas
    g = window.document.graph
    conv = g.find_node("stem.conv")
    canvas.zoom_100()
    canvas.center_on(conv.id)
    item = canvas.node_items[conv.id]
    item.badge_at(QPointF(0, 0))  # lays the text out: badge positions known
    a, b, k = item._badge_spans[0]
    y0, y1 = item._badge_y
    pos = canvas.mapFromScene(item.mapToScene(QPointF((a + b) / 2, (y0 + y1) / 2)))
    qtbot.mouseDClick(canvas.viewport(), Qt.LeftButton, pos=pos)
    viewer = _inspector(window).viewer
    assert viewer is not None and viewer.name == item.node.data["badge_tensors"][k]
    qtbot.addWidget(viewer)


def test_model_properties_are_summarized_once_per_revision(window, qtbot, monkeypatch):
    """The properties pane is refreshed by every selection and view signal; the model is
    summarized again only when it changed."""
    import app.panels.inspector as inspector
    from core.model.edits import RenameNode

    assert window.open_model(str(sample("small_cnn")), wait=True)
    calls = []
    real = inspector.model_facts
    monkeypatch.setattr(inspector, "model_facts", lambda g: calls.append(g.revision) or real(g))
    panel = window.panels["inspector"].widget()
    for _ in range(3):
        panel.refresh()
    assert len(calls) <= 1
    g = window.document.graph
    assert window.document.push(RenameNode(g, g.nodes[0].id, "renamed_stem"))
    panel.refresh()
    assert calls and calls[-1] == g.revision


def test_model_properties_of_an_opened_model_are_computed_on_the_open_worker(window, monkeypatch):
    """Opening a model summarizes it on the open worker (MainWindow.open_hooks), not on the UI
    thread as it appears: on a 10,000-node model that was a stall the user felt."""
    import threading

    import app.panels.inspector as inspector

    threads = []
    real = inspector.model_facts
    monkeypatch.setattr(inspector, "model_facts", lambda g: threads.append(threading.current_thread()) or real(g))
    assert window.open_model(str(sample("small_cnn")), wait=True)
    assert threads and all(t is not threading.main_thread() for t in threads)
    rows = {(s, k): v for s, k, v in _inspector(window).rows()}
    assert rows[("Model", "nodes")] == str(len(window.document.graph))
