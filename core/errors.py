"""Errors a user can cause. Each carries one sentence that names the file, node or op."""
from __future__ import annotations

__all__ = ["WorkbenchError", "ModelLoadError", "InvalidModelError", "EditError", "UnsupportedOpError", "Cancelled"]


class WorkbenchError(Exception):
    """A problem with the user's input, explained in one sentence (exit status 2 on the CLI)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ModelLoadError(WorkbenchError):
    """The file could not be read as an ONNX model."""


class InvalidModelError(WorkbenchError):
    """The file parses but the model in it is not valid (dangling input, cycle, unknown domain...)."""


class EditError(WorkbenchError):
    """An edit that cannot be applied to the graph."""


class UnsupportedOpError(WorkbenchError):
    """An operator a compiler stage cannot handle."""

    def __init__(self, message: str, op_type: str = "", node_name: str = ""):
        super().__init__(message)
        self.op_type = op_type
        self.node_name = node_name


class Cancelled(WorkbenchError):
    """The user cancelled a long job (layout, lowering, compile, tuning, bench).

    One class for every job, so a caller (a GUI worker, the CLI) tells "stopped on request" from
    "failed" with one `except`. `stages` holds what a step-by-step job finished before it stopped
    (lowering's stages), so the user keeps what was computed.
    """

    def __init__(self, message: str = "cancelled.", stages: list | None = None):
        super().__init__(message)
        self.stages = list(stages or [])
