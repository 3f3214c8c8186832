"""How big a model lowering and compiling take on, and the refusal beyond it.

Both grow linearly with the model now (kernel lineage was quadratic: see core.compiler.lineage),
but TVM's per-op work is not cheap: LegalizeOps builds a tensor expression and a PrimFunc for every
call (0.4 ms each), and lowering also keeps every stage's listing and lineage. Measured on a chain
of Relu (2-core AMD EPYC host shared with other work; CPU seconds of the CLI process):

    nodes     compile    lower
    2,000       4 s        -
    10,000     11 s      (28 s in the steps)
    60,000     53 s       84 s

So lowering stops at once beyond 40,000 nodes and compiling beyond 60,000, with one sentence
saying so, instead of running for minutes; MLCWB_MAX_NODES sets one limit for both (0: none).
Node count is a proxy: heavier ops (convolutions) cost more per node than Relu.
"""
from __future__ import annotations

import logging
import os

from ..errors import WorkbenchError

__all__ = ["ModelTooBigError", "DEFAULT_MAX_NODES", "max_nodes", "check_size"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_NODES = {"lowering": 40_000, "compiling": 60_000}


class ModelTooBigError(WorkbenchError):
    """The model has more nodes than lowering or compiling take on."""


def max_nodes(what: str = "compiling") -> int:
    """The node limit for `what`: MLCWB_MAX_NODES when set (0 = no limit), else its default."""
    default = DEFAULT_MAX_NODES.get(what, DEFAULT_MAX_NODES["compiling"])
    text = os.environ.get("MLCWB_MAX_NODES", "").strip()
    if text:
        try:
            return max(0, int(text))
        except ValueError:
            logger.warning("MLCWB_MAX_NODES=%r is not a whole number; using %d", text, default)
    return default


def check_size(graph, what: str) -> None:
    """Refuse `what` ('lowering', 'compiling') for a graph over its node limit."""
    limit = max_nodes(what)
    n = len(graph)
    if limit and n > limit:
        name = graph.path.name if getattr(graph, "path", None) is not None else (graph.name or "the model")
        raise ModelTooBigError(
            f"{name} has {n:,} nodes; {what} is limited to {limit:,} (about a minute of CPU at that size here); "
            f"set MLCWB_MAX_NODES={n} to try anyway."
        )
