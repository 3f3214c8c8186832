"""Schedules: how each tensor program (TIR PrimFunc) is tiled, vectorized, parallelized.

`schedule_pass(target)` is the one entry point the pass pipeline (core.pipeline) uses for its
"scheduled TIR" stage, and therefore what both lowering and compile run.

GPU: dlight's GPU rules (every kernel must be bound to threads to run at all).
CPU: for now the module is left as LegalizeOps wrote it (TVM's default CPU codegen); fast
default CPU schedules are the subject of the speed issue and replace this branch.
"""
from __future__ import annotations

__all__ = ["schedule_pass"]


def schedule_pass(target):
    """A module pass that schedules every PrimFunc of a Relax+TIR module for `target`."""
    import tvm
    from tvm.s_tir import dlight as dl

    if "gpu" in target.keys:
        return dl.ApplyDefaultSchedule(
            dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()
        )
    return tvm.transform.Sequential([], name="DefaultCPUSchedule")
