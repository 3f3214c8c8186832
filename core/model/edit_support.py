"""What every edit needs: names in messages, finding nodes and tensors by what the user typed,
fresh unique names, known shapes, and keeping the node list in topological order."""
from __future__ import annotations

import logging
import re

import onnx
import onnx_ir as ir

from ..errors import EditError
from .graph import NODE_ID as _ID
from .graph import Dim, Graph, Node

__all__ = ["node_text"]

logger = logging.getLogger(__name__)


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]*$")


def node_text(n: ir.Node | Node) -> str:
    """How messages and menus name a node: "Conv 'conv1'" (or "Conv #12" when it has no name)."""
    irn = n.ir if isinstance(n, Node) else n
    if irn.name:
        return f"{irn.op_type} '{irn.name}'"
    return f"{irn.op_type} #{irn.meta.get(_ID, '?')}"


def _find_node(graph: Graph, node_id: int) -> ir.Node:
    if not graph.has_node(node_id):
        raise EditError(f"The model has no node with id {node_id} (was it deleted?).")
    return graph.node(node_id).ir


def _find_value(graph: Graph, name: str, what: str = "tensor") -> ir.Value:
    if not name or not graph.has_value(name):
        raise EditError(f"The model has no {what} named '{name}'.")
    return graph.value(name).ir


def _taken_value_names(g: ir.Graph) -> set[str]:
    """Every tensor name the serialized graph mentions, dangling references included."""
    names = {v.name for v in g.inputs if v.name}
    names.update(g.initializers.keys())
    names.update(v.name for v in g.outputs if v.name)
    for n in g:
        names.update(v.name for v in n.outputs if v.name)
        names.update(v.name for v in n.inputs if v is not None and v.name)
    return names


def _unique(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def _known_shape(graph: Graph, v: ir.Value) -> tuple[str, tuple[Dim, ...] | None]:
    w = graph.value(v.name) if v.name and graph.has_value(v.name) else None
    if w is None:
        return "?", None
    return w.dtype, w.shape


def _inferred_type(graph: Graph, v: ir.Value) -> tuple[ir.TypeProtocol | None, ir.Shape | None]:
    """(type, shape) ONNX shape inference gives `v` in the graph as it is now (None, None if unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(graph.to_proto(), check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - an untyped output is flagged by validation
        return None, None
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.name != v.name or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
            continue
        tt = vi.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = ir.Shape([d.dim_value if d.HasField("dim_value") else ir.SymbolicDim(d.dim_param or None) for d in tt.shape.dim])
        return ir.TensorType(ir.DataType(tt.elem_type)), shape
    return None, None


def _would_cycle(graph: Graph, producer: ir.Node | None, consumer: ir.Node) -> bool:
    """True when feeding a value made by `producer` into `consumer` closes a cycle."""
    if producer is None or producer.graph is not graph.model.graph:
        return False
    if producer is consumer:
        return True
    return producer.meta[_ID] in graph.descendants(consumer.meta[_ID])


def _in_topological_order(g: ir.Graph) -> bool:
    seen: set[int] = set()
    for n in g:
        for v in n.inputs:
            if v is None:
                continue
            p = v.producer()
            if p is not None and p.graph is g and id(p) not in seen:
                return False
        seen.add(id(n))
    return True


def _restore_order(g: ir.Graph, order: list[ir.Node]) -> None:
    """Put the nodes back in `order` (same objects, so names and meta are untouched)."""
    if list(g) == order:
        return
    g.remove(list(g))
    g.extend(order)


def _sort_if_needed(g: ir.Graph) -> list[ir.Node] | None:
    """Restore topological order after a rewiring; returns the previous order when it changed."""
    if _in_topological_order(g):
        return None
    before = list(g)
    g.sort()
    return before


def _insert_at(g: ir.Graph, node: ir.Node, prev: ir.Node | None) -> None:
    """Insert `node` right after `prev` (None: at the front)."""
    if prev is not None:
        g.insert_after(prev, node)
    elif len(g):
        g.insert_before(g[0], node)
    else:
        g.append(node)
