"""Measure a compiled model: latency, memory, where the time goes, and onnxruntime beside it.

* Latency: median / p90 / min over `runs` timed calls after `warmup` untimed ones. With
  `vs_ort`, onnxruntime (CPU provider, same thread count as the TVM target) runs on the same
  inputs in a process of its own, the two timed in alternating blocks with a pause between
  (never one while the other's threads spin), each block started with untimed runs so both are
  timed in steady state (core.compiler.measure.alternation, the one timing loop); `ratio` is
  ours / onnxruntime (medians; below 1 means faster than onnxruntime).
* Memory: `params_bytes` (the constants the executable carries), `planned_bytes` vs
  `unplanned_bytes` (activation memory with and without TVM's static memory planning: the
  scheduled module is lowered through CallTIRRewrite + StaticPlanBlockMemory with its symbolic
  dims bound to the benchmark's values, and every allocation is summed as TVM's
  `relax.analysis.estimate_memory_usage` does, in bytes), `peak_rss_bytes` (this process's peak
  resident set after the runs; it includes Python, TVM and onnxruntime themselves).
* Kernels: the Relax VM's instrument hook (`vm.set_instrument`) times every kernel call; each
  kernel is mapped back to the ONNX nodes it came from through the compile's lineage.
"""
from __future__ import annotations

import logging
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .alternation import alternate, flatten
from ..runtime.artifact import Artifact
from ..runtime.manifest import LatencyStats, Measured, MemoryEstimate, MemoryUse
from ..check.reference import compare_outputs, random_feeds
from ...errors import Cancelled, WorkbenchError
from ..levels import Level
from ..target import TargetKind

__all__ = ["BenchResult", "KernelTime", "KernelGroup", "ThreadsUsed", "LatencyStats", "MemoryUse", "MemoryEstimate", "benchmark",
           "estimate_memory", "latency_stats", "profile_kernels", "node_heat", "kernel_heat", "spread_warning", "threads_text",
           "measured_for_manifest"]

logger = logging.getLogger(__name__)


@dataclass
class KernelTime:
    """One kernel's time per model run (ms), its share of all kernel time, its calls per run and
    the ONNX nodes it came from (the compile's lineage)."""

    name: str
    ms: float
    share: float = 0.0
    calls: int = 1
    onnx_nodes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "ms": self.ms, "share": self.share, "calls": self.calls, "onnx_nodes": list(self.onnx_nodes)}


@dataclass
class KernelGroup:
    """Kernels made from the same ONNX nodes, as the heat map outlines them (`kernel_heat`)."""

    name: str
    ms: float
    onnx_nodes: list[str]


@dataclass
class ThreadsUsed:
    """What ran the CPU runs: threads of the last timed run, whose pool launched the parallel
    kernels ("workbench" or "tvm"), and onnxruntime's threads when it ran beside."""

    ours: int
    pool: str
    ort: int | None = None

    def to_json(self) -> dict:
        return {"ours": self.ours, "pool": self.pool, **({"ort": self.ort} if self.ort is not None else {})}


@dataclass
class BenchResult:
    """Everything `bench --json` prints (see `to_json`)."""

    target: str
    dims: dict[str, int]
    latency_ms: LatencyStats
    memory: MemoryUse = field(default_factory=MemoryUse)
    kernels: list[KernelTime] = field(default_factory=list)
    ort_latency_ms: LatencyStats | None = None
    ratio: float | None = None
    max_abs_err_vs_ort: float | None = None
    outputs_match_ort: bool | None = None
    threads: ThreadsUsed | None = None  # CPU only
    path: str | None = None  # with shape buckets: which code ran ("bucket batch=2,sequence=96" / "general kernels")

    def to_json(self) -> dict:
        """The `bench --json` object; the onnxruntime figures only when it ran."""
        d = {"target": self.target, "dims": dict(self.dims), "latency_ms": self.latency_ms.to_json(), "memory": self.memory.to_json(),
             "kernels": [k.to_json() for k in self.kernels]}
        if self.ort_latency_ms is not None:
            d.update(ort_latency_ms=self.ort_latency_ms.to_json(), ratio=self.ratio, max_abs_err_vs_ort=self.max_abs_err_vs_ort,
                     outputs_match_ort=self.outputs_match_ort)
        d["threads"] = self.threads.to_json() if self.threads is not None else None
        if self.path is not None:
            d["path"] = self.path
        return d


def latency_stats(times_ms: list[float]) -> LatencyStats:
    """median / p10 / p90 / min / max / runs of a list of times in ms."""
    if not times_ms:
        return LatencyStats()
    a = np.asarray(times_ms, dtype=np.float64)
    return LatencyStats(
        median=round(float(np.median(a)), 4),
        p10=round(float(np.percentile(a, 10)), 4),
        p90=round(float(np.percentile(a, 90)), 4),
        min=round(float(a.min()), 4),
        max=round(float(a.max()), 4),
        runs=int(a.size),
    )


SPREAD_WIDE = 0.5  # p10-p90 wider than half the median ...
MEDIAN_OVER_MIN = 2.0  # ... or a median more than twice the best run: the figure is not reliable


def spread_warning(stats: LatencyStats) -> str:
    """One sentence when the runs disagree too much for their median to mean much ("" when not):
    the p10-p90 range wider than SPREAD_WIDE x the median, or the median above MEDIAN_OVER_MIN x
    the best run (other processes took the cores, or too few runs)."""
    med, lo, hi, best = stats.median, stats.p10, stats.p90, stats.min
    if not med or stats.runs < 2:
        return ""
    reasons = []
    if lo is not None and hi is not None and hi - lo > SPREAD_WIDE * med:
        reasons.append(f"p10-p90 {lo:.3g}-{hi:.3g} ms around a median of {med:.3g} ms")
    if best and med > MEDIAN_OVER_MIN * best:
        reasons.append(f"the best run took {best:.3g} ms, {med / best:.1f}x less than the median")
    if not reasons:
        return ""
    return ("Wide spread (" + "; ".join(reasons) + "): the machine was busy or there were too few runs; "
            "measure again with more runs on an idle machine before trusting the figure.")


# ---------------------------------------------------------------------------------------------
# memory


def _dtype_bytes(dtype_str: str) -> int:
    import tvm

    dt = tvm.DataType(dtype_str)
    return ((dt.bits + 7) // 8) * dt.lanes


def _allocation_bytes(mod) -> tuple[int, int, int]:
    """(unplanned, planned, dynamic allocation count) over `main`, as estimate_memory_usage counts:
    unplanned = every tensor allocation; planned = storage allocations + tensors left unplanned."""
    import tvm
    from tvm import relax

    alloc_builtin = tvm.ir.Op.get("relax.builtin.alloc_tensor")
    alloc_tensor = tvm.ir.Op.get("relax.memory.alloc_tensor")
    alloc_storage = tvm.ir.Op.get("relax.memory.alloc_storage")
    totals = {"unplanned": 0, "planned": 0, "dynamic": 0}

    def size_of(shape, dtype: str) -> int | None:
        if not isinstance(shape, relax.ShapeExpr):
            return None
        n = 1
        for d in shape.values:
            if not isinstance(d, tvm.tirx.IntImm):
                return None
            n *= int(d.value)
        return n * _dtype_bytes(dtype)

    def visit(e):
        if not isinstance(e, relax.Call):
            return
        if e.op.same_as(alloc_builtin):
            n = size_of(e.args[0], str(e.args[1].value))
            if n is None:
                totals["dynamic"] += 1
            else:
                totals["unplanned"] += n
                totals["planned"] += n
        elif e.op.same_as(alloc_tensor):
            n = size_of(e.args[2], str(e.args[3].value))
            if n is None:
                totals["dynamic"] += 1
            else:
                totals["unplanned"] += n
        elif e.op.same_as(alloc_storage):
            size = e.args[0]
            if isinstance(size, relax.ShapeExpr) and isinstance(size.values[0], tvm.tirx.IntImm):
                totals["planned"] += int(size.values[0].value)
            else:
                totals["dynamic"] += 1

    relax.analysis.post_order_visit(mod["main"], visit)
    return totals["unplanned"], totals["planned"], totals["dynamic"]


def _params_bytes(mod) -> int:
    import tvm
    from tvm import relax

    seen: set[int] = set()
    total = 0

    def visit(e):
        nonlocal total
        if isinstance(e, tvm.ir.expr.Constant) and e.__chandle__() not in seen:
            seen.add(e.__chandle__())
            try:
                arr = e.value
                total += int(np.prod(arr.shape, dtype=np.int64)) * np.dtype(arr.dtype).itemsize
            except Exception:  # noqa: BLE001 - exotic dtypes: count nothing rather than guess
                pass

    relax.analysis.post_order_visit(mod["main"], visit)
    return total


def estimate_memory(art: Artifact, dims: dict[str, int] | None = None) -> MemoryEstimate:
    """params / planned / unplanned bytes of the compiled module, symbolic dims bound to `dims`
    (default 1). Needs the in-memory compile (an Artifact straight from compile_model); a loaded
    artifact reports the estimate its manifest recorded."""
    if art.scheduled_mod is None:
        if art.manifest.memory_estimate is None:
            raise WorkbenchError("this artifact carries no memory estimate (it was exported without one).")
        return art.manifest.memory_estimate
    from tvm import relax

    from ..pipeline.pass_list import PassSpec, make_pass
    from ..pipeline.runner import Step, run_steps
    from ..target import make_target

    mod = art.scheduled_mod
    sym = sorted({d for s in art.inputs for d in s.shape if isinstance(d, str)})
    bound = {name: int((dims or {}).get(name, 1)) for name in sym}
    target = make_target(art.target) if art.target == TargetKind.CPU else None
    # the module names a dim by its C identifier (manifest's code_names); dims the import left
    # unnamed are not in it
    code = art.manifest.code_names
    defined = {v.name for v in relax.analysis.defined_symbolic_vars(mod["main"])}
    in_module = {code.get(name, name): n for name, n in bound.items() if code.get(name, name) in defined}
    # the pipeline's own VM-lowering steps, up to and then through memory planning
    steps = [Step("BindSymbolicVars", Level.TENSOR_PROGRAM, lambda: relax.transform.BindSymbolicVars(in_module))] if in_module else []
    steps += [Step(name, Level.TENSOR_PROGRAM, (lambda name=name: make_pass(PassSpec(name), target)))
              for name in ("DataflowLowering", "CallTIRRewrite")]
    unplanned_mod = run_steps(mod, steps, target)
    planned_mod = run_steps(unplanned_mod, [Step("StaticPlanBlockMemory", Level.TENSOR_PROGRAM,
                                                 lambda: make_pass(PassSpec("StaticPlanBlockMemory"), target))], target)
    unplanned, _, dyn = _allocation_bytes(unplanned_mod)
    _, planned, dyn2 = _allocation_bytes(planned_mod)
    return MemoryEstimate(params_bytes=_params_bytes(mod), planned_bytes=planned, unplanned_bytes=unplanned, dims=bound,
                          dynamic_allocations=max(dyn, dyn2))


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# ---------------------------------------------------------------------------------------------
# kernels


def profile_kernels(art: Artifact, args: list, repeats: int = 3) -> list[KernelTime]:
    """Per-kernel time (ms per model run, averaged over `repeats` runs), largest first, with the
    ONNX nodes each kernel came from; of the function a run on `args` calls (a shape bucket's or main). VM builtins (allocation, shape checks) are left out."""
    from tvm import relax

    dev = art.device
    vm = relax.VirtualMachine(art.library, dev)
    acc: dict[str, float] = {}
    calls: dict[str, int] = {}
    starts: list[float] = []
    sync = art.target == TargetKind.CUDA

    def instrument(func, name, before_run, ret_value, *rest):
        if name.startswith("vm.builtin.") or name == "shape_func" or name.startswith("__"):
            return 0
        if sync:
            dev.sync()
        if before_run:
            starts.append(time.perf_counter())
        elif starts:
            dt = (time.perf_counter() - starts.pop()) * 1000.0
            acc[name] = acc.get(name, 0.0) + dt
            calls[name] = calls.get(name, 0) + 1
        return 0

    bucket = art.bucket_for([a.shape for a in args])  # the function a run on these inputs calls
    fn = vm[bucket.function if bucket is not None else "main"]
    fn(*args)  # warm (lazy init, first-touch allocations)
    vm.set_instrument(instrument)
    for _ in range(max(1, repeats)):
        fn(*args)
    total = sum(acc.values()) or 1.0
    return [KernelTime(name=name, ms=round(ms / repeats, 4), share=round(ms / total, 4), calls=calls[name] // max(1, repeats),
                       onnx_nodes=list(art.kernel_lineage.get(name, [])))
            for name, ms in sorted(acc.items(), key=lambda kv: -kv[1])]


def kernel_heat(kernels: list[KernelTime]) -> tuple[dict[str, float], list[KernelGroup]]:
    """Heat by kernel, for a graph view: nothing is split.

    A fused kernel's time belongs to the kernel as a whole, not a share to each node it came from
    (a Relu fused into a convolution costs nothing of its own). Returns (node ms, groups): each
    ONNX node label with the time of the slowest kernel it is part of, and each kernel with
    lineage as a KernelGroup (slowest first), which the canvas outlines as one group.
    Kernels made from the very same nodes (a Conv's padding and the convolution) are one group
    with their times added and their names joined by " + "."""
    by_nodes: dict[tuple, KernelGroup] = {}
    for k in kernels:
        labels = list(dict.fromkeys(k.onnx_nodes))
        if not labels:
            continue
        g = by_nodes.setdefault(tuple(sorted(labels)), KernelGroup("", 0.0, labels))
        g.name = f"{g.name} + {k.name}" if g.name else k.name
        g.ms += k.ms
    groups = sorted(by_nodes.values(), key=lambda g: -g.ms)
    nodes: dict[str, float] = {}
    for g in groups:
        for n in g.onnx_nodes:
            nodes[n] = max(nodes.get(n, 0.0), g.ms)
    return nodes, groups


def node_heat(kernels: list[KernelTime]) -> dict[str, float]:
    """ms per ONNX node label: each kernel's time split evenly over the nodes it came from."""
    heat: dict[str, float] = {}
    for k in kernels:
        for n in k.onnx_nodes:
            heat[n] = heat.get(n, 0.0) + k.ms / len(k.onnx_nodes)
    return heat


# ---------------------------------------------------------------------------------------------
# the benchmark


# Timing with onnxruntime beside ours: onnxruntime runs in a process of its own (core.compiler.measure.ort_worker)
# with its default threading, ours here with TVM's; they take turns in blocks with a pause between
# (core.compiler.measure.alternation: neither is timed while the other's threads spin, slow drifts of the
# machine's load hit both alike, and each block starts with untimed runs).
ALTERNATING_BLOCKS = 5


def benchmark(
    art: Artifact,
    *,
    runs: int = 20,
    warmup: int = 3,
    vs_ort: bool = True,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    kernels: bool = True,
    progress: Callable[[str, float], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> BenchResult:
    """Latency, memory and per-kernel time of `art`, with onnxruntime beside it when `vs_ort`."""
    from ..runtime import prepare
    from ..target import host_cores

    prepare()  # TVM's thread settings (the pool itself loads only before TVM is first imported)

    report = progress or (lambda step, frac: None)
    if runs < 1:
        raise WorkbenchError(f"--runs must be at least 1, not {runs}.")
    art.check_runs_here()
    feeds = random_feeds(art.inputs, seed=seed, dims=dims)
    args = art.to_device(feeds)
    dev = art.device

    def stop():
        if cancel is not None and cancel():
            raise Cancelled("benchmark cancelled.")

    art.run_device(args)  # once before onnxruntime starts: inputs the library refuses (a manifest edited after export) are named as such
    stop()
    ort_proc = None
    if vs_ort:
        if art.model_bytes is None:
            raise WorkbenchError("this artifact has no source model (model.onnx) to run onnxruntime on; bench it without --vs-ort.")
        import onnx

        from .ort_worker import OrtProcess

        ort_names = {i.name for i in onnx.load_from_string(art.model_bytes).graph.input}
        report("starting onnxruntime", 0.0)
        try:
            ort_proc = OrtProcess(art.model_bytes, {k: v for k, v in feeds.items() if k in ort_names}, host_cores())
        except RuntimeError as exc:
            raise WorkbenchError(f"onnxruntime cannot run this artifact's source model: {exc}.") from None

    def ours(n: int) -> list[float]:
        # numpy in and out, as onnxruntime's session.run is timed: the boundary a user's run
        # crosses (for a tiny model the conversions were a third of it: docs/performance.md)
        times = []
        for _ in range(n):
            stop()
            t0 = time.perf_counter()
            art.run(feeds)
            dev.sync()
            times.append((time.perf_counter() - t0) * 1000.0)
        return times

    try:
        report("warm-up", 0.05)
        runners = [ours] if ort_proc is None else [ours, ort_proc.run]
        alone = ort_proc is None  # no other runtime: no pauses, nothing to warm after them
        timed = alternate(runners, blocks=1 if alone else ALTERNATING_BLOCKS, runs=runs, warmup=max(1, warmup),
                          settle_s=0.0 if alone else None, warm_blocks=not alone,
                          on_block=lambda index, count: report("timing", 0.1 + 0.6 * (index + 1) / count))
        ours_ms = flatten(timed[0])
        ort_ms = [] if alone else flatten(timed[1])

        result = BenchResult(
            target=art.target,
            dims={d: int((dims or {}).get(d, 1)) for s in art.inputs for d in s.shape if isinstance(d, str)},
            latency_ms=latency_stats(ours_ms),
            threads=_threads_used(art, host_cores() if ort_proc is not None else None),
            path=art.path_for(feeds) if art.manifest.shape_buckets else None,
        )
        if ort_proc is not None:
            result.ort_latency_ms = latency_stats(ort_ms)
            if result.ort_latency_ms.median:
                result.ratio = round(result.latency_ms.median / result.ort_latency_ms.median, 3)
            ours_out = art.run(feeds)
            ort_out = ort_proc.outputs()
            ok, err, _ = compare_outputs(ours_out, ort_out)
            if not ok:  # a quantized model is judged in quantization steps, as its compile check was
                ok = _within_steps(art, feeds, ours_out, ort_out)
            result.max_abs_err_vs_ort = err
            result.outputs_match_ort = ok
    finally:
        if ort_proc is not None:
            ort_proc.close()

    stop()
    report("memory", 0.75)
    mem = estimate_memory(art, dims=dims)
    result.memory = MemoryUse(mem.params_bytes, mem.planned_bytes, mem.unplanned_bytes, peak_rss_bytes())
    if kernels:
        stop()
        report("per-kernel time", 0.85)
        result.kernels = profile_kernels(art, args, repeats=min(3, runs))
    report("done", 1.0)
    return result


def _threads_used(art: Artifact, ort_threads: int | None) -> ThreadsUsed | None:
    """What ran the CPU runs: the threads of the last one (the governor's choice) and whose thread
    pool launched its parallel kernels (core.compiler.runtime.native_pool); None on a GPU."""
    if art.target == TargetKind.CUDA:
        return None
    from ..runtime import native_pool

    pool = native_pool.pool()
    return ThreadsUsed(native_pool.run_threads(), "workbench" if pool is not None and pool.enabled() else "tvm", ort_threads)


def threads_text(threads: ThreadsUsed | None) -> str:
    """One cell for `bench` and the Compile & Run table: "2 (workbench pool)": the threads and whose
    pool launched the parallel kernels (core.compiler.runtime.native_pool; "TVM pool" when it is not loaded)."""
    if not threads:
        return ""
    return f"{threads.ours} ({'workbench' if threads.pool == 'workbench' else 'TVM'} pool)"


def measured_for_manifest(res: BenchResult) -> Measured:
    """The figures an exported manifest records under 'measured'."""
    return Measured(latency_ms=res.latency_ms, memory=res.memory, dims=dict(res.dims), ort_latency_ms=res.ort_latency_ms,
                    ratio_vs_ort=res.ratio if res.ort_latency_ms is not None else None, measured_on=_machine())


def _machine() -> str:
    import platform

    from ..target import host_cores

    try:
        from ..target import host_cpu

        cpu = host_cpu()
    except Exception:  # noqa: BLE001
        cpu = platform.processor() or "?"
    return f"{platform.machine()} {cpu}, {host_cores()} cores"


def _within_steps(art, feeds, ours, ort_out) -> bool:
    """Whether a QDQ model's outputs are as close to onnxruntime's as its compile check allows
    (core.compiler.check.verification.step_check); False for any other model."""
    import onnx

    from ..check.reference import ORT
    from ..check.verification import step_check

    proto = onnx.ModelProto()
    proto.ParseFromString(art.model_bytes)
    steps = step_check(proto, art.outputs, feeds, ours, ort_out, ORT)
    return steps is not None and steps.ok
