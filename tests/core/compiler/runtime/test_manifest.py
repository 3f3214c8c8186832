"""The manifest as typed records: read with a one-sentence refusal of a damaged field, written
back with the keys manifest.json always had (old artifacts load; unknown keys survive)."""
from __future__ import annotations

import json

import pytest

from core.compiler.runtime.artifact import check_artifact_folder
from core.compiler.runtime.manifest import LatencyStats, Manifest, Measured, MemoryUse, TensorSpec, Verification
from core.errors import WorkbenchError

# a manifest as compile_model and export wrote it (trimmed: one pass, one kernel)
WRITTEN = {
    "format_version": 1, "name": "mlp", "library": "model.so", "runner": "run.py", "source_model": "model.onnx",
    "source_model_sha256": "ab" * 32, "source_path": "/m/mlp.onnx",
    "target": {"kind": "cpu", "tvm_target": {"kind": "llvm", "mcpu": "znver4"}, "cpu": {"name": "znver4", "features": [], "requires": ["avx2"]}},
    "device": "cpu", "tvm_version": "0.27.0", "created": "2026-12-01T10:00:00+00:00",
    "inputs": [{"name": "input", "shape": ["batch", 784], "dtype": "float32"}],
    "outputs": [{"name": "logits", "shape": ["batch", 10], "dtype": "float32"}],
    "code_names": {"batch": "batch"}, "rewrites": ["fold-conv-bn (4 matches)"], "converter_fixes": [],
    "passes": [{"name": "ONNX import (Relax)", "seconds": 0.01}],
    "tuning": {"trials": 8, "budget_s": 90.0, "database": "/db", "summary": "1/2 kernels tuned", "kernels": 2,
               "kernels_from_database": 1, "winograd_choices_from_database": 0, "model_ab": None},
    "kernel_lineage": {"fused_matmul_add": ["Gemm_0"]}, "parallel_kernels": 0,
    "memory_estimate": {"params_bytes": 400, "planned_bytes": 64, "unplanned_bytes": 128, "dims": {"batch": 2}, "dynamic_allocations": 0},
    "verification": {"checked": True, "inputs": "seeded random", "reference": "onnxruntime", "dims": {"batch": 2}, "rtol": 1e-3,
                     "atol": 1e-4, "scale_rtol": 1e-4, "max_abs_err": 2e-6, "output_scale": 3.5},
    "compile_seconds": 4.2,
    "measured": {"latency_ms": {"median": 1.0, "p10": 0.9, "p90": 1.2, "min": 0.8, "max": 1.5, "runs": 20},
                 "memory": {"params_bytes": 400, "planned_bytes": 64, "unplanned_bytes": 128, "peak_rss_bytes": 2**27},
                 "dims": {"batch": 2}, "ort_latency_ms": {"median": 0.5, "p10": 0.4, "p90": 0.6, "min": 0.4, "max": 0.7, "runs": 20},
                 "ratio_vs_ort": 2.0, "measured_on": "x86_64 znver4, 2 cores"},
    "thread_pool": "threadpool.so", "files": ["manifest.json", "model.onnx", "model.so", "run.py", "threadpool.so"],
}


def test_a_written_manifest_reads_into_records_and_writes_back_the_same():
    m = Manifest.from_json(json.loads(json.dumps(WRITTEN)))
    assert m.inputs == [TensorSpec("input", ("batch", 784), "float32")] and m.target.cpu["name"] == "znver4"
    assert m.verification.checked and m.verification.max_abs_err == 2e-6 and m.tuning.kernels_from_database == 1
    assert m.measured.ort_latency_ms.median == 0.5 and m.memory_estimate.dims == {"batch": 2} and m.passes[0].seconds == 0.01
    assert m.built_for == "znver4"
    assert m.to_json() == WRITTEN


def test_an_older_manifest_loads_with_what_it_has_and_keeps_what_it_does_not_know():
    old = {"inputs": [{"name": "x", "shape": [1, 3], "dtype": "float32"}], "outputs": [], "target": {"kind": "cuda"},
           "verification": {"checked": False, "reason": "verification off"}, "measured": {"latency_ms": {"median": 2.0, "p90": 2.5, "min": 1.9, "runs": 3}},
           "made_by": "a later workbench"}
    m = Manifest.from_json(old)
    assert m.target.kind == "cuda" and m.target.cpu is None and m.parallel_kernels is None and m.tuning is None
    assert m.verification == Verification(checked=False, reason="verification off")
    assert m.measured.latency_ms == LatencyStats(median=2.0, p90=2.5, min=1.9, runs=3) and m.measured.memory == MemoryUse()
    d = m.to_json()
    assert d["made_by"] == "a later workbench" and d["verification"] == {"checked": False, "reason": "verification off"}
    assert "parallel_kernels" not in d and "memory_estimate" not in d and "ort_latency_ms" not in d["measured"]


def test_measured_figures_are_written_as_bench_measured_them():
    lat = LatencyStats(median=1.0, p10=1.0, p90=1.0, min=1.0, max=1.0, runs=1)
    d = Measured(latency_ms=lat, dims={"batch": 2}, measured_on="host").to_json()
    assert d == {"latency_ms": lat.to_json(), "memory": MemoryUse().to_json(), "dims": {"batch": 2}, "measured_on": "host"}


@pytest.mark.parametrize("change,field,says", [
    ({"inputs": {"x": [1, 3]}}, "'inputs'", "is an object, not a list of tensors"),
    ({"inputs": None}, "'inputs'", "is null, not a list of tensors"),
    ({"outputs": "logits"}, "'outputs'", 'is the text "logits", not a list of tensors'),
    ({"inputs": [{"name": "x", "shape": 784, "dtype": "float32"}]}, "'inputs[0].shape'", "is the number 784, not a list of sizes"),
    ({"inputs": [{"name": "x", "shape": [1], "dtype": "float99"}]}, "'inputs[0].dtype'", "not the numpy name of a bool, integer or float dtype"),
    ({"target": {"kind": "tpu"}}, "'target.kind'", 'is the text "tpu", not cpu or cuda'),
    ({"verification": {"checked": "yes"}}, "'verification.checked'", "not true or false"),
    ({"measured": {"latency_ms": {"median": "fast"}}}, "'measured.latency_ms.median'", "not a number"),
    ({"passes": [{"seconds": 1.0}]}, "'passes[0].name'", "it has no"),
    ({"parallel_kernels": True}, "'parallel_kernels'", "is true, not a whole number"),
])
def test_a_damaged_field_is_refused_in_one_sentence_naming_the_file_and_the_field(change, field, says):
    with pytest.raises(WorkbenchError) as e:
        Manifest.from_json({**WRITTEN, **change}, "/art/manifest.json")
    text = str(e.value)
    assert text.startswith("/art/manifest.json is not a valid artifact manifest: ") and field in text and says in text, text
    assert "\n" not in text and text.endswith(".")


def test_a_missing_inputs_field_is_named():
    damaged = {k: v for k, v in WRITTEN.items() if k != "inputs"}
    with pytest.raises(WorkbenchError, match=r"^m\.json is not a valid artifact manifest: it has no 'inputs' \(a list of tensors\)\.$"):
        Manifest.from_json(damaged, "m.json")


def test_a_folder_with_a_damaged_manifest_is_refused_before_anything_loads(tmp_path):
    (tmp_path / "model.so").write_bytes(b"")
    (tmp_path / "manifest.json").write_text(json.dumps({**WRITTEN, "inputs": {}, "files": []}))
    with pytest.raises(WorkbenchError, match=r"manifest.json is not a valid artifact manifest: its 'inputs' is an object"):
        check_artifact_folder(tmp_path)
    # a path outside the folder is named first, whatever else is wrong
    (tmp_path / "manifest.json").write_text(json.dumps({"library": "../evil.so"}))
    with pytest.raises(WorkbenchError, match="outside the artifact folder"):
        check_artifact_folder(tmp_path)
