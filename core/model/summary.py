"""A model at a glance: the facts `inspect` prints and the GUI's model panel shows.

Two ways in, one result: `summarize(graph)` for a loaded Graph (the GUI, after edits), and
`summarize_file(path)` for a file, which reads only the protobuf (after the same checks
`load_model` makes, core.model.onnx_checks) and never builds the onnx_ir model: a 60,000-node
chain summarizes in well under a second that way, against ~3 s to load it as a Graph. The tests
hold the two to the same dict on every sample and light model.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .meta import CONSTANT_SOURCE_OPS, NONDETERMINISTIC_OPS, unconnected_required_inputs

if TYPE_CHECKING:
    import onnx

    from .graph import Graph, Value

__all__ = ["format_summary", "proto_constants", "summarize", "summarize_file", "summarize_proto", "walk_constants"]


def _itemsize(dtype: str) -> int:
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return 0


def _value_entry(v: Value) -> dict[str, Any]:
    shape = v.shape
    return {"name": v.name, "shape": list(shape) if shape is not None else None, "dtype": v.dtype}


def summarize(graph: Graph) -> dict[str, Any]:
    """Node count, op histogram (most frequent first), inputs/outputs, parameters, opsets, producer.

    Parameters are the constant tensors that feed computation: initializers, and weights that
    constant nodes make (e.g. ConstantOfShape); their count is in elements.
    """
    # The Inspector shows this for every opened model: the IR is read directly, and each dtype's
    # item size is looked up once (numpy's name lookup per weight cost ~40% of the time).
    ops = Counter(n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}.{n.op_type}" for n in graph.model.graph)
    count = 0
    nbytes = 0
    unknown = 0
    weights = graph.weights()
    itemsize_of: dict = {}
    for w in weights:
        size = w.size
        if size is None:
            unknown += 1
            continue
        count += size
        d = w.ir.dtype
        itemsize = itemsize_of.get(d) if d is not None else None
        if itemsize is None:
            itemsize = _itemsize(w.dtype)
            if d is not None:
                itemsize_of[d] = itemsize
        nbytes += size * itemsize
    return {
        "file": str(graph.path) if graph.path else None,
        "nodes": len(graph),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": [_value_entry(v) for v in graph.inputs],
        "outputs": [_value_entry(v) for v in graph.outputs],
        "params": {"count": count, "bytes": nbytes, "tensors": len(weights), "unknown_shape": unknown},
        "opset": graph.opset,
        "opset_imports": graph.opset_imports,
        "ir_version": graph.ir_version,
        "producer": graph.producer,
        "graph_name": graph.name,
        "functions": [f"{d}.{n}" if d else n for d, n in graph.functions],
        "metadata": graph.metadata,
        "shape_problems": list(graph.shape_problems),
    }


def summarize_file(path: str | os.PathLike) -> dict[str, Any]:
    """`summarize(load_model(path))`, from the protobuf alone (module docstring); raises what
    load_model raises for a bad file."""
    from .onnx_checks import read_model_proto

    proto, p = read_model_proto(path)
    return summarize_proto(proto, p)


def _np_dtype_name(elem_type: int | None) -> str:
    """core.model.graph.dtype_name for an ONNX elem_type (without importing onnx_ir)."""
    import onnx

    if elem_type is None:
        return "?"
    if elem_type == 0:
        return "undefined"  # declared so (ir.DataType.UNDEFINED), as a loaded Graph shows it
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # noqa: BLE001 - exotic types have no numpy name
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type in onnx.TensorProto.DataType.values() else "?"


def summarize_proto(proto: onnx.ModelProto, path: str | os.PathLike | None = None) -> dict[str, Any]:
    """`summarize`'s dict for a model as parsed protobuf (checked already: see summarize_file).

    A value's type is what the file declares (graph inputs, outputs, value_info), else its
    initializer's, else ONNX shape inference's, as a loaded Graph has it; constants and weights
    follow Graph.constant_values / Graph.weights."""
    from .shapes import infer_types

    g = proto.graph
    nodes = g.node
    declared: dict[str, Any] = {}
    for vi in (*g.value_info, *g.output, *g.input):  # an input's declaration wins, as in onnx_ir
        if vi.type.HasField("tensor_type"):
            declared[vi.name] = vi.type.tensor_type
    inits = {t.name: t for t in g.initializer}
    types, problems = infer_types(proto)

    def type_of(name: str) -> tuple[str, tuple | None]:
        elem, shape = None, None
        tt = declared.get(name)
        if tt is not None:
            elem = tt.elem_type  # 0 (UNDEFINED) stays: a loaded Graph keeps it too
            if tt.HasField("shape"):
                shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None)
                              for d in tt.shape.dim)
        t = inits.get(name)
        if t is not None and tt is None:
            elem, shape = t.data_type or None, tuple(t.dims)
        if elem is None or shape is None:
            found = types.get(name)
            if found is not None:
                elem = elem if elem is not None else found[0]
                shape = shape if shape is not None else found[1]
        return _np_dtype_name(elem), shape

    def entry(name: str) -> dict[str, Any]:
        dtype, shape = type_of(name)
        return {"name": name, "shape": list(shape) if shape is not None else None, "dtype": dtype}

    ops = Counter(n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}.{n.op_type}" for n in nodes)
    consts = proto_constants(proto)
    opsets = {d.domain: d.version for d in proto.opset_import}
    weights: list[str] = []
    if consts:
        readers: dict[str, list] = {}
        for n in nodes:
            for i in n.input:
                if i in consts:
                    readers.setdefault(i, []).append(n)
        outputs = {v.name for v in g.output}
        order = dict.fromkeys([v.name for v in g.input] + list(inits) + [o for n in nodes for o in n.output if o])
        for name in order:
            if name in consts and (name in outputs or any(not all(o in consts for o in n.output) for n in readers.get(name, ()))):
                weights.append(name)
    count = nbytes = unknown = 0
    for name in weights:
        dtype, shape = type_of(name)
        if shape is None or any(not isinstance(d, int) for d in shape):
            unknown += 1
            continue
        size = math.prod(shape)
        count += size
        nbytes += size * _itemsize(dtype)
    return {
        "file": str(path) if path else None,
        "nodes": len(nodes),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": [entry(v.name) for v in g.input if v.name not in inits],
        "outputs": [entry(v.name) for v in g.output],
        "params": {"count": count, "bytes": nbytes, "tensors": len(weights), "unknown_shape": unknown},
        "opset": int(opsets.get("", opsets.get("ai.onnx", 0))),
        "opset_imports": opsets,
        "ir_version": int(proto.ir_version),
        "producer": f"{proto.producer_name or ''} {proto.producer_version or ''}".strip(),
        "graph_name": g.name or "",
        "functions": [f"{f.domain}.{f.name}" if f.domain else f.name for f in proto.functions],
        "metadata": {m.key: m.value for m in proto.metadata_props},
        "shape_problems": problems,
    }


def proto_constants(proto: onnx.ModelProto) -> set[str]:
    """Names of the main graph's constant tensors, from the protobuf alone, as
    Graph.constant_values finds them in a loaded model (core.model.meta has the shared rules)."""
    consts = {t.name for t in proto.graph.initializer}
    for _ in walk_constants(proto, consts):
        pass
    return consts


def walk_constants(proto: onnx.ModelProto, consts: set[str]) -> Iterator[tuple[onnx.NodeProto, list[str], list[str], bool]]:
    """Each main-graph node in order with its inputs, its outputs and whether it computes
    constants only, adding what it makes to `consts` (the initializers' names to start with)."""
    opsets = {d.domain: d.version for d in proto.opset_import}
    for n in proto.graph.node:
        ins, outs = list(n.input), list(n.output)
        op = n.op_type
        if op not in CONSTANT_SOURCE_OPS:
            present = [i for i in ins if i]
            if not present or not all(i in consts for i in present):
                yield n, ins, outs, False
                continue
            if unconnected_required_inputs(op, n.domain, opsets, [bool(i) for i in ins]):
                yield n, ins, outs, False
                continue
        if op in NONDETERMINISTIC_OPS or n.domain not in ("", "ai.onnx") or (len(n.attribute) and any(a.type in (5, 10) for a in n.attribute)):
            yield n, ins, outs, False  # random, or not ONNX's own, or holds a graph (GRAPH, GRAPHS)
            continue
        consts.update(o for o in outs if o)
        yield n, ins, outs, True


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def format_summary(s: dict[str, Any]) -> str:
    """Plain-text rendering of `summarize`'s result, for the terminal."""

    def shape_text(e):
        return "?" if e["shape"] is None else "[" + ", ".join("?" if d is None else str(d) for d in e["shape"]) + "]"

    lines = []
    if s.get("file"):
        lines.append(f"model     {s['file']}")
    lines.append(f"producer  {s['producer'] or '(none)'}   ir_version {s['ir_version']}   opset {s['opset']}")
    others = {d: v for d, v in s["opset_imports"].items() if d not in ("", "ai.onnx")}
    if others:
        lines.append("imports   " + ", ".join(f"{d} v{v}" for d, v in others.items()))
    lines.append(f"nodes     {s['nodes']}")
    p = s["params"]
    lines.append(f"params    {p['count']:,} in {p['tensors']} tensors ({_human_bytes(p['bytes'])})")
    lines.append("inputs")
    for e in s["inputs"]:
        lines.append(f"  {e['name']:<32} {e['dtype']:<9} {shape_text(e)}")
    lines.append("outputs")
    for e in s["outputs"]:
        lines.append(f"  {e['name']:<32} {e['dtype']:<9} {shape_text(e)}")
    lines.append("ops")
    for op, n in s["ops"].items():
        lines.append(f"  {op:<32} {n}")
    if s["functions"]:
        lines.append("functions " + ", ".join(s["functions"]))
    for k, v in s["metadata"].items():
        lines.append(f"meta      {k} = {v}")
    for prob in s["shape_problems"]:
        lines.append(f"warning   {prob}")
    return "\n".join(lines)
