"""The workbench's own transformer rules (rewrites/activations.py: SiLU, SwiGLU) and the opset step
(rewrites/opset.py), on the tiny Llama-style decoder and small models: op counts after the
rewrite, onnxruntime before vs after on seeded inputs, onnx.checker validity (util.rewrite)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from core.rewrite import apply_rewrite, explain, find_matches
from rewrites import get_rule

from tests.rewrites.models import F, llama_decoder, model, rng
from tests.rewrites.test_onnxscript_sets import check, counts

N = helper.make_node


def silu_model(opset: int):
    return model([N("Sigmoid", ["x"], ["s"]), N("Mul", ["s", "x"], ["y"])], [("x", F, [2, 8])], [("y", F, None)], opset=opset)


@pytest.mark.parametrize("opset,op", [(18, "SiLU"), (24, "Swish")])
def test_fuse_silu_makes_swish_from_opset_24_and_a_local_function_below(opset, op):
    pv = check(silu_model(opset), "fuse-silu", 1, {op: 1, "Sigmoid": 0, "Mul": 0})
    assert bool(pv.graph.model.functions) == (opset < 24)


def test_ort_silu_is_quickgelu_with_alpha_one():
    pv = check(llama_decoder(opset=18), "ort-silu", 2, {"QuickGelu": 2, "Sigmoid": 0})
    q = next(n for n in pv.graph.model.graph if n.op_type == "QuickGelu")
    assert q.domain == "com.microsoft" and q.attributes.get_float("alpha") == 1.0


def test_fuse_swiglu_on_the_decoder_merges_gate_and_up_projections():
    g = llama_decoder(opset=18)
    before = counts(g)
    pv = check(g, "fuse-swiglu", 2, {"SwiGLU": 2, "Sigmoid": 0})
    after = counts(pv.graph)
    assert after["MatMul"] == before["MatMul"] - 4  # gate and up projections of both layers
    names = set(pv.graph.model.graph.initializers)
    assert "layers.0.mlp.gate_proj.weight" not in names and "layers.0.mlp.gate_up_proj.weight" in names


def test_fuse_swiglu_also_takes_the_fused_silu():
    g = llama_decoder(opset=18, layers=1)
    apply_rewrite(g, get_rule("fuse-silu"))
    assert counts(g)["SiLU"] == 1
    check(g, "fuse-swiglu", 1, {"SwiGLU": 1, "SiLU": 0, "MatMul": 7})


def test_fuse_swiglu_says_why_weights_of_different_shapes_do_not_fuse():
    r = rng(0)
    g = model(
        [N("MatMul", ["x", "w1"], ["a"]), N("Sigmoid", ["a"], ["s"]), N("Mul", ["a", "s"], ["g"]),
         N("MatMul", ["x", "w3"], ["u"]), N("Mul", ["g", "u"], ["y"], name="gated")],
        [("x", F, [2, 4])], [("y", F, None)],
        {"w1": r.standard_normal((4, 6)).astype(np.float32), "w3": r.standard_normal((4, 1)).astype(np.float32)},
    )
    rule = get_rule("fuse-swiglu")
    assert find_matches(g, rule) == []
    why = explain(g, rule, g.find_node("gated").id)
    assert not why.matches and "[4, 6]" in why.reason and "[4, 1]" in why.reason, why.reason


def test_upgrade_opset_keeps_node_ids_and_outputs():
    g = llama_decoder(opset=18, layers=1)
    pv = check(g, "upgrade-opset", 1, {"MatMul": counts(g)["MatMul"]})
    assert pv.graph.opset == 23 and not pv.removed and not pv.added
    assert not find_matches(pv.graph, get_rule("upgrade-opset"))  # nothing left to upgrade


def test_the_decoder_rewritten_for_standard_ops_end_to_end():
    """The recipe the issue describes: upgrade, RMSNorm, rotary, SwiGLU; each step one verified edit."""
    g = llama_decoder(opset=18)
    for rule_id in ("upgrade-opset", "fuse-rms-normalization", "fuse-rotary-embedding", "fuse-swiglu"):
        pv = apply_rewrite(g, get_rule(rule_id), verify=True)
        assert pv.applied and pv.verification.ok, rule_id
    c = counts(g)
    assert (c["RMSNormalization"], c["RotaryEmbedding"], c["SwiGLU"]) == (5, 4, 2)
    assert c["Pow"] == c["Neg"] == c["Sigmoid"] == 0
    assert len(g) < 70  # from 125 nodes
