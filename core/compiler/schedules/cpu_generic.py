"""The catch-all CPU rule: every kernel without a dedicated rule (pooling, depthwise convs, means,
softmax, layer-norm arithmetic, concatenation, reshapes, transposes).

Without it these kernels run single-threaded and scalar; with it, elementwise producers are
inlined into their consumers, spatial loops are spread over the cores, and the innermost loop is
vectorized to the host's width (see cpu_common.schedule_injective / schedule_reduction).
"""
from __future__ import annotations

from .cpu_common import schedule_remaining_blocks, vector_lanes

__all__ = ["Generic"]


class Generic:
    """Parallelize + vectorize whatever is there; always applies."""

    name = "cpu.Generic"

    def apply(self, func, target):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        schedule_remaining_blocks(sch, vector_lanes(target))
        return sch
