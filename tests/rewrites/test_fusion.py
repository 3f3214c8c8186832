"""fusion.py rules: op types after the rewrite, onnxruntime equality, checker validity, misses."""
from __future__ import annotations

import numpy as np

from core import load_model
from tests.conftest import sample

from tests.rewrites.util import graph_from_text, ops, rewrite, why

rng = np.random.default_rng(0)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_fuse_matmul_add_on_the_mlp():
    g = load_model(sample("mlp"))
    pv = rewrite(g, "fuse-matmul-add", expect_matches=3)
    assert ops(pv.graph).count("Gemm") == 3 and "MatMul" not in ops(pv.graph) and "Add" not in ops(pv.graph)
    assert len(pv.added) == 3 and len(pv.removed) == 6


def test_fuse_matmul_add_bias_first_matches_batched_does_not():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[4, 8] x, float[2, 4, 8] y) => (float[4, 5] a, float[2, 4, 5] c) {
          t = MatMul(x, w)
          a = Add(bias, t)
          v = MatMul(y, w)
          c = Add(v, bias)
        }""",
        {"w": f32(8, 5), "bias": f32(5)},
    )
    pv = rewrite(g, "fuse-matmul-add", expect_matches=1)  # the commuted Add matches; the 3-D one does not
    assert sorted(ops(pv.graph)) == ["Add", "Gemm", "MatMul"]


def test_fuse_matmul_add_why_not_names_rank_and_broadcast():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[4, 8] x, float[2, 4, 8] y) => (float[4, 5] b, float[2, 4, 5] c) {
          u = MatMul (x, w)
          b = Add (u, big)
          v = MatMul (y, w)
          c = Add (v, bias)
        }""",
        {"w": f32(8, 5), "bias": f32(5), "big": f32(1, 4, 5)},
    )
    adds = [n for n in g.nodes if n.op_type == "Add"]
    from core.rewrite import explain
    from rewrites import get_rule

    r = get_rule("fuse-matmul-add")
    assert "does not broadcast" in explain(g, r, adds[0].id).reason
    assert "rank 3" in explain(g, r, adds[1].id).reason
    mm = [n for n in g.nodes if n.op_type == "MatMul"][1]
    assert "rank 3" in explain(g, r, mm.id).reason  # asked on the MatMul, answered from its Add


def test_fuse_linear_relu_is_a_valid_local_function():
    g = load_model(sample("mlp"))
    pv = rewrite(g, "fuse-linear-relu", expect_matches=2)
    assert ops(pv.graph).count("LinearRelu") == 2 and "Relu" not in ops(pv.graph)
    assert ("mlc.workbench", "LinearRelu") in pv.graph.functions
    # after fuse-matmul-add the Gemm form fuses too
    from core.rewrite import RewriteEdit

    pv1 = rewrite(g, "fuse-matmul-add")
    RewriteEdit(pv1).do(g)
    g.changed()
    pv2 = rewrite(g, "fuse-linear-relu", expect_matches=2)
    assert ops(pv2.graph).count("GemmRelu") == 2
    assert "not part of this rule's pattern" in why(load_model(sample("small_cnn")), "fuse-linear-relu", "pool1")


def test_fuse_gelu_local_function_below_opset_20_and_gelu_at_20():
    g = load_model(sample("tiny_transformer"))
    pv = rewrite(g, "fuse-gelu", expect_matches=1)
    assert "Erf" not in ops(pv.graph) and ops(pv.graph).count("Gelu") == 1
    assert ("mlc.workbench", "Gelu") in pv.graph.functions
    text = """<ir_version: 10, opset_import: ["": 20]>
        m (float[2, 6] x) => (float[2, 6] y) {
          d = Div(x, s)
          e = Erf(d)
          p = Add(one, e)
          h = Mul(x, half)
          y = Mul(h, p)
        }"""
    g20 = graph_from_text(text, {"s": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)})
    pv = rewrite(g20, "fuse-gelu", expect_matches=1)
    assert ops(pv.graph) == ["Gelu"] and not pv.graph.functions


def test_fuse_gelu_why_not_names_the_wrong_constant():
    text = """<ir_version: 10, opset_import: ["": 20]>
        m (float[2, 6] x) => (float[2, 6] y) {
          d = Div(x, s)
          e = Erf(d)
          p = Add(e, one)
          m1 = Mul(x, p)
          y = Mul(m1, half)
        }"""
    g = graph_from_text(text, {"s": np.array(1.5, np.float32), "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)})
    rewrite(g, "fuse-gelu", expect_matches=0)
    erf = next(n for n in g.nodes if n.op_type == "Erf")
    from core.rewrite import explain
    from rewrites import get_rule

    reason = explain(g, get_rule("fuse-gelu"), erf.id).reason
    assert "divisor" in reason and "1.5" in reason and "sqrt(2)" in reason


def test_fuse_layernorm_on_the_transformer():
    from core.rewrite import find_matches
    from rewrites import get_rule

    g = load_model(sample("tiny_transformer"))
    pv = rewrite(g, "fuse-layernorm", expect_matches=2)
    assert ops(pv.graph).count("LayerNormalization") == 2
    assert "ReduceMean" not in ops(pv.graph) and "Sqrt" not in ops(pv.graph)
    # the axis counted from the end, as exporters write it: onnxruntime's SkipLayerNormalization
    # fusion (rewrite --for ort) then takes each residual Add in
    assert [n.attributes["axis"] for n in pv.graph.nodes if n.op_type == "LayerNormalization"] == [-1, -1]
    assert len(find_matches(pv.graph, get_rule("ort-skip-layer-normalization"))) == 1  # ln2, after the residual Add


def test_fuse_layernorm_needs_opset_17_and_trailing_axes():
    body = """
        m (float[2, 4, 8] x) => (float[2, 4, 8] y) {
          mean = ReduceMean <axes = [AX], keepdims = 1> (x)
          d = Sub(x, mean)
          sq = Pow(d, two)
          var = ReduceMean <axes = [AX], keepdims = 1> (sq)
          ve = Add(var, eps)
          sd = Sqrt(ve)
          n = Div(d, sd)
          sc = Mul(n, gamma)
          y = Add(sc, beta)
        }"""
    inits = {"two": np.array(2, np.float32), "eps": np.array(1e-5, np.float32), "gamma": f32(8), "beta": f32(8)}
    g16 = graph_from_text('<ir_version: 8, opset_import: ["": 16]>' + body.replace("AX", "-1"), inits)
    rewrite(g16, "fuse-layernorm", expect_matches=0)
    from core.rewrite import explain
    from rewrites import get_rule

    r = get_rule("fuse-layernorm")
    root16 = g16.nodes[-1]
    assert "needs opset 17" in explain(g16, r, root16.id).reason
    g_mid = graph_from_text('<ir_version: 8, opset_import: ["": 17]>' + body.replace("AX", "1"), inits | {"gamma": f32(4, 1), "beta": f32(4, 1)})
    assert "not the trailing axes" in explain(g_mid, r, g_mid.nodes[-1].id).reason
    g_ok = graph_from_text('<ir_version: 8, opset_import: ["": 17]>' + body.replace("AX", "-1"), inits)
    pv = rewrite(g_ok, "fuse-layernorm", expect_matches=1)
    assert ops(pv.graph) == ["LayerNormalization"]


def test_fuse_transpose_matmul_gemm_and_einsum():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[8, 4] a, float[6, 8] b) => (float[4, 6] y) {
          at = Transpose <perm = [1, 0]> (a)
          bt = Transpose <perm = [1, 0]> (b)
          y = MatMul(at, bt)
        }"""
    )
    pv = rewrite(g, "fuse-transpose-matmul", expect_matches=1)
    assert sorted(ops(pv.graph)) == ["Gemm", "Transpose"]
    t = load_model(sample("tiny_transformer"))
    pv = rewrite(t, "fuse-transpose-matmul", expect_matches=1)
    assert "Transpose" not in ops(pv.graph) and ops(pv.graph).count("Einsum") == 1


def test_fuse_transpose_matmul_why_not_on_other_perms():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[2, 3, 4] a, float[3, 4, 5] b) => (float[3, 2, 5] y) {
          at = Transpose <perm = [1, 0, 2]> (a)
          y = MatMul(at, b)
        }"""
    )
    rewrite(g, "fuse-transpose-matmul", expect_matches=0)
    from core.rewrite import explain
    from rewrites import get_rule

    reason = explain(g, get_rule("fuse-transpose-matmul"), g.nodes[0].id).reason
    assert "perm [1, 0, 2]" in reason


def test_why_not_on_a_node_that_only_feeds_a_match():
    from core.rewrite import explain
    from rewrites import get_rule

    g = load_model(sample("tiny_transformer"))
    w = explain(g, get_rule("fuse-gelu"), g.find_node("ffn.up.add").id)
    assert not w.matches and "only feeds a fuse-gelu match" in w.reason and "gelu.half_mul" in w.reason
    w = explain(g, get_rule("fuse-gelu"), g.find_node("gelu.erf").id)
    assert w.matches and g.find_node("gelu.erf").id in w.match.node_ids
