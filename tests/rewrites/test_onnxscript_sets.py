"""onnxscript's rule sets as workbench rules (rewrites/onnxscript_sets.py).

Each rule is run through the workbench's engine on a small model in the form onnxscript's
pattern matches, and the test asserts the three things: the op counts after the rewrite,
numerical equality with onnxruntime on seeded inputs (util.rewrite verifies; onnxruntime 1.32
runs the opset-23 and com.microsoft results), and onnx.checker validity (full check).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnx.printer
import pytest
from onnx import helper

from core.rewrite import explain, find_matches
from rewrites import get_rule

from tests.rewrites.models import F, llama_decoder, model, rng
from tests.rewrites.util import rewrite

N = helper.make_node


def f32(*shape, seed=0, scale=1.0):
    return (rng(seed).standard_normal(shape) * scale).astype(np.float32)


def i64(*v):
    return np.array(v, np.int64)


def scalar(v):
    return np.array(v, np.float32)


def counts(graph) -> Counter:
    return Counter(n.op_type for n in graph.nodes)


def check(graph, rule_id: str, matches: int, after: dict[str, int]):
    """Rewrite all matches (checked by onnx.checker and onnxruntime in util.rewrite) and
    compare the op counts named in `after`."""
    pv = rewrite(graph, rule_id, expect_matches=matches)
    got = counts(pv.graph)
    assert {op: got.get(op, 0) for op in after} == after, got
    return pv


# ---- the cases: (rule, model builder, matches, op counts after) -------------------------------------
def pad_conv():
    return model(
        [N("Pad", ["x", "pads"], ["p"], mode="constant"), N("Conv", ["p", "w", "b"], ["y"])],
        [("x", F, [1, 2, 6, 6])], [("y", F, None)],
        {"pads": i64(0, 0, 1, 1, 0, 0, 1, 1), "w": f32(3, 2, 3, 3), "b": f32(3, seed=1)},
    )


def conv_affine():
    return model(
        [N("Conv", ["x", "w", "b"], ["c"]), N("Mul", ["c", "s"], ["m"]), N("Add", ["m", "o"], ["y"])],
        [("x", F, [1, 2, 5, 5])], [("y", F, None)],
        {"w": f32(3, 2, 3, 3), "b": f32(3, seed=1), "s": scalar(0.5), "o": scalar(0.25)},
    )


def hardswish():
    return model(
        [N("Add", ["x", "three"], ["a"]), N("Clip", ["a", "zero", "six"], ["c"]), N("Mul", ["c", "x"], ["m"]), N("Div", ["m", "six"], ["y"])],
        [("x", F, [2, 8])], [("y", F, None)], {"three": scalar(3.0), "zero": scalar(0.0), "six": scalar(6.0)},
    )


def gemm_bn():
    return model(
        [N("Gemm", ["x", "w", "c"], ["g"]), N("BatchNormalization", ["g", "sc", "bi", "mu", "var"], ["y"])],
        [("x", F, [2, 4])], [("y", F, None)],
        {"w": f32(4, 3), "c": f32(3, seed=1), "sc": f32(3, seed=2), "bi": f32(3, seed=3), "mu": f32(3, seed=4),
         "var": np.abs(f32(3, seed=5)) + 0.5},
    )


def relu_clip_chains():
    return model(
        [N("Relu", ["x"], ["r"]), N("Relu", ["r"], ["y1"]), N("Clip", ["x", "lo", "hi"], ["c"]), N("Clip", ["c", "lo2", "hi2"], ["y2"])],
        [("x", F, [2, 8])], [("y1", F, None), ("y2", F, None)],
        {"lo": scalar(-1.0), "hi": scalar(6.0), "lo2": scalar(0.0), "hi2": scalar(4.0)},
    )


def min_max():
    return model(
        [N("Min", ["x", "hi"], ["m"]), N("Max", ["m", "lo"], ["y"])],
        [("x", F, [2, 8])], [("y", F, None)], {"hi": scalar(1.5), "lo": scalar(-0.5)},
    )


def whole_slice():
    return model(
        [N("Slice", ["x", "s", "e", "ax", "st"], ["sl"]), N("Relu", ["sl"], ["y"])],
        [("x", F, [2, 4])], [("y", F, None)], {"s": i64(0), "e": i64(4), "ax": i64(1), "st": i64(1)},
    )


def no_ops():
    return model(
        [N("Add", ["x", "zero"], ["a"]), N("Mul", ["a", "one"], ["m"]), N("Div", ["m", "one"], ["d"]), N("Relu", ["d"], ["y"])],
        [("x", F, [2, 3])], [("y", F, None)], {"zero": scalar(0.0), "one": scalar(1.0)},
    )


def expand_add():
    return model(
        [N("Expand", ["x", "shape"], ["e"]), N("Add", ["e", "y0"], ["y"])],
        [("x", F, [1, 3]), ("y0", F, [2, 3])], [("y", F, None)], {"shape": i64(2, 3)},
    )


def runtime_reshape():
    return model(
        [N("Shape", ["x"], ["sh"]), N("Slice", ["sh", "z", "two"], ["hw"]), N("Concat", ["hw", "m1"], ["new"], axis=0),
         N("Reshape", ["x", "new"], ["r"]), N("Relu", ["r"], ["y"])],
        [("x", F, [2, 3, 4, 5])], [("y", F, [2, 3, 20])], {"z": i64(0), "two": i64(2), "m1": i64(-1)},
    )


def transposes():
    return model(
        [N("Transpose", ["x"], ["t"], perm=[1, 0, 2]), N("Transpose", ["t"], ["u"], perm=[0, 2, 1]), N("Relu", ["u"], ["y"])],
        [("x", F, [2, 3, 4])], [("y", F, None)],
    )


def casts():
    return model(
        [N("Cast", ["x"], ["c"], to=onnx.TensorProto.FLOAT), N("Relu", ["c"], ["y"])],
        [("x", F, [2, 3])], [("y", F, None)],
    )


def unsqueezes():
    return model(
        [N("Unsqueeze", ["x", "a0"], ["u"]), N("Unsqueeze", ["u", "a1"], ["y"])],
        [("x", F, [2, 3])], [("y", F, None)], {"a0": i64(0), "a1": i64(3)},
    )


def skip_layernorm():  # a BERT block's residual + LayerNorm
    return model(
        [N("Add", ["x", "skip"], ["s"]), N("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
        [("x", F, [1, 4, 8]), ("skip", F, [1, 4, 8])], [("y", F, None)], {"g": f32(8), "b": f32(8, seed=1)}, opset=17,
    )


def bias_gelu():
    return model(
        [N("Add", ["x", "bias"], ["a"]), N("Gelu", ["a"], ["y"])],
        [("x", F, [2, 4, 8])], [("y", F, None)], {"bias": f32(8)}, opset=20,
    )


def erf_gelu():
    return model(
        [N("Div", ["x", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["a"]), N("Mul", ["x", "a"], ["m"]),
         N("Mul", ["half", "m"], ["y"])],
        [("x", F, [2, 8])], [("y", F, None)], {"sqrt2": scalar(np.sqrt(2.0)), "one": scalar(1.0), "half": scalar(0.5)},
    )


def transpose_matmul():
    return model(
        [N("Transpose", ["a"], ["t"], perm=[1, 0]), N("MatMul", ["t", "b"], ["m"]), N("Div", ["m", "four"], ["y"])],
        [("a", F, [4, 3]), ("b", F, [4, 5])], [("y", F, None)], {"four": scalar(4.0)},
    )


CASES = [
    ("fuse-pad-into-conv", pad_conv, 1, {"Pad": 0, "Conv": 1}),
    ("fuse-conv-affine", conv_affine, 1, {"Mul": 0, "Add": 0, "Conv": 1}),
    ("fuse-hardswish", hardswish, 1, {"Clip": 0, "Div": 0, "HardSwish": 1}),
    ("fold-batchnorm-gemm", gemm_bn, 1, {"BatchNormalization": 0, "Gemm": 1}),
    ("merge-relu-clip-chains", relu_clip_chains, 2, {"Relu": 1, "Clip": 1}),
    ("min-max-to-clip", min_max, 1, {"Min": 0, "Max": 0, "Clip": 1}),
    ("collapse-slices", whole_slice, 1, {"Slice": 0}),
    ("remove-arithmetic-no-ops", no_ops, 3, {"Add": 0, "Mul": 0, "Div": 0}),
    ("remove-redundant-expand", expand_add, 1, {"Expand": 0, "Add": 1}),
    ("materialize-reshape-shape", runtime_reshape, 1, {"Reshape": 1, "Concat": 0, "Shape": 0}),
    ("simplify-transposes", transposes, 1, {"Transpose": 1}),
    ("simplify-casts", casts, 1, {"Cast": 0}),
    ("merge-unsqueezes", unsqueezes, 1, {"Unsqueeze": 1}),
    ("fuse-rms-normalization", lambda: llama_decoder(opset=23), 5, {"RMSNormalization": 5, "Reciprocal": 0, "Pow": 0, "Sqrt": 0}),
    ("fuse-rotary-embedding", lambda: llama_decoder(opset=23), 4, {"RotaryEmbedding": 4, "Neg": 0, "Slice": 0, "Concat": 0}),
    ("ort-skip-layer-normalization", skip_layernorm, 1, {"SkipLayerNormalization": 1, "LayerNormalization": 0, "Add": 0}),
    ("ort-bias-gelu", bias_gelu, 1, {"BiasGelu": 1, "Gelu": 0, "Add": 0}),
    ("ort-erf-gelu", erf_gelu, 1, {"Gelu": 1, "Erf": 0, "Mul": 0}),
    ("ort-fused-matmul", transpose_matmul, 1, {"FusedMatMul": 1, "Div": 0, "MatMul": 0}),
]


@pytest.mark.parametrize("rule_id,build,matches,after", CASES, ids=[c[0] for c in CASES])
def test_rule_rewrites_verifies_and_checks(rule_id, build, matches, after):
    pv = check(build(), rule_id, matches, after)
    assert get_rule(rule_id).source == "onnxscript"
    assert pv.applied and not pv.skipped


def test_every_wrapped_rule_has_a_case():
    from rewrites.onnxscript_sets import RULES

    assert {r.id for r in RULES} == {c[0] for c in CASES}


def test_opset_23_fusions_wait_for_upgrade_opset_and_say_so():
    g = llama_decoder(opset=18)
    rule = get_rule("fuse-rms-normalization")
    assert find_matches(g, rule) == []
    why = explain(g, rule, g.find_node("layers.0.input_layernorm.scale").id)
    assert not why.matches and "opset 18" in why.reason and "upgrade-opset" in why.reason
    pv = check(g, "upgrade-opset", 1, {"RMSNormalization": 0})
    assert pv.graph.opset == 23 and not pv.removed and not pv.added  # node ids kept
    assert len(find_matches(pv.graph, rule)) == 5


def test_why_not_reports_onnxscripts_own_failure_reason():
    g = model(  # a Pad with a non-zero value cannot go into the Conv
        [N("Pad", ["x", "pads", "v"], ["p"], mode="constant"), N("Conv", ["p", "w"], ["y"])],
        [("x", F, [1, 2, 6, 6])], [("y", F, None)], {"pads": i64(0, 0, 1, 1, 0, 0, 1, 1), "v": scalar(1.0), "w": f32(3, 2, 3, 3)},
    )
    rule = get_rule("fuse-pad-into-conv")
    assert find_matches(g, rule) == []
    why = explain(g, rule, g.nodes[0].id)  # the Pad
    assert not why.matches and "must be equal to 0" in why.reason, why.reason


def test_rotary_matches_share_their_cos_sin_nodes():
    """q and k read the same Unsqueeze(Cos(...)): both match, and the shared nodes go with the last."""
    g = llama_decoder(opset=23, layers=1)
    ms = find_matches(g, get_rule("fuse-rotary-embedding"))
    assert len(ms) == 2
    check(g, "fuse-rotary-embedding", 2, {"RotaryEmbedding": 2, "Unsqueeze": 1})  # only the position ids' Unsqueeze stays


def test_fused_matmul_takes_the_transpose_in_a_second_step():
    """One apply is one pass (the Div goes into the FusedMatMul); the next takes the Transpose in."""
    pv = check(transpose_matmul(), "ort-fused-matmul", 1, {"FusedMatMul": 1, "Transpose": 1})
    check(pv.graph, "ort-fused-matmul", 1, {"FusedMatMul": 1, "Transpose": 0})


def test_wrapped_rules_see_inferred_shapes_of_a_model_without_value_info():
    """onnxscript reads value.shape/.dtype; a file without value_info has them only as the
    workbench's inferred types, shown to onnxscript for one match and put back after."""
    from core.model.onnx_io import load_model_bytes

    proto = llama_decoder(opset=23, layers=1).to_proto()
    del proto.graph.value_info[:]
    g = load_model_bytes(proto.SerializeToString(), "bare.onnx")
    q = g.find_node("layers.0.self_attn.q_rot.add").ir.inputs[0]
    assert q.shape is None
    assert len(find_matches(g, get_rule("fuse-rotary-embedding"))) == 2
    assert q.shape is None and q.type is None  # nothing left behind in the model
    check(g, "fuse-rms-normalization", 3, {"RMSNormalization": 3})
    assert onnx.printer.to_text(g.to_proto().graph) == onnx.printer.to_text(proto.graph)  # the model as read


def test_erf_gelu_in_torch_onnx_order_the_constant_second():
    """torch.onnx writes Mul(Mul(x, Erf(...) + 1), 0.5); onnxscript's pattern has 0.5 first: the
    wrapped rule tries the operand orders."""
    g = model(
        [N("Div", ["x", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["a"]), N("Mul", ["x", "a"], ["m"]),
         N("Mul", ["m", "half"], ["y"])],
        [("x", F, [2, 8])], [("y", F, None)], {"sqrt2": scalar(np.sqrt(2.0)), "one": scalar(1.0), "half": scalar(0.5)},
    )
    check(g, "ort-erf-gelu", 1, {"Gelu": 1, "Erf": 0, "Mul": 0})


def test_a_result_newer_than_the_models_opset_is_not_written():
    """HardSwish is opset 14: on an opset-13 model the pattern is found, named, and left alone."""
    proto = hardswish().to_proto()
    proto.opset_import[0].version = 13
    from core.model.onnx_io import load_model_bytes

    g = load_model_bytes(proto.SerializeToString(), "hs13.onnx")
    rule = get_rule("fuse-hardswish")
    assert find_matches(g, rule) == []
    why = explain(g, rule, g.nodes[-1].id)
    assert "opset 13" in why.reason and "HardSwish" in why.reason and "upgrade-opset" in why.reason, why.reason
