"""The one pipeline runner: ONNX import -> the pass list, a hook after each step -> code generation.

Everything that turns a model into code goes through `Pipeline`, so what the Lowering panel
steps through is what compile builds and what bench measures:

* `core.compiler.lowering.lower` snapshots the module after every step (the `after` hook) and
  reuses cached steps (the `reuse` hook);
* `core.compiler.compile.compile_model` inserts its tuning step before the scheduling step, keeps the
  scheduled module (memory estimate, lineage) and generates code with `codegen`;
* `core.compiler.measure.bench.estimate_memory` runs the pipeline's own VM-lowering steps on that module;
* `core.compiler.check.verification.locate_mismatch` builds its probe with `Pipeline.build`.

A step is one enabled `PassSpec` of core.compiler.pipeline.pass_list (or a step a caller inserts, such as
tuning), run inside the target's context and timed with a tvm PassInstrument (the nested passes'
times come with it). Code generation is `tvm.compile` with no Relax pipeline of its own: every
Relax pass has run as a step before it. A step's `info` is its pass's PassInfo, whose flags say
what role it plays (the scheduling step, the legalizing one); its `progress(fraction)` is the
typed event (core.progress.Progress) a caller reports when the step starts.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...errors import WorkbenchError
from ...progress import Progress
from ..target import TargetKind
from ..levels import Level

__all__ = ["Step", "StepResult", "Pipeline", "run_steps", "run_timed"]

logger = logging.getLogger(__name__)


@dataclass
class Step:
    """One step of a run: a name, its abstraction level and how to make its tvm Pass.

    `make()` builds the pass when the step runs (a cached step never builds it); `spec` is the
    PassSpec it came from (None for a step a caller inserted, e.g. compile's tuning).
    `cancellable`: the step polls cancel while it runs (a pass's flag); otherwise a cancel waits
    for `stops_after` (a caller's step that stops in rounds) or for the step's end."""

    name: str
    level: Level
    make: Callable[[], Callable]
    spec: Any = None
    cancellable: bool = False
    stops_after: str = ""

    @property
    def info(self):
        """The PassInfo of this step's pass (its role flags), None for a step a caller inserted."""
        return self.spec.info if self.spec is not None else None

    def progress(self, fraction: float) -> Progress:
        """The event that says this step starts, `fraction` of the way through the run's job."""
        return Progress(fraction, self.name, step=self.name, cancellable=self.cancellable, stops_after=self.stops_after)


@dataclass
class StepResult:
    """What the `after` hook receives: the module after step `index`, and how long it took."""

    index: int
    step: Step
    mod: Any
    seconds: float
    pass_seconds: list[tuple[str, float, int]] = field(default_factory=list)  # (pass, seconds, depth)


def _timing_instrument():
    import tvm

    @tvm.ir.instrument.pass_instrument
    class PassTimes:
        """Seconds per pass, nested passes included (depth 0 = the step itself)."""

        def __init__(self):
            self.times: list[tuple[str, float, int]] = []
            self._stack: list[tuple[str, float]] = []

        def run_before_pass(self, mod, info):
            self._stack.append((info.name, time.perf_counter()))

        def run_after_pass(self, mod, info):
            name, t0 = self._stack.pop()
            self.times.append((name, time.perf_counter() - t0, len(self._stack)))

    return PassTimes()


def run_timed(fn, mod):
    """(fn(mod), seconds, [(pass, seconds, depth)]): `fn` under the current PassContext plus a
    timing instrument."""
    import tvm

    instrument = _timing_instrument()
    cur = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=cur.opt_level, config=dict(cur.config), instruments=[instrument],
                                   required_pass=list(cur.required_pass), disabled_pass=list(cur.disabled_pass)):
        t0 = time.perf_counter()
        out = fn(mod)
        seconds = time.perf_counter() - t0
    times = sorted(instrument.times, key=lambda x: x[2])
    return out, seconds, times


def run_steps(
    mod,
    steps: list[Step],
    target=None,
    *,
    before: Callable[[int, Step], None] | None = None,
    reuse: Callable[[int, Step], Any] | None = None,
    after: Callable[[StepResult], None] | None = None,
    on_error: Callable[[Step, Exception], Exception | None] | None = None,
):
    """Run `steps` on `mod` in order inside `target` (None: no target context); returns the module.

    `before(i, step)` is called first at every step (progress; raising core.errors.Cancelled
    stops the run there). `reuse(i, step)` may return the module this step made before (a cache):
    the step is then not run and `after` not called. `after(result)` sees every module a step made.
    A step that raises goes to `on_error(step, exc)`, which may return the exception to raise
    instead (raised from the original); otherwise the original propagates.
    """
    import contextlib

    with target if target is not None else contextlib.nullcontext():
        for i, step in enumerate(steps):
            if before is not None:
                before(i, step)
            if reuse is not None:
                cached = reuse(i, step)
                if cached is not None:
                    mod = cached
                    continue
            try:
                mod, seconds, times = run_timed(step.make(), mod)
            except Exception as e:
                better = on_error(step, e) if on_error is not None else None
                if better is not None:
                    raise better from e
                raise
            if after is not None:
                after(StepResult(i, step, mod, seconds, times))
    return mod


class Pipeline:
    """A pass list (core.compiler.pipeline.pass_list PassSpecs) for one target, ready to run.

    `target`: a TargetKind ('cpu', 'cuda') or a tvm Target. `specs`: default_pipeline(target) when None.
    With `check` (the default) a list that cannot build is refused in one sentence; lowering
    passes check=False and reads `problems` itself (it shows the ONNX stage first).
    """

    def __init__(self, target: Any = TargetKind.CPU, specs: list | None = None, *, check: bool = True):
        from .pass_list import default_pipeline, validate
        from ..target import make_target

        self.target = make_target(target) if isinstance(target, str) else target
        self.specs = list(specs) if specs is not None else default_pipeline(self.target)
        self.problems = validate(self.specs)
        if check and self.problems:
            raise WorkbenchError("the pass pipeline cannot build: " + " ".join(self.problems))

    def steps(self) -> list[Step]:
        """One Step per enabled spec, in order."""
        from .pass_list import make_pass

        tgt = self.target
        return [Step(s.name, s.level, (lambda s=s: make_pass(s, tgt)), s, cancellable=s.info.cancellable)
                for s in self.specs if s.enabled]

    @staticmethod
    def import_graph(graph):
        """The Graph as a Relax module (core.compiler.frontend.onnx_import.ImportResult: module, lineage, seconds)."""
        from ..frontend.onnx_import import import_graph

        return import_graph(graph)

    def run(self, mod, steps: list[Step] | None = None, **hooks):
        """`run_steps` over `steps` (default: every enabled spec) inside this pipeline's target."""
        return run_steps(mod, self.steps() if steps is None else steps, self.target, **hooks)

    def codegen(self, mod, *, cancel=None, progress=None):
        """Code generation for a module that has been through every step: a Relax VM executable
        (TIR pipeline + LLVM, or CUDA with an LLVM host), built by core.compiler.backend.codegen so that
        `cancel()` stops it within a fraction of a second (CPU kernels build in small groups)."""
        from ..backend.codegen import build_executable

        return build_executable(mod, self.target, cancel=cancel, progress=progress)

    def build(self, graph, **hooks):
        """import -> every step -> code generation, in one call; returns the executable."""
        return self.codegen(self.run(self.import_graph(graph).mod, **hooks))
