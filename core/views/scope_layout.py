"""Layout that stays put when a group opens or closes.

Laying a graph out again from scratch after expanding one group moves every box: the user loses
their place. `relayout` instead lays out only what changed (the expanded group's contents, or the
collapsed group's box) as a block where the old nodes were, and moves the rest just enough to make
room: everything below the block moves down by the block's extra height, boxes beside it move out
sideways by half its extra width; everything above stays where it was. Edges whose ends did not
move together get a fresh straight route. Linear in the view's size plus the layout of the block.
"""
from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping

from .layout import Box, Layout, layout, stub_route
from .viewgraph import ViewGraph

__all__ = ["relayout"]

logger = logging.getLogger(__name__)

_MARGIN = 20.0


def _straight(src: Box, dst: Box) -> list[tuple[float, float]]:
    p0 = (src.x, src.y + src.h / 2)
    p1 = (dst.x, dst.y - dst.h / 2)
    dy = (p1[1] - p0[1]) / 3
    return [p0, (p0[0], p0[1] + dy), (p1[0], p1[1] - dy), p1]


def _edge_key(e) -> tuple:
    return (e.src, e.dst, e.label)


def relayout(old_view: ViewGraph, old: Layout, new_view: ViewGraph, sizes: Mapping[Hashable, tuple[float, float]], gap: float = 0.0) -> Layout:
    """A layout of `new_view` that keeps `old`'s positions for the nodes both views share.

    The nodes only `new_view` has are laid out on their own and placed, top-centred, where the
    nodes only `old_view` had were, `gap` lower (room for the frame the canvas draws around an
    opened group); `sizes` gives the new nodes' box sizes. Falls back to a full layout when the
    views share nothing."""
    new_ids = [n.id for n in new_view.nodes]
    new_set = set(new_ids)
    removed = [i for i in old.boxes if i not in new_set]
    added = [i for i in new_ids if i not in old.boxes]
    if not removed or not added or len(removed) == len(old.boxes):
        return layout(new_view, sizes)
    x0 = min(old.boxes[i].x - old.boxes[i].w / 2 for i in removed)
    x1 = max(old.boxes[i].x + old.boxes[i].w / 2 for i in removed)
    y0 = min(old.boxes[i].y - old.boxes[i].h / 2 for i in removed)
    y1 = max(old.boxes[i].y + old.boxes[i].h / 2 for i in removed)
    added_set = set(added)
    sub = ViewGraph(
        title="block",
        nodes=[n for n in new_view.nodes if n.id in added_set],
        edges=[e for e in new_view.edges if e.src in added_set and e.dst in added_set],
    )
    block = layout(sub, {i: sizes[i] for i in added})
    cx = (x0 + x1) / 2
    ox, oy = cx - block.width / 2, y0 + gap
    dy = block.height + gap - (y1 - y0)
    dx = (block.width - (x1 - x0)) / 2
    boxes: dict[Hashable, Box] = {}
    shift: dict[Hashable, tuple[float, float]] = {}
    for i in new_ids:
        if i in added_set:
            b = block.boxes[i]
            boxes[i] = Box(b.x + ox, b.y + oy, b.w, b.h)
            continue
        b = old.boxes[i]
        top, bottom = b.y - b.h / 2, b.y + b.h / 2
        if top >= y1 - 0.5:
            s = (0.0, dy)
        elif bottom > y0 + 0.5:
            s = (-dx if b.x < cx else dx, 0.0)
        else:
            s = (0.0, 0.0)
        shift[i] = s
        boxes[i] = Box(b.x + s[0], b.y + s[1], b.w, b.h)
    # edges: keep routes whose two ends moved together, re-route the rest
    old_routes = {}
    for k, e in enumerate(old_view.edges):
        old_routes.setdefault(_edge_key(e), old.routes[k] if k < len(old.routes) else None)
    block_routes = {_edge_key(e): block.routes[k] for k, e in enumerate(sub.edges)}
    routes: list[list[tuple[float, float]]] = []
    for e in new_view.edges:
        key = _edge_key(e)
        route = None
        if e.src in added_set and e.dst in added_set:
            r = block_routes.get(key)
            if r:
                route = [(x + ox, y + oy) for x, y in r]
        elif e.src in shift and e.dst in shift and shift[e.src] == shift[e.dst]:
            r = old_routes.get(key)
            if r:
                sx, sy = shift[e.src]
                route = [(x + sx, y + sy) for x, y in r]
        if route is None and e.data.get("stub"):
            route = stub_route(boxes.get(e.dst))
        if route is None:
            route = _straight(boxes[e.src], boxes[e.dst]) if e.src in boxes and e.dst in boxes else []
        routes.append(route)
    # keep every coordinate positive (the scene starts at 0, 0)
    min_x = min(b.x - b.w / 2 for b in boxes.values())
    min_y = min(b.y - b.h / 2 for b in boxes.values())
    mx = -min_x if min_x < 0 else 0.0
    my = -min_y if min_y < 0 else 0.0
    if mx or my:
        boxes = {i: Box(b.x + mx, b.y + my, b.w, b.h) for i, b in boxes.items()}
        routes = [[(x + mx, y + my) for x, y in r] for r in routes]
    width = max(b.x + b.w / 2 for b in boxes.values()) + _MARGIN
    height = max(b.y + b.h / 2 for b in boxes.values()) + _MARGIN
    out = Layout(boxes=boxes, routes=routes, width=width, height=height, method=f"incremental+{block.method}")
    out.notes = list(block.notes)
    out.seconds = block.seconds
    return out
