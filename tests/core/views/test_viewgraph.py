"""from_graph: what the canvas draws for an ONNX model (constants folded into badges), search and
inspector facts."""
from __future__ import annotations

import pytest

from core import load_model
from core.views.viewgraph import find_nodes, from_graph, input_node_id, node_facts, op_category, output_node_id, tensor_facts
from tests.conftest import light, sample


def test_constants_fold_into_badges_light_model():
    g = load_model(light("resnet50"))  # weights come from ConstantOfShape nodes
    view = from_graph(g)
    compute = [n for n in g.nodes if not n.is_constant]
    assert len(view.nodes) == len(compute) + len(g.inputs) + len(g.outputs)
    assert not any(n.label == "ConstantOfShape" for n in view.nodes)
    conv = next(n for n in view.nodes if n.label == "Conv")
    assert conv.badges[0].startswith("W 64×3×7×7") and conv.detail.startswith("7×7 /2")
    assert conv.category == "convolution"
    assert len(conv.data["badge_tensors"]) == len(conv.badges)
    ids = {n.id for n in view.nodes}
    assert all(e.src in ids and e.dst in ids for e in view.edges)
    assert view.nodes[0].id == input_node_id(g.inputs[0].name) and view.nodes[-1].id == output_node_id(g.outputs[0].name)


def test_edges_carry_tensor_shapes():
    g = load_model(sample("small_cnn"))
    view = from_graph(g)
    e = next(e for e in view.edges if e.src == input_node_id("input"))
    assert e.label == "input" and e.detail == "1×3×32×32 float32"
    # every non-constant tensor use is one edge
    uses = sum(1 for n in g.nodes for v in n.input_values if v is not None and not v.is_constant)
    assert len(view.edges) == uses + len(g.outputs)


def test_categories():
    assert op_category("Conv") == "convolution" and op_category("Gemm") == "matmul"
    assert op_category("Relu") == "activation" and op_category("Reshape") == "shape"
    assert op_category("SomeCustomOp") == "other"


def test_find_nodes_by_op_name_and_tensor():
    g = load_model(sample("small_cnn"))
    view = from_graph(g)
    relus = find_nodes(view, "relu")
    relu_ids = {n.id for n in g.nodes if n.op_type == "Relu"}
    assert set(relus[: len(relu_ids)]) == relu_ids  # exact op matches first, then tensor names with 'relu'
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    assert find_nodes(view, conv.name)[0] == conv.id
    assert conv.id in find_nodes(view, conv.outputs[0])
    assert find_nodes(view, "") == [] and find_nodes(view, "no-such-thing") == []


def test_facts_for_a_node_and_a_constant_of_shape_weight():
    g = load_model(light("squeezenet"))
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    rows = node_facts(g, conv.id)
    assert ("Node", "op", "Conv") in rows and any(r[0] == "Attributes" and r[1] == "kernel_shape" for r in rows)
    w = conv.inputs[1]
    facts = {(s, k): v for s, k, v in tensor_facts(g, w)}
    assert facts[("Tensor", "kind")].startswith("constant")
    assert facts[("Values", "min")] == facts[("Values", "max")]  # a ConstantOfShape fill


def test_node_lookup_builds_its_index_once():
    """view.node(id) is a dict lookup after the first call (it rebuilt a 10,000-entry index on
    every call: 0.4 ms each on the canvas's selection and item paths)."""
    from core.views.viewgraph import ViewGraph, ViewNode

    view = ViewGraph("v", [ViewNode(i, "Relu") for i in range(50)], [])
    assert view.node(7).id == 7
    index = view.__dict__["_index"]
    assert view.node(49).id == 49 and view.__dict__["_index"] is index
    with pytest.raises(KeyError):
        view.node(50)
