"""Loading and saving: lossless round trips, shape inference, external data, bad input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core import InvalidModelError, ModelLoadError, load_model, save_model
from tests.conftest import LIGHT_DIR, LIGHT_MODELS, SAMPLE_MODELS, SAMPLES_DIR
from tests.helpers import ort_run, random_feeds, run_cli

ALL_MODELS = [LIGHT_DIR / m for m in LIGHT_MODELS] + [SAMPLES_DIR / m for m in SAMPLE_MODELS]


def _node_sig(n: onnx.NodeProto):
    return (n.op_type, n.domain, n.name, list(n.input), list(n.output), [a.SerializeToString(deterministic=True) for a in n.attribute], n.doc_string)


@pytest.mark.parametrize("path", ALL_MODELS, ids=lambda p: p.stem)
def test_round_trip_is_lossless(path, tmp_path):
    original = onnx.load(path)
    out = tmp_path / "out.onnx"
    save_model(load_model(path), out)
    saved = onnx.load(out)
    onnx.checker.check_model(saved)
    assert [_node_sig(n) for n in saved.graph.node] == [_node_sig(n) for n in original.graph.node]
    assert [t.name for t in saved.graph.initializer] == [t.name for t in original.graph.initializer]
    for a, b in zip(saved.graph.initializer, original.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    assert [i.SerializeToString() for i in saved.graph.input] == [i.SerializeToString() for i in original.graph.input]
    assert [o.SerializeToString() for o in saved.graph.output] == [o.SerializeToString() for o in original.graph.output]
    assert saved.metadata_props == original.metadata_props
    assert (saved.producer_name, saved.ir_version, saved.doc_string) == (original.producer_name, original.ir_version, original.doc_string)
    assert list(saved.opset_import) == list(original.opset_import)
    # inferred shapes stay in memory: the saved file carries no value_info the source did not have
    assert len(saved.graph.value_info) == len(original.graph.value_info)


@pytest.mark.parametrize("path", [LIGHT_DIR / "light_squeezenet.onnx", LIGHT_DIR / "light_inception_v1.onnx"] + [SAMPLES_DIR / m for m in SAMPLE_MODELS], ids=lambda p: p.stem)
def test_round_trip_computes_the_same(path, tmp_path):
    original = onnx.load(path)
    out = tmp_path / "out.onnx"
    save_model(load_model(path), out)
    feeds = random_feeds(original, seed=1, dims={"batch": 3})
    for a, b in zip(ort_run(original, feeds), ort_run(onnx.load(out), feeds)):
        np.testing.assert_array_equal(a, b)


def test_subgraphs_and_functions_survive(tmp_path):
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    fn = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 17)])
    nodes = [
        helper.make_node("If", ["cond"], ["z"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Twice", ["z"], ["y"], name="twice", domain="local"),
    ]
    m = helper.make_model(
        helper.make_graph(nodes, "g", [cond, x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    src = tmp_path / "sub.onnx"
    onnx.save(m, src)
    g = load_model(src)
    assert g.functions == [("local", "Twice")]
    assert [name for name, _ in g.find_node("branch").subgraphs] == ["else_branch", "then_branch"] or \
        sorted(name for name, _ in g.find_node("branch").subgraphs) == ["else_branch", "then_branch"]
    save_model(g, tmp_path / "out.onnx")
    out = onnx.load(tmp_path / "out.onnx")
    onnx.checker.check_model(out)
    assert out.functions[0].name == "Twice"
    feeds = {"cond": np.array(False), "x": np.array([1.0, -2.0], dtype=np.float32)}
    np.testing.assert_array_equal(ort_run(out, feeds)[0], np.array([-2.0, 4.0], dtype=np.float32))


def test_missing_shapes_are_inferred():
    g = load_model(SAMPLES_DIR / "small_cnn.onnx")
    assert g.value("stem.relu_out").shape == (1, 16, 32, 32)
    assert g.value("stem.relu_out").dtype == "float32"
    g = load_model(SAMPLES_DIR / "mlp.onnx")
    assert g.value("relu0_out").shape == ("batch", 128)


def test_initializers_read_on_demand():
    g = load_model(SAMPLES_DIR / "mlp.onnx")
    w = g.value("linear0.weight")
    assert w.is_initializer and w.shape == (784, 128)
    arr = w.numpy()
    ref = numpy_helper.to_array(next(t for t in onnx.load(SAMPLES_DIR / "mlp.onnx").graph.initializer if t.name == "linear0.weight"))
    np.testing.assert_array_equal(arr, ref)


def _external_model(tmp_path, location: str):
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    m = helper.make_model(
        helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "m.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    if location != "weights.bin":
        p = onnx.load(tmp_path / "m.onnx", load_external_data=False)
        for e in p.graph.initializer[0].external_data:
            if e.key == "location":
                e.value = location
        onnx.save(p, tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


def test_external_data_inside_folder_loads(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    g = load_model(path)
    np.testing.assert_array_equal(g.value("w").numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    save_model(g, tmp_path / "copy.onnx")
    out = onnx.load(tmp_path / "copy.onnx")
    np.testing.assert_array_equal(numpy_helper.to_array(out.graph.initializer[0]), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_external_data_outside_folder_is_refused(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    _external_model(inner, "weights.bin")
    (tmp_path / "secret.bin").write_bytes((inner / "weights.bin").read_bytes())
    p = onnx.load(inner / "m.onnx", load_external_data=False)
    for e in p.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = "../secret.bin"
    onnx.save(p, inner / "m.onnx")
    with pytest.raises(InvalidModelError, match="outside the model's folder"):
        load_model(inner / "m.onnx")


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    g = load_model(SAMPLES_DIR / "mlp.onnx")
    save_model(g, tmp_path / "a.onnx")
    save_model(g, tmp_path / "a.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx"]


# ---- bad input: each ends with exit status 2 and one sentence naming the file ----------------

def _simple(nodes, inputs=("x",), outputs=("y",), opsets=(("", 17),)):
    return helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2]) for i in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in outputs]),
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _bad_cases(tmp_path):
    good = (SAMPLES_DIR / "small_cnn.onnx").read_bytes()
    cases = {}
    cases["missing"] = (tmp_path / "nope.onnx", "no such file")
    (tmp_path / "text.onnx").write_text("this is not a model\n")
    cases["not_onnx"] = (tmp_path / "text.onnx", "not an ONNX model")
    (tmp_path / "trunc.onnx").write_bytes(good[: len(good) // 3])
    cases["truncated"] = (tmp_path / "trunc.onnx", "is cut short")
    corrupt = bytearray(good)
    corrupt[0:8] = b"\xff" * 8
    (tmp_path / "corrupt.onnx").write_bytes(bytes(corrupt))
    cases["corrupted"] = (tmp_path / "corrupt.onnx", "cannot be parsed")
    (tmp_path / "empty.onnx").write_bytes(b"")
    cases["empty"] = (tmp_path / "empty.onnx", "empty")
    m = _simple([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")])
    onnx.save(m, tmp_path / "dangling.onnx")
    cases["dangling"] = (tmp_path / "dangling.onnx", "'adder' (Add) reads tensor 'ghost'")
    m = _simple([helper.make_node("Relu", ["x", ], ["a"], name="r1"),
                 helper.make_node("Add", ["a", "c"], ["b"], name="loop_add"),
                 helper.make_node("Relu", ["b"], ["c"], name="loop_relu"),
                 helper.make_node("Identity", ["b"], ["y"], name="out")])
    onnx.save(m, tmp_path / "cycle.onnx")
    cases["cycle"] = (tmp_path / "cycle.onnx", "cycle")
    m = _simple([helper.make_node("Frobnicate", ["x"], ["y"], name="frob", domain="com.example")])
    onnx.save(m, tmp_path / "domain.onnx")
    cases["unknown_domain"] = (tmp_path / "domain.onnx", "domain 'com.example'")
    m = _simple([helper.make_node("Frobnicate", ["x"], ["y"], name="frob")])
    onnx.save(m, tmp_path / "unknown_op.onnx")
    cases["unknown_op"] = (tmp_path / "unknown_op.onnx", "Frobnicate")
    return cases


@pytest.mark.parametrize("case", ["missing", "not_onnx", "truncated", "corrupted", "empty", "dangling", "cycle", "unknown_domain", "unknown_op"])
def test_bad_input_raises_one_sentence(case, tmp_path):
    path, needle = _bad_cases(tmp_path)[case]
    with pytest.raises((ModelLoadError, InvalidModelError)) as info:
        load_model(path)
    msg = str(info.value)
    assert str(path) in msg and needle in msg
    assert "\n" not in msg and "Traceback" not in msg


def test_bad_input_exits_2_on_the_command_line(tmp_path):
    cases = _bad_cases(tmp_path)
    inner = tmp_path / "trav"
    inner.mkdir()
    _external_model(inner, "../../etc/passwd")
    cases["traversal"] = (inner / "m.onnx", "outside the model's folder")
    for case, (path, needle) in cases.items():
        r = run_cli("inspect", path)
        assert r.returncode == 2, (case, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and needle in lines[0], (case, r.stderr)
        assert r.stdout == ""


def test_saved_file_gets_normal_permissions(tmp_path):
    import os

    g = load_model(SAMPLES_DIR / "mlp.onnx")
    save_model(g, tmp_path / "new.onnx")
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "new.onnx").stat().st_mode & 0o777 == 0o666 & ~umask
    (tmp_path / "new.onnx").chmod(0o640)
    save_model(g, tmp_path / "new.onnx")
    assert (tmp_path / "new.onnx").stat().st_mode & 0o777 == 0o640


def test_truncation_is_told_apart_from_corruption():
    from core.model.onnx_io import truncated_by

    good = (SAMPLES_DIR / "small_cnn.onnx").read_bytes()
    assert truncated_by(good) == 0
    for cut in (len(good) // 3, len(good) - 1, 7):
        assert truncated_by(good[:cut]) > 0, cut
    assert truncated_by(b"this is not a model\n") == 0
    assert truncated_by(b"\xff" * 8 + good[8:]) == 0
