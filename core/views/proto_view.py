"""A model's view straight from its checked protobuf, before the onnx_ir model exists.

Opening a big model spends much of its time building the onnx_ir model (docs/performance.md),
which nothing on screen needs: the view (core.views.viewgraph.from_graph) reads node ops,
names, attributes, tensor names and types, all in the protobuf and ONNX's shape inference. Here
`proto_view(proto, types)` makes that same view from them, so the workbench can draw a big model
(and its collapsed groups) while the onnx_ir model is built, and take this view over as the
loaded model's own (tests/core/views/test_proto_view.py holds it equal to `from_graph` of the
loaded Graph, model by model).

The rules are from_graph's, read off the protobuf: node ids are Graph's (file position + 1);
constant-only nodes fold into badges (core.model.summary.walk_constants, Graph.constant_values'
rules); a value's type is what the file declares, with what inference found for the parts it
leaves out (Graph.infer_shapes' rule).
"""
from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ..model.shapes import Dim, InferredTypes, decode_type
from ..model.summary import walk_constants
from .scopes import NAME_SCOPES_KEY
from .viewgraph import (
    ViewEdge,
    ViewGraph,
    ViewNode,
    _badge,
    _dims_text,
    _dtype_text,
    _formal_input_names,
    _formal_name,
    _key_detail,
    _op_node,
    _unconnected,
    input_node_id,
    output_node_id,
)

__all__ = ["ProtoView", "proto_view"]

_GRAPH = onnx.AttributeProto.GRAPH


@dataclass
class ProtoView:
    """`view`: what from_graph gives the loaded model; `metadata`: dynamo's name-scope text by
    node id (core.views.scopes); `sizes`: element counts of the constants drawn as badges (a
    group's parameter count), 0 where a shape is not fully known."""

    view: ViewGraph
    metadata: dict[Hashable, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


def proto_view(proto: onnx.ModelProto, types: InferredTypes, title: str, base_dir: str | Path | None = None) -> ProtoView:
    """The view of `proto` as loaded (checked; `types`: its inferred types, core.model.shapes);
    `base_dir`: where its external data lies (a scalar weight's badge shows its value)."""
    import onnx_ir as ir

    g = proto.graph
    opset_imports = {d.domain: d.version for d in proto.opset_import}
    opset = int(opset_imports.get("", opset_imports.get("ai.onnx", 0)))
    initializers = {t.name: t for t in g.initializer}
    declared: dict[str, bytes | tuple] = {}  # name -> a serialized TypeProto, or (elem_type, dims) of an initializer
    for t in g.initializer:
        declared[t.name] = (t.data_type or None, tuple(t.dims))
    for vi in (*g.value_info, *g.input, *g.output):
        if vi.type.WhichOneof("value") is not None:
            declared[vi.name] = vi.type.SerializeToString()
    decoded: dict[bytes, tuple] = {}
    dtype_memo: dict = {}
    texts: dict[str, tuple[str, str, str, str, str]] = {}
    by_type: dict[tuple, tuple[str, str, str, str, str]] = {}
    dims_of: dict[str, tuple[Dim, ...] | None] = {}

    def type_of(name: str) -> tuple:
        """(elem_type, dims) as Graph gives it: declared, gaps filled by inference."""
        d = declared.get(name)
        if isinstance(d, bytes):
            found = decoded.get(d)
            if found is None:
                found = decoded[d] = decode_type(d) or (None, None)
            d = found
        dtype, shape = d if d is not None else (None, None)
        if dtype is None or shape is None:
            inferred = types.get(name) if name else None
            if inferred is not None:
                dtype = dtype or inferred[0]
                shape = shape if shape is not None else inferred[1]
        return dtype, shape

    def text_of(name: str) -> tuple[str, str, str, str, str]:
        t = texts.get(name)
        if t is None:
            elem, shape = type_of(name)
            dims_of[name] = shape
            dtype = dtype_memo.get(elem)
            if dtype is None:
                dtype = dtype_memo[elem] = _dtype_text(ir.DataType(elem) if elem else None)
            t = by_type.get((shape, dtype))
            if t is None:
                shape_text = "?" if shape is None else "[" + ", ".join("?" if x is None else str(x) for x in shape) + "]"
                dims = _dims_text(shape)
                t = by_type[(shape, dtype)] = (dims, dtype, shape_text, f"{dims} {dtype}", f"{dtype} {shape_text}")
            texts[name] = t
        return t

    def shape_of(name: str):
        """A constant's dims (its badge needs no texts)."""
        d = declared.get(name)
        if isinstance(d, tuple) and d[0] is not None:  # an initializer
            shape = d[1]
        else:
            shape = type_of(name)[1]
        dims_of[name] = shape
        return shape

    def data_of(name: str):
        t = initializers.get(name)
        if t is None:
            return None
        from onnx import numpy_helper

        try:
            return numpy_helper.to_array(t, str(base_dir) if base_dir is not None else "")
        except Exception:  # noqa: BLE001 - external data out of reach: the badge says "scalar", not its value
            return None

    consts = set(initializers)
    walked = list(walk_constants(proto, consts))  # fills `consts` as Graph.constant_values does
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    producer_of: dict[str, Hashable] = {}
    metadata: dict[Hashable, str] = {}
    sizes: dict[str, int] = {}
    size_of: dict = {}  # dims -> element count
    badge_text: dict[tuple, str] = {}

    for v in g.input:
        if v.name in consts:
            continue
        vid = producer_of[v.name] = input_node_id(v.name)
        dims, dtype, shape_text, _, _ = text_of(v.name)
        nodes.append(ViewNode(id=vid, label=v.name, detail=f"{dims} {dtype}", category="io",
                              tooltip=f"graph input {v.name}: {dtype} {shape_text}", data={"kind": "input", "tensor": v.name}))

    formal_of: dict[tuple[str, str, int], str] = {}
    for i, (n, ins, outs, constant) in enumerate(walked):
        if constant and outs and all(outs):
            continue  # computes weights only: folded into its consumers as badges
        node_id = i + 1
        op_type, domain = n.op_type, n.domain
        badges: list[str] = []
        badge_tensors: list[str] = []
        for k, name in enumerate(ins):
            if not name:
                continue
            if name in consts:
                formal = formal_of.get((op_type, domain, k))
                if formal is None:
                    formal = formal_of[(op_type, domain, k)] = _formal_name(_formal_input_names(op_type, domain, opset), k)
                shape = dims_of[name] if name in dims_of else shape_of(name)
                if shape is not None and len(shape) == 0:
                    badges.append(_badge(formal, shape, data_of(name)))
                else:
                    key = (formal, shape)
                    text = badge_text.get(key)
                    if text is None:
                        text = badge_text[key] = f"{formal} {_dims_text(shape)}"
                    badges.append(text)
                if name not in sizes:
                    size = size_of.get(shape)
                    if size is None:
                        size = size_of[shape] = math.prod(shape) if shape is not None and all(isinstance(x, int) for x in shape) else 0
                    sizes[name] = size
                badge_tensors.append(name)
                continue
            src = producer_of.get(name)
            if src is not None:
                edges.append(ViewEdge(src, node_id, name, text_of(name)[3], {"index": k}))
        if len(outs) == 1:
            out_text = f"{outs[0]}: {text_of(outs[0])[4]}"
        else:
            out_text = ", ".join(f"{name}: {text_of(name)[4]}" for name in outs[:4])
        bodies = [a.name for a in n.attribute if a.type == _GRAPH] if len(n.attribute) else []
        out_shape = text_of(outs[0])[0] if outs else ""
        detail = _key_detail(op_type, out_shape, lambda n=n, ins=ins, outs=outs: (
            {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}, dims_of[outs[0]] if outs else None,
            lambda: data_of(ins[1]) if len(ins) > 1 and ins[1] else None))
        unconnected = _unconnected(op_type, domain, opset_imports, [bool(x) for x in ins], opset) if "" in ins else ()
        nodes.append(_op_node(node_id, op_type, domain, n.name, detail, badges, out_text, bodies, unconnected,
                              {"inputs": ins, "outputs": outs, "badge_tensors": badge_tensors}))
        for name in outs:
            if name:
                producer_of[name] = node_id
        if len(n.metadata_props):
            for entry in n.metadata_props:
                if entry.key == NAME_SCOPES_KEY and entry.value:
                    metadata[node_id] = entry.value

    for v in g.output:
        vid = output_node_id(v.name)
        dims, dtype, shape_text, dims_dtype, _ = text_of(v.name)
        nodes.append(ViewNode(id=vid, label=v.name, detail=dims_dtype, category="io",
                              tooltip=f"graph output {v.name}: {dtype} {shape_text}", data={"kind": "output", "tensor": v.name}))
        src = producer_of.get(v.name)
        if src is not None:
            edges.append(ViewEdge(src=src, dst=vid, label=v.name, detail=dims_dtype))

    view = ViewGraph(title=title, nodes=nodes, edges=edges, data={"source": "onnx", "revision": 0})
    return ProtoView(view, metadata, sizes)
