"""kernel_lineage's 'nodes between two nodes of one kernel' (a decomposed batch-norm's ops)."""
from __future__ import annotations

import onnx_ir as ir
from onnx import TensorProto, helper

from core.compiler.pipeline.lineage import _between
from core.model.graph import Graph


def _diamond() -> Graph:
    """a -> (b, c) -> d, plus a -> e and d -> f: b and c lie between a and d, e and f do not."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["a"], ["b"], name="b"),
        helper.make_node("Abs", ["a"], ["c"], name="c"),
        helper.make_node("Add", ["b", "c"], ["d"], name="d"),
        helper.make_node("Exp", ["a"], ["e"], name="e"),
        helper.make_node("Relu", ["d"], ["f"], name="f"),
    ]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2])  # noqa: E731
    g = helper.make_graph(nodes, "diamond", [vi("x")], [vi("e"), vi("f")])
    return Graph(ir.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))


def test_between_is_every_path_between_two_members_and_nothing_else():
    g = _diamond()
    order = {nid: i for i, nid in enumerate(g.topological_order())}
    node = {n.name: n.id for n in g.nodes}
    assert _between(g, {node["a"], node["d"]}, order) == {node["b"], node["c"]}
    assert _between(g, {node["a"], node["b"]}, order) == set()
    assert _between(g, {node["b"], node["f"]}, order) == {node["d"]}
    assert _between(g, {node["e"], node["f"]}, order) == set()  # no path between them
