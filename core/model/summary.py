"""A model at a glance: the facts `inspect` prints and the GUI's model panel shows."""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .graph import Graph, Value

__all__ = ["summarize", "format_summary"]


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
