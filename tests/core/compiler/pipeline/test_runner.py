"""core.compiler.pipeline.runner: lower and compile run the same steps through one runner."""
from __future__ import annotations

import numpy as np
import pytest

from core import load_model
from tests.conftest import sample


def _kernels(mod) -> dict:
    import tvm

    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.slow
def test_compiling_the_stages_lower_shows_gives_the_same_kernels():
    import tvm

    from core.compiler.compile import compile_model
    from core.compiler.lowering import lower
    from core.compiler.pipeline.runner import Pipeline
    from tests.helpers import random_feeds

    graph = load_model(sample("small_cnn"))
    stages = lower(graph, "cpu", target_code=False)
    art = compile_model(graph, "cpu", verify=False)
    assert [p.name for p in art.manifest.passes[1:-1]] == [s.name for s in stages[2:]]
    shown = _kernels(next(s for s in stages if s.name == "ScheduleTIR").mod)
    compiled = _kernels(art.scheduled_mod)
    assert shown and sorted(shown) == sorted(compiled)
    for name, func in shown.items():
        tvm.ir.assert_structural_equal(func, compiled[name])
    # code generated from lowering's last stage runs like the compiled artifact
    ex = Pipeline("cpu").codegen(stages[-1].mod)
    feeds = random_feeds(graph.to_proto())
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    got = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
    np.testing.assert_array_equal(got, art.run(feeds)[0])


def test_hooks_see_every_step_and_a_cached_step_is_not_run():
    import tvm
    from tvm import relax
    from tvm.script import relax as R

    from core.compiler.pipeline.runner import Step, run_steps

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((2,), "float32")):
            with R.dataflow():
                y = R.add(x, x)
                R.output(y)
            return y

    ran, seen, before = [], [], []

    def counting(name):
        def make():
            ran.append(name)
            return relax.transform.CanonicalizeBindings()
        return make

    steps = [Step(n, "graph", counting(n)) for n in ("a", "b", "c")]
    out = run_steps(Mod, steps, before=lambda i, s: before.append(s.name),
                    reuse=lambda i, s: Mod if s.name == "b" else None, after=lambda r: seen.append((r.index, r.step.name)))
    assert before == ["a", "b", "c"] and ran == ["a", "c"] and seen == [(0, "a"), (2, "c")]
    assert isinstance(out, tvm.IRModule)


def test_a_failing_step_is_reported_through_on_error():
    from core.compiler.pipeline.runner import Step, run_steps
    from core.errors import WorkbenchError

    def boom():
        def p(mod):
            raise ValueError("bad")
        return p

    with pytest.raises(WorkbenchError, match="step x failed: bad"):
        run_steps(None, [Step("x", "graph", boom)], on_error=lambda s, e: WorkbenchError(f"step {s.name} failed: {e}"))
    with pytest.raises(ValueError):
        run_steps(None, [Step("x", "graph", boom)])


def test_a_pipeline_that_cannot_build_is_refused_in_one_sentence():
    from core.compiler.pipeline.pass_list import default_pipeline
    from core.compiler.pipeline.runner import Pipeline
    from core.errors import WorkbenchError

    specs = [s.toggled(False) if s.name == "LegalizeOps" else s for s in default_pipeline("cpu")]
    with pytest.raises(WorkbenchError, match="LegalizeOps is required"):
        Pipeline("cpu", specs)
    assert Pipeline("cpu", specs, check=False).problems
