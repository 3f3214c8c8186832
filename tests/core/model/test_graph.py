"""The Graph wrapper: ids, values, constants, and the derived networkx view."""
from __future__ import annotations

import networkx as nx
import numpy as np
import onnx
import onnx_ir as ir
import pytest

from core import load_model
from tests.conftest import light, sample
from tests.helpers import ort_run, random_feeds


def test_nodes_keep_file_order_and_stable_ids():
    g = load_model(sample("small_cnn"))
    proto = onnx.load(sample("small_cnn"))
    assert [n.name for n in g.nodes] == [n.name for n in proto.graph.node]
    ids = [n.id for n in g.nodes]
    assert len(set(ids)) == len(ids)
    assert g.node(ids[3]).name == proto.graph.node[3].name
    g.changed()
    assert [n.id for n in g.nodes] == ids


def test_node_and_value_views():
    g = load_model(sample("small_cnn"))
    conv = g.find_node("stem.conv")
    assert conv.op_type == "Conv" and conv.domain == ""
    assert conv.attributes["kernel_shape"] == [3, 3]
    assert conv.inputs == ["input", "stem.weight"]
    out = g.value(conv.outputs[0])
    assert out.producer.id == conv.id
    assert [c.name for c in out.consumers] == ["stem.bn"]
    assert g.value("stem.weight").is_constant and not out.is_constant
    assert [v.name for v in g.inputs] == ["input"]
    assert g.opset == 17 and g.metadata["weights"] == "seeded random"


def test_constant_of_shape_weights_count_as_parameters():
    g = load_model(light("resnet50"))
    assert all(n.is_constant for n in g.nodes if n.op_type == "ConstantOfShape")
    assert not any(n.is_constant for n in g.nodes if n.op_type == "Conv")
    assert sum(w.size for w in g.weights()) == 25_610_154  # ResNet-50's well-known parameter count


def test_networkx_view_is_derived_and_cached():
    g = load_model(sample("mlp"))
    G = g.to_networkx()
    assert G.number_of_nodes() == len(g)
    assert g.to_networkx() is G
    order = g.topological_order()
    assert order == [n.id for n in g.nodes]
    assert nx.is_directed_acyclic_graph(G)
    first = g.find_node("linear0.matmul").id
    last = g.find_node("linear2.add").id
    assert last in g.descendants(first) and first in g.ancestors(last)
    g.changed()
    assert g.to_networkx() is not G


def test_extract_subgraph_runs_and_matches_the_original():
    g = load_model(sample("small_cnn"))
    ids = [g.find_node(n).id for n in ("block1.a.conv", "block1.a.bn", "block1.a.relu")]
    sub = g.extract(ids)
    proto = sub.to_proto()
    onnx.checker.check_model(proto)
    assert [v.name for v in sub.inputs] == ["pool1_out"]
    assert [v.name for v in sub.outputs] == ["block1.a.relu_out"]
    # feed the original's intermediate value and compare
    full = onnx.load(sample("small_cnn"))
    probe = onnx.helper.make_tensor_value_info("pool1_out", onnx.TensorProto.FLOAT, None)
    probe2 = onnx.helper.make_tensor_value_info("block1.a.relu_out", onnx.TensorProto.FLOAT, None)
    full.graph.output.extend([probe, probe2])
    feeds = random_feeds(full, seed=3)
    _, mid, want = ort_run(full, feeds)
    (got,) = ort_run(proto, {"pool1_out": mid})
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_clone_is_independent_and_keeps_ids():
    g = load_model(sample("mlp"))
    c = g.clone()
    assert [n.id for n in c.nodes] == [n.id for n in g.nodes]
    assert c.to_bytes() == g.to_bytes()
    c.model.graph.remove(next(iter(c.model.graph)), safe=False)
    assert len(c) == len(g) - 1


def test_clone_keeps_inferred_shapes_value_info_and_fresh_ids_apart():
    g = load_model(sample("small_cnn"))
    c = g.clone()
    for a, b in zip(g.values, c.values):
        assert a.name == b.name and a.shape == b.shape and a.dtype == b.dtype
        assert a.ir is not b.ir
    assert any("wb.inferred" in v.ir.meta and v.ir.shape is None for v in c.values)  # shapes the file leaves out
    assert c.value_info_names == g.value_info_names
    # ids made after the copy never name a node that exists in the other graph
    node_c = ir.Node("", "Relu", [c.inputs[0].ir], name="extra")
    c.model.graph.append(node_c)
    c.changed()
    assert c.find_node("extra").id not in {n.id for n in g.nodes}


@pytest.mark.parametrize("name", ["densenet121", "squeezenet"])
def test_topological_order_is_the_lexicographic_sort(name):
    """The one-pass order (the file's, when topological) is what networkx's sort by position gives."""
    g = load_model(light(name))
    expected = list(nx.lexicographical_topological_sort(g.to_networkx(), key=g._position))
    assert g.topological_order() == expected


def test_topological_order_of_nodes_listed_out_of_order():
    from onnx import TensorProto, helper

    from core.model.graph import Graph

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second"),
             helper.make_node("Relu", ["b"], ["y"], name="third")]
    proto = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))
    g = Graph(ir.from_proto(proto))
    third = g.find_node("third").ir
    g.model.graph.remove(third)
    g.model.graph.insert_before(g.find_node("first").ir, third)  # listed first, runs last
    g.changed()
    assert [g.node(i).name for i in g.topological_order()] == ["first", "second", "third"]
