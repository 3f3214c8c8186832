"""Schedules: how each tensor program (TIR PrimFunc) is tiled, vectorized, parallelized.

`schedule_pass(target)` is the one entry point the pass pipeline (core.compiler.pipeline.pass_list) uses for its
"scheduled TIR" stage, and therefore what both lowering and compile run.

GPU: dlight's GPU rules (every kernel must be bound to threads to run at all).

CPU: the workbench's own rules, tried in order on every PrimFunc FuseTIR produced; the first that
matches schedules the whole function (its main reduction plus the fused elementwise tail):

* `cpu_depthwise.DepthwiseConv2dNCHW` - depthwise conv2d: row vectors, or channel blocks;
* `cpu_depthwise_nchwc.DepthwiseConv2dNCHWc` - depthwise conv2d in channel-blocked layout
                            (core.compiler.passes.layout.nchwc): register tiles of channel vectors;
* `cpu_winograd.Conv2dWinogradNCHWc` - 3x3 conv2d by Winograd (core.compiler.passes.layout.winograd): transforms, batched GEMM;
* `cpu_conv_nchwc.Conv2dNCHWc` - conv2d in channel-blocked layout (core.compiler.passes.layout.nchwc): register tiles;
* `cpu_conv.Conv2dNCHW`   - conv2d / grouped conv2d: packed weights, register tiles, FMA vectors;
* `cpu_matmul.Matmul`     - matmul / dense (batch 1 GEMV and small GEMM), packed weights;
* `cpu_depthwise.Pool2dNCHW` - max / average pooling windows, channel blocks;
* `cpu_depthwise_nchwc.GlobalPoolNCHWc` - global average / max pools in NCHW{b}c: vector accumulators;
* `cpu_pool_nchwc.PoolNCHWc` - max / average pooling windows in NCHW{b}c: register tiles of columns;
* `cpu_rows.RowReduction` - softmax, layer norm, means over the last axis: one parallel loop over
                            rows, vector-wide partial reductions, vectorized output;
* `cpu_lrn.LRN`           - local response normalization (core.compiler.passes.lrn): a row's squares,
                            then vectors of channels summing their window;
* `cpu_copy.DataMovement` - reshape / transpose copies (channel shuffle, attention heads and
                            keys): indices simplified, planes copied by vectors, transposes tiled;
* `cpu_generic.Generic`   - everything else: pooling, reductions, softmax, elementwise, layout
                            copies: inline, parallelize over cores, vectorize to the host's width.

float32 exp / erf / tanh (softmax, GELU, sigmoid) are lowered to vectorizable arithmetic for
LLVM targets (`cpu_math`), not to one libm call per vector lane.

A rule that does not match returns None; one that raises is logged and the next is tried; a
function no rule handles stays as LegalizeOps wrote it. The build never fails over a schedule.
Weight repacking is emitted as layout-rewrite preprocessing blocks, split out of the kernels by
relax's SplitLayoutRewritePreproc and run once at compile time by FoldConstant.
Kernels already scheduled (by a MetaSchedule database, see core.compiler.tuning.tune) are left alone.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["KernelTrace", "cpu_rules", "default_schedule", "gpu_rules", "note_trace", "recording_traces", "schedule_cpu_func",
           "schedule_gpu_func", "schedule_pass"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelTrace:
    """How one kernel got its schedule: `source` in words ("schedule rule Matmul", "tuning database:
    search 0.012 ms") and TVM's schedule trace (a tvm.s_tir.Trace; None where none was kept)."""

    source: str
    trace: Any = None


_book = threading.local()


@contextlib.contextmanager
def recording_traces():
    """Within, on this thread: every kernel a schedule rule or a tuning record schedules notes its
    trace (`note_trace`) in the dict yielded, kernel name -> KernelTrace; a later note of the same
    kernel replaces an earlier one (a model-level A/B's candidate builds come before the final)."""
    previous = getattr(_book, "traces", None)
    traces: dict[str, KernelTrace] = {}
    _book.traces = traces
    try:
        yield traces
    finally:
        _book.traces = previous


def note_trace(kernel: str | None, source: str, sch) -> None:
    """Note that `kernel` got the schedule `sch` (a tvm.s_tir.Schedule) from `source`, when a
    `recording_traces` is open on this thread (otherwise nothing: no cost outside compile)."""
    traces = getattr(_book, "traces", None)
    if traces is not None and kernel:
        traces[kernel] = KernelTrace(source, getattr(sch, "trace", None))


def cpu_rules() -> list:
    """The CPU schedule rules, most specific first."""
    from .cpu_conv import Conv2dNCHW
    from .cpu_conv_nchwc import Conv2dNCHWc
    from .cpu_copy import DataMovement
    from .cpu_depthwise import DepthwiseConv2dNCHW, Pool2dNCHW
    from .cpu_depthwise_nchwc import DepthwiseConv2dNCHWc, GlobalPoolNCHWc
    from .cpu_generic import Generic
    from .cpu_lrn import LRN
    from .cpu_matmul import Matmul
    from .cpu_pool_nchwc import PoolNCHWc
    from .cpu_rows import RowReduction
    from .cpu_winograd import Conv2dWinogradNCHWc

    return [DepthwiseConv2dNCHW(), DepthwiseConv2dNCHWc(), Conv2dWinogradNCHWc(), Conv2dNCHWc(), Conv2dNCHW(), Matmul(), Pool2dNCHW(), GlobalPoolNCHWc(), PoolNCHWc(),
            RowReduction(), LRN(), DataMovement(), Generic()]


def schedule_cpu_func(func, target, rules=None, kernel: str | None = None):
    """(scheduled PrimFunc, rule name), or (None, None) when no rule applies to `func`; the
    schedule's trace is noted under `kernel` (note_trace)."""
    for rule in rules if rules is not None else cpu_rules():
        try:
            sch = rule.apply(func, target)
        except Exception as exc:  # noqa: BLE001 - a rule bug must cost speed, never the build
            logger.warning("schedule rule %s failed (%s); trying the next rule", rule.name, exc)
            continue
        if sch is not None:
            note_trace(kernel, f"schedule rule {rule.name}", sch)
            return sch.mod["main"].with_attr("tirx.is_scheduled", True), rule.name
    return None, None


def gpu_rules() -> list:
    """dlight's GPU rules, in the order they are tried (the last, Fallback, binds anything)."""
    from tvm.s_tir import dlight as dl

    return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]


def schedule_gpu_func(func, target, rules=None):
    """(PrimFunc scheduled by the first dlight GPU rule that applies, rule name), or (None, None)."""
    for rule in rules if rules is not None else gpu_rules():
        try:
            sch = rule.apply(func, target, False)
        except Exception as exc:  # noqa: BLE001 - as in schedule_cpu_func: the next rule is tried
            logger.warning("schedule rule %s failed (%s); trying the next rule", type(rule).__name__, exc)
            continue
        if isinstance(sch, list):  # a rule may offer several; ApplyDefaultSchedule takes the first
            sch = sch[0] if sch else None
        if sch is not None:
            return sch.mod["main"].with_attr("tirx.is_scheduled", True), type(rule).__name__
    return None, None


def default_schedule(func, target):
    """(`func` as the default schedule for `target` makes it, rule name), or (None, None): what
    schedule_pass gives a kernel, for measuring it against tuned schedules."""
    if "gpu" in target.keys:
        return schedule_gpu_func(func, target)
    return schedule_cpu_func(func, target)


def _is_scheduled(func) -> bool:
    attrs = func.attrs
    return attrs is not None and "tirx.is_scheduled" in attrs and bool(attrs["tirx.is_scheduled"])


def with_root_block(func):
    """`func` with its body inside a root block, when it has none.

    Some of TVM's TOPI kernels (scatter_elements, which the importer also uses for Slice and
    Unsqueeze with computed indices) are one opaque block with no root block around it. The
    schedule rules look up "root" and pass over them, and SplitLayoutRewritePreproc, which visits
    every kernel, fails an internal check on them ("There should be a compute block if there is
    only one subtree under the root"); a root block around the body is what TVMScript's parser
    would have added and satisfies both."""
    from tvm.s_tir.stmt import SBlock, SBlockRealize

    body = func.body
    if isinstance(body, SBlockRealize) and body.block.name_hint == "root":
        return func
    if not isinstance(body, SBlockRealize):
        return func  # a loop nest without blocks: the lowering handles it as written
    root = SBlockRealize([], True, SBlock([], [], [], "root", body))
    return func.with_body(root)


def _cpu_schedule_pass(target):
    import tvm

    from ..backend.codegen import check_cancelled

    @tvm.transform.module_pass(opt_level=0, name="CPUScheduleRules")
    def _pass(mod, _ctx):
        rules = cpu_rules()
        updated = {}
        for gvar, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc):
                continue
            rooted = with_root_block(func)
            if not _is_scheduled(func):
                check_cancelled()
                scheduled, _rule = schedule_cpu_func(rooted, target, rules, kernel=gvar.name_hint)
                rooted = scheduled if scheduled is not None else rooted
            if not rooted.same_as(func):
                updated[gvar] = rooted
        for gvar, func in updated.items():
            mod[gvar] = func
        return mod

    return _pass


def schedule_pass(target):
    """A module pass that schedules every PrimFunc of a Relax+TIR module for `target`."""
    import tvm
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from ..backend.codegen import fold_constant_calls_pass

    if "gpu" in target.keys:
        return dl.ApplyDefaultSchedule(*gpu_rules())
    # float32 exp/erf/tanh as vector arithmetic instead of one libm call per lane (cpu_math)
    from ..backend.fast_math import install as install_fast_math

    install_fast_math()
    return tvm.transform.Sequential(
        [
            # which kernel arguments are weights (constants): only those may be repacked ahead of time
            relax.transform.AttachAttrLayoutFreeBuffers(),
            _cpu_schedule_pass(target),
            # weight repacking moves out of the kernels into its own calls on the constants...
            relax.transform.SplitLayoutRewritePreproc(),
            # ...which are evaluated now, so the compiled model carries prepacked weights (built
            # in parallel and cancellable; relax's FoldConstant takes what is left, if anything)
            fold_constant_calls_pass(target),
            relax.transform.FoldConstant(),
            # and the packing kernels, now unused, go
            relax.transform.DeadCodeElimination(),
        ],
        name="DefaultCPUSchedule",
    )

