"""The abstraction levels a model is lowered through (DESIGN.md: computational graph -> tensor
programs -> target code): what each pass works at and each lowering stage shows."""
from __future__ import annotations

import enum

__all__ = ["Level"]


class Level(enum.StrEnum):
    """An abstraction level; its value is the name the GUI, the CLI and `lower --json` show."""

    GRAPH = "graph"  # Relax's high-level ops (and the ONNX graph itself)
    TENSOR_PROGRAM = "tensor program"  # TIR kernels called from Relax
    TARGET_CODE = "target code"  # LLVM IR, assembly, CUDA C

