"""A pipeline step is found by what it does (its PassInfo flags), not by its name: the same
passes registered under other names still legalize, fuse and schedule, and lowering, lineage,
compile and `validate` find them. With the name lookups these replaced, each test fails: a
renamed ScheduleTIR was not found (kernel_to_schedule took the stage itself, compile tuned after
the VM lowering), nor a renamed FuseOps/LegalizeOps (no kernel lineage, no order checked)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from core.compiler.pipeline.pass_list import PASSES, PassSpec, default_pipeline, validate
from core.model.onnx_io import load_model
from tests.conftest import sample

RENAMED = {"LegalizeOps": "MyLegalize", "FuseOps": "MyFuse", "ScheduleTIR": "MySchedule"}


@pytest.fixture
def renamed(monkeypatch) -> list[PassSpec]:
    """The default CPU pipeline with LegalizeOps, FuseOps and ScheduleTIR registered under other
    names (and the old names gone from the registry)."""
    for old, new in RENAMED.items():
        monkeypatch.setitem(PASSES, new, replace(PASSES[old], name=new))
        monkeypatch.delitem(PASSES, old)
    return [PassSpec(RENAMED.get(s.name, s.name), s.enabled) for s in default_pipeline("cpu")]


def test_validate_reads_the_roles_and_names_the_passes(renamed):
    assert validate(renamed) == []
    names = [s.name for s in renamed]
    moved = list(renamed)
    moved.insert(names.index("MyLegalize"), moved.pop(names.index("MySchedule")))
    assert "MySchedule works on TIR kernels and must come after MyLegalize." in validate(moved)
    fuse, merge = names.index("MyFuse"), names.index("FuseTIR")
    swapped = list(renamed)
    swapped[fuse], swapped[merge] = swapped[merge], swapped[fuse]
    assert "FuseTIR must come after MyFuse." in validate(swapped)
    untagged = [s.toggled(False) if s.name == "AnnotateTIROpPattern" else s for s in renamed]
    assert "MyFuse needs AnnotateTIROpPattern before it (it fuses by the kernels' patterns)." in validate(untagged)


def test_lowering_and_lineage_find_the_renamed_steps(renamed):
    """The renamed scheduling step still schedules (its stage's kernels carry the scheduled
    mark), kernel_to_schedule takes a kernel from before it, and the kernel lineage is read
    around the renamed fusing step."""
    import tvm

    from core.compiler.lowering import kernel_to_schedule, lower
    from core.compiler.pipeline.lineage import KernelLineageTap
    from core.compiler.pipeline.runner import Pipeline

    graph = load_model(sample("mlp"))
    stages = lower(graph, "cpu", renamed, target_code=False)
    names = [s.name for s in stages]
    cut = names.index("MySchedule")
    scheduled = stages[cut]
    kernels = [f for _, f in scheduled.mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert kernels and all(f.attrs is not None and "tirx.is_scheduled" in f.attrs for f in kernels)
    before = stages[cut - 1]
    kernel = next(k[1:] for k in before.lineage_map() if str(k).startswith("@fused_"))
    other = next(gv.name_hint for gv, f in scheduled.mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    assert kernel_to_schedule(stages, scheduled, other)[0] is before.mod  # not the last stage's module

    pipe = Pipeline("cpu", renamed)
    imported = pipe.import_graph(graph)
    tap = KernelLineageTap(imported.mod)
    final = pipe.run(imported.mod, after=tap)
    label = {n.id: n.label for n in graph.nodes}
    lineage = tap.kernel_lineage({v: [label[i] for i in ids] for v, ids in imported.lineage.items()}, graph, final)
    assert tap.prefused is not None and lineage and all(lineage.values())


def test_compile_tunes_before_the_renamed_scheduling_step(renamed, monkeypatch, tmp_path):
    """compile's tuning step goes right before the step flagged `schedules`, whatever its name."""
    import tvm

    from core.compiler.compile import TUNING_STEP, compile_model
    from core.compiler.tuning import ab as tuning

    def fake_tuning_pass(target, **options):
        return tvm.transform.module_pass(lambda mod, _ctx: mod, opt_level=0, name="FakeTuning")

    monkeypatch.setattr(tuning, "tuning_pass", fake_tuning_pass)
    events = []
    compile_model(sample("mlp"), "cpu", pipeline=renamed, verify=False, tune_db=tmp_path, progress=events.append)
    steps = [e.step for e in events if e.step]
    assert steps[steps.index(TUNING_STEP) + 1] == "MySchedule"
