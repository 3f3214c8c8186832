"""Artifacts for another ISA checked here under user-mode emulation (core.compiler.runtime.emulation):
an AArch64 build of a small model runs its own run.py under qemu-user and matches onnxruntime on the
host, `main.py run` says it ran emulated, a run.py refusal comes back as its sentence; without the
emulation set up, one sentence says how. And the runtime-only TVM that the emulation uses runs an
artifact of this machine too (run.py with TVM_USE_RUNTIME_LIB=1).

The emulated tests need `python scripts/setup_emulation.py` once (~150 MB cache); they skip with
that sentence where it has not run, except on CI (CI=true), where they fail. Each costs ~12 s."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.runtime.emulation import DEFAULT_TRIPLE, emulator, not_set_up, run_emulated
from core.errors import WorkbenchError
from tests.helpers import checked_model, ort_run, run_cli

TRIPLE = DEFAULT_TRIPLE


def _model() -> onnx.ModelProto:
    """y = relu(x @ w + b), x [2, 16], random weights."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w, b])
    return checked_model(graph)


@pytest.fixture(scope="module")
def arm_artifact(tmp_path_factory):
    """The model compiled for a Cortex-A76 (cross-linked with aarch64-linux-gnu-gcc) and exported."""
    from core.compiler.compile import compile_model

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu), so no ARM64 artifact can be linked.")
    folder = tmp_path_factory.mktemp("arm")
    onnx.save(_model(), str(folder / "tiny.onnx"))
    art = compile_model(str(folder / "tiny.onnx"), "cpu", triple=TRIPLE, cpu="cortex-a76")
    return art.export(folder / "art")


@pytest.fixture(scope="module")
def emulation():
    from core.compiler.target import host_arch

    if host_arch() == "aarch64":
        pytest.skip("this machine runs AArch64 code itself: nothing to emulate")
    emu = emulator(TRIPLE)
    if emu is None:
        why = not_set_up("an ARM64 artifact", TRIPLE)
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"emulation must be set up on CI: {why}")
        pytest.skip(why)
    return emu


def test_an_arm64_artifact_runs_emulated_and_matches_onnxruntime(arm_artifact, emulation):
    from core.compiler.check.artifact_run_check import check_artifact
    from core.compiler.runtime.artifact import load_artifact

    art = load_artifact(arm_artifact)
    assert art.foreign and art.library is None  # another ISA's library is never loaded here
    result = check_artifact(art)  # seeded inputs, run.py under qemu, onnxruntime on the host
    assert result.match and result.emulated and result.emulator == "qemu-aarch64", result.sentence
    assert result.max_abs_err < 1e-4
    assert "emulation" in result.sentence and "no latency" in result.sentence


def test_main_run_says_it_ran_emulated(arm_artifact, emulation, tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    ran = run_cli("run", arm_artifact, "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert ran.returncode == 0, ran.stderr
    assert "y: shape [2, 8] dtype float32" in ran.stdout and f"ran under emulation of {TRIPLE}" in ran.stdout
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["y"], ort_run(_model(), {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_run_py_refusals_come_back_in_its_words(arm_artifact, emulation):
    with pytest.raises(WorkbenchError, match=r"run\.py under qemu-aarch64 emulation: the inputs file holds 'z', which is not an input of the model \(inputs: x\)\.$"):
        run_emulated(arm_artifact, {"z": np.zeros((2, 16), np.float32)})


def test_without_emulation_one_sentence_says_how(arm_artifact, tmp_path, monkeypatch):
    from core.compiler.runtime.artifact import load_artifact
    from core.compiler.target import host_arch

    monkeypatch.setenv("MLCWB_EMULATION_DIR", str(tmp_path))
    assert emulator(TRIPLE) is None
    art = load_artifact(arm_artifact)
    with pytest.raises(WorkbenchError) as e:
        art.run({"x": np.zeros((2, 16), np.float32)})
    assert str(e.value) == (f"the artifact {arm_artifact} is built for {TRIPLE}; to check it on this {host_arch()} machine, "
                            "set up emulation once: python scripts/setup_emulation.py")
    with pytest.raises(WorkbenchError, match="only under emulation, where nothing is measured"):
        art.vm()  # nothing here times or runs it natively


@pytest.fixture(scope="module")
def host_artifact(tmp_path_factory):
    from core.compiler.compile import compile_model

    folder = tmp_path_factory.mktemp("host")
    onnx.save(_model(), str(folder / "tiny.onnx"))
    art = compile_model(str(folder / "tiny.onnx"), "cpu", verify=False)
    return art, art.export(folder / "art")


def test_run_py_runs_on_the_tvm_runtime_alone(host_artifact, tmp_path):
    """An artifact for this machine, run by its run.py with TVM's runtime library only (no
    compiler: `from tvm import relax` fails there), gives the workbench's outputs."""
    art, folder = host_artifact
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1")
    p = subprocess.run([sys.executable, str(folder / "run.py"), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["y"], art.run({"x": x})[0], rtol=1e-6, atol=1e-6)


def test_run_py_makes_the_vm_itself_where_tvm_has_no_vm_module(host_artifact, monkeypatch):
    """Where tvm.runtime.vm cannot be imported, run.py initialises the executable's VM as
    VirtualMachine does (the device, the CPU, the pooled allocator): the same outputs."""
    import importlib.util

    import tvm

    art, folder = host_artifact
    spec = importlib.util.spec_from_file_location("mlcwb_test_run_py", folder / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    monkeypatch.setitem(sys.modules, "tvm.runtime.vm", None)  # its import raises ImportError
    vm = run_py._virtual_machine(tvm, tvm.runtime.load_module(str(folder / "model.so")), tvm.cpu(0))
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), art.run({"x": x})[0], rtol=1e-6, atol=1e-6)


def test_check_artifact_runs_an_artifact_of_this_machine_natively(host_artifact, monkeypatch):
    from core.compiler.check.artifact_run_check import check_artifact
    from core.compiler.runtime.artifact import load_artifact

    art = load_artifact(host_artifact[1])
    result = check_artifact(art)
    assert result.match and not result.emulated and result.reference == "onnxruntime", result.sentence
    assert result.sentence.startswith("matches onnxruntime (max abs error") and "emulation" not in result.sentence
    real = art.run
    monkeypatch.setattr(art, "run", lambda feeds, function=None: [o + 1.0 for o in real(feeds, function)])
    wrong = check_artifact(art)
    assert not wrong.match and wrong.max_abs_err >= 1.0 - 1e-6
    assert wrong.sentence.startswith("the compiled model disagrees with onnxruntime on output 'y'"), wrong.sentence
