"""folding.py rules: constant subgraphs into initializers, Conv + BatchNormalization folding."""
from __future__ import annotations

import numpy as np
import pytest

from core import load_model
from core.rewrite import explain, find_matches
from rewrites import get_rule
from tests.conftest import light, sample

from tests.rewrites.util import graph_from_text, ops, rewrite

rng = np.random.default_rng(1)


def test_fold_constants_evaluates_constant_of_shape_chains():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3] x) => (float[2, 3] y) {
          c = ConstantOfShape <value = float[1] {0.5}> (shape)
          one = Constant <value = float {1.0}> ()
          w = Add(c, one)
          y = Mul(x, w)
        }""",
        {"shape": np.array([2, 3], np.int64)},
    )
    pv = rewrite(g, "fold-constants", expect_matches=1)
    assert ops(pv.graph) == ["Mul"]
    w = pv.graph.value("w")
    assert w.is_initializer and np.allclose(w.numpy(), 1.5)
    assert "shape" not in {v.name for v in pv.graph.initializers}  # what only fed the folded nodes goes
    rule = get_rule("fold-constants")
    mul = next(n for n in g.nodes if n.op_type == "Mul")
    assert "input 0 'x' is a graph input, not a constant" in explain(g, rule, mul.id).reason
    cos = next(n for n in g.nodes if n.op_type == "ConstantOfShape")
    assert "only feeds other constant nodes" in explain(g, rule, cos.id).reason


def test_fold_constants_leaves_random_ops_and_constants_alone():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3] x) => (float[2, 3] y) {
          r = RandomNormal <shape = [2, 3]> ()
          c = Constant <value = float {1.0}> ()
          t = Add(r, c)
          y = Mul(x, t)
        }"""
    )
    assert find_matches(g, get_rule("fold-constants")) == []
    rule = get_rule("fold-constants")
    rn = next(n for n in g.nodes if n.op_type == "RandomNormal")
    assert "random" in explain(g, rule, rn.id).reason
    c = next(n for n in g.nodes if n.op_type == "Constant")
    assert "already is a constant" in explain(g, rule, c.id).reason


def test_fold_conv_bn_on_the_small_cnn():
    g = load_model(sample("small_cnn"))
    pv = rewrite(g, "fold-conv-bn", expect_matches=4)
    assert "BatchNormalization" not in ops(pv.graph)
    convs = {n.id for n in g.nodes if n.op_type == "Conv"}
    assert pv.changed == convs and not pv.added  # the Conv keeps its id: it changed, it is not new
    assert all(n.op_type == "BatchNormalization" for n in g.nodes if n.id in pv.removed)


def test_fold_conv_bn_why_not():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[1, 2, 4, 4] x, float[3] mean) => (float[1, 3, 4, 4] y, float[1, 3, 4, 4] z) {
          c = Conv <kernel_shape = [1, 1]> (x, w)
          y = BatchNormalization(c, s, b, mean, v)
          c2 = Conv <kernel_shape = [1, 1]> (x, w)
          z = BatchNormalization(c2, s, b, m, v)
          r = Relu(c2)
        }""",
        {"w": rng.standard_normal((3, 2, 1, 1)).astype(np.float32), "s": np.ones(3, np.float32), "b": np.zeros(3, np.float32), "m": np.zeros(3, np.float32), "v": np.ones(3, np.float32)},
    )
    rule = get_rule("fold-conv-bn")
    assert find_matches(g, rule) == []
    bn1, bn2 = [n for n in g.nodes if n.op_type == "BatchNormalization"]
    r1 = explain(g, rule, bn1.id).reason
    assert "the BN mean 'mean' is a graph input, not a constant" in r1
    r2 = explain(g, rule, bn2.id).reason
    assert "'c2'" in r2 and "also used by" in r2 and "(Relu)" in r2


@pytest.mark.parametrize("name", ["resnet50", "inception_v2"])
def test_fold_conv_bn_removes_every_conv_following_bn_in_light_models(name):
    g = load_model(light(name))
    conv_bns = [n for n in g.nodes if n.op_type == "BatchNormalization" and (p := n.input_values[0].producer) is not None and p.op_type == "Conv"]
    assert conv_bns
    pv = rewrite(g, "fold-conv-bn", expect_matches=len(conv_bns))
    left = [n for n in pv.graph.nodes if n.op_type == "BatchNormalization" and (p := n.input_values[0].producer) is not None and p.op_type == "Conv"]
    assert not left
