"""A big model's first picture, straight from its protobuf: the collapsed groups it opens with.

Opening a 10,000-node model builds its onnx_ir model, infers its shapes and makes a view of every
node (core.views.viewgraph.from_graph) before anything is drawn, although it opens showing ~26
collapsed groups. `preview_view(proto)` makes just those boxes from the parsed (and checked)
protobuf: node names give the groups (the same core.views.scopes rules as the full view), the
tensor names the edges between them. No shapes or parameter counts yet: a box says its name, its
size and its ops. The workbench draws it while the model is still loading and replaces it with
the real view (same groups, with shapes and parameters) when the load is done.

Node ids are what `core.model.graph.Graph` gives the loaded model (file position + 1), and
constant-only nodes fold away as they do there (core.model.summary.walk_constants), so the
groups hold the same nodes as the full view's.
"""
from __future__ import annotations

from collections.abc import Hashable

import onnx

from ..model.summary import walk_constants
from .scopes import NAME_SCOPES_KEY, scope_tree, scoped_view
from .viewgraph import ViewEdge, ViewGraph, ViewNode, input_node_id, op_category, output_node_id

__all__ = ["PREVIEW_MIN_NODES", "preview_view"]

# smaller models open about as fast as their picture could be drawn: no preview (it would only flash)
PREVIEW_MIN_NODES = 2_000


def preview_view(proto: onnx.ModelProto, title: str, min_nodes: int = PREVIEW_MIN_NODES) -> ViewGraph | None:
    """The collapsed view the model will open with, without shapes or parameters; None when the
    model is small or opens with nothing collapsed (then there is nothing to show early)."""
    g = proto.graph
    if len(g.node) < min_nodes:
        return None
    view, metadata = _names_view(proto, title)
    tree = scope_tree(view, metadata=metadata)
    if not tree.root.children:
        return None
    expanded = tree.default_expanded(len(view.nodes))
    if len(expanded) == len(tree.by_path) - 1:  # everything open: the full view is what shows
        return None
    out = scoped_view(view, tree, expanded)
    out.data["preview"] = True
    return out


def _names_view(proto: onnx.ModelProto, title: str) -> tuple[ViewGraph, dict]:
    """Nodes (ids, op types, names) and edges of the main graph, the constant-only nodes left
    out as from_graph leaves them; and dynamo's name-scope metadata by node id."""
    g = proto.graph
    consts = {t.name for t in g.initializer}
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    producer_of: dict[str, Hashable] = {}
    metadata: dict = {}
    for v in g.input:
        if v.name not in consts:
            vid = producer_of[v.name] = input_node_id(v.name)
            nodes.append(ViewNode(vid, v.name, category="io", data={"kind": "input", "tensor": v.name}))
    for i, (n, ins, outs, constant) in enumerate(walk_constants(proto, consts)):
        if constant and outs and all(outs):
            continue
        node_id = i + 1  # core.model.graph.Graph's ids: file position + 1
        for k, x in enumerate(ins):
            src = producer_of.get(x)
            if src is not None:
                edges.append(ViewEdge(src, node_id, x, "", {"index": k}))
        op, domain = n.op_type, n.domain
        nodes.append(ViewNode(node_id, op if not domain or domain == "ai.onnx" else f"{domain}.{op}", category=op_category(op),
                              origin=[node_id], data={"kind": "node", "name": n.name}))
        for o in outs:
            if o:
                producer_of[o] = node_id
        if len(n.metadata_props):
            for entry in n.metadata_props:
                if entry.key == NAME_SCOPES_KEY:
                    metadata[node_id] = entry.value
    for v in g.output:
        vid = output_node_id(v.name)
        nodes.append(ViewNode(vid, v.name, category="io", data={"kind": "output", "tensor": v.name}))
        src = producer_of.get(v.name)
        if src is not None:
            edges.append(ViewEdge(src, vid, v.name))
    return ViewGraph(title=title, nodes=nodes, edges=edges, data={"source": "onnx-preview"}), metadata
