"""`main.py schedule`: list kernels, apply the course's steps from JSON, measure, save the trace,
file it for compile; exit 2 with one sentence for an unknown kernel or loop and a refused step."""
from __future__ import annotations

import json

import pytest

from tests.conftest import sample
from tests.core.compiler.manual.test_session import COURSE, KERNEL
from tests.helpers import run_cli

MM_RELU = sample("mm_relu")


def test_list_json_names_kernels_loops_and_flops():
    r = run_cli("schedule", MM_RELU, "--list", "--json")
    assert r.returncode == 0, r.stderr
    (k,) = json.loads(r.stdout)["kernels"]
    assert k["name"] == KERNEL and k["onnx_nodes"] == ["matmul", "relu"] and k["flops"] == 2 * 128**3 + 128**2
    loops = {b["name"]: [(lp["name"], lp["extent"], lp["kind"]) for lp in b["loops"]] for b in k["blocks"]}
    assert loops["matmul"] == [("matmul/i0", 128, "serial"), ("matmul/i1", 128, "serial"), ("k", 128, "serial")]
    text = run_cli("schedule", MM_RELU, "--list")
    assert text.returncode == 0 and "for matmul/i1 in 128" in text.stdout and "block compute [SS]" in text.stdout


@pytest.mark.slow
def test_course_steps_measure_save_trace_and_use_in_compile(tmp_path):
    steps = tmp_path / "steps.json"
    steps.write_text(json.dumps(COURSE))
    trace = tmp_path / "trace.json"
    db = tmp_path / "db"
    r = run_cli("schedule", MM_RELU, "--kernel", KERNEL, "--steps", steps, "--measure", "--json",
                "--save-trace", trace, "--use-in-compile", "--tune-db", db, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"kernel", "default_ms", "ms", "gflops", "steps", "tir"}
    assert out["kernel"] == KERNEL and len(out["steps"]) == len(COURSE)
    assert out["ms"] > 0 and out["default_ms"] > 0 and out["gflops"] > 0 and out["peak"]["estimate"] is True
    assert "T.parallel(T.int64(128))" in out["tir"] and 'T.sblock("matmul_init")' in out["tir"]
    assert out["use_in_compile"]["choice"] in ("hand schedule", "default")
    saved = json.loads(trace.read_text())
    assert saved["steps"] == out["steps"] and any("decompose_reduction" in line for line in saved["tvm_trace_python"])
    # the saved trace reads back as steps and gives the same kernel
    again = run_cli("schedule", MM_RELU, "--kernel", KERNEL, "--steps", trace, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["tir"] == out["tir"]
    assert any(p.name == "database_workload.json" for p in db.rglob("*"))


@pytest.mark.parametrize("steps, words", [
    (None, "no kernel 'nope'"),
    ([{"primitive": "split", "loop": "j", "factors": [None, 4]}], "no loop 'j' in the kernel"),
    ([{"primitive": "vectorize", "loop": "k"}], "step 1: vectorize k was refused by TVM"),
    ([{"primitive": "eval", "loop": "k"}], "unknown primitive"),
])
def test_unknown_names_and_refused_steps_exit_2_with_one_sentence(tmp_path, steps, words):
    args = ["schedule", MM_RELU, "--kernel", "nope" if steps is None else KERNEL]
    if steps is not None:
        path = tmp_path / "steps.json"
        path.write_text(json.dumps(steps))
        args += ["--steps", path]
    r = run_cli(*args)
    assert r.returncode == 2
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_start_default_prints_the_default_schedule_as_steps():
    r = run_cli("schedule", MM_RELU, "--kernel", KERNEL, "--start", "default", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["start"] == "default" and "T.parallel(T.int64(40))" in out["tir"]
    assert [s["primitive"] for s in out["steps"]][:2] == ["tvm_trace", "compute_inline"]
    text = run_cli("schedule", MM_RELU, "--kernel", KERNEL, "--start", "default")
    assert text.returncode == 0 and "started from the default schedule: schedule rule cpu.Matmul" in text.stdout
