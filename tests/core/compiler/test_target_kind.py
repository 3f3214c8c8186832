"""The target kind is a type (core.compiler.target.TargetKind) parsed once at the edge: an unknown
one is refused in one sentence naming it, by the core entry points and by the CLI, and the
kind's values are the CLI's and the manifest's words."""
from __future__ import annotations

import json

import pytest

from core.compiler.target import TargetKind, make_target
from core.errors import WorkbenchError
from tests.conftest import sample

REFUSAL = "unknown target 'tpu': choose one of cpu, cuda."


def test_an_unknown_target_kind_is_refused_in_one_sentence_naming_it():
    from core.compiler.compile import compile_model
    from core.compiler.lowering import lower
    from core.model.onnx_io import load_model

    with pytest.raises(WorkbenchError) as e:
        TargetKind.parse("tpu")
    assert str(e.value) == REFUSAL
    for call in (lambda: make_target("tpu"), lambda: compile_model(sample("mlp"), "tpu"),
                 lambda: lower(load_model(sample("mlp")), "tpu")):
        with pytest.raises(WorkbenchError) as e:
            call()
        assert str(e.value) == REFUSAL


def test_the_cli_refuses_an_unknown_target_with_the_same_sentence(capsys, tmp_path):
    from cli import run_cli

    for argv in (["compile", str(sample("mlp")), "--target", "tpu", "-o", str(tmp_path / "a")],
                 ["lower", str(sample("mlp")), "--target", "tpu"]):
        with pytest.raises(SystemExit) as e:
            run_cli(argv)
        assert e.value.code == 2
        assert capsys.readouterr().err.strip().endswith(f"argument --target: {REFUSAL}")


def test_a_kind_reads_and_writes_as_its_word():
    assert TargetKind.parse("cuda") is TargetKind.CUDA and TargetKind.parse(TargetKind.CPU) is TargetKind.CPU
    assert json.dumps({"kind": TargetKind.CUDA}) == '{"kind": "cuda"}' and f"{TargetKind.CPU}" == "cpu"
    assert TargetKind.of(make_target("cuda")) is TargetKind.CUDA and TargetKind.of(make_target("cpu")) is TargetKind.CPU
