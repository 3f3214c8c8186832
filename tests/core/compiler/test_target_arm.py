"""ARM64 as a target (core.compiler.target: --triple aarch64-linux-gnu, --preset): names checked
against LLVM's AArch64 lists in one sentence each, NEON's lanes and registers for the schedules,
the triple in the manifest, model.so cross-linked for AArch64, and nothing tried on this machine
that only an ARM64 CPU can run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import WorkbenchError
from tests.conftest import sample
from tests.helpers import run_cli

ARM = "aarch64-linux-gnu"
_EM_AARCH64 = 183  # ELF e_machine of AArch64
needs_cross = pytest.mark.skipif(shutil.which(f"{ARM}-gcc") is None, reason=f"{ARM}-gcc is not installed (.ci/run installs gcc-aarch64-linux-gnu)")


@pytest.fixture(autouse=True)
def _no_cpu_env(monkeypatch):
    """These tests say which CPU they mean; the suite's ISA pass (MLCWB_CPU=...) must not change them."""
    monkeypatch.delenv("MLCWB_CPU", raising=False)
    monkeypatch.delenv("MLCWB_CPU_FEATURES", raising=False)


def _elf_machine(path: Path) -> int:
    head = path.read_bytes()[:20]
    assert head[:4] == b"\x7fELF"
    return int.from_bytes(head[18:20], "little")


def test_presets_and_triples_build_aarch64_targets_with_neon_lanes_and_registers():
    from core.compiler.target import DEVICE_PRESETS, code_arch, device_preset, make_target, target_cpu, vector_lanes, vector_registers

    t = make_target("cpu", triple=ARM, mcpu="cortex-a76", mattr="+dotprod")
    assert str(t.attrs["mtriple"]) == ARM and str(t.attrs["mcpu"]) == "cortex-a76"
    assert vector_lanes(t) == 4 and vector_lanes(t, 16) == 8 and vector_registers(t) == 32
    record = target_cpu(t)
    assert record["triple"] == ARM and record["features"] == ["+dotprod"]
    assert {"neon", "dotprod"} <= set(record["requires"]) and not any(f.startswith("avx") for f in record["requires"])
    assert code_arch(record) == "aarch64"
    # the default CPU of a foreign triple is generic, its cores the preset's or 4
    generic = make_target("cpu", triple=ARM)
    assert str(generic.attrs["mcpu"]) == "generic" and int(generic.attrs["num-cores"]) == 4
    assert target_cpu(generic)["requires"] == ["fp-armv8", "neon"]
    orin = device_preset("jetson-orin").target()
    assert int(orin.attrs["num-cores"]) == 8 and str(orin.attrs["mcpu"]) == "cortex-a78ae"
    for preset in DEVICE_PRESETS.values():
        assert target_cpu(preset.target())["triple"] == preset.triple
    # this machine's own code records no triple (manifests stay as they were)
    assert "triple" not in target_cpu(make_target("cpu"))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"triple": "riscv64-linux-gnu"}, "unknown target triple 'riscv64-linux-gnu'"),
        ({"triple": ARM, "mcpu": "cortex-a99"}, "unknown CPU 'cortex-a99'"),
        ({"triple": ARM, "mattr": "+avx2"}, "unknown CPU feature 'avx2'"),
        ({"triple": ARM, "mcpu": "host"}, "CPU 'host' is this"),
        ({"triple": ARM, "kind": "cuda"}, "drop --triple"),
    ],
)
def test_wrong_names_are_one_sentence(kwargs, words):
    from core.compiler.target import make_target

    kind = kwargs.pop("kind", "cpu")
    with pytest.raises(WorkbenchError) as e:
        make_target(kind, **kwargs)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_unknown_preset_lists_the_presets():
    from core.compiler.target import device_preset

    with pytest.raises(WorkbenchError, match="unknown device preset 'rpi9': choose one of rpi4, rpi5"):
        device_preset("rpi9")


def test_foreign_code_names_the_architecture_and_where_it_runs():
    from core.compiler.target import cannot_run_here, host_arch, make_target, target_cpu

    if host_arch() == "aarch64":
        pytest.skip("this machine runs AArch64 code")
    why = cannot_run_here(target_cpu(make_target("cpu", triple=ARM, mcpu="cortex-a72")))
    assert "aarch64-linux-gnu (cortex-a72)" in why and "ARM64" in why and "--check-only" in why and "--rpc" in why


@needs_cross
def test_compile_for_a_preset_exports_a_cross_linked_artifact(tmp_path):
    out = tmp_path / "art"
    r = run_cli("compile", str(sample("mm_relu")), "--preset", "rpi5", "-o", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    assert _elf_machine(out / "model.so") == _EM_AARCH64
    manifest = json.loads((out / "manifest.json").read_text())
    cpu = manifest["target"]["cpu"]
    assert cpu["triple"] == ARM and cpu["name"] == "cortex-a76" and cpu["features"] == ["+dotprod"]
    assert not (out / "threadpool.so").exists()  # the workbench's pool is built for this machine only
    deploy = manifest["deploy"]
    assert deploy["platform"] == "linux-aarch64" and deploy["artifact_bytes"]["model.so"] == (out / "model.so").stat().st_size
    assert "model.onnx" in deploy["check_only_bytes"] and "model.onnx" not in deploy["artifact_bytes"]
    assert "the device (linux-aarch64) needs Python with numpy" in r.stdout
    assert manifest["verification"] is None or not manifest["verification"].get("passed")
    # the recipe rebuilds it for the same architecture, and says it cannot check it here
    rebuilt = tmp_path / "rebuilt"
    r = subprocess.run([sys.executable, str(out / "recipe" / "rebuild.py"), "-o", str(rebuilt)], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert "not checked: the code is for aarch64-linux-gnu" in r.stdout
    assert _elf_machine(rebuilt / "model.so") == _EM_AARCH64


@needs_cross
def test_a_missing_cross_compiler_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("MLCWB_CROSS_CC", "no-such-aarch64-gcc")
    r = run_cli("compile", str(sample("mm_relu")), "--triple", ARM, "-o", str(tmp_path / "art"), timeout=300)
    assert r.returncode == 2
    assert "MLCWB_CROSS_CC=no-such-aarch64-gcc names no compiler on PATH" in r.stderr
    assert not (tmp_path / "art").exists()


def test_cli_refuses_bad_triples_and_running_arm_code_here(tmp_path):
    r = run_cli("compile", str(sample("mm_relu")), "--triple", "mips-linux-gnu", "-o", str(tmp_path / "a"))
    assert r.returncode == 2 and "unknown target triple 'mips-linux-gnu'" in r.stderr
    r = run_cli("bench", str(sample("mm_relu")), "--preset", "graviton3", "--runs", "2")
    assert r.returncode == 2 and "aarch64-linux-gnu" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("debug", str(sample("mm_relu")), "--preset", "rpi4")
    assert r.returncode == 2 and "debug runs the compiled model here" in r.stderr


def test_lowering_for_arm_ends_in_aarch64_assembly_with_neon_fma(tmp_path):
    from core import load_model
    from core.compiler.lowering import lower
    from core.compiler.pipeline.pass_list import default_pipeline
    from core.compiler.target import make_target

    stages = lower(load_model(sample("mm_relu")), make_target("cpu", triple=ARM, mcpu="cortex-a76"), default_pipeline("cpu"), assembly=True)
    asm = stages[-1].text
    assert "fmla\tv" in asm and ".4s" in asm and "zmm" not in asm and "ymm" not in asm
