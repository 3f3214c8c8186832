"""Export: a folder that runs with only apache-tvm + numpy; load_artifact; `compile`/`run` CLI; CUDA export."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.compiler.runtime.artifact import load_artifact
from core.compiler.runtime.manifest import LatencyStats, Measured

from core.compiler.compile import compile_model

from core.compiler.backend.cuda import _patch_cuda_blob
from core.errors import WorkbenchError
from tests.conftest import sample
from tests.helpers import ort_run, run_cli

# Runs the exported run.py in a fresh interpreter from the artifact folder (the repository is not
# on sys.path) with an import hook that fails any import of the workbench or its heavy deps.
ISOLATED = textwrap.dedent(
    """
    import sys, runpy
    BLOCKED = {"onnx", "onnxruntime", "onnx_ir", "onnxscript", "PySide6", "core", "cli", "app", "rewrites", "networkx"}
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"run.py must not import {name}")
    sys.meta_path.insert(0, Block())
    sys.path = [p for p in sys.path if "/work/main" not in p or "site-packages" in p]
    sys.argv = ["run.py"] + sys.argv[1:]
    runpy.run_path("run.py", run_name="__main__")
    """
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("art") / "mlp"
    art = compile_model(sample("mlp"), "cpu", verify_dims={"batch": 2})
    art.export(folder, measured=Measured(latency_ms=LatencyStats(median=1.0, p90=1.0, min=1.0, runs=1)))
    return art, folder


def test_folder_contents_and_manifest(exported):
    art, folder = exported
    names = {p.name for p in folder.iterdir()}
    assert {"model.so", "manifest.json", "run.py", "model.onnx"} <= names
    m = json.loads((folder / "manifest.json").read_text())
    assert m["target"]["kind"] == "cpu" and m["tvm_version"]
    assert m["inputs"][0]["shape"] == ["batch", 784] and m["outputs"][0]["name"] == "logits"
    assert m["passes"] and m["verification"]["checked"] and "measured" in m
    assert m["memory_estimate"]["params_bytes"] > 400_000
    import hashlib

    assert m["source_model_sha256"] == hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()


def test_load_artifact_runs_like_the_compiled_one(exported):
    art, folder = exported
    loaded = load_artifact(folder)
    x = {"input": np.random.default_rng(1).standard_normal((4, 784)).astype(np.float32)}
    np.testing.assert_array_equal(loaded.run(x)[0], art.run(x)[0])


def test_run_py_needs_only_tvm_and_numpy(exported, tmp_path):
    art, folder = exported
    x = np.random.default_rng(2).standard_normal((3, 784)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    r = subprocess.run(
        [sys.executable, "-c", ISOLATED, "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")],
        cwd=folder, capture_output=True, text=True, timeout=120, env=env,
    )
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "out.npz", allow_pickle=False) as out:
        np.testing.assert_allclose(out["logits"], ort_run(onnx.load(str(sample("mlp"))), {"input": x})[0], rtol=1e-3, atol=1e-4)
    h = subprocess.run([sys.executable, "run.py", "--help"], cwd=folder, capture_output=True, text=True, timeout=60)
    assert h.returncode == 0 and "--inputs" in h.stdout


def test_runner_source_imports_nothing_else():
    import ast
    from pathlib import Path

    import core.compiler.runtime.run_template as rt

    tree = ast.parse(Path(rt.__file__).read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    # tvm_ffi is apache-tvm's own FFI package, installed with it (its from_dlpack reads numpy's 16-byte aligned arrays)
    assert roots <= {"__future__", "argparse", "ctypes", "importlib", "os", "sys", "tempfile", "time", "numpy", "tvm", "tvm_ffi"}


def test_compile_and_run_cli(tmp_path):
    out_dir = tmp_path / "a"
    r = run_cli("compile", sample("mlp"), "--target", "cpu", "-o", out_dir, "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["verification"]["checked"] and "model.so" in d["files"]
    x = np.random.default_rng(3).standard_normal((2, 784)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    r = run_cli("run", out_dir, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz", timeout=120)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "out.npz", allow_pickle=False) as out:
        assert out.files == ["logits"] and out["logits"].shape == (2, 10)
    np.savez(tmp_path / "bad.npz", nope=x)
    r = run_cli("run", out_dir, "--inputs", tmp_path / "bad.npz")
    assert r.returncode == 2 and "nope" in r.stderr


def test_bad_artifact_folder_is_one_sentence(tmp_path):
    with pytest.raises(WorkbenchError, match="manifest.json"):
        load_artifact(tmp_path)
    r = run_cli("run", tmp_path, "--inputs", tmp_path / "x.npz")
    assert r.returncode == 2 and "manifest.json" in r.stderr


def test_patch_cuda_blob_swaps_source_for_fatbin():
    def u64(n):
        return struct.pack("<Q", n)

    def s(b):
        return u64(len(b)) + b

    source = b"extern \"C\" __global__ void k() {}"
    fmap = u64(1) + s(b"k") + b"\x01\x02\x03"  # opaque to the patcher
    cuda_bytes = s(b"cuda") + fmap + s(source)
    body = u64(3) + u64(0) + u64(1) + u64(2) + u64(1) + u64(1) + s(b"_lib") + s(b"cuda") + s(cuda_bytes)
    blob = u64(len(body)) + body
    patched = _patch_cuda_blob(blob, b"FATBIN")
    assert patched.endswith(s(s(b"fatbin") + fmap + s(b"FATBIN")))
    assert struct.unpack_from("<Q", patched)[0] == len(patched) - 8


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit) to build the fatbin")
def test_cuda_compile_and_export_carry_compiled_kernels(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])
    m = helper.make_model(
        helper.make_graph([helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])], "tiny", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.save(m, tmp_path / "tiny.onnx")
    art = compile_model(tmp_path / "tiny.onnx", "cuda")
    assert "__global__" in art.cuda_source
    folder = art.export(tmp_path / "cuda_art")
    man = json.loads((folder / "manifest.json").read_text())
    assert man["target"]["kind"] == "cuda" and man["cuda"]["kernels"] == "fatbin" and man["cuda"]["fatbin_bytes"] > 0
    assert "__global__" in (folder / "kernels.cu").read_text()
    lib = (folder / "model.so").read_bytes()
    assert bytes.fromhex("50ed55ba") in lib  # the fatbin's magic: compiled code, not source, ships
    assert b"__global__" not in lib


@pytest.mark.isa
def test_a_model_without_parallel_kernels_runs_without_choosing_threads():
    """The manifest counts the kernels with a parallel loop; where there are none (the tiny
    transformer's 1-5 us kernels), runs skip core.compiler.runtime.threads' choice, which only costs
    time; a model with split convs keeps it, and so does an artifact whose manifest does not say."""
    tiny = compile_model(sample("tiny_transformer"), "cpu", verify=False)
    cnn = compile_model(sample("small_cnn"), "cpu", verify=False)
    assert tiny.manifest.parallel_kernels == 0 and cnn.manifest.parallel_kernels >= 1
    def zeros(art):
        return {s.name: np.zeros([d if isinstance(d, int) else 1 for d in s.shape], s.dtype) for s in art.inputs}

    for art in (tiny, cnn):
        art.run(zeros(art))
    assert tiny._governor is None and cnn._governor is not None
    tiny.manifest.parallel_kernels = None  # an artifact exported before the count existed
    tiny.run(zeros(tiny))
    assert tiny._governor is not None


def test_run_py_launches_on_the_thread_pool_the_folder_carries(exported, tmp_path):
    """The folder carries the workbench's parallel launch (core.compiler.runtime.native_pool) and run.py
    loads it before TVM; without it, or with WORKBENCH_NATIVE_POOL=0, TVM's own pool runs."""
    _art, folder = exported
    m = json.loads((folder / "manifest.json").read_text())
    assert m["thread_pool"] == "threadpool.so" and "threadpool.so" in m["files"] and (folder / "threadpool.so").is_file()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORKBENCH_NATIVE_POOL")}

    def bench(folder, **extra):
        r = subprocess.run([sys.executable, "-c", ISOLATED, "--bench", "3"], cwd=folder, capture_output=True, text=True, timeout=120, env={**env, **extra})
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().splitlines()[-1]

    assert bench(folder) == "parallel kernels: the workbench's thread pool"
    assert bench(folder, WORKBENCH_NATIVE_POOL="0") == "parallel kernels: TVM's thread pool"
    bare = tmp_path / "bare"  # as exported where no C compiler built the pool: the manifest names none
    shutil.copytree(folder, bare)
    (bare / "threadpool.so").unlink()
    m = json.loads((bare / "manifest.json").read_text())
    del m["thread_pool"], m["checksums"]["threadpool.so"]
    m["files"].remove("threadpool.so")
    (bare / "manifest.json").write_text(json.dumps(m))
    assert bench(bare) == "parallel kernels: TVM's thread pool"


@pytest.mark.isa
def test_run_py_chooses_threads_only_for_a_model_with_parallel_kernels(exported, tmp_path, monkeypatch):
    """The exported run.py, like Artifact.run_device, skips its thread governor (a look at the
    machine and the pool's timing, each run) for a model without a parallel kernel (the MLP here)
    and keeps it for one with split convs."""
    import importlib.util

    cnn = compile_model(sample("small_cnn"), "cpu", verify=False)
    assert exported[0].manifest.parallel_kernels == 0 and cnn.manifest.parallel_kernels >= 1
    cnn_folder = tmp_path / "cnn"
    cnn.export(cnn_folder)
    monkeypatch.delenv("WORKBENCH_ADAPTIVE_THREADS", raising=False)
    governed = {}
    for name, folder in (("mlp", exported[1]), ("cnn", cnn_folder)):
        spec = importlib.util.spec_from_file_location(f"run_py_{name}", folder / "run.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        real, calls = module._pool_governor, []
        monkeypatch.setattr(module, "_pool_governor", lambda *a, real=real, calls=calls: calls.append(a) or real(*a))
        assert module.main(["--bench", "2"]) == 0
        governed[name] = len(calls)
    assert governed == {"mlp": 0, "cnn": 1}
