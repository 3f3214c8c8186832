"""CUDA artifacts: every model exports through nvcc (no GPU needed), the fatbin loads and runs where a
GPU is, and an nvcc failure names the kernel and the first compiler error."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from core import load_model
from core.compiler.runtime.artifact import load_artifact
from core.compiler.compile import compile_model
from core.compiler.backend.cuda import explain_nvcc_failure, kernel_at_line, nvcc_fatbin
from core.compiler.check.reference import compare_outputs, ort_run, random_feeds
from core.compiler.target import gpu_present
from core.errors import WorkbenchError
from core.verify import with_random_weights
from tests.conftest import LIGHT_MODELS, SAMPLE_MODELS, light, sample
from tests.helpers import exporter_names_model

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to build the fatbin")

_SOURCE = """#include <cstdint>
extern "C" __global__ void good_kernel(float* x);
extern "C" __global__ void __launch_bounds__(128) bad_kernel(float* __restrict__ x);
extern "C" __global__ void good_kernel(float* x) {
  x[0] = 1.0f;
}

extern "C" __global__ void __launch_bounds__(128) bad_kernel(float* __restrict__ x) {
  x[0] = y;
  int z = ;
}
"""


def test_nvcc_error_line_maps_to_its_kernel():
    assert kernel_at_line(_SOURCE, 5) == "good_kernel"
    assert kernel_at_line(_SOURCE, 9) == "bad_kernel"
    assert kernel_at_line(_SOURCE, 3) == "bad_kernel"  # its declaration (where a bad parameter name fails)
    assert kernel_at_line(_SOURCE, 1) is None
    stderr = ('/tmp/x/kernels.cu(9): error: identifier "y" is undefined\n    x[0] = y;\n\n'
              "/tmp/x/kernels.cu(10): error: expected an expression\n\n"
              '2 errors detected in the compilation of "/tmp/x/kernels.cu".\n')
    assert explain_nvcc_failure(stderr, _SOURCE) == (
        "nvcc could not compile the generated CUDA kernel 'bad_kernel': kernels.cu line 9: "
        'identifier "y" is undefined (1 more error follows).')
    assert explain_nvcc_failure("kernels.cu(1): error: bad include\n", _SOURCE) == (
        "nvcc could not compile the generated CUDA code: kernels.cu line 1 (before the first kernel): bad include.")
    assert explain_nvcc_failure("nvcc fatal   : Unsupported gpu architecture 'compute_10'\n", _SOURCE) == (
        "nvcc could not compile the generated CUDA kernels: nvcc fatal   : Unsupported gpu architecture 'compute_10'.")


@needs_nvcc
def test_real_nvcc_failure_is_one_sentence_naming_the_kernel(tmp_path):
    with pytest.raises(WorkbenchError) as e:
        nvcc_fatbin(_SOURCE, tmp_path)
    assert str(e.value).startswith("nvcc could not compile the generated CUDA kernel 'bad_kernel': kernels.cu line 9: ")
    assert "\n" not in str(e.value)


# The models the CUDA export must handle: the onnx wheel's light models, the bundled samples and an
# exporter-style model (names with / . : -). nvcc takes ~10-60 s a model on a shared 2-core machine,
# so the suite exports a few that cover the cases (ShuffleNet: Caffe2's 'gpu_0/data_0', grouped
# convolutions); MLCWB_CUDA_SWEEP=all exports every one.
_ALL = ["exporter_names"] + [f"light:{n.removeprefix('light_').removesuffix('.onnx')}" for n in LIGHT_MODELS] + [
    f"sample:{n.removesuffix('.onnx')}" for n in SAMPLE_MODELS]
_DEFAULT = ["exporter_names", "light:shufflenet", "sample:mlp"]
_MODELS = _ALL if os.environ.get("MLCWB_CUDA_SWEEP") == "all" else [m for m in _DEFAULT if m in _ALL]


def _model(key: str, tmp_path: Path):
    if key == "exporter_names":
        onnx.save(exporter_names_model(), tmp_path / "exporter_names.onnx")
        return load_model(tmp_path / "exporter_names.onnx")
    kind, name = key.split(":")
    if kind == "light":  # the light models' weights are one constant: random ones for a real check
        return with_random_weights(load_model(light(name)), seed=0)
    return load_model(sample(name))


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("key", _MODELS)
def test_every_model_exports_for_cuda_and_runs_where_a_gpu_is(key, tmp_path):
    art = compile_model(_model(key, tmp_path), "cuda", verify=False)
    signatures = re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?\w+\(([^)]*)\)", art.cuda_source)
    assert signatures
    for sig in signatures:
        for param in sig.split(","):
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", param.split()[-1].lstrip("*")), param
    folder = art.export(tmp_path / "art")
    man = json.loads((folder / "manifest.json").read_text())
    assert man["cuda"]["kernels"] == "fatbin" and man["cuda"]["fatbin_bytes"] > 0
    assert [s["name"] for s in man["inputs"]] == [s.name for s in art.inputs]  # the user's names
    if not gpu_present():
        with pytest.raises(WorkbenchError, match="no usable GPU"):
            load_artifact(folder)
        return
    loaded = load_artifact(folder)
    feeds = random_feeds(loaded.inputs, seed=0, dims={"batch:0": 2, "batch": 2})
    ok, err, _ = compare_outputs(loaded.run(feeds), ort_run(loaded.model_bytes, feeds))
    assert ok, f"{key}: largest difference from onnxruntime {err}"


# -- benchmarks/gpu_check.py and the peak table ----------------------------------------------------

_GPU_CHECK = Path(__file__).resolve().parents[4] / "benchmarks" / "gpu_check.py"


@pytest.mark.parametrize("name, model, tflops", [
    ("NVIDIA H200", "H200 SXM", 67.0), ("NVIDIA H200 NVL", "H200 NVL", 60.0), ("NVIDIA GH200 480GB", "GH200", 67.0),
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 67.0), ("NVIDIA H100 PCIe", "H100 PCIe", 51.0),
    ("NVIDIA A100-SXM4-80GB", "A100", 19.5), ("NVIDIA L4", "L4", 30.3), ("NVIDIA L40S", "L40S", 91.6), ("Tesla T4", "T4", 8.1),
])
def test_peak_table_by_reported_gpu_name(name, model, tflops):
    from benchmarks.gpu_peaks import gpu_peak

    peak = gpu_peak(name)
    assert (peak.model, peak.fp32_tflops) == (model, tflops) and "spec sheet" in peak.source


def test_unknown_gpu_has_no_peak_rather_than_a_guess():
    from benchmarks.gpu_peaks import gpu_peak

    assert gpu_peak("NVIDIA RTX A1000") is None and gpu_peak("") is None


@pytest.mark.skipif(gpu_present(), reason="checks the path taken where no GPU is")
def test_gpu_check_skips_cleanly_without_a_gpu():
    r = subprocess.run([sys.executable, str(_GPU_CHECK), "--models", "mlp"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "gpu_check: no CUDA GPU is visible to TVM on this machine, so there is nothing to run; skipped."


@pytest.mark.slow
def test_gpu_check_path_runs_on_the_cpu(tmp_path):
    """The script's build -> export -> load -> compare -> time path, on the CPU (--target cpu)."""
    from core.model.flops import count_flops

    r = subprocess.run([sys.executable, str(_GPU_CHECK), "--target", "cpu", "--models", "mlp", "--runs", "3", "--jobs", "1",
                        "--batch", "2", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "rows.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert row["model"] == "mlp" and row["match"] and row["gpu_ms"] > 0 and row["peak_fraction"] is None
    assert row["gflop"] == round(count_flops(sample("mlp"), dims={"batch": 2}).total / 1e9, 4) > 0
    assert (tmp_path / "out" / "mlp" / "model.so").is_file() and "1/1 models ran on the CPU" in r.stdout


# -- tuning for CUDA ------------------------------------------------------------------------------


def _fused_cuda_module(model: onnx.ModelProto, target):
    """(the module tuning receives for `target`: compile's steps up to ScheduleTIR, the pipeline,
    the steps from ScheduleTIR on)."""
    import onnx_ir as ir

    from core.compiler.compile import import_relax
    from core.compiler.pipeline.runner import Pipeline
    from core.model.graph import Graph

    pipe = Pipeline(target)
    steps = pipe.steps()
    cut = [s.name for s in steps].index("ScheduleTIR")
    return pipe.run(import_relax(Graph(ir.from_proto(model))).mod, steps[:cut]), pipe, steps[cut:]


def _matmul_relu_model() -> onnx.ModelProto:
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 32])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_cuda_tuning_target_carries_metaschedules_block_limits():
    from core.compiler.target import make_target
    from core.compiler.tuning.tune import _tuning_target, target_key

    t = make_target("cuda", cuda_arch="sm_90")
    tuned = _tuning_target(t)
    assert "max_threads_per_block" not in t.attrs  # compile's own target is left as it is
    assert int(tuned.attrs["max_threads_per_block"]) > 0 and int(tuned.attrs["max_shared_memory_per_block"]) > 0
    assert target_key(tuned) == target_key(t) and tuned.host is not None  # same database folder
    cpu = make_target("cpu")
    assert _tuning_target(cpu) is cpu


def test_default_schedule_for_cuda_binds_every_kernel_to_threads():
    import tvm

    from core.compiler.schedules import default_schedule
    from core.compiler.target import make_target

    t = make_target("cuda")
    mod, _, _ = _fused_cuda_module(_matmul_relu_model(), t)
    funcs = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert funcs
    for func in funcs:
        scheduled, rule = default_schedule(func, t)
        assert rule is not None and "threadIdx.x" in scheduled.script()


@pytest.mark.slow
@needs_nvcc
def test_cuda_tuning_loop_records_and_applies_schedules_that_nvcc_compiles(tmp_path):
    """MetaSchedule's CUDA search (GPU rules, candidates built for CUDA, database, budget, progress)
    with a runner standing in for the GPU, which this machine lacks: it reports a time per
    candidate without running it. What is checked is the plumbing - the times are not real."""
    import tvm
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    from core.compiler.backend.cuda import cuda_source_of
    from core.compiler.target import make_target
    from core.compiler.tuning.tune import apply_database_pass, database_dir, tune_module

    @derived_object
    class StandInRunner(ms.runner.PyRunner):
        # the default schedule is measured alone, searched candidates in rounds of 2: the stand-in
        # makes the searched ones faster, so the database has something to win with
        def run(self, runner_inputs):
            secs = 2e-5 if len(runner_inputs) == 1 else 1e-5
            return [ms.runner.LocalRunnerFuture(res=[secs], error_message=None) for _ in runner_inputs]

    t = make_target("cuda", cuda_arch="sm_80")
    mod, pipe, rest = _fused_cuda_module(_matmul_relu_model(), t)
    seen: list[tuple[float, str]] = []
    report = tune_module(mod, t, tmp_path, budget_s=300, trials_per_task=2, trials_per_round=2, runner=StandInRunner(),
                         progress=lambda f, m: seen.append((f, m)))
    assert [task.trials for task in report.tasks] == [2] and not report.cancelled
    assert report.tasks[0].default_ms is not None  # dlight's default, measured the same way
    assert seen[-1][0] == 1.0 and [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert (database_dir(tmp_path, t) / "database_tuning_record.json").stat().st_size > 0
    with t:
        applied = apply_database_pass(t, tmp_path)(mod)
    kernels = [f for _, f in applied.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert all("tirx.is_scheduled" in f.attrs for f in kernels)  # from the database (its time beat the default's)
    ex = pipe.codegen(pipe.run(applied, rest))  # ScheduleTIR leaves the tuned kernels as they are
    nvcc_fatbin(cuda_source_of(ex), tmp_path)  # the tuned kernels are valid CUDA


@pytest.mark.parametrize("fmt", [b"cuda", b"ptx"])
def test_blob_patch_replaces_source_or_a_gpu_machines_own_build(fmt):
    """Where a GPU is, TVM compiles the kernels for that GPU alone while building (fmt 'ptx'):
    the export still ships the fatbin for every listed architecture."""
    import struct

    from core.compiler.backend.cuda import _patch_cuda_blob

    def u64(n):
        return struct.pack("<Q", n)

    def s(b):
        return u64(len(b)) + b

    fmap = u64(1) + s(b"k") + b"\x01\x02"
    cuda_bytes = s(fmt) + fmap + s(b"CODE FOR ONE GPU")
    body = u64(3) + u64(0) + u64(1) + u64(2) + u64(1) + u64(1) + s(b"_lib") + s(b"cuda") + s(cuda_bytes)
    patched = _patch_cuda_blob(u64(len(body)) + body, b"FATBIN")
    assert patched.endswith(s(s(b"fatbin") + fmap + s(b"FATBIN"))) and b"CODE FOR ONE GPU" not in patched
