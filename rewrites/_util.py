"""Small helpers the rule modules share (messages, constants, local functions)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from core.rewrite import WB_DOMAIN, current, fail, node_label, static_shape

__all__ = ["describe_shape", "require_constant", "require_is_constant", "not_constant_reason", "scalar_near", "local_function", "producer_label", "WB_DOMAIN"]


def describe_shape(v: ir.Value | None) -> str:
    s = static_shape(v)
    if s is None:
        return "an unknown shape"
    return "[" + ", ".join("?" if d is None else str(d) for d in s) + "]"


def producer_label(v: ir.Value) -> str:
    p = v.producer()
    if p is not None:
        return f"computed by {node_label(p)}"
    if v.is_graph_input():
        return "a graph input"
    return "not a constant"


def _graph_input_behind(v: ir.Value) -> str | None:
    """Name of a graph input the value depends on (breadth-first), for "not constant" messages."""
    seen = set()
    queue = [v]
    while queue:
        cur = queue.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        if cur.is_graph_input() and cur.const_value is None:
            return cur.name
        p = cur.producer()
        if p is not None:
            queue.extend(i for i in p.inputs if i is not None)
        if len(seen) > 5000:
            break
    return None


def not_constant_reason(v: ir.Value, role: str) -> str:
    if v.is_graph_input() and v.const_value is None:
        return f"{role} '{v.name}' is a graph input, not a constant"
    src = _graph_input_behind(v)
    behind = f" (it depends on graph input '{src}')" if src else ""
    return f"{role} '{v.name}' is not a constant{behind}"


def require_constant(v: ir.Value | None, role: str) -> np.ndarray:
    """The value's numbers, or fail naming which input is not constant."""
    if v is None:
        fail(f"{role} is missing.")
    arr = current().const(v)
    if arr is None:
        fail(not_constant_reason(v, role) + ".")
    return arr


def require_is_constant(v: ir.Value | None, role: str) -> None:
    """Fail unless the value is constant (without computing it: checks stay cheap)."""
    if v is None:
        fail(f"{role} is missing.")
    if not current().is_const(v):
        fail(not_constant_reason(v, role) + ".")


def scalar_near(v: ir.Value | None, expected: float, role: str, text: str | None = None, rtol: float = 1e-3) -> None:
    """Fail unless `v` is a constant holding one number close to `expected`."""
    arr = require_constant(v, role)
    if arr.size != 1:
        fail(f"{role} '{v.name}' has {arr.size} elements; it should be the single number {text or expected}.")
    x = float(np.asarray(arr).reshape(-1)[0])
    if not np.isclose(x, expected, rtol=rtol, atol=1e-6):
        fail(f"{role} '{v.name}' is {x:.6g}, not {text or f'{expected:g}'}.")


def local_function(text_body: str, opset: int) -> ir.Function:
    """A model-local function in the workbench domain from ONNX text (the body and signature)."""
    src = f'<domain: "{WB_DOMAIN}", opset_import: ["": {opset}]>\n{text_body}'
    proto = onnx.parser.parse_function(src)
    return ir.serde.deserialize_function(proto)
