"""Attribute values as a person types them: parsed from text, checked against the attribute's
type, and shown back (`parse_attribute_text`, `coerce_attribute`, `format_attribute_value`), plus
shapes typed as text (`parse_shape_text`). Shared by the edits, the inspector and the CLI.
"""
from __future__ import annotations

import ast
import logging
import re
from typing import Any

import numpy as np
import onnx_ir as ir

from ..errors import EditError
from .edit_support import _IDENTIFIER
from .graph import Dim
from .op_schema import _EDITABLE_TYPES

__all__ = ["coerce_attribute", "parse_attribute_text", "format_attribute_value", "parse_shape_text"]

logger = logging.getLogger(__name__)


def _as_int(name: str, x: Any, where: str) -> int:
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return int(x)
    raise EditError(f"Attribute '{name}' of {where} takes integers; {x!r} is not one.")


def _as_float(name: str, x: Any, where: str) -> float:
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        v = float(x)
        if np.isfinite(v) or not np.isnan(v):
            return v
    raise EditError(f"Attribute '{name}' of {where} takes numbers; {x!r} is not one.")


def _as_list(name: str, x: Any, where: str) -> list:
    if isinstance(x, np.ndarray):
        return x.reshape(-1).tolist()
    if isinstance(x, (list, tuple)):
        return list(x)
    raise EditError(f"Attribute '{name}' of {where} takes a list; {x!r} is not one.")


def coerce_attribute(name: str, attr_type: ir.AttributeType, value: Any, where: str = "the node") -> ir.Attr:
    """An `ir.Attr` of `attr_type` from a plain Python value, or EditError saying why it does not fit."""
    T = ir.AttributeType
    if attr_type not in _EDITABLE_TYPES:
        raise EditError(f"Attribute '{name}' of {where} is a {attr_type.name.lower()} and cannot be edited here.")
    if attr_type == T.INT:
        return ir.AttrInt64(name, _as_int(name, value, where))
    if attr_type == T.FLOAT:
        return ir.AttrFloat32(name, _as_float(name, value, where))
    if attr_type == T.STRING:
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if not isinstance(value, str):
            raise EditError(f"Attribute '{name}' of {where} takes text; {value!r} is not text.")
        return ir.AttrString(name, value)
    if attr_type == T.INTS:
        return ir.AttrInt64s(name, [_as_int(name, x, where) for x in _as_list(name, value, where)])
    if attr_type == T.FLOATS:
        return ir.AttrFloat32s(name, [_as_float(name, x, where) for x in _as_list(name, value, where)])
    if attr_type == T.STRINGS:
        items = _as_list(name, value, where)
        if not all(isinstance(x, str) for x in items):
            raise EditError(f"Attribute '{name}' of {where} takes a list of texts.")
        return ir.AttrStrings(name, items)
    # TENSOR
    if isinstance(value, ir.TensorProtocol):
        return ir.AttrTensor(name, value)
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        raise EditError(f"Attribute '{name}' of {where} takes a numeric tensor; {value!r} is not one.")
    return ir.AttrTensor(name, ir.Tensor(np.asarray(arr, order="C")))


def _infer_type(value: Any) -> ir.AttributeType:
    T = ir.AttributeType
    if isinstance(value, (bool, int, np.integer)):
        return T.INT
    if isinstance(value, (float, np.floating)):
        return T.FLOAT
    if isinstance(value, str):
        return T.STRING
    if isinstance(value, np.ndarray):
        return T.TENSOR
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(x, (bool, int, np.integer)) for x in value):
            return T.INTS
        if all(isinstance(x, (int, float, np.integer, np.floating)) for x in value):
            return T.FLOATS
        if all(isinstance(x, str) for x in value):
            return T.STRINGS
    raise EditError(f"Cannot tell the attribute type of {value!r}; give a number, text or a list of them.")


def parse_attribute_text(text: str, attr_type: ir.AttributeType, name: str = "value", like: Any = None) -> Any:
    """Read what a user typed into an attribute field as a value of `attr_type`.

    Lists may be written "1, 2" or "[1, 2]"; tensors as a (nested) list literal, cast to the
    dtype of `like` (the current value) when there is one. Raises EditError with one sentence.
    """
    T = ir.AttributeType
    s = text.strip()
    try:
        if attr_type == T.STRING:
            return text
        if attr_type == T.INT:
            return int(s, 0) if not re.fullmatch(r"[+-]?\d+\.0*", s) else int(float(s))
        if attr_type == T.FLOAT:
            return float(s)
        if attr_type in (T.INTS, T.FLOATS, T.STRINGS):
            inner = s[1:-1] if s.startswith("[") and s.endswith("]") else s
            parts = [p.strip() for p in inner.split(",")] if inner.strip() else []
            if attr_type == T.INTS:
                return [int(p) for p in parts]
            if attr_type == T.FLOATS:
                return [float(p) for p in parts]
            return [p.strip("'\"") for p in parts]
        if attr_type == T.TENSOR:
            lit = ast.literal_eval(s)
            dtype = like.dtype if isinstance(like, np.ndarray) else None
            return np.asarray(lit, dtype=dtype)
    except (ValueError, SyntaxError, TypeError) as e:
        kind = attr_type.name.lower()
        raise EditError(f"'{text}' is not a valid {kind} for attribute '{name}' ({e.__class__.__name__}).") from None
    raise EditError(f"Attribute '{name}' is a {attr_type.name.lower()} and cannot be edited as text.")


def format_attribute_value(value: Any) -> str:
    """The text an attribute field shows; `parse_attribute_text` reads it back."""
    if isinstance(value, np.ndarray):
        return repr(value.tolist())
    if isinstance(value, (list, tuple)):
        return ", ".join(format_attribute_value(x) if not isinstance(x, str) else x for x in value)
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e-4 or value == 0 else repr(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def parse_shape_text(text: str) -> list[Dim]:
    """'batch, 3, 224, 224' or '[N, 3, 224, 224]' -> ['batch', 3, 224, 224]; '?' is an unknown dim."""
    s = text.strip()
    if s.startswith("[") and s.endswith("]") or s.startswith("(") and s.endswith(")"):
        s = s[1:-1]
    dims: list[Dim] = []
    for part in (p.strip() for p in s.split(",")) if s.strip() else []:
        if part in ("?", ""):
            dims.append(None)
        elif re.fullmatch(r"\d+", part):
            dims.append(int(part))
        elif _IDENTIFIER.match(part):
            dims.append(part)
        else:
            raise EditError(f"'{part}' is not a dimension: write a size (224), a name (batch) or '?'.")
    return dims
