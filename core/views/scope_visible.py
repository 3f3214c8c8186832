"""`scoped_view` for a big model with most of it in closed groups: visit only what is drawn.

Opening or closing one group of a 10,000-node model used to rebuild the drawn view from every
node and edge of the model (~25 ms of the UI thread a time, the largest part of an expand). Here
the drawn nodes come from walking the scope tree down to the closed groups, and the candidate
edges from each closed group's border-crossing edges (`Scope.crossing`, recorded by
`scope_tree`) and each drawn node's own edges; the result is the same ViewGraph, in the same
order, as the full scan in `core.views.scopes.scoped_view` (tested side by side). It takes the
tree (`core.views.scopes.ScopeTree`) and how to draw a box from that module, which calls it.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from .scope_summary import tree_index
from .viewgraph import ViewEdge, ViewGraph, ViewNode

__all__ = ["bundle_edges", "scoped_view_visible"]

logger = logging.getLogger(__name__)


def scoped_view_visible(view: ViewGraph, tree, expanded: set[str], box_node: Callable, box_id: Callable) -> ViewGraph | None:
    """`scoped_view` from the drawn part only (None when most nodes are drawn: the full scan is
    as fast then). Same nodes, edges and order as the scan over the whole view. `box_node(scope)`
    makes a closed group's box, `box_id(path)` is its id."""
    root = tree.root
    boxes: dict = {}
    shown: list = []
    stack = [root]
    while stack:
        s = stack.pop()
        if s is not root and s.path not in expanded:
            boxes[s.path] = s
            continue
        shown.extend(s.node_ids)
        stack.extend(s.children)
    if len(shown) * 2 > len(view.nodes):
        return None
    position, incident, origins = tree_index(view, tree)
    nodes_of = view.nodes
    items: list[tuple] = [(position[nid], None) for nid in shown]
    for path, s in boxes.items():
        members = origins.get(path)
        if members is None:
            order = sorted(position[m] for m in s.members())
            members = origins[path] = (order[0], [o for i in order for o in nodes_of[i].origin])
        items.append((members[0], s))
    items.sort(key=lambda it: it[0])
    nodes: list[ViewNode] = []
    for i, s in items:
        if s is None:
            nodes.append(nodes_of[i])
        else:
            box = box_node(s)
            box.origin.extend(origins[s.path][1])
            nodes.append(box)
    candidates: set[int] = set()
    for s in boxes.values():
        candidates.update(s.crossing)
    for nid in shown:
        candidates.update(incident.get(nid, ()))
    scope_of = tree.scope_of
    rep: dict = {}

    def rep_of(nid):
        r = rep.get(nid)
        if r is None:
            r = nid
            s = scope_of.get(nid)
            while s is not None and s is not root:  # the outermost closed group holding it
                if s.path not in expanded:
                    r = box_id(s.path)
                s = s.parent
            rep[nid] = r
        return r

    all_edges = view.edges
    edges = bundle_edges((all_edges[k] for k in sorted(candidates)), rep_of)
    data = dict(view.data)
    data["scopes"] = {"expanded": sorted(expanded), "boxes": len(boxes), "source": tree.source}
    return ViewGraph(title=view.title, nodes=nodes, edges=edges, data=data)


def bundle_edges(edges, rep_of) -> list[ViewEdge]:
    """`edges` with each end replaced by `rep_of(node id)` (the box drawn for it): edges inside
    one box go, edges whose ends are unchanged stay as they are, and the edges between the same
    two drawn nodes become one bundled edge listing its tensors (collapsed views, full or partial)."""
    out: list[ViewEdge] = []
    bundles: dict[tuple, ViewEdge] = {}
    for e in edges:
        s, d = rep_of(e.src), rep_of(e.dst)
        if s == d:
            continue
        if s is e.src and d is e.dst:
            out.append(e)
            continue
        b = bundles.get((s, d))
        if b is None:
            b = bundles[(s, d)] = ViewEdge(src=s, dst=d, label=e.label, detail=e.detail, data={"tensors": [], "bundled": True})
            out.append(b)
        tensors = b.data["tensors"]
        if e.label not in tensors:
            tensors.append(e.label)
            if len(tensors) > 1:
                b.label = f"{len(tensors)} tensors"
                b.detail = ", ".join(tensors[:3]) + ("…" if len(tensors) > 3 else "")
    return out
