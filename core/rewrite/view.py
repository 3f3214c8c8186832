"""The canvas view of a rewrite preview: the rewritten graph with the removed nodes put back as
ghosts, so one picture shows what goes (faded, red dashed) and what comes (green dashed).

    view, removed, outlined = preview_view(pv)
    canvas.show_view(view); canvas.set_ghosts(removed, outlined)
"""
from __future__ import annotations

from ..views.viewgraph import ViewGraph, from_graph
from .engine import Preview

__all__ = ["preview_view"]


def preview_view(pv: Preview, before_graph=None) -> tuple[ViewGraph, set, set]:
    """(merged view, ids to draw as removed, ids to outline as added or changed).

    `before_graph`: a copy of the original to read instead of `pv.base` (a worker thread should
    not read the live document graph, whose caches the UI thread may be resetting)."""
    before = from_graph(before_graph if before_graph is not None else pv.base)
    after = from_graph(pv.graph)
    ids = {n.id for n in after.nodes}
    ghosts = [n for n in before.nodes if n.id in pv.removed and n.id not in ids]
    ids.update(n.id for n in ghosts)
    ghost_ids = {n.id for n in ghosts}
    seen = {(e.src, e.dst, e.label) for e in after.edges}
    edges = list(after.edges)
    for e in before.edges:
        if (e.src in ghost_ids or e.dst in ghost_ids) and e.src in ids and e.dst in ids and (e.src, e.dst, e.label) not in seen:
            edges.append(e)
    n_app = len(pv.applied)
    title = f"Preview: {pv.rule.id} ({n_app} match{'es' if n_app != 1 else ''})"
    view = ViewGraph(title, list(after.nodes) + ghosts, edges, {"preview": pv.rule.id})
    return view, ghost_ids, (set(pv.added) | set(pv.changed)) & ids
