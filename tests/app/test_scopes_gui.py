"""Collapsible groups on the canvas and the Compare window, through the real window."""
from __future__ import annotations

import onnx

from core.model.samples import scoped_bert
from core.views.scopes import is_scope_id


def _bert(tmp_path, layers=12):
    path = tmp_path / "bert.onnx"
    onnx.save(scoped_bert(layers=layers), path)
    return path


def _scopes(canvas):
    return [i for i in canvas.layout_result.boxes if is_scope_id(i)]


def test_big_scoped_model_opens_collapsed_and_expands_in_place(window, qtbot, tmp_path):
    assert window.open_model(_bert(tmp_path), wait=True)
    c = window.canvas
    assert len(_scopes(c)) == 12 and len(c.view.nodes) == 21  # embeddings & pooler nodes, 12 layer boxes, io
    item = c.node_items["scope:encoder/layer.3"]
    assert type(item).__name__ == "ScopeBoxItem" and "33 nodes" in item.node.detail
    def on_screen(node_id):
        b = c.layout_result.boxes[node_id]
        return c.mapFromScene(b.x, b.y)

    c.centerOn(c.layout_result.boxes["scope:encoder/layer.3"].x, c.layout_result.boxes["scope:encoder/layer.3"].y)
    above = on_screen("scope:encoder/layer.2")
    below_y = c.layout_result.boxes["scope:encoder/layer.4"].y - c.layout_result.boxes["scope:encoder/layer.2"].y
    c.nodeActivated.emit("scope:encoder/layer.3")  # what double-click and Enter send
    boxes = c.layout_result.boxes
    assert "scope:encoder/layer.3" not in boxes and "scope:encoder/layer.3/attention" in boxes
    # stays put on screen (sideways a little when the wider scene re-centres in the viewport)
    assert abs(on_screen("scope:encoder/layer.2").y() - above.y()) <= 2 and abs(on_screen("scope:encoder/layer.2").x() - above.x()) < 20
    assert boxes["scope:encoder/layer.4"].y - boxes["scope:encoder/layer.2"].y > below_y + 200  # room was made below
    assert sorted(f.path for f in window.scopes.frames) == ["embeddings", "encoder", "encoder/layer.3", "pooler"]
    c.select(["scope:encoder/layer.4"])
    rows = window.panels["inspector"].widget().rows()
    assert ("Group", "nodes", "33") in rows and ("Ops", "MatMul", "8") in rows
    assert any(r[0] == "Inputs" and r[2] == "1×16×32 float32" for r in rows)
    # '-' on a node inside collapses the innermost open group around it
    c.select(["scope:encoder/layer.3/intermediate"])
    window.scopes.collapse_selected()
    assert "scope:encoder/layer.3" in c.layout_result.boxes and c.selected_ids() == ["scope:encoder/layer.3"]
    assert c.layout_result.boxes["scope:encoder/layer.4"].y - c.layout_result.boxes["scope:encoder/layer.2"].y == below_y  # the earlier layout is back
    assert abs(on_screen("scope:encoder/layer.2").y() - above.y()) <= 2


def test_search_finds_inside_collapsed_groups_and_expands_to_the_node(window, tmp_path):
    assert window.open_model(_bert(tmp_path), wait=True)
    c = window.canvas
    bar = c.find_bar
    bar.open()
    hits = bar.search("/encoder/layer.7/attention/self/Softmax")
    assert len(hits) == 2 and isinstance(hits[0], int) and hits[0] not in c.layout_result.boxes  # the node, then its reader
    assert "scope:encoder/layer.7" in c.highlights["search"][0]  # the box holding it glows
    bar.next_hit()
    assert hits[0] in c.layout_result.boxes and c.selected_ids() == [hits[0]]
    assert bar.count.text() == "1/2"
    assert window.document.graph.node(hits[0]).op_type == "Softmax"


def test_highlights_of_hidden_nodes_light_their_group(window, tmp_path):
    assert window.open_model(_bert(tmp_path), wait=True)
    c = window.canvas
    g = window.document.graph
    erf = [n.id for n in g.nodes if n.op_type == "Erf"][4]  # layer.4's GELU
    c.set_highlight("rewrite-match", [erf], "#ff00ff")
    assert "rewrite-match" in c.node_items["scope:encoder/layer.4"].highlights
    assert "rewrite-match" not in c.node_items["scope:encoder/layer.3"].highlights


def test_heat_overlay_sums_over_a_group(window, tmp_path):
    assert window.open_model(_bert(tmp_path, layers=12), wait=True)
    c = window.canvas
    g = window.document.graph
    values = {n.id: 1.0 for n in g.nodes if n.op_type == "MatMul"}
    c.set_overlay(values, "ms")
    item = c.node_items["scope:encoder/layer.0"]
    assert item.overlay is not None and item.overlay_text == "8"


def test_compare_before_and_after_a_rewrite(window, tmp_path, messages):
    from app.compare import CompareWindow
    from core.rewrite.engine import RewriteEdit, preview
    from rewrites import get_rule

    assert window.open_model(_bert(tmp_path, layers=12), wait=True)
    window.document.push(RewriteEdit(preview(window.document.graph, get_rule("fuse-gelu"))))
    window.compare_with_saved()
    cw = window.findChildren(CompareWindow)[-1]
    from PySide6.QtCore import QEventLoop, QTimer

    for _ in range(400):
        if cw.left.canvas.layout_result is not None and cw.right.canvas.layout_result is not None and not cw.left.canvas.busy and not cw.right.canvas.busy:
            break
        loop = QEventLoop()
        QTimer.singleShot(10, loop.quit)
        loop.exec()
    d = cw.diff
    assert len(d.removed) == 60 and len(d.added) == 12 and not messages
    assert "60 only in A" in cw.summary.text() and "12 only in B" in cw.summary.text()
    # collapsed layers holding differences are ringed on both sides
    assert "scope:encoder/layer.5" in cw.left.canvas._highlights["changed"][0]
    assert "scope:encoder/layer.5" in cw.right.canvas._highlights["changed"][0]
    # opening a group on one side opens it on the other; selection follows
    cw.left.scopes.expand("encoder/layer.5")
    assert "encoder/layer.5" in cw.right.scopes.expanded
    cw.left.canvas.select(["scope:encoder/layer.5/attention"])
    assert cw.right.canvas.selected_ids() == ["scope:encoder/layer.5/attention"]
    cw.left.canvas._set_scale(0.5)
    assert abs(cw.right.canvas.zoom() - 0.5) < 1e-6
    cw.close()


def test_compare_two_lowering_stages(window, qtbot):
    from tests.conftest import sample

    assert window.open_model(str(sample("mlp")), wait=True)
    panel = window.lowering_panel
    panel.start()
    qtbot.waitUntil(lambda: not panel.running, timeout=120_000)
    names = [s.name for s in panel.stages]
    fuse = names.index("FuseOps")
    panel.select_stage(fuse)
    cw = panel.compare_with_previous()
    assert cw is not None and cw.windowTitle().startswith("Compare — ") and "FuseOps" in cw.windowTitle()
    d = cw.diff
    # FuseOps groups the matmul/add/relu chains into fused functions: nodes disappear and appear
    assert d.removed and d.added and d.matched
    qtbot.waitUntil(lambda: cw.left.canvas.layout_result is not None and cw.right.canvas.layout_result is not None, timeout=60_000)
    assert cw.right.canvas._ghosts[1] == set(d.added)
    cw.close()


def test_open_groups_are_framed_around_everything_they_hold(window, tmp_path):
    """A small scoped model opens with every group open: each group's frame holds the boxes of
    all its nodes and sits inside the frame of the group around it."""
    assert window.open_model(_bert(tmp_path, layers=2), wait=True)
    c, tree = window.canvas, window.scopes._tree
    frames = {f.path: f.rect for f in window.scopes.frames}
    assert set(frames) == {s.path for s in tree.groups}
    for nid, b in c.layout_result.boxes.items():
        for path in tree.path_to(nid):
            assert frames[path].contains(b.x - b.w / 2, b.y - b.h / 2) and frames[path].contains(b.x + b.w / 2, b.y + b.h / 2), (nid, path)
    for s in tree.groups:
        if s.parent is not tree.root:
            inner, outer = frames[s.path], frames[s.parent.path]
            assert outer.contains(inner.x(), inner.y() + inner.height()) and inner.y() > outer.y(), s.path
