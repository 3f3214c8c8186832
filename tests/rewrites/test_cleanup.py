"""cleanup.py rules: dead code, identities (and inference Dropout), reshape chains."""
from __future__ import annotations

import numpy as np

from core import load_model
from core.rewrite import explain, find_matches
from rewrites import get_rule
from tests.conftest import light

from tests.rewrites.util import graph_from_text, ops, rewrite


def test_eliminate_dead_code_removes_unused_branches_only():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3] x) => (float[2, 3] y) {
          y = Relu(x)
          a = Exp(x)
          b = Neg(a)
        }"""
    )
    pv = rewrite(g, "eliminate-dead-code", expect_matches=1)
    assert ops(pv.graph) == ["Relu"]
    rule = get_rule("eliminate-dead-code")
    relu = g.nodes[0]
    assert "computes graph output 'y'" in explain(g, rule, relu.id).reason
    exp = g.nodes[1]
    assert "is read by" in explain(g, rule, exp.id).reason


def test_eliminate_identity_and_inference_dropout():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3] x) => (float[2, 3] y, float[2, 3] z) {
          a = Relu(x)
          b = Identity(a)
          c = Dropout(b)
          y = Identity(c)
          z = Identity(x)
        }"""
    )
    pv = rewrite(g, "eliminate-identity", expect_matches=3)
    assert sorted(ops(pv.graph)) == ["Identity", "Relu"]  # z = Identity(x) must stay: x is a graph input
    assert [v.name for v in pv.graph.outputs] == ["y", "z"]
    rule = get_rule("eliminate-identity")
    z = g.nodes[-1]
    assert "graph input" in explain(g, rule, z.id).reason


def test_dropout_in_training_mode_stays():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3] x) => (float[2, 3] y) {
          y = Dropout(x, ratio, train)
        }""",
        {"ratio": np.array(0.5, np.float32), "train": np.array(True)},
    )
    assert find_matches(g, get_rule("eliminate-identity")) == []
    assert "training_mode true" in explain(g, get_rule("eliminate-identity"), g.nodes[0].id).reason


def test_collapse_reshapes_chain():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3, 4] x) => (float[6, 4, 1] y) {
          a = Flatten <axis = 2> (x)
          b = Reshape(a, s1)
          y = Unsqueeze(b, ax)
        }""",
        {"s1": np.array([6, 4], np.int64), "ax": np.array([2], np.int64)},
    )
    pv = rewrite(g, "collapse-reshapes", expect_matches=1)
    assert ops(pv.graph) == ["Reshape"]
    rule = get_rule("collapse-reshapes")
    single = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3, 4] x) => (float[6, 4] y) {
          a = Relu(x)
          y = Reshape(a, s1)
        }""",
        {"s1": np.array([6, 4], np.int64)},
    )
    assert find_matches(single, rule) == []
    assert "not a reshape-like op" in explain(single, rule, single.nodes[1].id).reason


def test_collapse_reshapes_symbolic_batch_keeps_minus_one():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[N, 3, 4] x) => (float[N, 12] y) {
          a = Unsqueeze(x, ax)
          y = Flatten <axis = 1> (a)
        }""",
        {"ax": np.array([1], np.int64)},
    )
    pv = rewrite(g, "collapse-reshapes", expect_matches=1)
    shape = pv.graph.nodes[0].input_values[1].numpy().tolist()
    assert shape == [-1, 12]


def test_dropout_in_light_alexnet():
    g = load_model(light("bvlc_alexnet"))
    pv = rewrite(g, "eliminate-identity", expect_matches=2)
    assert "Dropout" not in ops(pv.graph)
