"""Where tuning builds and measures candidate schedules: a LocalBuilder that starts in seconds,
a LocalRunner whose fastest repeat counts, and an RPC runner for devices registered with a TVM tracker.

Split from core.compiler.tuning.tune (which re-exports these names), so the search itself reads apart
from the machinery that times it.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

__all__ = ["Pace", "confirm_at_threads", "local_builder", "local_runner", "measure_schedules", "parse_rpc_address", "rpc_runner"]

logger = logging.getLogger(__name__)


def _worker_initializer():
    """Import TVM's tensor intrinsics quickly (a closure, so it can also be shipped by value to
    a worker process that cannot import this package).

    Why: MetaSchedule's default build and every TuneContext import `tvm.s_tir.tensor_intrin`,
    which parses ~250 TVMScript functions, each calling `inspect.stack()` - and that reads
    source files for every frame. Measured here: 143 s under load, longer than the builder's
    timeout, so every build timed out. With a stack that skips source lookup: ~13 s.
    """

    def initialize():
        import inspect
        import sys

        def light_stack(context=1):
            frame, frames = sys._getframe(1), []
            while frame is not None:
                frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None))
                frame = frame.f_back
            return frames

        if "tvm.s_tir.tensor_intrin" in sys.modules:
            return
        original = inspect.stack
        inspect.stack = light_stack
        try:
            import tvm.s_tir.tensor_intrin  # noqa: F401
        finally:
            inspect.stack = original

    return initialize


def _build_without_intrinsics():
    """MetaSchedule's default_build minus its import of every tensor intrinsic (see
    _worker_initializer), which CPU float kernels never use; a closure, shipped by value."""

    def build(mod, target, _params):
        from tvm.driver import build as tvm_build
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        try:  # candidates built as the compiled model is: exp/erf/tanh as vector arithmetic
            from core.compiler.backend.fast_math import install

            install()
        except ImportError:  # a worker that cannot import the workbench: libm calls, slower
            pass
        # measure the kernel, not its one-off weight repacking (as default_build does)
        mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
        return tvm_build(mod, target=target)

    return build


def local_builder(workers: int | None = None, target=None):
    """A LocalBuilder that starts in seconds (no tensor-intrinsic import); one worker per core
    up to two by default (builds are LLVM-bound; candidates are built in batches). For a `target`
    of another architecture (an ARM64 device over RPC) each candidate is linked here with the
    cross compiler, so the device loads a library and needs no C compiler of its own (MetaSchedule
    sends a tar of objects for the device to link otherwise)."""
    from tvm.s_tir import meta_schedule as ms

    from ..target import host_cores

    workers = workers or max(1, min(2, host_cores()))
    export = _cross_export(target) if target is not None else None
    return ms.builder.LocalBuilder(max_workers=workers, timeout_sec=120, f_build=_build_without_intrinsics(), f_export=export)


def _cross_export(target):
    """MetaSchedule's export of a built candidate as a library cross-linked for `target`, or None
    (its default) for this machine's code."""
    from ..target import code_arch, host_arch, target_cpu

    cpu = target_cpu(target) if target.kind.name == "llvm" else None
    if cpu is None or code_arch(cpu) == host_arch():
        return None
    from ..backend.cross import cross_compiler_for

    compiler = cross_compiler_for(cpu["triple"])  # refused here, in one sentence, before any worker starts

    def export(mod) -> str:
        import os
        import tempfile

        from tvm.support import cc

        path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
        mod.export_library(path, fcompile=cc.cross_compiler(compiler))
        return path

    return export


def _run_evaluator_on(threads: int):
    """MetaSchedule's evaluator with TVM's pool in the measuring process set to `threads` first
    (a closure, shipped by value to the runner's worker process)."""

    def run_evaluator(rt_mod, device, evaluator_config, repeated_args):
        import tvm
        from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common

        tvm.get_global_func("runtime.config_threadpool")(1, int(threads))
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)

    return run_evaluator


def local_runner(threads: int | None = 1):
    """A LocalRunner measuring each candidate as 15 repeats of >= 2 ms (the fastest is kept:
    core.compiler.tuning.tune._measure_schedules), on `threads` threads (None: the pool's own size).
    Short repeats, many of them: on a shared machine some fit between other processes' time
    slices, and the fastest of them is what the schedule costs (docs/performance.md: Tuning
    runner).

    One thread by default: candidates are compared by what they cost a core. TVM splits a
    parallel loop statically, so on a machine other processes share, a 2-thread measurement
    times whichever core was taken, and configs measured so ranged several-fold between two runs.
    Every schedule compared (default, template configs, MetaSchedule's records) is measured alike,
    so the choices stay consistent. How a config splits its parallel loop over the model's threads
    is checked afterwards, for the few finalists only (`confirm_at_threads`, on a runner of that
    many threads)."""
    from tvm.s_tir import meta_schedule as ms

    config = ms.runner.EvaluatorConfig(number=1, repeat=15, min_repeat_ms=2, enable_cpu_cache_flush=False)
    if threads is None:
        return ms.runner.LocalRunner(timeout_sec=60, evaluator_config=config)
    return ms.runner.LocalRunner(timeout_sec=60, evaluator_config=config, f_run_evaluator=_run_evaluator_on(threads))


def parse_rpc_address(text: str, option: str = "--tune-rpc") -> tuple[str, int, str]:
    """'HOST:PORT:KEY' (a TVM RPC tracker and the key its devices registered under) as
    (host, port, key); a WorkbenchError naming what is wrong otherwise (`option`: the flag it names).
    The parser lives with `bench --rpc`'s (core.compiler.measure.remote), below tuning."""
    from ..measure.remote import parse_tracker_address

    return parse_tracker_address(text, option)


def rpc_runner(tracker_host: str, tracker_port: int, key: str, *, session_timeout_s: int = 60, max_workers: int = 1, repeat: int = 1, number: int = 3):
    """A MetaSchedule runner that measures candidates on the devices registered under `key`
    with the TVM RPC tracker at tracker_host:tracker_port.

    Scale-out recipe (every machine needs the same TVM version):

        python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190               # one machine
        python -m tvm.exec.rpc_server --tracker HOST:9190 --key cpu-znver3      # each device
        python -m tvm.exec.query_rpc_tracker --host HOST --port 9190            # check

    then `tune_module(..., runner=rpc_runner(HOST, 9190, "cpu-znver3"))`. Candidates are built
    here (for the target given, which must describe the devices) and sent to the servers.
    """
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(
            tracker_host=tracker_host, tracker_port=int(tracker_port), tracker_key=key, session_timeout_sec=session_timeout_s
        ),
        evaluator_config=ms.runner.EvaluatorConfig(number=number, repeat=repeat, min_repeat_ms=0, enable_cpu_cache_flush=False),
        max_workers=max_workers,
    )


def _device_type(target) -> str:
    return "cpu" if target.kind.name == "llvm" else target.kind.name


def scheduled_module(scheduled):
    """A PrimFunc that core.compiler.schedules' rules scheduled, as a module the functions below
    measure. Not as a new s_tir.Schedule: its well-formedness check refuses what loop_partition
    leaves (the AVX2 Winograd GEMM's partial last tile: a block bound to a loop outside it),
    which builds and runs all the same."""
    import tvm

    return tvm.IRModule({"main": scheduled.without_attr("tirx.is_scheduled")})


def _module(candidate):
    """The IRModule of a candidate: an s_tir.Schedule, or a module (scheduled_module)."""
    import tvm

    return candidate if isinstance(candidate, tvm.IRModule) else candidate.mod


def _build_inputs(schedules: list, target, builder) -> list:
    """A RunnerInput per schedule (an s_tir.Schedule, or a module from scheduled_module; None
    where it did not build)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    modules = [_module(sch) for sch in schedules]
    built = builder.build([ms.builder.BuilderInput(mod, target) for mod in modules])
    inputs = []
    for mod, result in zip(modules, built):
        if result.error_msg:
            logger.info("candidate did not build: %s", result.error_msg.splitlines()[0])
            inputs.append(None)
            continue
        # what the builder measures: the kernel taking its weights already packed
        measured = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)["main"]
        args_info = ms.arg_info.ArgInfo.from_prim_func(measured)
        inputs.append(ms.runner.RunnerInput(result.artifact_path, _device_type(target), args_info))
    return inputs


def _run_rounds(inputs: list, runner, rounds: int = 1) -> list[list[float | None]]:
    """Seconds per round per input (None where the input is None or did not run): the inputs
    take turns round by round (so a drift of the machine's load hits all), and each figure is
    the fastest repeat of its round."""
    present = [i for i, inp in enumerate(inputs) if inp is not None]
    out: list[list[float | None]] = [[None] * len(inputs) for _ in range(rounds)]
    if not present:
        return out
    futures = runner.run([inputs[i] for i in present] * rounds)
    for n, future in enumerate(futures):
        index = present[n % len(present)]
        result = future.result()
        if result.error_msg:
            logger.info("candidate did not run: %s", result.error_msg.splitlines()[0])
            continue
        # the fastest repeat: on a shared machine other processes only ever add time (a parallel
        # kernel waits for a worker whose core another process holds), so the least disturbed
        # repeat is the closest to what the schedule itself costs
        out[n // len(present)][index] = min(float(x) for x in result.run_secs)
    return out


def _fastest(values) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def measure_schedules(schedules: list, target, builder, runner, rounds: int = 1) -> list[float | None]:
    """Seconds per schedule (None where it did not build or run): all built once, then run in
    `rounds` alternating rounds (the fastest repeat of any round counts)."""
    per_round = _run_rounds(_build_inputs(schedules, target, builder), runner, rounds)
    return [_fastest(column) for column in zip(*per_round)]


# How much faster than the default a tuned schedule must measure, at the thread count the
# model runs on, to replace it: less is within what the same schedule varies between
# measurements on a shared machine, and a pick within the noise is as likely to be slower.
CONFIRM_MARGIN = 0.03
CONFIRM_ROUNDS = 3


def confirm_at_threads(default, candidates: list, target, builder, runner, rounds: int = CONFIRM_ROUNDS, margin: float = CONFIRM_MARGIN):
    """Measure the default schedule and `candidates` (picked on one thread) side by side on
    `runner` (the model's thread count), in `rounds` alternating rounds. Returns (index of the
    winning candidate, or None; seconds of each, the default first, None where it failed).
    The winner is the fastest candidate, if it beats the default by `margin` over all rounds
    and in most rounds one by one: on a loaded machine one lucky quiet moment can make any
    schedule look fast once. (What is best on one core may split its parallel loop worse over
    two: fewer, bigger row blocks, one thread idle at the end.)"""
    per_round = _run_rounds(_build_inputs([default, *candidates], target, builder), runner, rounds)
    times = [_fastest(column) for column in zip(*per_round)]
    base = times[0]
    timed = [(secs, i) for i, secs in enumerate(times[1:]) if secs is not None]
    if base is None or not timed:
        return None, times
    best_secs, best = min(timed)
    wins = sum(1 for row in per_round if row[0] is not None and row[best + 1] is not None and row[best + 1] < row[0] * (1.0 - margin))
    return (best if best_secs < base * (1.0 - margin) and 2 * wins > rounds else None), times


class Pace:
    """Seconds per unit of tuning work (a candidate built and measured, a schedule confirmed, a
    MetaSchedule round), learnt as the work is done, so that the tuner starts no step that would
    end past its deadline. Why: the deadline used to be checked only between steps, and a step
    (a batch of four conv configs, a confirmation, a template search's last batches) takes 5-30 s
    on 2 cores: `compile --tune-minutes 1` tuned for 51 s of its 45 s share on mobilenet_v3_small
    and 63 s on SqueezeNet, leaving the model-level A/B little of its time.

    `clock` (seconds, monotonic) is injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._spent: dict[str, list[float]] = {}  # kind -> [seconds, units]

    @contextlib.contextmanager
    def timed(self, kind: str, units: int):
        """Time the work inside as `units` units of `kind`."""
        started = self.clock()
        try:
            yield
        finally:
            self.add(kind, units, self.clock() - started)

    def add(self, kind: str, units: int, seconds: float) -> None:
        """Count `seconds` spent on `units` of `kind`."""
        spent = self._spent.setdefault(kind, [0.0, 0.0])
        spent[0] += seconds
        spent[1] += max(units, 0)

    def estimate(self, kind: str, units: int, like: str | None = None) -> float:
        """Seconds `units` of `kind` should take: at the pace seen so far (of `like` when `kind`
        was never timed); 0 when nothing is known yet (the first step always starts)."""
        for key in (kind, like):
            seconds, done = self._spent.get(key, (0.0, 0.0)) if key else (0.0, 0.0)
            if done > 0:
                return seconds / done * units
        return 0.0

    def fits(self, deadline: float, kind: str, units: int, like: str | None = None) -> bool:
        """True when `units` of `kind` should end by `deadline`."""
        return self.clock() + self.estimate(kind, units, like) <= deadline
