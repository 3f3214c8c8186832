"""Expanding a group keeps the rest of the layout where it was."""
from __future__ import annotations

import onnx_ir as ir

from core.model.graph import Graph
from core.model.samples import scoped_bert
from core.views.layout import layout
from core.views.scope_layout import relayout
from core.views.scopes import scope_node_id, scope_tree, scoped_view
from core.views.viewgraph import from_graph


def _sizes(view):
    return {n.id: (200.0, 60.0) if n.data.get("kind") == "scope" else (110.0, 40.0) for n in view.nodes}


def test_expand_then_collapse_keeps_nodes_above_and_moves_nodes_below():
    g = Graph(ir.from_proto(scoped_bert(layers=4)))
    g.infer_shapes()
    view = from_graph(g)
    tree = scope_tree(view, g)
    before_view = scoped_view(view, tree, {"encoder"})
    before = layout(before_view, _sizes(before_view))
    after_view = scoped_view(view, tree, {"encoder", "encoder/layer.1"})
    after = relayout(before_view, before, after_view, _sizes(after_view))
    assert set(after.boxes) == {n.id for n in after_view.nodes} and len(after.routes) == len(after_view.edges)
    assert all(len(r) >= 4 and (len(r) - 1) % 3 == 0 for r in after.routes)
    old = before.boxes[scope_node_id("encoder/layer.1")]
    above = scope_node_id("encoder/layer.0")
    below = scope_node_id("encoder/layer.2")
    assert (after.boxes[above].x, after.boxes[above].y) == (before.boxes[above].x, before.boxes[above].y)
    grown = after.boxes[below].y - before.boxes[below].y
    assert grown > 100  # moved down by the block's extra height
    assert abs(after.boxes[scope_node_id("encoder/layer.3")].y - before.boxes[scope_node_id("encoder/layer.3")].y - grown) < 1e-6
    inner = [after.boxes[i] for i in after.boxes if i not in before.boxes]
    assert min(b.y - b.h / 2 for b in inner) >= old.y - old.h / 2 - 0.5  # the block starts where the box was
    assert max(b.y + b.h / 2 for b in inner) < after.boxes[below].y - after.boxes[below].h / 2  # and ends above the next
    # collapsing again puts the box back and pulls the rest up
    back = relayout(after_view, after, before_view, _sizes(before_view))
    assert abs(back.boxes[below].y - before.boxes[below].y) < 1.0
    assert abs(back.boxes[above].y - before.boxes[above].y) < 1.0
