"""What a collapsed group's box says, worked out when a box first needs it.

A 10,000-node scoped model has ~4,000 groups and opens showing ~26 of them. Filling every
group's op histogram, parameter count and border-crossing tensors up front took ~90 ms of the
~145 ms of `scope_tree` (AMD EPYC Zen 4; docs/performance.md); here one group's facts come
from its own members and their edges, on first use (`Scope.ops`, `.inputs`, ... in
core.views.scopes), so opening pays for the drawn boxes only and opening a group for its
children only.
"""
from __future__ import annotations

import logging
from collections import Counter

from .viewgraph import ViewGraph

__all__ = ["ScopeFacts", "scope_facts", "tree_index"]

logger = logging.getLogger(__name__)


class ScopeFacts:
    """One group's summary: op histogram (ops in order of first appearance), tensors entering
    and leaving it (tensor -> "dims dtype", in edge order), parameter elements, and the indices
    of the view edges with one end inside it."""

    __slots__ = ("ops", "inputs", "outputs", "params", "crossing")

    def __init__(self, ops: Counter, inputs: dict, outputs: dict, params: int, crossing: list):
        self.ops, self.inputs, self.outputs, self.params, self.crossing = ops, inputs, outputs, params, crossing


def tree_index(view: ViewGraph, tree) -> tuple[dict, dict, dict]:
    """Per tree, made once: node positions, the edges at each node (by index), and a memo of
    each closed group's (first position, ONNX ids of its members in view order). Stored under
    one key in one assignment: the model's tree is read from worker threads too."""
    index = tree.cache.get("visible")
    if index is None:
        position = {n.id: i for i, n in enumerate(view.nodes)}
        incident: dict = {}
        for k, e in enumerate(view.edges):
            incident.setdefault(e.src, []).append(k)
            incident.setdefault(e.dst, []).append(k)
        index = tree.cache["visible"] = (position, incident, {})
    return index


def _param_sizes(tree) -> dict:
    sizes = tree.cache.get("param_sizes")
    if sizes is None:
        sizes = tree.cache["param_sizes"] = {}
    return sizes


def scope_facts(scope, tree) -> ScopeFacts:
    """The facts of `scope`, a group of `tree` (a ScopeTree made from `tree.view`)."""
    view = tree.view
    position, incident, _ = tree_index(view, tree)
    nodes = view.nodes
    order = sorted(position[m] for m in scope.members())
    inside = {nodes[i].id for i in order}
    counts: dict = {}  # insertion order: first appearance (Counter.most_common keeps it for ties)
    tensors: dict = {}  # an ordered set
    for i in order:
        n = nodes[i]
        counts[n.label] = counts.get(n.label, 0) + 1
        badge_tensors = n.data.get("badge_tensors")
        if badge_tensors:
            tensors.update(dict.fromkeys(badge_tensors))
    params = 0
    graph = tree.graph
    sizes = _param_sizes(tree)  # filled up front for a tree made before its Graph (core.views.scope_preview)
    if graph is not None or sizes:
        for t in tensors:
            s = sizes.get(t)
            if s is None:
                try:
                    s = graph.value(t).size or 0 if graph is not None else 0
                except KeyError:
                    s = 0
                sizes[t] = s
            params += s
    crossing: set[int] = set()
    edges = view.edges
    for i in order:
        for k in incident.get(nodes[i].id, ()):
            e = edges[k]
            if (e.src in inside) != (e.dst in inside):
                crossing.add(k)
    ks = sorted(crossing)
    inputs: dict = {}
    outputs: dict = {}
    for k in ks:
        e = edges[k]
        (outputs if e.src in inside else inputs).setdefault(e.label or str(e.src), e.detail)
    return ScopeFacts(Counter(counts), inputs, outputs, params, ks)
