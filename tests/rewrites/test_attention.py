"""fuse-attention (rewrites/attention.py) on small models: the op counts after the rewrite,
onnxruntime before vs after on seeded inputs and onnx.checker validity (util.rewrite), the
Attention node's inputs and attributes, and the reason for each refusal."""
from __future__ import annotations

import numpy as np
from onnx import helper

from tests.rewrites.models import F, llama_decoder, model
from tests.rewrites.test_onnxscript_sets import check
from tests.rewrites.util import why

N = helper.make_node
B, HQ, HKV, S, D = 2, 4, 2, 5, 8


def _attention(pv):
    return [n for n in pv.graph.model.graph if n.op_type == "Attention"]


def gqa_model(opset: int = 23, mask: str = "add", guard: bool = False, fill: float = -1e30):
    """Q [B, 4, S, D]; K, V [B, 2, S, D] repeated to 4 heads as transformers' repeat_kv writes it;
    √scale on Q and on Kᵀ as torch's dynamo SDPA; the mask added (a graph input) or a Where."""
    nodes = []
    for x in "kv":
        nodes += [N("Unsqueeze", [x, "ax2"], [f"{x}5"]), N("Expand", [f"{x}5", "rep_shape"], [f"{x}r"]),
                  N("Reshape", [f"{x}r", "heads_shape"], [f"{x}h"])]
    nodes += [N("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]), N("Mul", ["q", "root"], ["qs"]), N("Mul", ["kt", "root"], ["kts"]),
              N("MatMul", ["qs", "kts"], ["scores"])]
    inputs = [("q", F, [B, HQ, S, D]), ("k", F, [B, HKV, S, D]), ("v", F, [B, HKV, S, D])]
    inits = {"ax2": np.array([2], np.int64), "rep_shape": np.array([B, HKV, HQ // HKV, S, D], np.int64),
             "heads_shape": np.array([B, HQ, S, D], np.int64), "root": np.array(D ** -0.25, np.float32)}
    if mask == "add":
        nodes.append(N("Add", ["scores", "mask"], ["masked"]))
        inputs.append(("mask", F, [B, 1, S, S]))
    else:
        nodes.append(N("Where", ["keep", "scores", "fill"], ["masked"]))
        inputs.append(("keep", helper.TensorProto.BOOL, [B, 1, S, S]))
        inits["fill"] = np.array(fill, np.float32)
    nodes.append(N("Softmax", ["masked"], ["p"], axis=-1))
    if guard:
        nodes += [N("IsNaN", ["p"], ["nan"]), N("Where", ["nan", "zero", "p"], ["pg"])]
        inits["zero"] = np.array(0.0, np.float32)
    nodes.append(N("MatMul", ["pg" if guard else "p", "vh"], ["y"], name="av"))
    return model(nodes, inputs, [("y", F, None)], inits, opset=opset)


def test_causal_decoder_attention_becomes_is_causal_with_the_divisor_as_scale():
    pv = check(llama_decoder(opset=23), "fuse-attention", 2, {"Attention": 2, "Softmax": 0, "Div": 0})
    for a in _attention(pv):
        assert a.attributes.get_int("is_causal") == 1 and len(a.inputs) == 3  # the constant triangle is gone
        assert np.isclose(a.attributes.get_float("scale"), 1 / np.sqrt(8))  # hidden 16, 2 heads: Div by sqrt(8)
        assert a.inputs[0].producer().op_type == "Add" and a.inputs[1].producer().op_type == "Add"  # rotary q, k; not Kᵀ


def test_gqa_feeds_key_and_value_unrepeated_with_the_additive_mask():
    pv = check(gqa_model(), "fuse-attention", 1, {"Attention": 1, "Expand": 0, "Unsqueeze": 0, "Reshape": 0, "Transpose": 0, "Mul": 0})
    (a,) = _attention(pv)
    assert [i.name for i in a.inputs] == ["q", "k", "v", "mask"]
    assert np.isclose(a.attributes.get_float("scale"), 1 / np.sqrt(D)) and a.attributes.get("is_causal") is None


def test_nan_guard_is_dropped_with_a_finite_where_mask():
    pv = check(gqa_model(mask="where", guard=True), "fuse-attention", 1, {"Attention": 1, "IsNaN": 0, "Softmax": 0})
    (a,) = _attention(pv)
    assert a.inputs[3].producer().op_type in ("Where", "CastLike")


def test_refused_below_opset_23_with_the_way_forward():
    reason = why(gqa_model(opset=18), "fuse-attention", "av")
    assert "opset 18" in reason and "upgrade-opset" in reason


def test_refused_nan_guard_with_a_mask_that_may_be_minus_infinity():
    assert "not provably finite" in why(gqa_model(guard=True), "fuse-attention", "av")


def test_refused_where_fill_that_adding_would_not_equal():
    assert "set to -10000; only a fill of -1e30" in why(gqa_model(mask="where", fill=-1e4), "fuse-attention", "av")
