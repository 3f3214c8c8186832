"""Edit commands: each one's do/undo/redo restores identical bytes, edited models stay valid
where the edit keeps them valid (onnx.checker + onnxruntime), invalid edits are refused."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from core import EditError, InvalidModelError, load_model
from core.model.edits import (
    AddGraphOutput,
    CompoundEdit,
    DeleteNode,
    InsertNode,
    RemoveAttribute,
    RemoveGraphOutput,
    RenameNode,
    RenameTensor,
    ReplaceInitializer,
    SetAttribute,
    SetInput,
    SetInputShape,
    available_ops,
    coerce_attribute,
    op_spec,
    parse_attribute_text,
    parse_shape_text,
)
from core.model.history import History
from core.model.validation import check, refresh, save_checked
from tests.conftest import sample
from tests.helpers import ort_run, random_feeds


@pytest.fixture
def cnn():
    return load_model(sample("small_cnn"))


@pytest.fixture
def mlp():
    return load_model(sample("mlp"))


def nid(g, name: str) -> int:
    return g.find_node(name).id


def roundtrip(g, edit):
    """do / undo / redo through a History; every state must serialize byte-identically."""
    h = History(g)
    before, ids = g.to_bytes(), [n.id for n in g.nodes]
    h.push(edit)
    after, ids_after = g.to_bytes(), [n.id for n in g.nodes]
    assert after != before, f"{edit.description} changed nothing"
    h.undo()
    assert g.to_bytes() == before, f"undo of {edit.description} did not restore the bytes"
    assert [n.id for n in g.nodes] == ids, "node ids must survive undo"
    h.redo()
    assert g.to_bytes() == after, f"redo of {edit.description} did not reproduce the bytes"
    assert [n.id for n in g.nodes] == ids_after
    refresh(g)
    return h


def assert_runs(g, dims=None):
    """The edited model passes onnx.checker and runs in onnxruntime; returns its outputs."""
    assert check(g) == []
    proto = g.to_proto()
    onnx.checker.check_model(proto, full_check=True)
    return ort_run(proto, random_feeds(proto, dims=dims))


# ---- each command: do/undo/redo bytes, and the edited model --------------------------------------


def test_edit_delete_bridge_keeps_model_valid(cnn):
    h = roundtrip(cnn, DeleteNode(cnn, nid(cnn, "block1.a.relu"), bridge=True))
    assert cnn.find_node("block1.a.relu") is None
    assert_runs(cnn)
    assert h.can_undo


def test_edit_delete_without_bridge_is_flagged(cnn):
    relu = nid(cnn, "stem.relu")
    roundtrip(cnn, DeleteNode(cnn, relu))
    pool = nid(cnn, "pool1")
    assert cnn.node(pool).inputs == [""]  # the reader is detached, not left naming a lost tensor
    problems = check(cnn)
    assert [p.node_id for p in problems] == [pool]
    assert problems[0].sentence == "MaxPool 'pool1' has nothing connected to its required input X (input 0)."
    cnn.clone()  # the IR stays consistent for other tools
    with pytest.raises(InvalidModelError, match="pool1"):
        save_checked(cnn, "/nonexistent/never_written.onnx")


def test_edit_delete_graph_output_producer_drops_the_output(mlp):
    roundtrip(mlp, DeleteNode(mlp, nid(mlp, "linear2.add")))
    assert mlp.outputs == []
    assert [p.sentence for p in check(mlp)] == ["The model has no graph outputs."]


def test_edit_delete_graph_output_producer_bridged(mlp):
    # deleting the last Add with bridging moves the graph output onto the MatMul's output
    roundtrip(mlp, DeleteNode(mlp, nid(mlp, "linear2.add"), bridge=True))
    assert [v.name for v in mlp.outputs] == ["linear2.matmul_out"]
    assert_runs(mlp, {"batch": 3})


def test_edit_insert_after_tensor_runs_and_changes_result(cnn):
    base = assert_runs(cnn)
    edit = InsertNode(cnn, "Neg", ["block2.relu_out"], insert_on="block2.relu_out")
    roundtrip(cnn, edit)
    neg = cnn.node(edit.node_id)
    assert neg.op_type == "Neg" and neg.name == "Neg_1"
    assert cnn.find_node("gap").inputs == [neg.outputs[0]]
    out = assert_runs(cnn)
    assert not np.allclose(out[0], base[0])


def test_edit_insert_with_schema_attributes(mlp):
    edit = InsertNode(mlp, "Softmax", ["logits"], {"axis": -1}, name="probs", insert_on="logits")
    roundtrip(mlp, edit)
    out = assert_runs(mlp, {"batch": 4})
    assert np.allclose(out[0].sum(axis=-1), 1.0, atol=1e-5)
    assert mlp.outputs[0].name == "probs_out"


def test_edit_insert_multi_input_op_is_ordered(cnn):
    # an Add of two existing tensors lands after the later producer, new output exposed
    h = roundtrip(cnn, InsertNode(cnn, "Add", ["pool1_out", "block1.relu_out"], name="extra_add"))
    h.push(AddGraphOutput(cnn, "extra_add_out"))
    refresh(cnn)
    assert len(assert_runs(cnn)) == 2


def test_edit_set_attribute_changes_result(cnn):
    base = assert_runs(cnn)
    roundtrip(cnn, SetAttribute(cnn, nid(cnn, "pool1"), "kernel_shape", [3, 3]))
    roundtrip(cnn, SetAttribute(cnn, nid(cnn, "pool1"), "pads", [1, 1, 1, 1]))
    out = assert_runs(cnn)
    assert out[0].shape == base[0].shape and not np.allclose(out[0], base[0])


def test_edit_set_attribute_typed_and_validated(cnn):
    conv = nid(cnn, "stem.conv")
    with pytest.raises(EditError, match="stem.conv.*no attribute 'stride'"):
        SetAttribute(cnn, conv, "stride", [2, 2]).do(cnn)
    with pytest.raises(EditError, match="'strides'.*integers"):
        SetAttribute(cnn, conv, "strides", [1.5, 2]).do(cnn)
    with pytest.raises(EditError, match="'auto_pad'.*text"):
        SetAttribute(cnn, conv, "auto_pad", 3).do(cnn)
    # a well-typed value shape inference rejects is allowed and flagged on that node
    History(cnn).push(SetAttribute(cnn, conv, "kernel_shape", [5, 5, 5]))
    problems = refresh(cnn)
    assert problems[0].node_id == conv and "kernel_shape" in problems[0].sentence


def test_edit_remove_attribute(cnn):
    roundtrip(cnn, RemoveAttribute(cnn, nid(cnn, "flatten"), "axis"))  # default axis=1: same model
    assert_runs(cnn)
    with pytest.raises(EditError, match="'flatten'.*no attribute 'axis'"):
        RemoveAttribute(cnn, nid(cnn, "flatten"), "axis").do(cnn)


def test_edit_remove_required_attribute_refused(cnn):
    before = cnn.to_bytes()
    with pytest.raises(EditError, match="'kernel_shape' of MaxPool 'pool1' is required"):
        RemoveAttribute(cnn, nid(cnn, "pool1"), "kernel_shape").do(cnn)
    with pytest.raises(EditError, match="'kernel_shape' of MaxPool 'pool1' takes a list"):
        SetAttribute(cnn, nid(cnn, "pool1"), "kernel_shape", "2,2").do(cnn)  # text: parse it first
    assert cnn.to_bytes() == before


def test_edit_rename_node_and_tensor_everywhere(cnn):
    roundtrip(cnn, RenameNode(cnn, nid(cnn, "stem.conv"), "first_conv"))
    roundtrip(cnn, RenameTensor(cnn, "input", "image"))  # graph input
    roundtrip(cnn, RenameTensor(cnn, "logits", "scores"))  # graph output
    roundtrip(cnn, RenameTensor(cnn, "stem.weight", "w_stem"))  # initializer
    roundtrip(cnn, RenameTensor(cnn, "pool1_out", "pooled"))  # read by two nodes
    proto = cnn.to_proto()
    assert proto.graph.input[0].name == "image" and proto.graph.output[0].name == "scores"
    assert [t.name for t in proto.graph.initializer][0] == "w_stem"  # order kept
    readers = [n.name for n in proto.graph.node if "pooled" in n.input]
    assert readers == ["block1.a.conv", "block1.add"]
    assert_runs(cnn)
    with pytest.raises(EditError, match="'block1.add'.*another node"):
        RenameNode(cnn, nid(cnn, "block1.relu"), "block1.add").do(cnn)
    with pytest.raises(EditError, match="'pooled' to 'fc.bias'.*already used"):
        RenameTensor(cnn, "pooled", "fc.bias").do(cnn)


def test_edit_add_and_remove_graph_outputs(cnn):
    roundtrip(cnn, AddGraphOutput(cnn, "block1.relu_out"))
    outs = assert_runs(cnn)
    assert outs[1].shape == (1, 16, 16, 16)
    roundtrip(cnn, RemoveGraphOutput(cnn, "logits"))
    assert [v.name for v in cnn.outputs] == ["block1.relu_out"]
    assert_runs(cnn)
    with pytest.raises(EditError, match="'block1.relu_out'.*only output"):
        RemoveGraphOutput(cnn, "block1.relu_out").do(cnn)
    with pytest.raises(EditError, match="'block1.relu_out' is already a graph output"):
        AddGraphOutput(cnn, "block1.relu_out").do(cnn)


def test_edit_input_shape_symbolic_batch(cnn):
    roundtrip(cnn, SetInputShape(cnn, "input", parse_shape_text("N, 3, 32, 32")))
    proto = cnn.to_proto()
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    # the declared output shape follows instead of keeping a stale batch of 1
    assert proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "N"
    out = assert_runs(cnn, {"N": 3})
    assert out[0].shape == (3, 10)


def test_edit_replace_initializer_from_npy(cnn, tmp_path):
    base = assert_runs(cnn)
    new_bias = np.arange(10, dtype=np.float32)
    path = tmp_path / "bias.npy"
    np.save(path, new_bias)
    roundtrip(cnn, ReplaceInitializer(cnn, "fc.bias", path))
    out = assert_runs(cnn)
    assert np.allclose(out[0] - base[0], new_bias - load_model(sample("small_cnn")).value("fc.bias").numpy(), atol=1e-5)


def test_edit_replace_initializer_refuses_pickles_and_wrong_dtype(cnn, tmp_path):
    pickled = tmp_path / "objects.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(EditError, match="objects.npy holds Python objects"):
        ReplaceInitializer(cnn, "fc.bias", pickled)
    wide = tmp_path / "wide.npy"
    np.save(wide, np.zeros(10, dtype=np.float64))
    edit = ReplaceInitializer(cnn, "fc.bias", wide)
    with pytest.raises(EditError, match="'fc.bias'.*float32.*float64"):
        edit.do(cnn)
    with pytest.raises(EditError, match="not an initializer|no initializer"):
        ReplaceInitializer(cnn, "pool1_out", np.zeros(1, np.float32))


def test_edit_connect_and_disconnect(cnn):
    add = nid(cnn, "block1.add")
    # rewire the residual branch's second operand onto the shortcut: same shape, still runs
    roundtrip(cnn, SetInput(cnn, add, 1, "pool1_out"))
    assert_runs(cnn)
    roundtrip(cnn, SetInput(cnn, add, 1, None))
    assert any(p.node_id == add for p in check(cnn))


def test_edit_connect_refuses_cycle_and_resorts_order(mlp):
    before = mlp.to_bytes()
    with pytest.raises(EditError, match="cycle"):
        SetInput(mlp, nid(mlp, "linear0.matmul"), 0, "relu1_out").do(mlp)
    assert mlp.to_bytes() == before
    # feeding an early node from a later, unrelated tensor re-sorts the nodes, undo puts them back
    g = load_model(sample("tiny_transformer"))
    order = [n.name for n in g.nodes]
    assert order.index("attn.q.matmul") < order.index("attn.k.add")
    roundtrip(g, SetInput(g, nid(g, "attn.q.matmul"), 0, "attn.k.add_out"))
    order = [n.name for n in g.nodes]
    assert order.index("attn.q.matmul") > order.index("attn.k.add")
    assert_runs(g)


def test_edit_insert_refusals_name_the_problem(cnn):
    before = cnn.to_bytes()
    cases = [
        (lambda: InsertNode(cnn, "Frobnicate", ["input"]), "Frobnicate.*no such op"),
        (lambda: InsertNode(cnn, "Relu", ["nope"]), "no tensor named 'nope'"),
        (lambda: InsertNode(cnn, "Add", ["input"]), "Add.*takes 2 inputs, not 1"),
        (lambda: InsertNode(cnn, "Relu", ["input"], {"alpha": 1.0}), "Relu.*no attribute 'alpha'"),
        (lambda: InsertNode(cnn, "Relu", ["input"], name="fc"), "node named 'fc' already exists"),
        (lambda: InsertNode(cnn, "Cast", ["input"]), "attribute 'to' .* is required"),
        (lambda: InsertNode(cnn, "Relu", ["input"], domain="com.example"), "does not import the domain 'com.example'"),
        (lambda: InsertNode(cnn, "Add", ["gap_out", "block1.relu_out"], insert_on="block1.relu_out"), "cycle"),
    ]
    for make, pattern in cases:
        with pytest.raises(EditError, match=pattern):
            make().do(cnn)
        assert cnn.to_bytes() == before, pattern


def test_edit_compound_is_all_or_nothing(cnn):
    before = cnn.to_bytes()
    good = DeleteNode(cnn, nid(cnn, "stem.relu"), bridge=True)
    bad = RenameNode(cnn, nid(cnn, "pool1"), "fc")
    with pytest.raises(EditError, match="another node"):
        History(cnn).push(CompoundEdit("Delete 2 nodes", [good, bad]))
    assert cnn.to_bytes() == before
    roundtrip(cnn, CompoundEdit("Delete 2 nodes", [DeleteNode(cnn, nid(cnn, "stem.relu"), bridge=True),
                                                    DeleteNode(cnn, nid(cnn, "block2.relu"), bridge=True)]))
    assert_runs(cnn)


def test_edit_op_schemas_from_model_opset(cnn):
    ops = {s.op_type for s in available_ops(cnn)}
    assert {"Conv", "Relu", "LayerNormalization", "Softmax"} <= ops
    assert "Gelu" not in ops  # Gelu arrives in opset 20; the sample imports 17
    conv = op_spec("Conv", "", 17)
    assert conv.attributes["group"].default == 1 and conv.attributes["auto_pad"].default == "NOTSET"
    assert [p.name for p in conv.inputs] == ["X", "W", "B"] and conv.inputs[2].optional


def test_edit_attribute_text_parsing():
    import onnx_ir as ir

    T = ir.AttributeType
    assert parse_attribute_text("[2, 2]", T.INTS) == [2, 2]
    assert parse_attribute_text("1,1,1,1", T.INTS) == [1, 1, 1, 1]
    assert parse_attribute_text("1e-5", T.FLOAT) == 1e-5
    assert parse_attribute_text("SAME_UPPER", T.STRING) == "SAME_UPPER"
    assert parse_attribute_text("[[1, 2]]", T.TENSOR, like=np.zeros(1, np.int64)).dtype == np.int64
    with pytest.raises(EditError, match="'two' is not a valid int for attribute 'axis'"):
        parse_attribute_text("two", T.INT, "axis")
    assert coerce_attribute("value", T.TENSOR, [1.5]).value.numpy().dtype == np.float64
    with pytest.raises(EditError, match="'value' of the node takes a numeric tensor"):
        coerce_attribute("value", T.TENSOR, "x")  # would not serialize
    assert parse_shape_text("[batch, 3, ?, 224]") == ["batch", 3, None, 224]
    with pytest.raises(EditError, match="'-1' is not a dimension"):
        parse_shape_text("-1, 3")


def test_edit_save_checked_is_atomic_and_valid(cnn, tmp_path):
    History(cnn).push(DeleteNode(cnn, nid(cnn, "stem.relu"), bridge=True))
    out = tmp_path / "edited.onnx"
    assert save_checked(cnn, out) == []
    assert [p.name for p in tmp_path.iterdir()] == ["edited.onnx"]  # no temporary file left over
    again = load_model(out)
    assert again.to_bytes() == cnn.to_bytes()
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_edit_cli_twin_applies_checks_and_saves(tmp_path, capsys):
    import json

    from cli import run_cli as cli_in_process
    from tests.helpers import run_cli

    out = tmp_path / "edited.onnx"
    r = run_cli("edit", sample("small_cnn"), "-o", out, "--delete-reconnect", "block1.a.relu",
                "--set", "pool1", "kernel_shape=3,3", "--set", "pool1", "pads=1,1,1,1",
                "--insert", "LeakyRelu(gap_out) after=gap_out alpha=0.2", "--input-shape", "input", "N,3,32,32", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["edits"][0] == "Delete and reconnect Relu 'block1.a.relu'" and report["problems"] == []
    g = load_model(out)
    assert g.find_node("block1.a.relu") is None and g.find_node("LeakyRelu_1").attributes["alpha"] == pytest.approx(0.2)
    assert assert_runs(g, {"N": 2})[0].shape == (2, 10)
    # refusals (in-process, same entry point): exit 2, one sentence, nothing written
    capsys.readouterr()
    assert cli_in_process(["edit", str(sample("small_cnn")), "-o", str(tmp_path / "bad.onnx"), "--delete", "stem.relu"]) == 2
    assert "MaxPool 'pool1' has nothing connected" in capsys.readouterr().err
    assert not (tmp_path / "bad.onnx").exists()
    assert cli_in_process(["edit", str(out), "-o", str(out), "--delete", "fc"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli_in_process(["edit", str(out), "-o", str(tmp_path / "x.onnx"), "--set", "pool1", "stride=2"]) == 2
    assert "MaxPool 'pool1' has no attribute 'stride'" in capsys.readouterr().err
