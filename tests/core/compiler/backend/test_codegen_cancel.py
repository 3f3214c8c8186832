"""Code generation and the long CPU passes stop within 0.5 s of a cancel (core.compiler.backend.codegen),
and the kernels built in groups give the same executable behaviour as one tvm.compile."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from core import load_model
from core.compiler.backend.codegen import BuildCancelled, build_executable, cancel_scope, fold_constant_calls
from core.compiler.pipeline.runner import Pipeline
from core.errors import Cancelled
from tests.conftest import sample
from tests.helpers import foreign_cpu, run_cli

GOAL_S = 0.5


@pytest.fixture(scope="module")
def scheduled():
    """tiny_transformer through every step: the module code generation starts from."""
    pipe = Pipeline("cpu")
    return pipe, pipe.run(pipe.import_graph(load_model(sample("tiny_transformer"))).mod)


def _cancel_after(seconds: float):
    state = {"at": None}
    t0 = time.perf_counter()

    def cancel() -> bool:
        if state["at"] is None and time.perf_counter() - t0 >= seconds:
            state["at"] = time.perf_counter()
        return state["at"] is not None

    return cancel, state


def test_code_generation_stops_within_half_a_second(scheduled):
    pipe, mod = scheduled
    t0 = time.perf_counter()
    build_executable(mod, pipe.target)
    whole = time.perf_counter() - t0
    cancel, state = _cancel_after(min(0.2, whole / 4))
    with pytest.raises(BuildCancelled):
        build_executable(mod, pipe.target, cancel=cancel)
    assert isinstance(BuildCancelled(), Cancelled)
    assert time.perf_counter() - state["at"] < GOAL_S


def test_grouped_build_runs_like_tvm_compile(scheduled):
    import tvm

    from core.compiler.runtime.artifact import Artifact, specs_from_proto
    from core.compiler.check.reference import random_feeds

    pipe, mod = scheduled
    graph = load_model(sample("tiny_transformer"))
    inputs, outputs = specs_from_proto(graph.to_proto())
    feeds = random_feeds(inputs, seed=0, dims={"batch": 2})
    ours = Artifact(library=build_executable(mod, pipe.target), target="cpu", inputs=inputs, outputs=outputs).run(feeds)
    ref = Artifact(library=tvm.compile(mod, pipe.target, relax_pipeline=None), target="cpu", inputs=inputs, outputs=outputs).run(feeds)
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a, b)


def test_compile_cancelled_in_code_generation_stops_fast():
    from core.compiler.compile import compile_model

    flag = {"at": None}

    def progress(event):
        if event.step == "code generation" and flag["at"] is None:
            threading.Timer(0.05, lambda: flag.__setitem__("at", time.perf_counter())).start()

    with pytest.raises(Cancelled):
        compile_model(sample("tiny_transformer"), "cpu", verify=False, progress=progress, cancel=lambda: flag["at"] is not None)
    assert time.perf_counter() - flag["at"] < GOAL_S


def test_weight_prepacking_is_folded_and_cancellable():
    """The CPU schedules' weight repacking is computed by fold_constant_calls (no call left for
    relax's FoldConstant); a cancel stops it between kernel groups."""
    from tvm import relax

    from core.compiler.schedules import _cpu_schedule_pass

    pipe = Pipeline("cpu")
    steps = pipe.steps()
    cut = next(i for i, s in enumerate(steps) if s.name == "ScheduleTIR")
    mod = pipe.run(pipe.import_graph(load_model(sample("small_cnn"))).mod, steps[:cut])
    with pipe.target:
        for p in (relax.transform.AttachAttrLayoutFreeBuffers(), _cpu_schedule_pass(pipe.target), relax.transform.SplitLayoutRewritePreproc()):
            mod = p(mod)
        assert "_weight_prepack" in mod["main"].script(show_meta=False)
        with pytest.raises(BuildCancelled), cancel_scope(lambda: True):
            fold_constant_calls(mod, pipe.target)
        folded = fold_constant_calls(mod, pipe.target)
    assert "_weight_prepack" not in folded["main"].script(show_meta=False)


def test_lowering_cancelled_in_target_code_keeps_its_stages():
    from core.compiler.lowering import lower

    flag = {"at": None}

    def progress(event):
        if event.step == "target code" and flag["at"] is None:
            threading.Timer(0.05, lambda: flag.__setitem__("at", time.perf_counter())).start()

    with pytest.raises(Cancelled) as e:
        lower(load_model(sample("tiny_transformer")), "cpu", cancel=lambda: flag["at"] is not None, progress=progress)
    assert time.perf_counter() - flag["at"] < GOAL_S
    assert len(e.value.stages) > 3 and e.value.stages[-1].language == "tvmscript"


@pytest.mark.parametrize("name", ["mlp", "tiny_transformer"])
def test_compiling_for_a_cpu_this_machine_cannot_run_folds_weights_on_this_one(name, tmp_path):
    """The weight prepacking is run at compile time; for a deployment CPU this host lacks features
    of (AVX-512 code compiled on an AVX2 host) its kernels are built for this host instead. They
    were built for the target and died with SIGILL on Zen 3 (the compile is a fresh process here,
    so a crash fails this test rather than the suite)."""
    foreign = foreign_cpu()
    if foreign is None:
        pytest.skip("this host runs the code of every candidate CPU")
    out = tmp_path / "artifact"
    proc = run_cli("compile", str(sample(name)), "--cpu", foreign, "-o", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["cpu"]["name"] == foreign


def test_folded_weights_built_for_this_host_equal_those_built_for_the_target(monkeypatch):
    """The substitute build computes the same constants: the same scheduled module (haswell's
    schedules, which every host of this project runs) folded with its kernels built for haswell
    and, with haswell taken for foreign, for this host."""
    import tvm
    from tvm import relax

    from core.compiler.backend import codegen
    from core.compiler import target as target_mod
    from core.compiler.schedules import _cpu_schedule_pass
    from core.compiler.target import host_cpu, make_target

    pipe = Pipeline("cpu")
    steps = pipe.steps()
    cut = next(i for i, s in enumerate(steps) if s.name == "ScheduleTIR")
    mod = pipe.run(pipe.import_graph(load_model(sample("small_cnn"))).mod, steps[:cut])
    haswell = make_target("cpu", mcpu="haswell", mattr="")
    with haswell:
        for p in (relax.transform.AttachAttrLayoutFreeBuffers(), _cpu_schedule_pass(haswell), relax.transform.SplitLayoutRewritePreproc()):
            mod = p(mod)
    built_for = []
    real_build = codegen._build_groups
    monkeypatch.setattr(codegen, "_build_groups", lambda g, a, t, c, w: built_for.append(str(t.attrs["mcpu"])) or real_build(g, a, t, c, w))
    copy = lambda: tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)  # the fold sets functions in place
    as_target = fold_constants_of(codegen.fold_constant_calls(copy(), haswell))
    monkeypatch.setattr(target_mod, "cannot_run_here", lambda cpu: "pretend" if cpu and cpu.get("name") == "haswell" else None)
    on_host = fold_constants_of(codegen.fold_constant_calls(copy(), haswell))
    assert built_for == ["haswell", host_cpu()]
    assert len(as_target) == len(on_host) > 0
    for a, b in zip(as_target, on_host):
        np.testing.assert_array_equal(a, b)


def fold_constants_of(mod) -> list[np.ndarray]:
    """The constant arguments of main's kernel calls, in order."""
    import tvm
    from tvm import relax

    return [a.value.numpy() for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and len(b.value.args) == 2 and isinstance(b.value.args[1], relax.Tuple)
            for a in b.value.args[1].fields if isinstance(a, tvm.ir.expr.Constant)]
