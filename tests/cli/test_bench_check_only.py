"""`bench --check-only`: one run on seeded inputs against onnxruntime and no timing; an ARM64
build is compiled, cross-linked and checked under emulation on this x86 machine."""
from __future__ import annotations

import json

from tests.conftest import sample
from tests.core.compiler.runtime.test_emulation import emulation  # noqa: F401 - the fixture (skips, or fails on CI, when not set up)
from tests.helpers import run_cli


def test_check_only_on_this_machine_measures_nothing_and_matches(tmp_path):
    art = tmp_path / "art"
    assert run_cli("compile", str(sample("mlp")), "-o", str(art)).returncode == 0
    r = run_cli("bench", str(art), "--check-only", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["match"] and not out["emulated"] and out["reference"] == "onnxruntime" and "latency_ms" not in out


def test_an_arm64_build_of_a_sample_is_checked_under_emulation(emulation):  # noqa: F811
    r = run_cli("bench", str(sample("small_cnn")), "--preset", "rpi5", "--check-only", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["match"] and out["emulated"] and out["emulator"] == "qemu-aarch64" and out["max_abs_err"] < 1e-4
    assert "no latency is measured" in out["sentence"]
