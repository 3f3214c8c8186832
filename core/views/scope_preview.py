"""A big model's view before its onnx_ir model exists: what it opens with, from the protobuf.

Opening a 10,000-node model used to build its onnx_ir model, infer its shapes and make the view
of every node before anything was drawn, although it opens showing ~26 collapsed groups.
`open_view(proto, types)` makes the model's full view from the checked protobuf and its
inferred types (core.views.proto_view: the view `from_graph` gives the loaded model), its scope
tree (with parameter counts from the inferred shapes) and the groups it opens with, as
app.scopes would for the loaded model. The workbench draws that while the onnx_ir model is
built, then adopts the same view, tree and layout as the loaded model's: nothing is made twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ..model.shapes import InferredTypes
from .proto_view import proto_view
from .quantized import fold_quantized
from .scopes import ScopeTree, scope_tree, scoped_view
from .viewgraph import ViewGraph

__all__ = ["PREVIEW_MIN_NODES", "OpenView", "open_view"]

# smaller models open about as fast as their view could be drawn early: the usual path
PREVIEW_MIN_NODES = 2_000


@dataclass
class OpenView:
    """`full`: every node (Q/DQ folded when `fold`), `tree`: its groups, `expanded`: the groups
    it opens with expanded, `view`: what is drawn (`full` when there are no groups)."""

    full: ViewGraph
    tree: ScopeTree
    expanded: set[str] = field(default_factory=set)
    view: ViewGraph | None = None
    fold: bool = True

    @property
    def collapsed(self) -> bool:
        """Something opens collapsed (a few boxes for many nodes: worth drawing early)."""
        return bool(self.tree.root.children) and len(self.expanded) < len(self.tree.by_path) - 1


def open_view(proto: onnx.ModelProto, types: InferredTypes, title: str, base_dir: str | Path | None = None,
              fold: bool = True, min_nodes: int = PREVIEW_MIN_NODES) -> OpenView | None:
    """The view `proto` opens with (app.scopes' rules), or None for a model under `min_nodes`
    nodes (its view is made from the loaded Graph as usual)."""
    if len(proto.graph.node) < min_nodes:
        return None
    made = proto_view(proto, types, title, base_dir)
    full = fold_quantized(made.view) if fold else made.view
    tree = scope_tree(full, metadata=made.metadata)
    tree.cache["param_sizes"] = dict(made.sizes)
    if not tree.root.children:
        return OpenView(full, tree, set(), full, fold)
    expanded = tree.default_expanded(len(full.nodes))
    return OpenView(full, tree, expanded, scoped_view(full, tree, expanded), fold)
