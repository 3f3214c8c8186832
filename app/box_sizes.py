"""How big each box on the canvas is, from its text alone.

Layout sizes every box before any item exists, often on a worker thread, so this module touches
no Qt object: it reads widths from a `TextMeasure` (app.style) built on the UI thread. Node boxes
(app.graph_items) and the boxes of collapsed name scopes (app.scope_items) are both sized here,
so either module imports it and neither needs the other for a size.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from core.views.viewgraph import ViewNode

if TYPE_CHECKING:
    from app.style import TextMeasure

__all__ = ["BADGE_MAX_WIDTH", "badge_text", "node_size", "scope_box_size"]

# a node box: padding, the category stripe on its left, its narrowest width, the badge line
PAD_X = 9.0
PAD_Y = 4.0
STRIPE = 4.0
MIN_WIDTH = 84.0
BADGE_MAX_WIDTH = 250.0
BADGE_SEP = "  "
BODY_MARK = 9.0  # size of the mark on a box with bodies to open (If, Loop, Scan)

# a collapsed scope's box: a stack of cards, STACK apart, between its narrowest and widest
SCOPE_PAD_X = 10.0
SCOPE_PAD_Y = 6.0
SCOPE_STACK = 4.0
SCOPE_MAX_WIDTH = 340.0
SCOPE_MIN_WIDTH = 150.0


def badge_text(node: ViewNode) -> str:
    return BADGE_SEP.join(node.badges)


def node_size(node: ViewNode, measure: TextMeasure) -> tuple[float, float]:
    """Box size of a view node for its label, detail and badges (thread-safe: no Qt objects).
    Memoised per text: big graphs repeat the same few labels thousands of times."""
    if node.category == "group":  # a collapsed name scope's box (app.scope_items)
        return scope_box_size(node, measure)
    key = (node.label, node.detail, tuple(node.badges), bool(node.data.get("subgraphs")))
    size = measure.sizes.get(key)
    if size is None:
        size = measure.sizes[key] = _node_size(node, measure)
    return size


def _node_size(node: ViewNode, measure: TextMeasure) -> tuple[float, float]:
    w = measure.width(node.label, 0) + (BODY_MARK + 6 if node.data.get("subgraphs") else 0)
    h = PAD_Y * 2 + measure.heights[0]
    if node.detail:
        w = max(w, measure.width(node.detail, 1))
        h += measure.heights[1]
    if node.badges:
        w = max(w, min(BADGE_MAX_WIDTH, measure.width(badge_text(node), 2)))
        h += measure.heights[2] + 1
    return max(MIN_WIDTH, math.ceil(w + 2 * PAD_X + STRIPE)), math.ceil(h)


def scope_box_size(node: ViewNode, measure: TextMeasure) -> tuple[float, float]:
    """Box size of a group: name, detail and one line per badge (histogram, shapes)."""
    key = ("group", node.label, node.detail, tuple(node.badges))
    size = measure.sizes.get(key)
    if size is None:
        w = max(measure.width(node.label, 0) + 18, measure.width(node.detail, 1))
        for b in node.badges:
            w = max(w, measure.width(b, 2))
        h = 2 * SCOPE_PAD_Y + measure.heights[0] + measure.heights[1] + len(node.badges) * (measure.heights[2] + 1)
        w = max(SCOPE_MIN_WIDTH, min(SCOPE_MAX_WIDTH, math.ceil(w + 2 * SCOPE_PAD_X)))
        size = measure.sizes[key] = (w + SCOPE_STACK, math.ceil(h) + SCOPE_STACK)
    return size
