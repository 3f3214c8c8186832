"""Arithmetic work of a model, counted from its ONNX graph: the figure behind "fraction of peak".

Only the multiply-accumulate ops are counted (Conv, ConvTranspose, Gemm, MatMul; 2 FLOPs per
multiply-add): they are where the arithmetic is, and where a GPU's peak FLOP/s can be approached at
all. Elementwise ops, pooling and normalisation are memory-bound and left out, so the count is a
lower bound on the work the compiled code does and "fraction of peak" an honest, slightly
pessimistic figure. Shapes come from ONNX shape inference with the symbolic input dims bound.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["FlopCount", "count_flops", "COUNTED_OPS"]

logger = logging.getLogger(__name__)

COUNTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass
class FlopCount:
    """FLOPs of the counted ops, by op type; nodes whose shapes inference could not tell."""

    total: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)  # node names (or op types) left uncounted


def _bound_proto(model: Any, dims: dict[str, int] | None):
    """A copy of the model (ModelProto, Graph or path) with the inputs' symbolic dims bound."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    elif hasattr(model, "to_proto"):
        proto = model.to_proto()
    else:
        proto = onnx.load(str(model))
    for vi in proto.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = int((dims or {}).get(d.dim_param, 1))
    return proto


def _shapes(proto) -> dict[str, tuple[int, ...]]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as e:  # noqa: BLE001 - onnx raises its own C++ errors; count what is known
        logger.info("shape inference failed (%s); counting from declared shapes only", e)
        inferred = proto
    g = inferred.graph
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    for t in g.initializer:
        shapes[t.name] = tuple(int(d) for d in t.dims)
    for n in g.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = tuple(int(d) for d in a.t.dims)
    return shapes


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _node_flops(node, shapes: dict[str, tuple[int, ...]]) -> int | None:
    """FLOPs of one counted node, or None when a shape it needs is unknown."""
    ins = [shapes.get(i) if i else None for i in node.input]
    out = shapes.get(node.output[0]) if node.output else None
    op = node.op_type
    if op == "Conv":  # each output element: Cin/group * kernel multiply-adds (W: Cout, Cin/group, k...)
        if out is None or len(ins) < 2 or ins[1] is None:
            return None
        return 2 * _prod(out) * _prod(ins[1][1:])
    if op == "ConvTranspose":  # each input element scatters into Cout/group * kernel outputs (W: Cin, Cout/group, k...)
        if len(ins) < 2 or ins[0] is None or ins[1] is None:
            return None
        return 2 * _prod(ins[0]) * _prod(ins[1][1:])
    if op == "MatMul":
        if out is None or len(ins) < 2 or ins[0] is None:
            return None
        return 2 * _prod(out) * (ins[0][-1] if len(ins[0]) else 1)
    if op == "Gemm":
        if out is None or len(ins) < 2 or ins[0] is None:
            return None
        trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
        k = ins[0][0] if trans_a else ins[0][-1]
        return 2 * _prod(out) * k
    return 0


def count_flops(model: Any, dims: dict[str, int] | None = None) -> FlopCount:
    """FLOPs of one run of `model` (an onnx.ModelProto, a core Graph or a path), symbolic input
    dims bound to `dims` (default 1). Nodes inside subgraphs (If/Loop bodies) are not counted."""
    proto = _bound_proto(model, dims)
    shapes = _shapes(proto)
    count = FlopCount()
    for node in proto.graph.node:
        if node.op_type not in COUNTED_OPS or node.domain not in ("", "ai.onnx"):
            continue
        flops = _node_flops(node, shapes)
        if flops is None:
            count.unknown.append(node.name or node.op_type)
            continue
        count.total += flops
        count.by_op[node.op_type] = count.by_op.get(node.op_type, 0) + flops
    return count
