"""MLC Workbench engine: graph model, I/O, edits, rewrites, verification, layout, lowering, compile.

No Qt here: everything the GUI does is callable from a script or notebook through this package.
Heavy submodules (TVM lowering, compile) are imported on use, so `import core` stays fast. Importing
sets no environment variable and builds or loads nothing: core.compiler.runtime.prepare() readies a
process to run compiled code (the entry points call it, and so do compile_model, lower and benchmark).
"""
from __future__ import annotations

from .errors import EditError, InvalidModelError, ModelLoadError, UnsupportedOpError, WorkbenchError

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
    "compile_model",
    "load_artifact",
    "Artifact",
    "benchmark",
]

# compile/bench are exported lazily: importing them pulls in nothing heavy, but keep `import core` lean
# Graph & co. import onnx_ir (~0.5 s: it imports sympy): only when used, so that commands which
# never build a Graph (`inspect` reads the protobuf) and `core.errors` stay quick to import
_LAZY = {"Graph": "model.graph", "Node": "model.graph", "Value": "model.graph", "load_model": "model.onnx_io",
         "save_model": "model.onnx_io", "compile_model": "compiler.compile", "load_artifact": "compiler.compile", "Artifact": "compiler.compile", "benchmark": "compiler.measure.bench"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'core' has no attribute '{name}'")
