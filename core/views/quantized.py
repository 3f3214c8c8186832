"""Quantized (QDQ) models drawn as their ops.

onnxruntime's `quantize_static` (QDQ format) writes each quantized op as a DequantizeLinear on
every activation input, the op itself in float, and a QuantizeLinear on its output; weights are
integer initializers behind DequantizeLinear nodes, which the view already folds into badges (they
are constants). A ResNet-18 so drawn has three boxes per op. `fold_quantized(view)` draws each op
with its input DequantizeLinear nodes (those read by it alone) and its output's QuantizeLinear as
one box: the op's id (selecting it selects the op, so edits and rewrites act on the model as it
is), its label and colour, "quantized uint8 → uint8" as its detail, the folded nodes' ids in
`origin` (lineage and heat add up over them) and in `data["qdq"]`. A QuantizeLinear or
DequantizeLinear next to no op (the model's input quantizer, its output's dequantizer) stays a box
of its own. The Inspector's rows for such an op are core.views.quantization_rows'.
"""
from __future__ import annotations

from collections.abc import Hashable

from .viewgraph import ViewEdge, ViewGraph, ViewNode

__all__ = ["fold_quantized", "is_quantized_view"]

_Q, _DQ = "QuantizeLinear", "DequantizeLinear"


def _op(node: ViewNode) -> str:
    return node.label.rsplit(".", 1)[-1] if node.data.get("kind") == "node" else ""


def _dtype(detail: str) -> str:
    return detail.split(" ")[-1] if detail else "?"


def is_quantized_view(view: ViewGraph) -> bool:
    return any(n.label.endswith(("QuantizeLinear", "DequantizeLinear")) and _op(n) in (_Q, _DQ) for n in view.nodes)


def fold_quantized(view: ViewGraph) -> ViewGraph:
    """`view` with each quantized op's Q/DQ nodes drawn inside its box (module docstring); the
    view itself when nothing folds (a float model: one pass over the labels, on every open)."""
    if not is_quantized_view(view):
        return view
    by_id = {n.id: n for n in view.nodes}
    ins: dict[Hashable, list[ViewEdge]] = {}
    outs: dict[Hashable, list[ViewEdge]] = {}
    for e in view.edges:
        ins.setdefault(e.dst, []).append(e)
        outs.setdefault(e.src, []).append(e)
    owner: dict[Hashable, Hashable] = {}  # folded Q/DQ id -> the op that draws it
    folded: dict[Hashable, ViewNode] = {}
    for n in view.nodes:
        op = _op(n)
        if not op or op in (_Q, _DQ):
            continue
        deq = [e for e in ins.get(n.id, ()) if _op(by_id[e.src]) == _DQ and e.src not in owner
               and all(x.dst == n.id for x in outs.get(e.src, ()))]
        readers = outs.get(n.id, ())
        q = readers[0].dst if len(readers) == 1 and _op(by_id[readers[0].dst]) == _Q else None
        if not deq and q is None:
            continue
        # what its inputs are before dequantization, a DequantizeLinear shared with another reader too
        in_types = sorted({_dtype(x.detail) for e in ins.get(n.id, ()) if _op(by_id[e.src]) == _DQ for x in ins.get(e.src, ())}) or ["float"]
        out_type = _dtype(outs[q][0].detail) if q is not None and outs.get(q) else "float"
        members = [e.src for e in deq] + ([q] if q is not None else [])
        for m in members:
            owner[m] = n.id
        data = dict(n.data)
        data["qdq"] = {"dequantize": [e.src for e in deq], "quantize": q, "inputs": in_types, "output": out_type}
        tip = f"{n.tooltip}\nquantized: {', '.join(in_types)} in, {out_type} out ({len(members)} Q/DQ nodes drawn inside; View ▸ Quantized Ops shows them)"
        folded[n.id] = ViewNode(n.id, n.label, f"quantized {'/'.join(in_types)} → {out_type}", n.category, list(n.badges), tip,
                                list(n.origin) + [o for m in members for o in by_id[m].origin], data)
    if not folded:
        return view
    nodes = [folded.get(n.id, n) for n in view.nodes if n.id not in owner]
    edges: list[ViewEdge] = []
    for e in view.edges:
        src, dst = owner.get(e.src, e.src), owner.get(e.dst, e.dst)
        if src == dst:
            continue  # inside one box
        edges.append(e if (src, dst) == (e.src, e.dst) else ViewEdge(src, dst, e.label, e.detail, dict(e.data)))
    data = dict(view.data)
    data["quantized_folded"] = len(owner)
    return ViewGraph(title=view.title, nodes=nodes, edges=edges, data=data)
