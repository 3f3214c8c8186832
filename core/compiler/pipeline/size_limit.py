"""How big a model lowering and compiling take on, and the refusal beyond it.

Both grow linearly with the model: kernel lineage was quadratic twice (one kernel's lineage, and
realigning `main` after FuseOps: core.compiler.pipeline.lineage), LegalizeOps built a PrimFunc per call
(now once per distinct call: core.compiler.passes.legalize_cache), lowering propagated every stage's
lineage whether shown or not (now on first use); docs/performance.md: "Model size limit" has
the figures.

So both stop at once beyond 60,000 nodes (about 40 s of one core, under a minute on a quiet
machine), with one sentence saying so, instead of running for minutes; MLCWB_MAX_NODES sets one
limit for both (0: none). Node count is a proxy: heavier ops (convolutions) cost more per node.
"""
from __future__ import annotations

import logging
import os

from ...errors import WorkbenchError

__all__ = ["ModelTooBigError", "DEFAULT_MAX_NODES", "max_nodes", "check_size"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_NODES = {"lowering": 60_000, "compiling": 60_000}


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
