"""The edit history as code (core.rewrite.as_python): edits and rewrites applied through the
workbench's own commands, written as a script, and the script run in a fresh interpreter that
cannot import the workbench (`python -I`, cwd outside the repository) on the original file: its
output must equal the workbench's saved model byte for byte (both parsed by onnx and serialized
deterministically). `same_model` was checked against a model one attribute apart (the negative
test below), so it cannot pass on models that differ."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core import load_model, save_model
from core.model import edits as E
from core.rewrite.as_python import NotExpressible, PythonScript
from core.rewrite.engine import RewriteEdit, preview
from core.rewrite.python_source import ArrayStore
from rewrites import get_rule
from tests.conftest import sample


def same_model(a, b) -> bool:
    return onnx.load(str(a)).SerializeToString(deterministic=True) == onnx.load(str(b)).SerializeToString(deterministic=True)


def run_script(script: PythonScript, src, tmp_path, name="edits.py"):
    """Write the script (and its .npy files), run it without the workbench; the model it wrote."""
    folder = tmp_path / "script"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(script.text(src.name))
    for fname, array in script.array_files.items():
        np.save(folder / fname, array, allow_pickle=False)
    return run_blocked(path, src, tmp_path / "from_script.onnx")


def run_blocked(path, src, out):
    """Run script `path` on `src`, writing `out`, with the workbench out of reach."""
    # a fresh interpreter, outside the repository, where importing the workbench fails (the venv
    # has it installed, so its packages are blocked by name)
    r = subprocess.run([sys.executable, "-I", "-c", BLOCKED_RUN, str(path), str(src), str(out)], cwd=path.parent,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


BLOCKED_RUN = """
import runpy, sys
for name in ("core", "app", "cli", "rewrites", "main"):
    sys.modules[name] = None  # import core -> ImportError
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def small_model(tmp_path):
    """MatMul -> Add -> Relu -> Mul with random weights (onnx.helper), one unnamed node."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "bias")
    big = numpy_helper.from_array(rng.standard_normal((64, 3)).astype(np.float32), "unused_big")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "bias"], ["add"], name="add"),
        helper.make_node("Relu", ["add"], ["relu"]),  # unnamed: found by position
        helper.make_node("Mul", ["relu", "relu"], ["y"], name="mul"),
    ]
    g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w, bias, big])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "small.onnx"
    onnx.save(m, path)
    return path


def check(script, graph, src, tmp_path):
    wb = tmp_path / "workbench.onnx"
    save_model(graph, wb)
    out = run_script(script, src, tmp_path)
    assert same_model(wb, out)
    return wb, out


def test_edits_and_a_rewrite_on_the_cnn_sample(tmp_path):
    src = sample("small_cnn")
    g = load_model(src)
    s = PythonScript(g)
    s.apply(E.DeleteNode(g, g.find_node("stem.relu").id, bridge=True))
    s.apply(E.InsertNode(g, "LeakyRelu", ["gap_out"], {"alpha": 0.2}, insert_on="gap_out"))
    s.apply(E.SetAttribute(g, g.find_node("pool1").id, "strides", [1, 1]))
    s.apply(E.RenameNode(g, g.find_node("fc").id, "classifier"))
    s.apply(E.RenameTensor(g, "stem.weight", "stem.w"))
    scale = g.value("block2.bn.scale").numpy()
    s.apply(E.ReplaceInitializer(g, "block2.bn.scale", scale * 2))
    s.apply(RewriteEdit(preview(g, get_rule("fold-conv-bn"))))
    text = s.text(src.name)
    assert "# 1. Delete and reconnect Relu 'stem.relu'" in text and "# 7. fold-conv-bn (4 matches)" in text
    assert "def apply(model: ir.Model) -> None:" in text and "import core" not in text
    check(s, g, src, tmp_path)


def test_more_edit_kinds_on_a_small_model(tmp_path):
    src = small_model(tmp_path)
    g = load_model(src)
    s = PythonScript(g)
    relu = next(n for n in g.nodes if n.op_type == "Relu")
    s.apply(E.SetInput(g, g.find_node("mul").id, 1, "add"))  # no re-sort needed
    s.apply(E.InsertNode(g, "Sigmoid", ["x"], name="sig"))
    s.apply(E.SetInput(g, g.find_node("mm").id, 0, "sig_out"))  # 'sig' now runs before its reader
    s.apply(E.InsertNode(g, "LeakyRelu", ["y"], {"alpha": 0.5}, name="leaky", insert_on="y"))
    s.apply(E.RemoveAttribute(g, g.find_node("leaky").id, "alpha"))
    s.apply(E.AddGraphOutput(g, "add"))
    s.apply(E.SetInputShape(g, "x", ["N", 4]))
    s.apply(E.ReplaceInitializer(g, "unused_big", np.ones((64, 3), np.float32)))
    s.apply(E.DeleteNode(g, relu.id))  # no reconnect: the Mul is left reading nothing at input 0
    text = s.text(src.name)
    assert "g.node(3)  # Relu #3" in text  # the unnamed node, by position
    assert "embedded(" in text  # 192 floats: embedded as base64
    check(s, g, src, tmp_path)


def test_an_edit_that_re_sorts_the_graph(tmp_path):
    src = small_model(tmp_path)
    g = load_model(src)
    s = PythonScript(g)
    s.apply(E.InsertNode(g, "Sigmoid", ["x"], name="sig"))  # first: it reads only the graph input
    s.apply(E.InsertNode(g, "Neg", ["relu"], name="neg"))
    s.apply(E.SetInput(g, g.find_node("sig").id, 0, "neg_out"))  # 'sig' must now come after 'neg'
    assert [n.name for n in g.nodes].index("sig") > [n.name for n in g.nodes].index("neg")
    text = s.text(src.name)
    assert "g.sort()" in text or "reorder(g, " in text
    check(s, g, src, tmp_path)


def test_large_arrays_go_to_npy_files_or_are_refused_for_the_clipboard(tmp_path, monkeypatch):
    monkeypatch.setattr(ArrayStore, "__init__", _small_store(ArrayStore.__init__))
    src = small_model(tmp_path)
    g = load_model(src)
    s = PythonScript(g)
    s.apply(E.ReplaceInitializer(g, "unused_big", np.full((64, 3), 0.5, np.float32)))
    assert len(s.array_files) == 1 and 'HERE / "array_' in s.text(src.name)
    check(s, g, src, tmp_path)
    g2 = load_model(src)
    clip = PythonScript(g2, files=False)
    with pytest.raises(NotExpressible, match=r"edit 1 \(Replace initializer 'unused_big' from an array\) cannot be written as Python: .*unused_big.* clipboard"):
        clip.apply(E.ReplaceInitializer(g2, "unused_big", np.full((64, 3), 0.5, np.float32)))


def _small_store(init):
    def small(self, files=True, embed_bytes=0):
        init(self, files=files, embed_bytes=256)

    return small


def test_the_comparison_fails_on_a_model_one_attribute_apart(tmp_path):
    src = sample("small_cnn")
    g = load_model(src)
    s = PythonScript(g)
    s.apply(E.SetAttribute(g, g.find_node("pool1").id, "strides", [1, 1]))
    wb = tmp_path / "workbench.onnx"
    save_model(g, wb)
    out = run_script(s, src, tmp_path)
    assert same_model(wb, out)
    m = onnx.load(out)
    next(a for n in m.graph.node if n.name == "pool1" for a in n.attribute if a.name == "strides").ints[:] = [2, 1]
    onnx.save(m, tmp_path / "differs.onnx")
    assert not same_model(wb, tmp_path / "differs.onnx")
    assert not same_model(wb, src)


def test_a_block_that_does_not_reproduce_the_edit_is_refused(tmp_path, monkeypatch):
    """The in-process check, not the test, is what keeps a wrong script from being handed out."""
    from core.rewrite import as_python

    src = sample("small_cnn")
    g = load_model(src)
    s = PythonScript(g)
    real = as_python._Block.write
    monkeypatch.setattr(as_python._Block, "write", lambda self: [x.replace("[1, 1]", "[1, 2]") for x in real(self)])
    with pytest.raises(NotExpressible, match=r"edit 1 \(Set strides = \[1, 1\] on MaxPool 'pool1'\) cannot be written as Python: .*byte for byte"):
        s.apply(E.SetAttribute(g, g.find_node("pool1").id, "strides", [1, 1]))


def test_from_journal_replays_the_entries(tmp_path):
    from core.model import journal
    from core.rewrite.as_python import from_journal

    src = sample("small_cnn")
    g = load_model(src)
    blobs = journal.Blobs(tmp_path / "blobs")
    edits = [E.DeleteNode(g, g.find_node("stem.relu").id, bridge=True)]
    entries = []
    for e in edits:
        entries.append(dict(journal.encode_edit(e, blobs), description=e.description))
    s = from_journal(src, entries, blobs)
    assert "# 1. Delete and reconnect Relu 'stem.relu'" in s.text(src.name)
