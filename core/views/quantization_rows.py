"""The Inspector's rows for a quantized op: its quantized inputs' and output's type, scale and zero point.

A module of its own (no import of the view): core.views.viewgraph's `node_facts` adds these rows,
and core.views.quantized, which draws a QDQ model's ops as one box, builds on viewgraph.
"""
from __future__ import annotations

__all__ = ["quantization_rows"]

_Q, _DQ = "QuantizeLinear", "DequantizeLinear"


def quantization_rows(graph, node_id: int) -> list[tuple[str, str, str]]:
    """(section, key, value) rows for an op whose inputs come from DequantizeLinear nodes or whose
    output goes to a QuantizeLinear: tensor, integer type, scale and zero point of each."""
    import numpy as np

    n = graph.node(node_id)
    rows: list[tuple[str, str, str]] = []

    def describe(node, role: str) -> None:
        vals = node.input_values
        scale = vals[1].numpy() if len(vals) > 1 and vals[1] is not None else None
        zp = vals[2].numpy() if len(vals) > 2 and vals[2] is not None else None
        tensor = vals[0] if node.op_type == _DQ else node.output_values[0]
        kind = str(zp.dtype) if zp is not None else str(tensor.dtype)
        axis = node.attributes.get("axis", 1)
        if scale is None:
            text = f"{tensor.name}: {kind}"
        elif np.size(scale) == 1:
            z = f", zero point {np.asarray(zp).reshape(-1)[0]}" if zp is not None else ""
            text = f"{tensor.name}: {kind}, scale {float(np.asarray(scale).reshape(-1)[0]):.4g}{z}"
        else:
            text = f"{tensor.name}: {kind}, {np.size(scale)} scales along axis {axis} ({float(np.min(scale)):.3g}–{float(np.max(scale)):.3g})"
        rows.append(("Quantization", role, text))

    for i, v in enumerate(n.input_values):
        p = v.producer if v is not None else None
        if p is not None and p.op_type == _DQ:
            describe(p, f"input {i}")
    for v in n.output_values:
        readers = [c for c in v.consumers if c.op_type == _Q]
        if readers:
            describe(readers[0], "output")
    return rows
