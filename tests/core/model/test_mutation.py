"""Graph's mutation primitives: each is undone exactly, and remove refuses a node still read."""
from __future__ import annotations

import onnx_ir as ir
import pytest

from core import EditError, load_model
from tests.conftest import sample


@pytest.fixture
def mlp():
    return load_model(sample("mlp"))


def _first_with_readers(g):
    return next(n for n in g.nodes if any(o.consumers for o in n.output_values))


def test_remove_refuses_a_node_whose_output_is_still_read(mlp):
    n = _first_with_readers(mlp)
    before = mlp.to_bytes()
    with pytest.raises(EditError, match=f"cannot remove .*still read by"):
        mlp.remove_node(n.id)
    assert mlp.to_bytes() == before


def test_remove_refuses_a_graph_output_producer(mlp):
    out = mlp.model.graph.outputs[0]
    with pytest.raises(EditError, match="the graph outputs"):
        mlp.remove_node(out.producer())


def test_replace_all_uses_then_remove_is_undone_exactly(mlp):
    n = _first_with_readers(mlp).ir
    src = next(v for v in n.inputs if v is not None)
    before = mlp.to_bytes()
    undos = [mlp.replace_all_uses(o, src) for o in n.outputs]
    undos.append(mlp.remove_node(n))
    mlp.changed()
    assert n not in list(mlp.model.graph)
    assert all(not o.uses() for o in n.outputs)
    for undo in reversed(undos):
        undo()
    mlp.changed()
    assert mlp.to_bytes() == before


def test_replace_all_uses_with_none_drops_graph_outputs_and_undo_puts_them_back(mlp):
    g = mlp.model.graph
    outputs = list(g.outputs)
    undo = mlp.replace_all_uses(outputs[0], None)
    assert outputs[0] not in list(g.outputs)
    undo()
    assert list(g.outputs) == outputs


def test_insert_node_is_undone_exactly(mlp):
    g = mlp.model.graph
    x = mlp.model.graph.inputs[0]
    before = mlp.to_bytes()
    node = ir.Node("", "Relu", [None], outputs=[ir.Value(name="relu_new")], name="relu_new")  # placed detached
    undo = mlp.insert_node(node, None, [x])
    mlp.changed()
    assert list(g)[0] is node and node.inputs[0] is x and mlp.find_node("relu_new") is not None
    undo()
    mlp.changed()
    assert mlp.to_bytes() == before and not any(u.node is node for u in x.uses())


def test_swap_model_replaces_the_model_and_keeps_ids_fresh(mlp):
    other = mlp.clone()
    top = max(n.id for n in other.nodes)
    model_before = mlp.model
    undo = mlp.swap_model(other.model, other.value_info_names, other.shape_problems)
    assert mlp.model is other.model and len(mlp.nodes) == len(other.nodes)
    node = ir.Node("", "Relu", [mlp.model.graph.inputs[0]], outputs=[ir.Value(name="r2")], name="r2")
    mlp.model.graph.append(node)
    mlp.changed()
    assert mlp.find_node("r2").id > top
    undo()
    assert mlp.model is model_before
