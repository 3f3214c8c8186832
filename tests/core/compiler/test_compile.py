"""compile_model: compiled outputs match onnxruntime; a wrong conversion is refused, naming the op."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.compiler.compile import CompileCancelled, compile_model

from core.compiler.check.reference import compare_outputs
from core.compiler.target import gpu_present

from core.compiler.check.verification import CompiledMismatchError
from core.errors import UnsupportedOpError
from tests.conftest import light, sample
from tests.helpers import ort_run, random_feeds


def _check(art, model_path, dims=None, seed=0):
    model = onnx.load(str(model_path))
    feeds = random_feeds(model, seed=seed, dims=dims)
    ours = art.run(feeds)
    ref = ort_run(model, feeds)
    ok, err, _ = compare_outputs(ours, ref, rtol=1e-3, atol=1e-4)
    assert ok, f"max abs error {err}"
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def mlp_art():
    return compile_model(sample("mlp"), "cpu")


@pytest.mark.isa
@pytest.mark.parametrize("batch", [1, 3, 8])
def test_mlp_dynamic_batch_matches_onnxruntime(mlp_art, batch):
    _check(mlp_art, sample("mlp"), dims={"batch": batch}, seed=batch)


@pytest.mark.isa
def test_compile_records_passes_and_verification(mlp_art):
    m = mlp_art.manifest
    names = [p.name for p in m.passes]
    assert names[0] == "ONNX import (Relax)"
    assert "LegalizeOps" in names and "FuseTIR" in names and "ScheduleTIR" in names
    assert m.verification.checked is True and m.verification.max_abs_err < 1e-4
    assert [s.to_json() for s in m.inputs] == [{"name": "input", "shape": ["batch", 784], "dtype": "float32"}]
    assert len(m.source_model_sha256) == 64


@pytest.mark.isa
@pytest.mark.parametrize("name", ["small_cnn", "tiny_transformer"])
def test_samples_with_real_weights_match_onnxruntime(name):
    art = compile_model(sample(name), "cpu", verify_dims={"batch": 2})
    _check(art, sample(name), dims={"batch": 2})


@pytest.mark.isa
@pytest.mark.slow
def test_squeezenet_with_random_weights_matches_onnxruntime():
    """The light models' ConstantOfShape weights make outputs nearly input-independent; with seeded
    random weights the comparison means something."""
    from core import load_model
    from core.verify import with_random_weights

    graph = with_random_weights(load_model(light("squeezenet")), seed=0)
    art = compile_model(graph, "cpu")
    model = onnx.load_from_string(art.model_bytes)
    feeds = random_feeds(model, seed=1)
    ours, ref = art.run(feeds), ort_run(model, feeds)
    assert np.abs(ref[0]).max() > 0 and ref[0].std() > 0
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-3, atol=1e-4)


def _tiny(op: str, tmp_path, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    a = helper.make_node("Add", ["x", "x"], ["a"], name="double")
    b = helper.make_node(op, ["a"], ["y"], name="the_node", **attrs)
    m = helper.make_model(helper.make_graph([a, b], "tiny", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / f"{op}.onnx"
    onnx.save(m, p)
    return p


def test_a_wrong_conversion_is_refused_naming_the_op_and_node(tmp_path):
    """A converter that computes the wrong thing (Relu converted to identity) must not pass."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from core.compiler.frontend import onnx_import as tvm_import

    class WrongRelu(fe.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            return relax.op.negative(inputs[0])

    tvm_import.register_converter("Relu", WrongRelu)
    try:
        with pytest.raises(CompiledMismatchError) as e:
            compile_model(_tiny("Relu", tmp_path), "cpu")
    finally:
        tvm_import.unregister_converter("Relu")
    assert e.value.op_type == "Relu" and e.value.node_name == "the_node"
    assert "Relu" in str(e.value) and "the_node" in str(e.value)
    # -relu(2x) against relu(2x): off by the values themselves, so the conversion is blamed
    assert e.value.wrong_conversion and e.value.relative_err >= 1.0 and e.value.accepting_atol is None
    assert "TVM's conversion of Relu computes a wrong result" in str(e.value)
    assert "seeded random inputs (x float32 in " in str(e.value)


def test_unsupported_op_is_one_sentence_naming_it(tmp_path):
    with pytest.raises(UnsupportedOpError) as e:
        compile_model(_tiny("LpNormalization", tmp_path, axis=1, p=2), "cpu")
    assert "LpNormalization" in str(e.value)


def test_cancel_stops_the_compile():
    with pytest.raises(CompileCancelled):
        compile_model(sample("mlp"), "cpu", cancel=lambda: True)


def test_progress_reports_each_step():
    """Each step is one typed event; `cancellable` comes from the pass's flag (ScheduleTIR polls
    cancel, LegalizeOps runs to its end), not from its name."""
    events = []
    compile_model(sample("mlp"), "cpu", verify=False, progress=events.append)
    names = [e.message for e in events]
    assert names[0] == "import to Relax" and names[-1] == "done" and "code generation" in names
    fracs = [e.fraction for e in events]
    assert fracs == sorted(fracs)
    by_step = {e.step: e for e in events if e.step}
    assert by_step["ScheduleTIR"].cancellable and not by_step["LegalizeOps"].cancellable
    assert by_step["code generation"].cancellable  # CPU kernels build in groups, cancel polled between


def test_compare_outputs_tells_float32_summation_noise_from_wrong_results():
    ref = np.array([4000.0, 0.3, -1000.0], np.float32)
    # 0.01 off on a near-zero element of an output ~4000 wide: float32 reduction order, accepted
    assert compare_outputs([ref + np.array([0, 0.01, 0], np.float32)], [ref])[0]
    # 1 % off everywhere: a wrong result, refused
    ok, err, first = compare_outputs([ref * 1.01], [ref])
    assert not ok and err == pytest.approx(40.0) and first == 0
    assert not compare_outputs([np.zeros(3, np.float32)], [np.ones(3, np.float32)])[0]


# -- tuning options ---------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, -5, float("nan"), float("inf"), "ten"])
def test_a_bad_tuning_budget_is_one_sentence(budget):
    from core.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match=r"^the tuning budget must be a positive number of seconds, not .*\.$"):
        compile_model(sample("mlp"), "cpu", tune_trials=4, tune_budget_s=budget)


@pytest.mark.skipif(gpu_present(), reason="the refusal is for machines without a GPU")
def test_cuda_tuning_without_a_gpu_is_refused_in_one_sentence():
    from core.compiler.compile import CUDA_TUNING_NEEDS_GPU
    from core.errors import WorkbenchError

    with pytest.raises(WorkbenchError) as e:
        compile_model(sample("mlp"), "cuda", tune_trials=4)
    assert str(e.value) == CUDA_TUNING_NEEDS_GPU


def test_tuning_budget_reaches_the_tuning_pass_and_the_manifest(monkeypatch, tmp_path):
    """compile hands trials, budget, database, progress and cancel to core.compiler.tuning.ab.tuning_pass,
    maps its progress into 15-55 % (after the Winograd choice's 5-15 %) without the bar running
    backwards, and records what it did."""
    from core.compiler.tuning import ab as tuning

    seen = {}

    def fake_tuning_pass(target, trials=0, database=None, **options):
        import tvm

        seen.update(trials=trials, database=database, **options)

        @tvm.transform.module_pass(opt_level=0, name="FakeTuning")
        def _pass(mod, _ctx):
            options["progress"](0.0, "extracting kernels")
            options["progress"](0.5, "tuning fused_matmul_add: 16 trials")
            options["progress"](1.0, "1/2 kernels tuned (0 reused from the database), 3 s, done")
            return mod

        return _pass

    monkeypatch.setattr(tuning, "tuning_pass", fake_tuning_pass)
    steps = []
    art = compile_model(sample("mlp"), "cpu", verify=False, tune_trials=8, tune_budget_s=90, tune_db=tmp_path,
                        progress=steps.append, cancel=lambda: False)
    assert seen["trials"] == 8 and seen["budget_s"] == 90.0 and seen["database"] == str(tmp_path) and callable(seen["cancel"])
    fracs = [e.fraction for e in steps]
    assert fracs == sorted(fracs)
    # 15-55 %: the Winograd choice step before LegalizeOps owns 5-15 % (none to make in an MLP)
    tuning = next(e for e in steps if e.message == "tuning fused_matmul_add: 16 trials")
    assert tuning.fraction == pytest.approx(0.35) and tuning.step == "MetaSchedule tuning"
    assert not tuning.cancellable and tuning.stops_after == "the measuring round in progress"  # cancel waits for the round
    choice = next(e for e in steps if e.step == "Winograd choice")
    assert choice.fraction == pytest.approx(0.05) and choice.stops_after == "the conv being measured"
    tuning = art.manifest.tuning
    assert tuning.trials == 8 and tuning.budget_s == 90.0 and tuning.database.startswith(str(tmp_path))
    assert tuning.summary.startswith("1/2 kernels tuned") and tuning.kernels >= 1 and tuning.kernels_from_database == 0
    assert "MetaSchedule tuning" in [p.name for p in art.manifest.passes]
    # the default budget is the 10 minutes per model
    compile_model(sample("mlp"), "cpu", verify=False, tune_trials=8, tune_db=tmp_path)
    assert seen["budget_s"] == 600.0
    # a budget alone tunes too (template search only, no MetaSchedule trials)...
    art = compile_model(sample("mlp"), "cpu", verify=False, tune_budget_s=120, tune_db=tmp_path)
    assert seen["trials"] == 0 and seen["budget_s"] == 120.0 and art.manifest.tuning.budget_s == 120.0
    # ...and a database alone is only applied
    art = compile_model(sample("mlp"), "cpu", verify=False, tune_db=tmp_path)
    assert seen["trials"] == 0 and seen["budget_s"] is None and art.manifest.tuning.budget_s is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tune-trials", "4", "--tune-minutes", "0"], "--tune-minutes must be a positive number of minutes, not '0'."),
        (["--tune-trials", "4", "--tune-minutes", "soon"], "--tune-minutes must be a positive number of minutes, not 'soon'."),
        pytest.param(["--tune-minutes", "5", "--target", "cuda"], "for --target cuda measures every candidate on a GPU, and this machine has none",
                     marks=pytest.mark.skipif(gpu_present(), reason="no-GPU refusal")),
        pytest.param(["--tune-trials", "4", "--target", "cuda"], "for --target cuda measures every candidate on a GPU, and this machine has none",
                     marks=pytest.mark.skipif(gpu_present(), reason="no-GPU refusal")),
    ],
)
def test_cli_tune_minutes_bad_values_exit_2_with_one_sentence(args, message, capsys, tmp_path):
    from cli import run_cli

    assert run_cli(["compile", str(sample("mlp")), "-o", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.endswith(".")
    assert not (tmp_path / "out").exists()


def test_exporter_style_names_compile_and_run_by_the_users_names(tmp_path):
    from tests.helpers import exporter_names_model

    model = exporter_names_model()
    onnx.save(model, tmp_path / "names.onnx")
    art = compile_model(tmp_path / "names.onnx", "cpu", verify_dims={"batch:0": 3})
    assert art.manifest.verification.checked
    assert [s.name for s in art.manifest.inputs] == ["a.b", "a/b", "a_b", "input-1", "0"]
    assert art.manifest.code_names["batch:0"] == "batch_0" and art.manifest.memory_estimate.dims == {"batch:0": 3}
    _check(art, tmp_path / "names.onnx", dims={"batch:0": 5})
