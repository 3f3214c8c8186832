"""The transformer-block rules on real torch.onnx dynamo exports (tests/rewrites/data, made by
scripts/make_dynamo_fixtures.py: a 2-layer Llama with grouped-query attention and a 2-layer BERT,
transformers' configs, random weights): how many matches each rule finds in each layer, validity
(onnx.checker) and onnxruntime before vs after, and the rewritten model compiled by the workbench
against onnxruntime's outputs of the original file. The fixtures are committed; a missing one fails."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from core import load_model
from core.rewrite import apply_rewrite, find_matches
from rewrites import get_rule

from tests.rewrites.util import rewrite

DATA = Path(__file__).parent / "data"
LLAMA, BERT = DATA / "llama_dynamo.onnx", DATA / "bert_dynamo.onnx"

# rule -> matches per layer (None: outside the layers, the final norm); 2 layers each
LLAMA_MATCHES = {
    "fuse-rms-normalization": {0: 2, 1: 2, None: 1},  # input and post-attention norms, the final norm
    "fuse-rotary-embedding": {0: 2, 1: 2},  # q and k
    "fuse-swiglu": {0: 1, 1: 1},
    "fuse-attention": {0: 1, 1: 1},
}
BERT_MATCHES = {"fuse-gelu": {0: 1, 1: 1}, "fuse-attention": {0: 1, 1: 1}}


def _layer(graph, node_id: int) -> int | None:
    """The decoder/encoder layer a node comes from, read from the exporter's name scopes."""
    scope = graph.node(node_id).ir.metadata_props.get("namespace", "")
    found = re.search(r"\.(?:layers|layer)\.(\d+):", scope)
    return int(found.group(1)) if found else None


def _upgraded(path: Path):
    g = load_model(path)
    apply_rewrite(g, get_rule("upgrade-opset"))
    assert g.opset == 23
    return g


def _feeds(batch: int = 2, seq: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, -3:] = 0  # right padding
    return {"input_ids": rng.integers(0, 128, (batch, seq)).astype(np.int64), "attention_mask": mask}


@pytest.mark.parametrize("path,expected", [(LLAMA, LLAMA_MATCHES), (BERT, BERT_MATCHES)], ids=["llama", "bert"])
def test_each_rule_matches_in_every_layer_and_verifies(path, expected):
    base = _upgraded(path)
    for rule_id, per_layer in expected.items():
        g = base.clone()
        found = Counter(_layer(g, m.root_id) for m in find_matches(g, get_rule(rule_id)))
        assert dict(found) == per_layer, (rule_id, dict(found))
        rewrite(g, rule_id, expect_matches=sum(per_layer.values()))  # onnx.checker + onnxruntime before vs after


def _all_rules(path: Path):
    from benchmarks.rewrite_compile import TRANSFORMER_RULES
    from core.rewrite import run_rules
    from rewrites import get_rules

    g = load_model(path)
    reports = run_rules(g, get_rules(list(TRANSFORMER_RULES)), verify=True)
    return g, {r.rule: r.applied for r in reports if r.applied}


def test_llama_rewritten_to_opset_23_ops_runs_the_same_on_onnxruntime():
    import onnxruntime as ort

    g, applied = _all_rules(LLAMA)
    assert applied == {"upgrade-opset": 1, "fuse-rms-normalization": 5, "fuse-rotary-embedding": 4, "fuse-swiglu": 2, "fuse-attention": 2}
    ops = Counter(n.op_type for n in g.nodes)
    assert ops["Attention"] == 2 and ops["Softmax"] == 0 and ops["RMSNormalization"] == 5 and ops["RotaryEmbedding"] == 4
    proto = g.to_proto()
    onnx.checker.check_model(proto, full_check=True)
    x = _feeds()
    want = ort.InferenceSession(str(LLAMA)).run(None, x)[0]
    got = ort.InferenceSession(proto.SerializeToString()).run(None, x)[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    # GQA: K and V reach Attention with the exporter's 2 key/value heads, not repeated to 4
    att = next(n for n in g.model.graph if n.op_type == "Attention")
    assert att.inputs[1].shape[1] == 2 and att.inputs[0].shape[1] == 4


def test_attention_on_the_llama_agrees_with_onnx_reference_evaluator():
    """Checked against a second implementation of opset-23 Attention: onnxruntime's reads the
    lowest float32 as -inf, onnx's reference does not (the rule passes -1e30 for it)."""
    from onnx.reference import ReferenceEvaluator

    g = _upgraded(LLAMA)
    apply_rewrite(g, get_rule("fuse-attention"))
    x = _feeds()
    want = ReferenceEvaluator(str(LLAMA)).run(None, x)[0]
    got = ReferenceEvaluator(g.to_proto()).run(None, x)[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("path", [LLAMA, BERT], ids=["llama", "bert"])
def test_rewritten_model_compiles_and_matches_the_original(path):
    """As exported: batch and sequence symbolic (RMSNormalization, RotaryEmbedding and Attention
    convert with symbolic lengths), checked at two shapes against the original file."""
    from benchmarks.rewrite_compile import reference
    from core.compiler.compile import compile_model

    g, _ = _all_rules(path)
    assert [v.shape for v in g.inputs] == [("batch", "seq"), ("batch", "seq")]
    art = compile_model(g, "cpu", verify_dims={"batch": 2, "seq": 8})  # verifies against onnxruntime itself
    for batch, seq in ((2, 8), (1, 13)):
        x = _feeds(batch, seq)
        for got, want in zip(art.run(x), reference(path, x)):
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


def test_attention_matches_bert_with_its_shapes_folded_to_constants():
    """Kᵀ's Reshape/Transpose/Reshape with constant shapes (a static export, or the exporter's
    shape arithmetic folded) is checked against K's static shape instead of Shape(K)."""
    from benchmarks.rewrite_compile import static

    g = static(load_model(BERT), 2, 8)
    apply_rewrite(g, get_rule("upgrade-opset"))
    assert not any(n.op_type == "Shape" for n in g.nodes)
    rewrite(g, "fuse-attention", expect_matches=2)
