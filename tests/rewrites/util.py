"""Helpers for rule tests: build a model from ONNX text, rewrite it, check the three things."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.parser

from core import Graph
from core.model.onnx_io import load_model_bytes
from core.rewrite import explain, find_matches, preview
from rewrites import get_rule


def graph_from_text(text: str, inits: dict[str, np.ndarray] | None = None) -> Graph:
    """A validated Graph from ONNX text syntax, with numpy initializers added."""
    m = onnx.parser.parse_model(text)
    for name, arr in (inits or {}).items():
        m.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(arr), name))
    return load_model_bytes(m.SerializeToString(), "inline.onnx")


def rewrite(graph: Graph, rule_id: str, expect_matches: int | None = None):
    """Preview all matches, assert validity (onnx.checker, full check) and numerical equality."""
    rule = get_rule(rule_id)
    ms = find_matches(graph, rule)
    if expect_matches is not None:
        assert len(ms) == expect_matches, [m.summary for m in ms]
    pv = preview(graph, rule, ms)
    assert not pv.skipped, pv.skipped
    onnx.checker.check_model(pv.graph.to_proto(), full_check=True)
    if pv.applied:
        c = pv.verify()
        assert c.ok, c.explain()
    return pv


def ops(graph: Graph) -> list[str]:
    return [n.op_type for n in graph.nodes]


def why(graph: Graph, rule_id: str, node_name: str) -> str:
    node = graph.find_node(node_name)
    assert node is not None, node_name
    w = explain(graph, get_rule(rule_id), node.id)
    assert not w.matches, w.reason
    return w.reason
