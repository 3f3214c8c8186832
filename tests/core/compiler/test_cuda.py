"""CUDA artifacts: every model exports through nvcc (no GPU needed), the fatbin loads and runs where a
GPU is, and an nvcc failure names the kernel and the first compiler error."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import onnx
import pytest

from core import load_model
from core.compiler.artifact import load_artifact
from core.compiler.compile import compile_model
from core.compiler.cuda import explain_nvcc_failure, kernel_at_line, nvcc_fatbin
from core.compiler.reference import compare_outputs, ort_run, random_feeds
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
    assert kernel_at_line(_SOURCE, 3) is None  # a forward declaration is no kernel body
    stderr = ('/tmp/x/kernels.cu(9): error: identifier "y" is undefined\n    x[0] = y;\n\n'
              "/tmp/x/kernels.cu(10): error: expected an expression\n\n"
              '2 errors detected in the compilation of "/tmp/x/kernels.cu".\n')
    assert explain_nvcc_failure(stderr, _SOURCE) == (
        "nvcc could not compile the generated CUDA kernel 'bad_kernel': kernels.cu line 9: "
        'identifier "y" is undefined (1 more error follows).')
    assert "preamble" in explain_nvcc_failure("kernels.cu(1): error: bad include\n", _SOURCE)
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
# so the suite exports a few that cover the cases (ZFNet-512: Caffe2's 'gpu_0/data_0' and a
# '-' in a name); MLCWB_CUDA_SWEEP=all exports every one.
_ALL = ["exporter_names"] + [f"light:{n.removeprefix('light_').removesuffix('.onnx')}" for n in LIGHT_MODELS] + [
    f"sample:{n.removesuffix('.onnx')}" for n in SAMPLE_MODELS]
_DEFAULT = ["exporter_names", "light:zfnet512", "sample:mlp"]
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
