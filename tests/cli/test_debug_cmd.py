"""`main.py debug`: the first divergence in text and JSON, the compiled program by default, and
bad input as one sentence with exit status 2."""
from __future__ import annotations

import json

import numpy as np
import onnx

from tests.core.accuracy.test_debug import mlp_tanh, scaled_weight
from tests.core.views.test_diff_matching import cnn
from tests.helpers import run_cli


def test_against_a_model_with_one_changed_conv_names_that_conv(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(cnn(), a)
    onnx.save(scaled_weight(cnn(), "b0b_w", 1.02), b)
    r = run_cli("debug", a, "--against", b, "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["first_divergence"]["op"] == "Conv" and obj["first_divergence"]["output"] == "b0b_c"
    assert obj["first_divergence"]["node"] == "Conv#7"  # unnamed: its label
    row = obj["tensors"][0]
    assert {"node", "op", "output", "max_abs", "max_rel", "range"} <= set(row) and row["max_abs"] == 0
    text = run_cli("debug", a, "--against", b)
    assert text.returncode == 0, text.stderr
    assert "first divergence: Conv 'Conv#7'" in text.stdout


def test_the_compiled_program_against_onnxruntime(tmp_path):
    m = tmp_path / "mlp.onnx"
    onnx.save(mlp_tanh(), m)
    r = run_cli("debug", m, "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["mode"] == "compiled" and obj["reference"] == "onnxruntime" and obj["first_divergence"] is None
    assert obj["tensors"] and all(t["ok"] and t.get("kernel") for t in obj["tensors"])


def test_bad_input_is_one_sentence_and_exit_2(tmp_path):
    a = tmp_path / "a.onnx"
    onnx.save(cnn(), a)
    r = run_cli("debug", a, "--against", tmp_path / "missing.onnx")
    assert r.returncode == 2 and "missing.onnx" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    feeds = tmp_path / "in.npz"
    np.savez(feeds, image=np.zeros((1, 3, 8, 8), np.float32))
    r = run_cli("debug", a, "--against", a, "--inputs", feeds)
    assert r.returncode == 2 and "'image'" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
