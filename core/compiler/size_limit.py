"""How big a model lowering and compiling take on, and the refusal beyond it.

TVM's per-op work grows with the model and is not cheap: LegalizeOps builds a tensor expression and
a PrimFunc for every call (1-2 ms each in Python), the workbench keeps a snapshot, its listing and
its lineage after every step, and LLVM compiles the fused kernels. Measured on a chain of Relu
(2-core AMD EPYC host shared with other work, `lower` CLI): 2,000 nodes 4 s, 5,000 7 s, 10,000
~55 s wall (28 s in the steps), 20,000 ~100 s; a 60,000-node chain was still compiling after 300 s.
So beyond `DEFAULT_MAX_NODES` nodes lowering and compiling stop at once with one sentence saying
so, instead of running for minutes; MLCWB_MAX_NODES sets another limit (0: none).
"""
from __future__ import annotations

import logging
import os

from ..errors import WorkbenchError

__all__ = ["ModelTooBigError", "DEFAULT_MAX_NODES", "max_nodes", "check_size"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_NODES = 10_000


class ModelTooBigError(WorkbenchError):
    """The model has more nodes than lowering and compiling take on."""


def max_nodes() -> int:
    """The node limit: MLCWB_MAX_NODES when set (0 = no limit), else DEFAULT_MAX_NODES."""
    text = os.environ.get("MLCWB_MAX_NODES", "").strip()
    if text:
        try:
            return max(0, int(text))
        except ValueError:
            logger.warning("MLCWB_MAX_NODES=%r is not a whole number; using %d", text, DEFAULT_MAX_NODES)
    return DEFAULT_MAX_NODES


def check_size(graph, what: str) -> None:
    """Refuse `what` ('lowering', 'compiling') for a graph over the node limit."""
    limit = max_nodes()
    n = len(graph)
    if limit and n > limit:
        name = graph.path.name if getattr(graph, "path", None) is not None else (graph.name or "the model")
        raise ModelTooBigError(
            f"{name} has {n:,} nodes; {what} is limited to {limit:,} (TVM takes about a minute per 10,000 nodes "
            f"here and grows faster than that); set MLCWB_MAX_NODES={n} to try anyway."
        )
