"""Layered layout: boxes never overlap, rows run top to bottom along the edges, routes join the
right boxes; dot for model-sized graphs, the layered fallback for big or cyclic ones."""
from __future__ import annotations

import random
import time

import pytest

from core import load_model
from core.views.layout import DOT_NODE_LIMIT, LayoutCancelled, find_dot, layout
from core.views.viewgraph import ViewEdge, ViewGraph, ViewNode, from_graph
from tests.conftest import light, sample


def _sizes(view, w=110.0, h=40.0):
    rng = random.Random(0)
    return {n.id: (w + rng.randint(0, 80), h + rng.choice([0, 14])) for n in view.nodes}


def _assert_no_overlap(lo):
    boxes = sorted(lo.boxes.values(), key=lambda b: b.x - b.w / 2)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            if b.x - b.w / 2 >= a.x + a.w / 2:
                break
            overlap_y = abs(a.y - b.y) < (a.h + b.h) / 2
            assert not overlap_y, (a, b)


def _assert_routes_join_boxes(view, lo, tol=3.0):
    for e, pts in zip(view.edges, lo.routes):
        assert len(pts) >= 2 and (len(pts) - 1) % 3 == 0
        a, b = lo.boxes[e.src], lo.boxes[e.dst]
        (x0, y0), (x1, y1) = pts[0], pts[-1]
        assert abs(x0 - a.x) <= a.w / 2 + tol and abs(y0 - a.y) <= a.h / 2 + tol
        assert abs(x1 - b.x) <= b.w / 2 + tol and abs(y1 - b.y) <= b.h / 2 + tol + 8  # arrow tip


@pytest.mark.parametrize("method", ["dot", "layered"])
def test_resnet_layout(method):
    view = from_graph(load_model(light("resnet50")))
    lo = layout(view, _sizes(view), method)
    assert lo.method == method and set(lo.boxes) == {n.id for n in view.nodes}
    _assert_no_overlap(lo)
    _assert_routes_join_boxes(view, lo)
    for e in view.edges:  # top to bottom
        assert lo.boxes[e.src].y < lo.boxes[e.dst].y
    assert all(0 <= b.x - b.w / 2 and b.x + b.w / 2 <= lo.width + 1 for b in lo.boxes.values())


def test_auto_uses_dot_for_models_and_layered_for_huge_graphs():
    assert find_dot() is not None
    view = from_graph(load_model(sample("small_cnn")))
    assert layout(view, _sizes(view)).method == "dot"
    n = DOT_NODE_LIMIT + 1
    big = ViewGraph("big", [ViewNode(i, "Op") for i in range(n)], [ViewEdge(i - 1, i) for i in range(1, n)] + [ViewEdge(i - 3, i) for i in range(3, n, 3)])
    t = time.perf_counter()
    lo = layout(big, _sizes(big))
    assert lo.method == "layered" and time.perf_counter() - t < 10
    _assert_no_overlap(lo)
    _assert_routes_join_boxes(big, lo)


def test_layered_survives_cycles_and_self_loops():
    nodes = [ViewNode(i, "Op") for i in range(5)]
    edges = [ViewEdge(0, 1), ViewEdge(1, 2), ViewEdge(2, 1), ViewEdge(2, 3), ViewEdge(3, 3), ViewEdge(3, 4), ViewEdge(0, 4)]
    view = ViewGraph("cyclic", nodes, edges)
    lo = layout(view, _sizes(view), "layered")
    assert set(lo.boxes) == set(range(5))
    _assert_no_overlap(lo)
    assert lo.routes[4] == []  # the self loop is not drawn


def test_cancel_stops_the_layout():
    n = 3000
    big = ViewGraph("big", [ViewNode(i, "Op") for i in range(n)], [ViewEdge(i - 1, i) for i in range(1, n)])
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(LayoutCancelled):
        layout(big, _sizes(big), "layered", cancel=cancel)


def test_falls_back_when_dot_is_missing_or_fails(monkeypatch, tmp_path):
    import core.views.layout as L

    view = from_graph(load_model(sample("small_cnn")))
    monkeypatch.setattr(L, "find_dot", lambda: None)
    lo = layout(view, _sizes(view))
    assert lo.method == "layered" and "dot not found" in lo.notes[0]
    broken = tmp_path / "dot"
    broken.write_text("#!/bin/sh\necho 'Error: syntax error' >&2\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(L, "find_dot", lambda: str(broken))
    lo = layout(view, _sizes(view))
    assert lo.method == "layered" and "syntax error" in lo.notes[0]
    _assert_no_overlap(lo)
