"""Undo/redo over long random edit sessions: undo-all returns the original bytes, redo-all the
edited ones, node ids survive, and every refused edit leaves the graph untouched."""
from __future__ import annotations

import random

import onnx_ir as ir
import pytest

from core import EditError, load_model
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
    op_spec,
)
from core.model.graph import Graph
from core.model.history import History
from tests.conftest import sample

UNARY = ["Relu", "Neg", "Identity", "Sigmoid", "Abs", "Tanh"]


def random_edit(g: Graph, rng: random.Random, step: int):
    """One random edit that names things that exist (it may still be refused)."""
    nodes = g.nodes
    float_values = [v for v in g.values if v.dtype == "float32" and not v.is_initializer]
    kind = rng.choice(
        ["delete", "delete", "insert", "insert", "set_attr", "remove_attr", "rename_node", "rename_tensor",
         "add_output", "remove_output", "input_shape", "initializer", "connect", "disconnect", "compound"]
    )
    if kind == "delete" and nodes:
        return DeleteNode(g, rng.choice(nodes).id, bridge=rng.random() < 0.7)
    if kind == "insert" and float_values:
        t = rng.choice(float_values).name
        return InsertNode(g, rng.choice(UNARY), [t], insert_on=t if rng.random() < 0.6 else None)
    if kind in ("set_attr", "remove_attr") and nodes:
        n = rng.choice(nodes)
        spec = op_spec(n.op_type, n.domain, g.opset)
        if spec is None or not spec.attributes:
            return None
        if kind == "remove_attr":
            return RemoveAttribute(g, n.id, rng.choice(list(spec.attributes)))
        a = rng.choice(list(spec.attributes.values()))
        value = {
            ir.AttributeType.INT: lambda: rng.randint(0, 3),
            ir.AttributeType.FLOAT: lambda: round(rng.uniform(0, 1), 3),
            ir.AttributeType.INTS: lambda: [rng.randint(1, 3) for _ in range(rng.randint(1, 4))],
            ir.AttributeType.FLOATS: lambda: [round(rng.uniform(0, 1), 3)],
            ir.AttributeType.STRING: lambda: rng.choice(["NOTSET", "SAME_UPPER", "bogus"]),
            ir.AttributeType.TENSOR: lambda: rng.choice([[0.5], "x"]),
        }.get(a.type, lambda: "x")()
        return SetAttribute(g, n.id, a.name, value)
    if kind == "rename_node" and nodes:
        return RenameNode(g, rng.choice(nodes).id, f"renamed_{step}")
    if kind == "rename_tensor" and g.values:
        return RenameTensor(g, rng.choice(g.values).name, f"t_{step}")
    if kind == "add_output" and g.values:
        return AddGraphOutput(g, rng.choice(g.values).name)
    if kind == "remove_output" and g.outputs:
        return RemoveGraphOutput(g, rng.choice(g.outputs).name)
    if kind == "input_shape" and g.inputs:
        v = rng.choice(g.inputs)
        dims = list(v.shape or [])
        if dims:
            dims[0] = rng.choice(["N", "batch", 1, 2, None])
        return SetInputShape(g, v.name, dims)
    if kind == "initializer" and g.initializers:
        v = rng.choice(g.initializers)
        data = v.numpy()
        return ReplaceInitializer(g, v.name, (data + 1).astype(data.dtype))
    if kind == "connect" and nodes and g.values:
        n = rng.choice(nodes)
        return SetInput(g, n.id, rng.randrange(len(n.inputs) + 1), rng.choice(g.values).name)
    if kind == "disconnect" and nodes:
        n = rng.choice(nodes)
        return SetInput(g, n.id, rng.randrange(max(len(n.inputs), 1)), None)
    if kind == "compound" and len(nodes) >= 2:
        a, b = rng.sample(nodes, 2)
        return CompoundEdit("Delete 2 nodes", [DeleteNode(g, a.id, bridge=True), DeleteNode(g, b.id, bridge=True)])
    return None


@pytest.mark.parametrize("model", ["small_cnn", "tiny_transformer"])
def test_undo_all_after_200_random_edits(model):
    g = load_model(sample(model))
    rng = random.Random(1234)
    original, original_ids = g.to_bytes(), [n.id for n in g.nodes]
    history = History(g)
    applied = refused = 0
    step = 0
    while applied < 200:
        step += 1
        assert step < 2000, "the generator stopped producing applicable edits"
        try:
            edit = random_edit(g, rng, step)
        except EditError:
            continue
        if edit is None:
            continue
        before = g.to_bytes()
        try:
            history.push(edit)
        except EditError as e:
            refused += 1
            assert str(e).endswith((".", ")")) and "\n" not in str(e)
            assert g.to_bytes() == before, f"refused edit {edit.description!r} changed the graph"
            continue
        applied += 1
        g.infer_shapes()  # as the GUI does after each edit: later edits read the inferred shapes
    edited = g.to_bytes()
    assert edited != original and refused > 0
    while history.undo() is not None:
        pass
    assert g.to_bytes() == original
    assert [n.id for n in g.nodes] == original_ids
    while history.redo() is not None:
        pass
    assert g.to_bytes() == edited


def test_undo_redo_interleaved_returns_to_each_state():
    g = load_model(sample("mlp"))
    rng = random.Random(7)
    history = History(g)
    states = [g.to_bytes()]
    for step in range(60):
        try:
            edit = random_edit(g, rng, step)
            if edit is None:
                continue
            history.push(edit)
        except EditError:
            continue
        states.append(g.to_bytes())
        if rng.random() < 0.3 and len(states) > 2:
            history.undo()
            assert g.to_bytes() == states[-2]
            history.redo()
            assert g.to_bytes() == states[-1]
    for expected in reversed(states[:-1]):
        history.undo()
        assert g.to_bytes() == expected
    assert not history.can_undo


def test_redo_branch_dropped_after_new_edit():
    g = load_model(sample("mlp"))
    history = History(g)
    relu = g.find_node("relu0").id
    history.push(RenameNode(g, relu, "a"))
    history.set_clean()
    history.undo()
    history.push(RenameNode(g, relu, "b"))
    assert not history.can_redo and not history.is_clean
    assert g.find_node("b") is not None and g.find_node("a") is None
