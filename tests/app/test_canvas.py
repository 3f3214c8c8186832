"""The canvas API other views use: any ViewGraph, highlights, overlays, ghosts, and the
screenshot command built on it."""
from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QFontMetricsF, QImage

from app.graph_items import ChipItem, GroupItem
from app.style import node_fonts

from core.views.viewgraph import ViewEdge, ViewGraph, ViewNode
from tests.conftest import sample
from tests.helpers import run_cli


def _stage_view() -> ViewGraph:
    nodes = [ViewNode("a", "R.conv2d", "1×16×32×32", "convolution", origin=[1]), ViewNode("b", "R.nn.relu", category="activation", origin=[3]), ViewNode("c", "fused_kernel", category="other")]
    return ViewGraph("stage", nodes, [ViewEdge("a", "b", "lv0", "1×16×32×32 float32"), ViewEdge("b", "c", "lv1")])


def test_show_view_then_back_to_model(window, qtbot):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    c = window.canvas
    n_model = len(c.node_items)
    with qtbot.waitSignal(c.viewShown, timeout=10000):
        c.show_view(_stage_view())
    assert c.mode == "view" and set(c.node_items) == {"a", "b", "c"}
    seen = []
    c.viewSelectionChanged.connect(seen.append)
    c.select(["b"])
    assert seen[-1] == ["b"] and window.document.selection == []  # a stage selection is not a model selection
    rows = window.panels["inspector"].widget().rows()
    assert ("Node", "label", "R.nn.relu") in rows
    with qtbot.waitSignal(c.viewShown, timeout=10000):
        c.show_model()
    assert c.mode == "model" and len(c.node_items) == n_model


def test_a_layout_still_running_does_not_replace_what_is_shown_after_it(window, qtbot):
    """show_view starts a layout; show_model (the cached layout, at once) before it ends: the
    stage's layout, when it ends, must not replace the model (it once did, mode still "model")."""
    assert window.open_model(str(sample("small_cnn")), wait=True)
    c = window.canvas
    model_ids = {i for i in c.layout_result.boxes if isinstance(i, int)}
    c.show_view(_stage_view())  # its layout runs on a worker; its result is queued to this thread
    assert c.busy
    c.show_model()
    qtbot.waitUntil(lambda: not c.busy, timeout=10000)
    qtbot.wait(200)  # anything the stage's job still had queued
    assert c.mode == "model" and {i for i in c.layout_result.boxes if isinstance(i, int)} == model_ids
    assert "a" not in c.node_items


def test_highlight_overlay_ghosts(window):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    c = window.canvas
    ids = [i for i in c.node_items if isinstance(i, int)][:3]
    c.set_highlight("lineage", ids, "#ff00ff")
    assert all(c.node_items[i].highlights["lineage"] == QColor("#ff00ff") for i in ids)
    # edges between highlighted nodes take the colour too
    inner = [e for e in c.edge_items if e.edge.src in ids and e.edge.dst in ids]
    assert inner and all(e.highlight == QColor("#ff00ff") for e in inner)
    c.clear_highlight("lineage")
    assert not any(c.node_items[i].highlights for i in ids)

    c.set_overlay({ids[0]: 1.0, ids[1]: 4.0}, "kernel time (ms)")
    assert c.node_items[ids[1]].overlay is not None and c.node_items[ids[1]].overlay_text == "4"
    assert c.node_items[ids[0]].overlay != c.node_items[ids[1]].overlay
    assert c.legend.isVisible() and "kernel time" in c.legend.text() and "4" in c.legend.text()
    chips = sorted(it.text for it in c._group_items if isinstance(it, ChipItem))
    assert chips == ["1", "4"]  # one chip per valued node, outside its box
    for it in c._group_items:
        if isinstance(it, ChipItem):
            assert not any(it.scene_rect_at_100().intersects(n.sceneBoundingRect().adjusted(5, 5, -5, -5)) for n in c.node_items.values())
    c.set_overlay(None)
    assert c.node_items[ids[1]].overlay is None and not c.legend.isVisible() and not c._group_items

    # a group (a fused kernel): one outline around its nodes, one chip with its value; the
    # scale's top is given (the chart's slowest kernel), not the largest value drawn
    c.set_overlay({ids[0]: 2.0, ids[1]: 2.0}, "kernel time", groups=[{"ids": ids[:2], "value": 2.0, "label": "fused"}], max_value=8.0, unit="ms")
    outlines = [it for it in c._group_items if isinstance(it, GroupItem)]
    assert len(outlines) == 1 and [it.text for it in c._group_items if isinstance(it, ChipItem)] == ["2 ms"]
    for i in ids[:2]:
        assert outlines[0].path.contains(c.node_items[i].sceneBoundingRect().center())
    assert c._overlay_max == 8.0 and "8 ms" in c.legend.text()
    c.set_overlay(None)

    c.set_ghosts(removed_ids=[ids[0]], added_ids=[ids[1]])
    assert c.node_items[ids[0]].ghost == "removed" and c.node_items[ids[1]].ghost == "added"
    c.clear_ghosts()
    assert not c.node_items[ids[0]].ghost


def test_render_at_every_level_of_detail(window):
    """Paint the scene zoomed out, at 100 % and zoomed in (text, shapes on edges), into images."""
    assert window.open_model(str(sample("small_cnn")), wait=True)
    c = window.canvas
    for z in (0.05, 1.0, 2.0):
        c.resetTransform()
        c.zoom_by(z)
        img = c.viewport().grab().toImage()
        colours = {img.pixel(x, y) for x in range(0, img.width(), 2) for y in range(0, img.height(), 2)}
        assert len(colours) > 3, z


@pytest.mark.slow  # a fresh process that starts the whole window with every panel (~5-10 s)
def test_screenshot_command_writes_png(tmp_path):
    out = tmp_path / "shot.png"
    r = run_cli("screenshot", str(sample("small_cnn")), "-o", str(out), "--size", "900x700")
    assert r.returncode == 0, r.stderr
    img = QImage(str(out))
    assert (img.width(), img.height()) == (900, 700)
    colours = {img.pixel(x, y) for x in range(0, 900, 5) for y in range(0, 700, 5)}
    assert len(colours) > 20  # boxes, text and edges, not a blank window
    bad = run_cli("screenshot", str(tmp_path / "missing.onnx"), "-o", str(out))
    assert bad.returncode == 2 and "missing.onnx" in bad.stderr
    r = run_cli("screenshot", str(sample("small_cnn")), "-o", str(out), "--size", "big")
    assert r.returncode == 2 and "--size" in r.stderr


def _chain_model(path, n_blocks: int):
    """A residual chain of n_blocks x (Conv, Relu, Add): big enough for the lazy scene."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 2, 1, 1], np.ones(4, np.float32))
    nodes, x = [], "x"
    for k in range(n_blocks):
        nodes += [
            helper.make_node("Conv", [x, "w"], [f"c{k}"], name=f"conv{k}"),
            helper.make_node("Relu", [f"c{k}"], [f"r{k}"], name=f"relu{k}"),
            helper.make_node("Add", [f"r{k}", x], [f"a{k}"], name=f"add{k}"),
        ]
        x = f"a{k}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 2, 4, 4])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_big_graph_draws_an_overview_and_makes_items_on_demand(window, tmp_path):
    path = _chain_model(tmp_path / "chain.onnx", 150)  # 450 nodes, 750 edges
    assert window.open_model(str(path), wait=True)
    c = window.canvas
    assert c.overview is not None and len(c.view.nodes) == 452
    c.fit_all()
    assert c.overview_active()
    assert len(c.node_items) < 50  # nothing is built for a view that shows the image
    img = c.viewport().grab().toImage()
    assert len({img.pixel(x, y) for x in range(0, img.width(), 3) for y in range(0, img.height(), 3)}) > 5
    c.zoom_100()
    assert not c.overview_active()
    assert 0 < len(c.node_items) < 452  # only around the visible area
    # search reaches nodes that have no item yet, selects and shows them
    far = window.document.graph.find_node("add140").id
    assert far not in c.node_items
    bar = c.find_bar
    bar.open()
    assert bar.search("add140") == [far]
    bar.next_hit()
    assert c.node_items[far].isSelected() and c._visible(far)
    assert ("Node", "name", "add140") in window.panels["inspector"].widget().rows()


def test_clicking_an_edge_picks_its_tensor(window, qtbot):
    from PySide6.QtCore import Qt

    assert window.open_model(str(sample("small_cnn")), wait=True)
    c = window.canvas
    c.zoom_100()
    edge = next(e for e in c.edge_items if e.edge.label and not str(e.edge.src).startswith("input:"))
    mid = edge.path.pointAtPercent(0.5)
    c.centerOn(mid)
    qtbot.mouseClick(c.viewport(), Qt.LeftButton, pos=c.mapFromScene(mid))
    assert window.document.selected_tensor == edge.edge.label
    assert edge.highlight is not None
    assert edge.edge.src in c.node_items and "tensor" in c.node_items[edge.edge.src].highlights
    rows = window.panels["inspector"].widget().rows()
    assert ("Tensor", "name", edge.edge.label) in rows and ("Tensor", "kind", "activation") in rows


def _dark_pixels(item, zoom: float) -> int:
    """Near-black pixels (text) when `item` alone is painted at `zoom`."""
    from PySide6.QtGui import QPainter
    from PySide6.QtWidgets import QGraphicsScene

    scene = QGraphicsScene()
    scene.addItem(item)
    r = item.boundingRect()
    img = QImage(int(r.width() * zoom) + 2, int(r.height() * zoom) + 2, QImage.Format_ARGB32)
    img.fill(QColor("white"))
    p = QPainter(img)
    scene.render(p, img.rect(), item.sceneBoundingRect())
    p.end()
    scene.removeItem(item)
    return sum(1 for x in range(img.width()) for y in range(img.height()) if QColor(img.pixel(x, y)).lightness() < 90)


def test_titles_stay_readable_at_the_scales_fit_produces(qapp):
    """Between the overview and full detail a box still shows its op name, enlarged to stay
    at least MIN_READABLE_PX tall on screen; only far below what Fit produces does it become a flat box."""
    from app.canvas.view import FIT_MIN_SCALE
    from app.graph_items import LABEL_LOD, MIN_READABLE_PX, TEXT_LOD, NodeItem, node_size
    from app.style import TextMeasure

    node = ViewNode(1, "Conv", "conv1 3×3", "convolution", badges=["W 64×3×3×3"])
    w, h = node_size(node, TextMeasure())
    assert LABEL_LOD < FIT_MIN_SCALE < TEXT_LOD
    for zoom in (FIT_MIN_SCALE, 0.45):
        item = NodeItem(node, w, h)
        assert _dark_pixels(item, zoom) > 12, zoom  # the title is drawn
        assert item._title is not None and item._title[1] == "Conv"
        assert item._title[0] * zoom * QFontMetricsF(node_fonts()[0]).height() >= MIN_READABLE_PX * 0.95
    assert _dark_pixels(NodeItem(node, w, h), LABEL_LOD / 2) == 0  # overview: a flat box


def test_left_to_right_layout_and_shapes_on_edges(window, qtbot):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    c = window.canvas
    g = window.document.graph
    first, last = g.find_node("stem.conv").id, g.nodes[-1].id
    assert c.layout_result.boxes[first].y < c.layout_result.boxes[last].y
    with qtbot.waitSignal(c.viewShown, timeout=10000):
        window.direction_action.setChecked(True)
    boxes = c.layout_result.boxes
    assert c.direction == "LR" and boxes[first].x < boxes[last].x and c.layout_result.width > c.layout_result.height
    assert window.settings.value("view/leftToRight") in (True, "true")
    # edges run left to right: each starts left of where it ends
    assert all(item.path.pointAtPercent(0).x() < item.path.pointAtPercent(1).x() for item in c.edge_items)

    assert not any(e.always_label for e in c.edge_items)
    window.edge_shapes_action.setChecked(True)
    assert all(e.always_label for e in c.edge_items)
    with qtbot.waitSignal(c.viewShown, timeout=10000):
        window.direction_action.setChecked(False)  # new items keep the setting
    assert c.direction == "TB" and all(e.always_label for e in c.edge_items)
