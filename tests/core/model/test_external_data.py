"""Models with external weights: saved anywhere (copied beside the new file), autosaved by
reference (no copy), handed to importers and onnxruntime self-contained, compiled from any folder."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest

from core import load_model, save_model
from core.errors import InvalidModelError
from core.model.edits import ReplaceInitializer
from core.model.external_data import content_fingerprint, referenced_files, self_contained_proto
from core.model.history import History
from tests.helpers import external_weights_cnn, run_cli


def _locations(path) -> dict[str, str]:
    proto = onnx.load(str(path), load_external_data=False)
    return {t.name: next(e.value for e in t.external_data if e.key == "location")
            for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}


def _weights(graph) -> dict[str, np.ndarray]:
    return {v.name: v.numpy() for v in graph.initializers}


def test_save_as_to_another_folder_copies_the_weights_beside_it(tmp_path):
    src = external_weights_cnn(tmp_path / "a")
    g = load_model(src)
    before = _weights(g)
    data_before = (tmp_path / "a" / "cnn_bn_ext.data").read_bytes()
    res = save_model(g, tmp_path / "b" / "copy.onnx")
    assert res.data_file == tmp_path / "b" / "copy.onnx.data" and res.copied == 7
    assert "7 external weights copied into copy.onnx.data beside it" in res.describe()
    assert set(_locations(tmp_path / "b" / "copy.onnx").values()) == {"copy.onnx.data"}
    assert (tmp_path / "a" / "cnn_bn_ext.data").read_bytes() == data_before  # the source is untouched
    # the open model now reads from the copy: the old folder can go
    (tmp_path / "a" / "cnn_bn_ext.data").rename(tmp_path / "moved.data")
    assert referenced_files(g.model) == {(tmp_path / "b" / "copy.onnx.data").resolve()}
    again = load_model(tmp_path / "b" / "copy.onnx")
    for k, v in _weights(again).items():
        np.testing.assert_array_equal(v, before[k])
    # saving in place writes no second data file and keeps the reference
    res = save_model(again, tmp_path / "b" / "copy.onnx")
    assert res.data_file is None and res.referenced == [(tmp_path / "b" / "copy.onnx.data").resolve()]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["copy.onnx", "copy.onnx.data"]


def test_save_into_a_parent_folder_references_the_data_file_where_it_is(tmp_path):
    src = external_weights_cnn(tmp_path / "sub")
    g = load_model(src)
    res = save_model(g, tmp_path / "up.onnx")
    assert res.data_file is None
    assert set(_locations(tmp_path / "up.onnx").values()) == {os.path.join("sub", "cnn_bn_ext.data")}
    np.testing.assert_array_equal(load_model(tmp_path / "up.onnx").value("fc_w").numpy(), g.value("fc_w").numpy())


def test_edited_weights_are_stored_with_the_copy(tmp_path):
    g = load_model(external_weights_cnn(tmp_path / "a"))
    h = History(g)
    h.push(ReplaceInitializer(g, "fc_w", np.full((8, 4), 2.0, np.float32)))
    save_model(g, tmp_path / "b" / "m.onnx")
    assert "fc_w" not in _locations(tmp_path / "b" / "m.onnx")  # in memory only: inline
    back = load_model(tmp_path / "b" / "m.onnx")
    assert (back.value("fc_w").numpy() == 2.0).all()
    h.undo()  # the old tensor still reads from its own file
    assert not (g.value("fc_w").numpy() == 2.0).all()


def test_autosave_mode_references_the_weights_without_copying(tmp_path):
    src = external_weights_cnn(tmp_path / "a")
    g = load_model(src)
    res = save_model(g, tmp_path / "autosave" / "s.onnx", external="reference")
    assert res.data_file is None and not (tmp_path / "autosave" / "s.onnx.data").exists()
    assert set(_locations(tmp_path / "autosave" / "s.onnx").values()) == {str((tmp_path / "a" / "cnn_bn_ext.data").resolve())}
    with pytest.raises(InvalidModelError, match="outside the model's folder"):
        load_model(tmp_path / "autosave" / "s.onnx")  # a user's file may not point anywhere
    back = load_model(tmp_path / "autosave" / "s.onnx", allow_absolute_external=True)
    for k, v in _weights(back).items():
        np.testing.assert_array_equal(v, g.value(k).numpy())
    assert content_fingerprint(back) == content_fingerprint(g)
    assert referenced_files(g.model) == {(tmp_path / "a" / "cnn_bn_ext.data").resolve()}  # the live graph is untouched


def test_self_contained_proto_carries_the_weights(tmp_path, monkeypatch):
    g = load_model(external_weights_cnn(tmp_path / "a"))
    monkeypatch.chdir(tmp_path)
    proto = self_contained_proto(g)
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in proto.graph.initializer)
    onnx.checker.check_model(proto)  # resolves nothing against the working directory
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(proto.graph.initializer[0]), g.value("stem_w").numpy())


def _cli(cwd, *args, timeout=300):
    return run_cli(*args, timeout=timeout, cwd=cwd)


def test_compile_lower_rewrite_and_bench_from_another_folder(tmp_path):
    src = external_weights_cnn(tmp_path / "models")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _cli(elsewhere, "compile", src, "--target", "cpu", "-o", tmp_path / "art")
    assert r.returncode == 0, r.stderr[-1500:]
    assert "matches onnxruntime" in r.stdout
    exported = onnx.load(str(tmp_path / "art" / "model.onnx"), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in exported.graph.initializer)  # self-contained
    r = _cli(elsewhere, "bench", tmp_path / "art", "--runs", "2", "--warmup", "1", "--vs-ort", "--json")
    assert r.returncode == 0, r.stderr[-1500:]
    assert json.loads(r.stdout)["outputs_match_ort"] is True
    r = _cli(elsewhere, "lower", src, "--json")
    assert r.returncode == 0, r.stderr[-1500:]
    r = _cli(elsewhere, "rewrite", src, "--rules", "fold-conv-bn", "--verify", "-o", "out/folded.onnx")
    assert r.returncode == 0, r.stderr[-1500:]
    assert "weights in folded.onnx.data beside it" in r.stdout
    folded = load_model(elsewhere / "out" / "folded.onnx")
    assert [n.op_type for n in folded.nodes][:2] == ["Conv", "Relu"]
