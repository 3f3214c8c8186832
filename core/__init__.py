"""MLC Workbench engine: graph model, I/O, edits, rewrites, verification, layout, lowering, compile.

No Qt here: everything the GUI does is callable from a script or notebook through this package.
Heavy submodules (TVM lowering, compile) are imported on use, so `import core` stays fast.
"""
from __future__ import annotations

from .errors import EditError, InvalidModelError, ModelLoadError, UnsupportedOpError, WorkbenchError
from .compiler.runtime import native_pool as _native_pool
from .compiler.target import use_host_cores

use_host_cores()  # before TVM's thread pool exists (see core.compiler.target.use_host_cores)
_native_pool.install()  # before TVM is imported (see core.compiler.runtime.native_pool)

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
