"""The main window opens models off the UI thread, keeps the open one on a bad file, and shows
the right node boxes, inspector rows and search hits."""
from __future__ import annotations

from PySide6.QtCore import QPointF, QUrl, Qt, QMimeData
from PySide6.QtGui import QDropEvent

from core import load_model
from tests.conftest import light, sample


def _expected_boxes(path) -> int:
    g = load_model(path)
    return len([n for n in g.nodes if not n.is_constant]) + len([v for v in g.inputs if not v.is_constant]) + len(g.outputs)


def test_open_sample_model(window):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    assert "small_cnn.onnx" in window.windowTitle()
    assert len(window.canvas.node_items) == _expected_boxes(sample("small_cnn"))
    assert len(window.canvas.edge_items) == len(window.canvas.view.edges)
    assert window.canvas.layout_result.method == "dot"


def test_constants_fold_into_badges(window):
    path = light("squeezenet")
    assert window.open_model(str(path), wait=True)
    g = window.document.graph
    items = window.canvas.node_items
    assert len(items) == _expected_boxes(path) < len(g)
    conv = next(i for i in items.values() if i.node.label == "Conv")
    assert any(b.startswith("W ") for b in conv.node.badges) and any(b.startswith("B ") for b in conv.node.badges)


def test_bad_file_keeps_open_model(window, tmp_path, messages):
    assert window.open_model(str(sample("mlp")), wait=True)
    bad = tmp_path / "bad.onnx"
    bad.write_text("nope")
    assert not window.open_model(str(bad), wait=True)
    assert messages and str(bad) in messages[0]
    assert window.document.graph.path.name == "mlp.onnx"
    assert "mlp.onnx" in window.windowTitle()
    assert window.canvas.node_items


def test_select_node_shows_attributes_in_inspector(window):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    g = window.document.graph
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    window.canvas.select([conv.id])
    assert window.document.selection == [conv.id]
    rows = window.panels["inspector"].widget().rows()
    assert ("Node", "op", "Conv") in rows
    assert ("Attributes", "kernel_shape", "[3, 3]") in rows
    assert any(r[0] == "Inputs" and r[1] == "W" and "[16, 3, 3, 3]" in r[2] for r in rows)


def test_picking_a_weight_shows_its_statistics(window):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    g = window.document.graph
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    window.document.set_selected_tensor(conv.inputs[1])
    rows = dict(((s, k), v) for s, k, v in window.panels["inspector"].widget().rows())
    data = g.value(conv.inputs[1]).numpy()
    assert rows[("Tensor", "shape")] == "[16, 3, 3, 3]"
    assert float(rows[("Values", "min")]) == float(f"{data.min():.6g}")
    assert float(rows[("Values", "mean")]) == float(f"{data.mean():.6g}")
    # the consumer is highlighted on the canvas
    assert "tensor" in window.canvas.node_items[conv.id].highlights


def test_search_enter_selects_and_centers_next_hit(window, qtbot):
    assert window.open_model(str(light("inception_v1")), wait=True)
    bar = window.canvas.find_bar
    bar.open()
    hits = bar.search("Concat")
    assert len(hits) == 9  # one per inception module
    qtbot.keyClick(bar.edit, Qt.Key_Return)
    qtbot.keyClick(bar.edit, Qt.Key_Return)
    assert window.canvas.selected_ids() == [hits[1]]
    assert window.canvas._visible(hits[1])
    assert bar.count.text() == "2/9"
    # every hit is listed under the field; the current one is marked, a click jumps to another
    assert bar.results.isVisible() and bar.results.count() == 9 and bar.results.currentRow() == 1
    assert bar.results.item(0).text().startswith("Concat")
    rect = bar.results.visualItemRect(bar.results.item(5))
    qtbot.mouseClick(bar.results.viewport(), Qt.LeftButton, pos=rect.center())
    assert window.canvas.selected_ids() == [hits[5]] and bar.count.text() == "6/9" and window.canvas._visible(hits[5])
    bar.previous_hit()
    assert window.canvas.selected_ids() == [hits[4]] and bar.results.currentRow() == 4
    # tensor names find the nodes that read or write them, and the row says through which tensor
    g = window.document.graph
    some = next(n for n in g.nodes if n.op_type == "MaxPool")
    assert some.id in bar.search(some.outputs[0])
    assert any(some.outputs[0] in bar.results.item(i).text() for i in range(bar.results.count()))
    bar.search("no-such-op")
    assert not bar.results.isVisible() and bar.count.text() == "no hits"


def test_fit_and_zoom(window, qtbot):
    assert window.open_model(str(light("resnet50")), wait=True)
    c = window.canvas
    qtbot.wait(50)  # let the docks settle: the viewport's size decides the fit
    c.fit_all()
    visible = c.mapToScene(c.viewport().rect()).boundingRect()
    slack = 12 / c.zoom()  # scroll bars coming and going may shift the fit by a few pixels
    assert visible.adjusted(-slack, -slack, slack, slack).contains(c.scene().sceneRect())
    assert c.zoom() < 0.2  # a deep network is tall
    # Fit stops where op names stay readable: the network from its input, across its whole width
    from app.canvas.view import FIT_MIN_SCALE

    c.fit()
    assert FIT_MIN_SCALE <= c.zoom() <= 1.0
    visible = c.mapToScene(c.viewport().rect()).boundingRect()
    top = min(c.layout_result.boxes.values(), key=lambda b: b.y)
    assert visible.contains(top.x, top.y) and visible.width() >= c.layout_result.width * 0.98
    c.zoom_100()
    assert abs(c.zoom() - 1.0) < 1e-9
    assert window.zoom_label.text() == "100 %"


def test_drop_an_onnx_file_opens_it(window, qtbot):
    md = QMimeData()
    md.setUrls([QUrl.fromLocalFile(str(sample("mlp")))])
    ev = QDropEvent(QPointF(10, 10), Qt.CopyAction, md, Qt.LeftButton, Qt.NoModifier)
    window.dropEvent(ev)
    qtbot.waitUntil(lambda: window.document.graph is not None and not window.canvas.busy and window.canvas.view is not None, timeout=10000)
    assert window.document.path.name == "mlp.onnx"
    assert window.recent_files()[0].endswith("mlp.onnx")


def test_cancel_keeps_the_open_model(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    assert window.open_model(str(light("densenet121")))  # starts in the background
    assert window.cancel_button.isVisible() or window._load_job is not None
    window.cancel_work()
    qtbot.waitUntil(lambda: window._load_job is None, timeout=20000)
    assert window.document.graph.path.name == "mlp.onnx"
    assert len(window.canvas.view.nodes) < 20
