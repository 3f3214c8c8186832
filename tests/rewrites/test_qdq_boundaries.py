"""Rewrites respect quantization: no rule folds or fuses a Q/DQ boundary away, so an int8 model stays
an int8 model (docs/quantization.md). Each test says which failure it was checked against: before
the rule knew about DequantizeLinear, fold-constants offered every weight's DequantizeLinear of an
onnxruntime-quantized ResNet-18 (62 matches) and fold-conv-bn folded dequantized weights into floats."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from core.model.onnx_io import load_model_bytes
from core.rewrite import explain, find_matches, preview
from rewrites import RULES, get_rule
from tests.core.compiler.qdq_models import qdq_cnn, quantize_qdq
from tests.rewrites.util import graph_from_text, ops, rewrite

OURS = ("folding", "cleanup", "fusion")  # the families that read or store constants


def _quantization(graph) -> tuple[int, int, int]:
    """(QuantizeLinear nodes, DequantizeLinear nodes, integer initializers)."""
    c = collections.Counter(n.op_type for n in graph.nodes)
    ints = sum(1 for v in graph.initializers if np.issubdtype(np.asarray(v.numpy()).dtype, np.integer))
    return c["QuantizeLinear"], c["DequantizeLinear"], ints


@pytest.fixture(scope="module")
def quantized_resnet():
    from benchmarks.architectures.resnet import resnet18

    m = quantize_qdq(resnet18(size=32, classes=10))
    return load_model_bytes(m.SerializeToString(), "resnet18_qdq.onnx")


def test_no_rule_of_ours_removes_a_quantization_boundary(quantized_resnet):
    g = load_model_bytes(qdq_cnn().SerializeToString(), "cnn_qdq.onnx")
    for graph in (g, quantized_resnet):
        before = _quantization(graph)
        assert before[1] > 0 and before[2] > 0
        for rule in RULES.values():
            if rule.family not in OURS:
                continue
            ms = find_matches(graph, rule)
            if ms:
                assert _quantization(preview(graph, rule, ms).graph) == before, rule.id


def test_fold_constants_leaves_dequantized_weights_alone(quantized_resnet):
    rule = get_rule("fold-constants")
    assert find_matches(quantized_resnet, rule) == []
    dq = next(n for n in quantized_resnet.nodes if n.op_type == "DequantizeLinear" and n.name == "conv1.weight_DequantizeLinear")
    reason = explain(quantized_resnet, rule, dq.id).reason
    assert "would dequantize the int8 tensor 'conv1.weight_quantized' into floats" in reason


def test_fold_constants_folds_float_constants_but_nothing_computed_from_a_dequantize():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 19]>
        m (float[4] x) => (float[4] y) {
          w = Add(a, b)
          wq = QuantizeLinear(w, s, z)
          wd = DequantizeLinear(wq, s, z)
          r = Reshape(wd, shape)
          y1 = Mul(x, r)
          y = Add(y1, w)
        }""",
        {"a": np.float32([0.1, 0.2, 0.3, 0.4]), "b": np.float32([1, 1, 1, 1]), "s": np.float32(0.01), "z": np.int8(0),
         "shape": np.int64([4])},
    )
    rule = get_rule("fold-constants")
    reshape = next(n for n in g.nodes if n.op_type == "Reshape")
    assert "would dequantize the int8 tensor 'wq' into floats (through" in explain(g, rule, reshape.id).reason
    pv = rewrite(g, "fold-constants", expect_matches=1)  # the float Add, which the Mul's sibling reads
    assert ops(pv.graph) == ["QuantizeLinear", "DequantizeLinear", "Reshape", "Mul", "Add"]


def test_fold_conv_bn_refuses_dequantized_weights():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[1, 2, 4, 4] x) => (float[1, 2, 4, 4] y) {
          w = DequantizeLinear(wq, ws, wz)
          c = Conv(x, w)
          y = BatchNormalization(c, scale, bias, mean, var)
        }""",
        {"wq": np.ones((2, 2, 1, 1), np.int8), "ws": np.float32([0.1, 0.2]), "wz": np.zeros(2, np.int8),
         "scale": np.float32([1, 2]), "bias": np.float32([0, 1]), "mean": np.float32([0, 0]), "var": np.float32([1, 1])},
    )
    rule = get_rule("fold-conv-bn")
    assert find_matches(g, rule) == []
    bn = next(n for n in g.nodes if n.op_type == "BatchNormalization")
    assert "the Conv weight 'w' is dequantized from the int8 tensor 'wq'" in explain(g, rule, bn.id).reason


def test_fold_conv_bn_still_folds_float_weights():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[1, 2, 4, 4] x) => (float[1, 2, 4, 4] y) {
          c = Conv(x, w)
          y = BatchNormalization(c, scale, bias, mean, var)
        }""",
        {"w": np.ones((2, 2, 1, 1), np.float32), "scale": np.float32([1, 2]), "bias": np.float32([0, 1]),
         "mean": np.float32([0, 0]), "var": np.float32([1, 1])},
    )
    assert ops(rewrite(g, "fold-conv-bn", expect_matches=1).graph) == ["Conv"]
