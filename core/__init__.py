"""MLC Workbench engine: graph model, I/O, edits, rewrites, verification, layout, lowering, compile.

No Qt here: everything the GUI does is callable from a script or notebook through this package.
Heavy submodules (TVM lowering, compile) are imported on use, so `import core` stays fast.
"""
from __future__ import annotations

from .errors import EditError, InvalidModelError, ModelLoadError, UnsupportedOpError, WorkbenchError
from .graph import Graph, Node, Value
from .onnx_io import load_model, save_model

__all__ = [
    "Graph",
    "Node",
    "Value",
    "load_model",
    "save_model",
    "WorkbenchError",
    "ModelLoadError",
    "InvalidModelError",
    "EditError",
    "UnsupportedOpError",
]
