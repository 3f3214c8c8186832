"""The canvas API other views use: any ViewGraph, highlights, overlays, ghosts, and the
screenshot command built on it."""
from __future__ import annotations

from PySide6.QtGui import QColor, QImage

from core.viewgraph import ViewEdge, ViewGraph, ViewNode
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
    assert c.legend.isVisible() and "kernel time" in c.legend.text()
    c.set_overlay(None)
    assert c.node_items[ids[1]].overlay is None and not c.legend.isVisible()

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
