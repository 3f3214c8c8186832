"""Issue 41 items 3 and 4: the overview map floats small in a corner without covering a box after
Fit, and Fit stops at the zoom where every op name reads whole (frame titles readable too)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QFontMetricsF

from tests.conftest import sample


def _encoder(path, layers=1):
    from benchmarks.architectures.transformers import bert_encoder
    import onnx

    onnx.save(bert_encoder(layers=layers), str(path))
    return str(path)


def _minimap_clear_of_boxes(canvas):
    mm = canvas.minimap
    vp = canvas.viewport().geometry()
    g = mm.geometry()
    assert g.width() <= mm.MAX_SIDE and g.height() <= mm.MAX_SIDE
    assert g.width() * g.height() <= 0.15 * vp.width() * vp.height()
    assert vp.contains(g), (g, vp)  # over the canvas, not beside it: it takes no width
    assert canvas.viewportMargins().right() == 0
    near = [min(abs(g.left() - vp.left()), abs(vp.right() - g.right())), min(abs(g.top() - vp.top()), abs(vp.bottom() - g.bottom()))]
    assert max(near) <= mm.MARGIN + 1, "in a corner"
    covered = [b for b in canvas.boxes_on_screen() if b.intersects(QRectF(g))]
    assert not covered, f"{len(covered)} boxes under the minimap"


@pytest.mark.parametrize("model", ["small_cnn", "tiny_transformer"])
def test_minimap_floats_in_a_corner_and_fit_leaves_it_no_box(window, qtbot, model):
    assert window.open_model(str(sample(model)), wait=True)
    canvas = window.canvas
    for left_to_right in (False, True):
        if window.direction_action.isChecked() != left_to_right:
            with qtbot.waitSignal(canvas.viewShown, timeout=10000):
                window.direction_action.setChecked(left_to_right)
        canvas.zoom_100()
        qtbot.waitUntil(lambda: canvas.minimap.isVisible(), timeout=5000)  # 100 % of the graph does not fit
        canvas.fit()
        if canvas.minimap.isVisible():
            _minimap_clear_of_boxes(canvas)
        canvas.fit_all()
        qtbot.waitUntil(lambda: not canvas.minimap.isVisible(), timeout=5000)  # everything in view: no map


def _wide_view(chains=10, length=40):
    """Parallel chains: a graph as wide as the canvas at Fit's zoom, with boxes in every corner."""
    from core.views.viewgraph import ViewEdge, ViewGraph, ViewNode

    ops = ["MatMul", "Transpose", "Softmax", "Add", "ReduceMean"]
    nodes = [ViewNode((c, k), ops[(c + k) % len(ops)], "1×128×256", "matmul") for c in range(chains) for k in range(length)]
    edges = [ViewEdge((c, k), (c, k + 1)) for c in range(chains) for k in range(length - 1)]
    return ViewGraph("wide", nodes, edges)


@pytest.mark.parametrize("direction", ["TB", "LR"])
def test_fit_narrows_the_breadth_when_every_corner_is_taken(window, qtbot, direction):
    """A graph as broad as the canvas at Fit's zoom leaves no corner free: Fit makes room beside it."""
    canvas = window.canvas
    canvas.direction = direction
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        canvas.show_view(_wide_view(), fit=False)
    canvas._fit_start(1.0, True)  # what Fit did before: the breadth across the whole canvas
    assert canvas._place_minimap() > 0  # ... where every corner covers boxes
    canvas.fit()
    assert canvas.minimap.isVisible()
    _minimap_clear_of_boxes(canvas)
    assert canvas.zoom() >= canvas.readable_zoom()


def _assert_titles_whole(canvas):
    from app.graph_items import TEXT_LOD, NodeItem
    from app.scope_items import ScopeBoxItem

    canvas.viewport().grab()  # paint: zoomed-out titles are elided while painting
    visible = canvas.mapToScene(canvas.viewport().rect()).boundingRect()
    drawn = 0
    for item in canvas.node_items.values():
        if type(item) is not NodeItem or not visible.intersects(item.sceneBoundingRect()):
            continue
        if canvas.zoom() < TEXT_LOD:
            assert item._title is not None and item._title[1] == item.node.label, (item.node.label, item._title)
        else:
            assert item._texts[0][0].text() == item.node.label
        drawn += 1
    assert drawn >= 5


def test_an_encoder_opens_where_op_names_read_whole(window, qtbot, tmp_path):
    from app.canvas.view import FIT_MIN_SCALE

    # a canvas tall enough that the whole encoder fits at about 30 % (what Fit chose before,
    # with titles cut to "Mat…", "Trans…"), but not at the zoom where they read whole
    path = _encoder(tmp_path / "bert1.onnx")
    assert window.open_model(path, wait=True)
    canvas = window.canvas
    readable = canvas.readable_zoom()
    assert FIT_MIN_SCALE < readable <= 0.6
    height = canvas.scene().sceneRect().height()
    window.resize(1200, window.height() + int(0.33 * height) - canvas.viewport().height())
    qtbot.wait(50)
    assert FIT_MIN_SCALE <= canvas.fit_scale() < readable  # the case of the issue
    assert window.open_model(path, wait=True)  # opened again at this size
    assert canvas.zoom() >= readable
    _assert_titles_whole(canvas)
    top = min(canvas.layout_result.boxes.values(), key=lambda b: b.y)
    assert canvas.mapToScene(canvas.viewport().rect()).boundingRect().contains(top.x, top.y)  # from its start
    for zoom in (readable, 0.5):
        canvas.set_zoom(zoom)
        _assert_titles_whole(canvas)


def test_fit_keeps_the_start_in_view_when_the_docks_settle(window, qtbot):
    assert window.open_model(str(sample("tiny_transformer")), wait=True)
    canvas = window.canvas
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        window.direction_action.setChecked(True)
    canvas.fit()
    window.resize(window.width() - 300, window.height())  # e.g. a dock taking its width after opening
    qtbot.wait(50)
    first = min(canvas.layout_result.boxes.values(), key=lambda b: b.x)
    visible = canvas.mapToScene(canvas.viewport().rect()).boundingRect()
    assert visible.left() <= first.x - first.w / 2
    canvas.zoom_by(1.2)  # the user's own zoom is kept on resize
    zoom = canvas.zoom()
    window.resize(window.width() + 200, window.height())
    qtbot.wait(50)
    assert abs(canvas.zoom() - zoom) < 1e-9


def test_group_frame_titles_stay_readable_zoomed_out(qapp):
    from app.graph_items import READABLE_PX, item_fonts
    from app.scope_items import ScopeFrame

    frame = ScopeFrame("encoder/layer.0/attention/self", QRectF(0, 0, 260, 400), 2, lambda p: None)
    fh = QFontMetricsF(item_fonts()[0][2]).height()
    for zoom in (0.3, 0.35, 0.43, 0.6, 0.8):
        assert frame.title_scale(zoom) * fh * zoom >= READABLE_PX, zoom
        text = frame.title_text(zoom)
        assert text.endswith("attention/self")  # elided from the start: the innermost name stays
    assert frame.title_text(1.0) == "− encoder/layer.0/attention/self"
