"""The workbench's ONNX converters by op type: what the import (core.compiler.frontend.onnx_import) uses
ahead of TVM's own, and where fixes (core.compiler.frontend.converters) register themselves.

A module of its own so the fixes and the importer both import it and neither imports the other
back (tests/test_architecture.py refuses import cycles).
"""
from __future__ import annotations

import logging

__all__ = ["register_converter", "unregister_converter", "converters"]

logger = logging.getLogger(__name__)

_CONVERTERS: dict[str, type] = {}


def register_converter(op_type: str, converter_class: type) -> None:
    """Use `converter_class` (frontend protocol: `get_converter(opset)`) for every `op_type` node."""
    if not hasattr(converter_class, "get_converter"):
        raise TypeError(f"converter for {op_type} must have get_converter(opset) like tvm's OnnxOpConverter")
    _CONVERTERS[op_type] = converter_class


def unregister_converter(op_type: str) -> None:
    """Remove a registered converter (the frontend's own, if any, applies again)."""
    _CONVERTERS.pop(op_type, None)


def converters() -> dict[str, type]:
    """The registry itself (op type -> converter class); the importer reads it at every import."""
    return _CONVERTERS
