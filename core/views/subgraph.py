"""Bodies of control-flow nodes (If, Loop, Scan, ...): each graph attribute as a graph of its own.

The canvas draws the model's top-level graph, where an If or a Loop is one box; its branches and
body are graphs stored in the node's attributes. `body_graph` copies one of them out into a
standalone `Graph` (through protobuf: the model is never touched), so everything that draws or
inspects a Graph works on it, nested bodies included (call `body_graph` on the result again).

A body may read values of the scopes around it without declaring them (ONNX allows it): those
become inputs of the copy, typed as in the enclosing graph, and `body_view` marks their boxes
"from outside", so the drawing shows where each body's data comes from.
"""
from __future__ import annotations

import logging

import onnx
import onnx_ir as ir

from core.errors import WorkbenchError
from core.model.graph import Graph

from .viewgraph import ViewGraph, from_graph, input_node_id

__all__ = ["subgraph_attrs", "body_graph", "body_view", "OUTER_NOTE"]

logger = logging.getLogger(__name__)

OUTER_NOTE = "from outside"  # detail suffix of an input the body reads from an enclosing graph


def subgraph_attrs(graph: Graph, node_id) -> list[str]:
    """Names of the node's graph attributes (If: then_branch, else_branch; Loop / Scan: body),
    in reading order (files often store them sorted, else before then)."""
    if not isinstance(node_id, int) or not graph.has_node(node_id):
        return []
    names = [k for k, a in graph.node(node_id).ir.attributes.items() if a.type == ir.AttributeType.GRAPH]
    first = {"then_branch": 0, "else_branch": 1, "body": 2}
    return sorted(names, key=lambda k: (first.get(k, 3), names.index(k)))


def _outer_reads(body: ir.Graph) -> list[str]:
    """Names the body's own nodes read that nothing in the body defines (inputs, initializers,
    node outputs): values of an enclosing scope."""
    defined = {v.name for v in body.inputs} | set(body.initializers)
    for n in body:
        defined.update(o.name for o in n.outputs)
    out: list[str] = []
    for n in body:
        for v in n.inputs:
            if v is not None and v.name and v.name not in defined and v.name not in out:
                out.append(v.name)
    return out


def body_graph(graph: Graph, node_id, attr: str) -> tuple[Graph, list[str]]:
    """(the body `attr` of node `node_id` as a standalone Graph, the names it reads from outside)."""
    if attr not in subgraph_attrs(graph, node_id):
        raise WorkbenchError(f"node {node_id} has no graph attribute '{attr}'.")
    node = graph.node(node_id)
    body = node.ir.attributes[attr].value
    outer = _outer_reads(body)
    proto = ir.to_proto(body)
    for name in outer:
        info = onnx.ValueInfoProto(name=name)
        if graph.has_value(name):
            try:
                info = ir.serde.serialize_value(graph.value(name).ir)
            except Exception:  # noqa: BLE001 - an untyped value: an untyped input is still drawn
                logger.debug("no type for outer value %s", name)
        proto.input.append(info)
    model = onnx.helper.make_model(proto, opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in graph.opset_imports.items()])
    model.ir_version = graph.ir_version
    return Graph(ir.from_proto(model)), outer


def body_view(graph: Graph, node_id, attr: str) -> tuple[ViewGraph, Graph]:
    """The canvas view of a body, and the standalone Graph it was drawn from (for nested bodies)."""
    body, outer = body_graph(graph, node_id, attr)
    view = from_graph(body)
    node = graph.node(node_id)
    view.title = f"{node.label} ({node.op_type}) ▸ {attr}"
    view.data["source"] = "body"
    marks = {input_node_id(name) for name in outer}
    for n in view.nodes:
        if n.id in marks:
            n.detail = f"{n.detail} · {OUTER_NOTE}" if n.detail else OUTER_NOTE
    return view, body
