"""Compiling for another CPU than this one (core.compiler.target: --cpu / --cpu-features,
MLCWB_CPU / MLCWB_CPU_FEATURES): names checked against LLVM's lists, the CPU recorded in the
manifest, and code this machine cannot run compiled and exported but refused at run time
(workbench, `bench`, `run`, the exported run.py) in one sentence."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from core.errors import WorkbenchError
from tests.conftest import sample
from tests.helpers import ROOT, run_cli

# CPUs with features some x86-64 hosts lack (AMX, AVX512-FP16, AVX10): the first one this host
# cannot run stands for "a deployment host unlike this one" (none on a host that runs them all)
_FOREIGN_CANDIDATES = ("sapphirerapids", "graniterapids", "diamondrapids", "znver5", "skylake-avx512")


@pytest.fixture(autouse=True)
def _no_cpu_env(monkeypatch):
    """These tests say which CPU they mean; the suite's ISA pass (MLCWB_CPU=...) must not change them."""
    monkeypatch.delenv("MLCWB_CPU", raising=False)
    monkeypatch.delenv("MLCWB_CPU_FEATURES", raising=False)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLCWB_CPU", "MLCWB_CPU_FEATURES")}


@pytest.fixture(scope="module")
def foreign_cpu() -> str:
    from core.compiler.target import cannot_run_here, make_target, target_cpu

    for cpu in _FOREIGN_CANDIDATES:
        if cannot_run_here(target_cpu(make_target("cpu", mcpu=cpu))):
            return cpu
    pytest.skip("this host runs the code of every candidate CPU")


def test_default_is_the_host_and_the_environment_changes_it(monkeypatch):
    from core.compiler.target import host_cpu, make_target

    from core.compiler.target import target_cpu

    assert make_target("cpu").attrs["mcpu"] == host_cpu() and target_cpu(make_target("cpu"))["features"] == []
    monkeypatch.setenv("MLCWB_CPU", "znver3")
    monkeypatch.setenv("MLCWB_CPU_FEATURES", "-avx2")
    t = make_target("cpu")
    assert t.attrs["mcpu"] == "znver3" and list(t.attrs["mattr"]) == ["-avx2"]
    assert make_target("cuda").host.attrs["mcpu"] == "znver3"
    # a caller naming its CPU gets that CPU as it is; "host" is this machine's
    named = make_target("cpu", mcpu="haswell")
    assert named.attrs["mcpu"] == "haswell" and "mattr" not in named.attrs
    assert make_target("cpu", mcpu="host").attrs["mcpu"] == host_cpu()
    assert list(make_target("cpu", mattr=["-fma"]).attrs["mattr"]) == ["-fma"]


def test_features_off_are_off_for_the_schedules():
    from tvm.target import codegen

    from core.compiler.target import make_target, required_features, target_cpu

    t = make_target("cpu", mcpu="skylake-avx512", mattr="-avx512f")
    assert not codegen.target_has_features("avx512f", t) and codegen.target_has_features("avx2", t)
    assert "avx512f" not in required_features(t) and "avx2" in required_features(t)
    assert target_cpu(t) == {"name": "skylake-avx512", "features": ["-avx512f"], "requires": required_features(t)}
    assert "avx512f" in target_cpu(make_target("cpu", mcpu="skylake-avx512"))["requires"]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"mcpu": "znver9"}, r"unknown CPU 'znver9': LLVM knows no such CPU name \(did you mean .*znver"),
        ({"mcpu": "zen4"}, r"unknown CPU 'zen4'"),
        ({"mcpu": "znver3", "mattr": "-avx512q"}, r"unknown CPU feature 'avx512q' in '-avx512q'"),
    ],
)
def test_unknown_names_are_one_sentence(kwargs, message):
    from core.compiler.target import make_target

    with pytest.raises(WorkbenchError, match=message):
        make_target("cpu", **kwargs)


def test_unknown_cpu_from_the_environment_is_refused_by_the_cli():
    env = {**_clean_env(), "MLCWB_CPU": "pentium9"}
    r = subprocess.run([sys.executable, str(ROOT / "main.py"), "lower", str(sample("mlp")), "--json"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "unknown CPU 'pentium9'" in r.stderr


def test_compile_for_another_cpu_exports_and_every_runner_refuses_to_run_it(tmp_path, foreign_cpu):
    folder = tmp_path / "art"
    r = run_cli("compile", sample("mlp"), "--cpu", foreign_cpu, "-o", folder, "--json")
    assert r.returncode == 0, r.stderr
    assert "not a recognized" not in r.stderr  # LLVM knows the CPU: no warning
    out = json.loads(r.stdout)
    assert out["cpu"]["name"] == foreign_cpu and out["cpu"]["requires"]
    assert out["verification"]["checked"] is False and foreign_cpu in out["verification"]["reason"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["target"]["cpu"] == out["cpu"] and manifest["target"]["tvm_target"]["mcpu"] == foreign_cpu

    for args in (("bench", folder, "--runs", "2"), ("run", folder, "--inputs", tmp_path / "in.npz")):
        if args[0] == "run":
            import numpy as np

            np.savez(tmp_path / "in.npz", input=np.zeros((2, 784), np.float32))
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("mlcwb: cannot run this model here: its code for " + foreign_cpu)
        assert r.stderr.strip().count("\n") == 0
    r = run_cli("bench", sample("mlp"), "--cpu", foreign_cpu, "--runs", "2")
    assert r.returncode == 2 and "cannot run this model here" in r.stderr and r.stderr.strip().count("\n") == 0

    # the exported runner, with only TVM and numpy, refuses before it loads the library
    r = subprocess.run([sys.executable, "run.py"], cwd=folder, capture_output=True, text=True, timeout=120, env=_clean_env())
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"run.py: this model is compiled for {foreign_cpu} and this CPU lacks ")


def test_tuning_code_this_machine_cannot_run_needs_rpc(foreign_cpu):
    from core.compiler.compile import compile_model

    with pytest.raises(WorkbenchError, match=rf"cannot tune here: .*code for {foreign_cpu} needs .*--tune-rpc"):
        compile_model(sample("mlp"), "cpu", cpu=foreign_cpu, tune_trials=1)


def test_compile_for_this_host_without_avx512_runs_and_matches(tmp_path):
    """Code for a narrower ISA than the host's runs here, verified, and run.py runs it."""
    from core.compiler.compile import compile_model

    art = compile_model(sample("mlp"), "cpu", cpu="host", cpu_features="-avx512f", verify_dims={"batch": 2})
    cpu = art.manifest.target.cpu
    assert cpu["features"] == ["-avx512f"] and "avx512f" not in cpu["requires"]
    assert art.manifest.verification.checked
    folder = art.export(tmp_path / "art")
    r = subprocess.run([sys.executable, "run.py", "--dim", "batch=2"], cwd=folder, capture_output=True, text=True, timeout=120, env=_clean_env())
    assert r.returncode == 0, r.stderr


def test_lower_for_a_named_cpu_generates_its_code(tmp_path):
    r = run_cli("lower", sample("mm_relu"), "--cpu", "haswell", "--cpu-features", "-fma", "--dump", tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    llvm_ir = [p for p in tmp_path.iterdir() if p.suffix == ".ll"]
    assert llvm_ir, sorted(p.name for p in tmp_path.iterdir())
    text = llvm_ir[0].read_text()
    assert '"target-cpu"="haswell"' in text and "-fma" in text


def test_unknown_cpu_on_the_cli_is_one_sentence_and_status_2(tmp_path):
    for args in (("compile", sample("mlp"), "--cpu", "znver9", "-o", tmp_path / "a"),
                 ("bench", sample("mlp"), "--cpu-features", "+nonesuch"),
                 ("lower", sample("mlp"), "--cpu", "nehalem2")):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("mlcwb: unknown CPU") and r.stderr.strip().count("\n") == 0
    assert not (tmp_path / "a").exists()


def test_measuring_a_kernel_for_another_cpu_is_refused(foreign_cpu):
    """`schedule --measure` compiles the kernel for the environment's CPU; code this machine
    cannot run is not timed (it would die of an illegal instruction)."""
    env = {**_clean_env(), "MLCWB_CPU": foreign_cpu}
    r = subprocess.run([sys.executable, str(ROOT / "main.py"), "schedule", str(sample("mm_relu")), "--kernel", "fused_matmul_relu", "--measure"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"mlcwb: cannot run this kernel here: its code for {foreign_cpu} needs ")
    assert r.stderr.strip().count("\n") == 0


def test_avx512_code_has_no_gathers_where_avx2_code_moves_contiguous_vectors():
    """Loops no schedule rule took (tiny_transformer's layer-norm pieces have a symbolic batch):
    with AVX-512 LLVM's vectorizer gathered and scattered them (576 in the model, slow on Zen 4);
    every AVX-512 target asks it not to (core.compiler.target.NO_GATHER). Code generation only:
    the test runs on AVX2 hosts too."""
    import re

    from core.compiler.compile import compile_model
    from core.compiler.target import NO_GATHER, make_target, target_cpu

    assert set(NO_GATHER) <= set(make_target("cpu", mcpu="znver4").attrs["mattr"])
    assert "mattr" not in make_target("cpu", mcpu="znver3").attrs  # AVX2 targets as they were
    assert target_cpu(make_target("cpu", mcpu="znver4"))["features"] == []

    def modules(m):
        yield m
        for child in m.imports:
            yield from modules(child)

    art = compile_model(sample("tiny_transformer"), "cpu", cpu="znver4", verify=False)
    asm = "\n".join(m.inspect_source("asm") for m in modules(art.library.mod) if m.kind == "llvm")
    assert "%zmm" in asm
    assert not re.search(r"\bv(?:gather|scatter)\w*ps\b", asm)
