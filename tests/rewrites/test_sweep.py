"""Every rule on real models: a rule either does not match, or applies every match and leaves a valid
model (onnx.checker, full check) that computes what the original did (onnxruntime on seeded random
inputs); fold-conv-bn leaves no Conv-following BatchNormalization behind.

Swept: the smaller light models of the onnx wheel, as shipped and with seeded random weights
(core.verify.with_random_weights: their ConstantOfShape weights make outputs nearly
input-independent), and the bundled samples. The larger light models (bvlc_alexnet, densenet121,
inception_v2, resnet50, vgg19, zfnet512) are left out for time: with them the sweep took ~85 s on
2 cores. Each model also names the rules that must match in it, so a sweep in which nothing
matched fails instead of passing.
"""
from __future__ import annotations

import onnx
import pytest

from core import load_model
from core.rewrite import find_matches, preview
from core.verify import with_random_weights
from rewrites import all_rules
from tests.conftest import light, sample

# label -> (model path, with random weights?, rules that must match at least)
MODELS = {
    "squeezenet": (light("squeezenet"), False, {"fold-constants", "eliminate-identity"}),
    "squeezenet (random)": (light("squeezenet"), True, {"eliminate-identity"}),
    "shufflenet": (light("shufflenet"), False, {"fold-constants", "fold-conv-bn"}),
    "shufflenet (random)": (light("shufflenet"), True, {"fold-conv-bn"}),
    "inception_v1": (light("inception_v1"), False, {"fold-constants", "eliminate-identity"}),
    "inception_v1 (random)": (light("inception_v1"), True, {"eliminate-identity"}),
    "mlp": (sample("mlp"), False, {"fuse-matmul-add", "fuse-linear-relu"}),
    "small_cnn": (sample("small_cnn"), False, {"fold-conv-bn"}),
    "tiny_transformer": (sample("tiny_transformer"), False, {"fuse-gelu", "fuse-layernorm", "fuse-transpose-matmul"}),
}


def _conv_bns(graph) -> int:
    """BatchNormalization nodes that directly follow a Conv."""
    return sum(1 for n in graph.nodes if n.op_type == "BatchNormalization" and (p := n.input_values[0].producer) is not None and p.op_type == "Conv")


def sweep(graph) -> tuple[set[str], list[str]]:
    """(ids of the rules that matched, one line per rule that failed)."""
    matched, failures = set(), []
    for rule in all_rules():
        matches = find_matches(graph, rule)
        if not matches:
            continue
        matched.add(rule.id)
        pv = preview(graph, rule, matches)
        if pv.skipped:
            failures.append(f"{rule.id}: a match no longer applied: {pv.skipped[0][1]}")
            continue
        try:
            onnx.checker.check_model(pv.graph.to_proto(), full_check=True)
        except Exception as e:  # noqa: BLE001 - the checker's own error is the failure's text
            failures.append(f"{rule.id}: invalid model: {str(e).splitlines()[0]}")
            continue
        if pv.applied:
            check = pv.verify()
            if not check.ok:
                failures.append(f"{rule.id}: differs from the original: {check.explain()}")
        if rule.id == "fold-conv-bn" and _conv_bns(pv.graph):
            failures.append(f"{rule.id}: {_conv_bns(pv.graph)} Conv-following BatchNormalization left")
    return matched, failures


@pytest.mark.parametrize("label", list(MODELS))
def test_every_matching_rule_applies_and_verifies(label):
    path, randomize, expected = MODELS[label]
    graph = load_model(path)
    if randomize:
        graph = with_random_weights(graph, seed=0)
    matched, failures = sweep(graph)
    assert not failures, failures
    assert expected <= matched, f"expected {sorted(expected - matched)} to match in {label}"
