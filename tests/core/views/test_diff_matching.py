"""Node matching reads one edit as one edit (issue 41 item 2): in a CNN of conv-BN-relu blocks with
residual adds, deleting any one node (its readers reconnected to its input) gives exactly one removed
node and at most one changed one, for named and unnamed nodes, and with every tensor and initializer
renamed; inserting one node gives one added node; changing one attribute one changed node.

Checked against the matcher before this one (name, then one forward and one backward pass): deleting
the first BN of the unnamed CNN gave 17 removed and 16 added, the first Conv after the stem 15 and 14."""
from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.model.graph import Graph
from core.views.diff import diff_graphs

C = 4  # channels of every block, so deleting any node but the stem conv keeps every shape


def cnn(names: bool = False, seed: int = 0) -> onnx.ModelProto:
    """18 nodes: a stem (Conv, BN, Relu), two residual blocks (Conv, BN, Relu, Conv, BN, Add, Relu),
    GlobalAveragePool; weights seeded random, node names empty unless `names`."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(name, *shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    def conv_bn(x, tag, cin, relu=True):
        c = helper.make_node("Conv", [x, weight(f"{tag}_w", C, cin, 3, 3)], [f"{tag}_c"], pads=[1, 1, 1, 1])
        bn = helper.make_node("BatchNormalization", [f"{tag}_c", weight(f"{tag}_s", C), weight(f"{tag}_b", C),
                                                     weight(f"{tag}_m", C), f"{tag}_v"], [f"{tag}_n"], epsilon=1e-5)
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, C).astype(np.float32), f"{tag}_v"))
        nodes.extend([c, bn])
        if relu:
            nodes.append(helper.make_node("Relu", [f"{tag}_n"], [f"{tag}_r"]))
            return f"{tag}_r"
        return f"{tag}_n"

    x = conv_bn("x", "stem", 3)
    for k in range(2):
        h = conv_bn(x, f"b{k}a", C)
        h = conv_bn(h, f"b{k}b", C, relu=False)
        nodes.append(helper.make_node("Add", [h, x], [f"b{k}_sum"]))
        nodes.append(helper.make_node("Relu", [f"b{k}_sum"], [f"b{k}_out"]))
        x = f"b{k}_out"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["y"]))
    if names:
        for i, n in enumerate(nodes):
            n.name = f"{n.op_type.lower()}_{i}"
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 1, 1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def delete_reconnect(model: onnx.ModelProto, index: int) -> onnx.ModelProto:
    """The model without node `index`, its readers reading the node's first input instead."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    gone = m.graph.node[index]
    src, out = gone.input[0], gone.output[0]
    del m.graph.node[index]
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            if name == out:
                n.input[i] = src
    return m


def insert_after(model: onnx.ModelProto, index: int, op: str = "Sigmoid") -> onnx.ModelProto:
    """The model with a new unnamed `op` node reading node `index`'s output, its readers reading the new node."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    out = m.graph.node[index].output[0]
    for n in m.graph.node:
        for i, name in enumerate(n.input):
            if name == out:
                n.input[i] = "inserted"
    m.graph.node.insert(index + 1, helper.make_node(op, [out], ["inserted"]))
    return m


def renamed(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every tensor but the graph's inputs and outputs renamed (a re-export numbers them anew)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = {v.name for v in list(m.graph.input) + list(m.graph.output)}
    new = {}

    def rn(name):
        if not name or name in keep:
            return name
        return new.setdefault(name, f"t{len(new) * 7 % 101}_{len(new)}")

    for t in m.graph.initializer:
        t.name = rn(t.name)
    for n in m.graph.node:
        n.input[:] = [rn(v) for v in n.input]
        n.output[:] = [rn(v) for v in n.output]
    return m


def _graph(model: onnx.ModelProto) -> Graph:
    g = Graph(ir.from_proto(model))
    g.infer_shapes()
    return g


def _deletable(model: onnx.ModelProto) -> list[int]:
    return [i for i, n in enumerate(model.graph.node) if i > 0 and n.op_type != "GlobalAveragePool"]


@pytest.mark.parametrize("variant", ["unnamed", "named", "unnamed, tensors renamed"])
def test_deleting_any_one_node_reads_as_one_removed_node(variant):
    base = cnn(names=variant == "named")
    assert len(base.graph.node) == 18
    a = _graph(base)
    labels = [r for r in (n.name or f"{n.op_type}#{i}" for i, n in enumerate(base.graph.node))]
    for i in _deletable(base):
        edited = delete_reconnect(base, i)
        if "renamed" in variant:
            edited = renamed(edited)
        d = diff_graphs(a, _graph(edited))
        j = d.to_json()
        assert j["added"] == [] and len(j["removed"]) == 1, (i, j)
        assert len(j["changed"]) <= 1, (i, j)
        # unnamed nodes of one op in a row cannot be told apart: then a neighbour of the same op reads as removed
        removed = j["removed"][0]
        assert removed == labels[i] or removed.split("#")[0] == base.graph.node[i].op_type, (i, removed)
        assert j["matched"] == 17


@pytest.mark.parametrize("names", [False, True])
def test_inserting_one_node_reads_as_one_added_node(names):
    base = cnn(names=names)
    a = _graph(base)
    for i in (0, 1, 5, 9, 16):
        d = diff_graphs(a, _graph(insert_after(base, i)))
        j = d.to_json()
        assert j["removed"] == [] and len(j["added"]) == 1 and j["added"][0].startswith("Sigmoid#"), (i, j)
        assert j["changed"] == [] and j["matched"] == 18, (i, j)


@pytest.mark.parametrize("names", [False, True])
def test_changing_one_attribute_reads_as_one_changed_node(names):
    base = cnn(names=names)
    b = onnx.ModelProto()
    b.CopyFrom(base)
    bn = [n for n in b.graph.node if n.op_type == "BatchNormalization"][2]
    bn.attribute[0].f = 1e-3
    d = diff_graphs(_graph(base), _graph(renamed(b) if not names else b))
    j = d.to_json()
    assert not j["added"] and not j["removed"] and j["matched"] == 18
    assert len(j["changed"]) == 1 and j["changed"][0]["what"] == "attribute epsilon 1e-05 → 0.001", j
    assert d.by["structure"] == (18 if not names else 0)


def test_the_same_model_matches_itself_whole_and_ties_break_the_same_way_every_time():
    a, b = _graph(cnn()), _graph(renamed(cnn()))
    first = diff_graphs(a, b)
    assert first.identical and len(first.matched) == 18
    # parallel nodes alike in everything but position (two identical Relu branches) pair in order
    nodes = [helper.make_node("Relu", ["x"], [f"r{i}"]) for i in range(3)] + [helper.make_node("Sum", ["r0", "r1", "r2"], ["y"])]
    g = helper.make_graph(nodes, "par", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    d = diff_graphs(_graph(m), _graph(m))
    assert d.identical and [k for k in d.matched] == [v for v in d.matched.values()]
    assert diff_graphs(_graph(m), _graph(m)).matched == d.matched


def test_a_value_read_by_hundreds_of_nodes_of_one_op():
    """A hub (graph input and a shared constant read by 300 Adds / Relus at one slot) is weighed
    near the position a neighbour predicts (core.views.diff._HUB), not over all its readers."""
    def hub(n, drop=None):
        nodes, prev = [], "x"
        for i in range(n):
            if i != drop:
                nodes += [helper.make_node("Relu", ["x"], [f"r{i}"]), helper.make_node("Add", [f"r{i}", "one"], [f"a{i}"])]
        nodes.append(helper.make_node("Sum", [f"a{i}" for i in range(n) if i != drop], ["y"]))
        g = helper.make_graph(nodes, "hub", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.ones(2, np.float32), "one")])
        return _graph(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))

    a = hub(300)
    d = diff_graphs(a, hub(300))
    assert d.identical and all(k == v for k, v in d.matched.items())  # the same graph: each node with itself
    # one unit dropped: one Relu and one Add removed (which of 300 alike units cannot be told: the
    # Sum's inputs shift by one slot after the gap), the Sum has one input fewer
    j = diff_graphs(a, hub(300, drop=150)).to_json()
    assert sorted(r.split("#")[0] for r in j["removed"]) == ["Add", "Relu"] and j["added"] == [], j
    assert j["changed"] == [{"node": "Sum#598", "what": "inputs 300 → 299"}] and j["matched"] == 599
