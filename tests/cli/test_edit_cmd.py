"""`main.py edit --emit-python FILE.py`: the edits of the command line as a script, which turns the
model into what `-o` writes, byte for byte, run without the workbench; `-o` optional with it; bad
input in one sentence (exit 2)."""
from __future__ import annotations

import json

import numpy as np

from tests.conftest import sample
from tests.core.rewrite.test_as_python import run_blocked, same_model
from tests.helpers import run_cli

EDITS = ["--delete-reconnect", "stem.relu", "--set", "pool1", "strides=1,1", "--insert", "LeakyRelu(gap_out) after=gap_out alpha=0.2",
         "--rename-node", "fc", "classifier", "--replace-initializer", "block2.bn.scale", "SCALE"]


def test_emit_python_gives_the_model_edit_writes(tmp_path):
    src = sample("small_cnn")
    scale = tmp_path / "scale.npy"
    np.save(scale, np.linspace(0.5, 1.5, 32, dtype=np.float32))
    edits = [str(scale) if e == "SCALE" else e for e in EDITS]
    script, out = tmp_path / "edits.py", tmp_path / "edited.onnx"
    r = run_cli("edit", src, "-o", out, "--emit-python", script, "--json", *edits)
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["python"] == str(script) and obj["python_arrays"] == []
    text = script.read_text()
    assert "# 5. Replace initializer 'block2.bn.scale' from scale.npy" in text
    assert same_model(out, run_blocked(script, src, tmp_path / "from_script.onnx"))


def test_emit_python_without_output_and_bad_input(tmp_path):
    src = sample("small_cnn")
    script = tmp_path / "only.py"
    r = run_cli("edit", src, "--emit-python", script, "--set", "pool1", "strides=1,1")
    assert r.returncode == 0, r.stderr
    assert script.exists() and "wrote " + str(script) in r.stdout
    r = run_cli("edit", src, "--set", "pool1", "strides=1,1")
    assert r.returncode == 2 and r.stderr.strip().endswith("edit needs -o OUT.onnx, --emit-python FILE.py or both.")
    r = run_cli("edit", src, "--emit-python", tmp_path / "x.py", "--delete", "no_such_node")
    assert r.returncode == 2 and "no node named 'no_such_node'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.py").exists()


def test_a_node_is_named_as_messages_name_it(tmp_path):
    """`Relu #10`, the form edit's own messages print for an unnamed node, works as well as `#10`."""
    import onnx

    from tests.core.views.test_diff_matching import cnn

    src, out = tmp_path / "cnn.onnx", tmp_path / "out.onnx"
    onnx.save(cnn(), src)
    relu = next(i for i, n in enumerate(cnn().graph.node) if n.op_type == "Relu") + 1
    r = run_cli("edit", src, "--delete-reconnect", f"Relu #{relu}", "-o", out)
    assert r.returncode == 0, r.stderr
    assert len(onnx.load(out).graph.node) == len(cnn().graph.node) - 1
    r = run_cli("edit", src, "--delete", f"Conv #{relu}", "-o", out, "--overwrite")
    assert r.returncode == 2 and f"Node #{relu} is a Relu, not a Conv." in r.stderr, r.stderr
