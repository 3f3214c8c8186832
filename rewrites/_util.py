"""Small helpers the rule modules share (messages, constants, local functions)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from core.rewrite import WB_DOMAIN, current, fail, node_label, static_shape

__all__ = [
    "describe_shape", "require_constant", "require_is_constant", "not_constant_reason", "scalar_near", "local_function", "producer_label",
    "dequantized_integer", "quantized_type_name", "require_not_dequantized", "WB_DOMAIN",
]

# the element types a DequantizeLinear reads as quantized integers: its boundary (docs/quantization.md)
_QUANTIZED_TYPES = frozenset(
    getattr(ir.DataType, n) for n in ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4", "INT2", "UINT2") if hasattr(ir.DataType, n)
)


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


def dequantized_integer(node: ir.Node) -> bool:
    """Whether `node` is a DequantizeLinear of an integer tensor: a Q/DQ boundary no rule folds away."""
    if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return False
    return _quantized_dtype(node.inputs[0]) is not None


def _quantized_dtype(v: ir.Value) -> ir.DataType | None:
    """The integer type of `v` a DequantizeLinear reads (from its type, its constant, or the
    QuantizeLinear that writes it where shapes were not inferred); None for anything else."""
    dt = getattr(v.type, "dtype", None) if v.type is not None else None
    if dt is None and v.const_value is not None:
        dt = v.const_value.dtype
    p = v.producer()
    if dt is None and p is not None and p.op_type == "QuantizeLinear":
        zp = p.inputs[2] if len(p.inputs) > 2 else None
        dt = _quantized_dtype(zp) if zp is not None else ir.DataType.UINT8
    return dt if dt in _QUANTIZED_TYPES else None


def quantized_type_name(v: ir.Value) -> str:
    """'int8', 'uint8', ... for a tensor a DequantizeLinear reads (dequantized_integer)."""
    dt = _quantized_dtype(v)
    return dt.name.lower() if dt is not None else "integer"


def require_not_dequantized(v: ir.Value | None, role: str) -> None:
    """Fail when `v` is computed from a quantized integer tensor by a DequantizeLinear (at most a
    few value-preserving steps up): a rule that stored its numbers would turn the int8 model's
    weights back into floats."""
    seen, queue = set(), [v]
    while queue and len(seen) < 64:
        cur = queue.pop(0)
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        p = cur.producer()
        if p is None:
            continue
        if dequantized_integer(p):
            src = p.inputs[0]
            fail(f"{role} '{v.name}' is dequantized from the {quantized_type_name(src)} tensor '{src.name}' by {node_label(p)}; "
                 "a rule never folds a quantization boundary away (it would store the weights as floats).")
        queue.extend(p.inputs)
