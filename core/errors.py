"""Errors a user can cause. Each carries one sentence that names the file, node or op."""
from __future__ import annotations

import re

__all__ = ["WorkbenchError", "ModelLoadError", "InvalidModelError", "EditError", "UnsupportedOpError", "Cancelled", "brief_reason"]


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


def brief_reason(error: BaseException | str, limit: int = 160) -> str:
    """A third-party error (TVM's, onnxruntime's) cut to a clause that fits inside one sentence:
    its last non-empty line (TVM puts the reason last, after IR dumps and tracebacks), without
    "Check failed: (...) is false:" and bracketed prefixes, inner full stops turned into
    semicolons, at most `limit` characters, no final full stop."""
    text = str(error).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", "File ", "Traceback"))]
    line = lines[-1] if lines else type(error).__name__ if isinstance(error, BaseException) else "unknown reason"
    line = re.sub(r"^Check failed: \(.*?\) is false:\s*", "", line)
    line = re.sub(r"^\[[^\]]*\]\s*(:\s*\d+\s*:\s*\w+\s*:\s*)?", "", line)
    line = re.sub(r"\.\s+(?=\S)", "; ", line).strip().rstrip(".;: ")
    if len(line) > limit:
        line = line[: limit - 1].rstrip() + "…"
    return line or (type(error).__name__ if isinstance(error, BaseException) else "unknown reason")
