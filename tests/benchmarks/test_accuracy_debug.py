"""benchmarks/accuracy_debug.py's three tables on small models: a compiled encoder agrees with
onnxruntime at every tensor read (in a child process, with its peak RSS), a QDQ ResNet-18 is ranked by
quantization steps, and a small chunk budget splits the run into chunks."""
from __future__ import annotations

import math

import onnx
import pytest

from benchmarks.accuracy_debug import qdq_models, qdq_report, run_child


@pytest.fixture(scope="module")
def resnet_qdq():
    return qdq_models(size=32)


def test_the_compiled_encoder_agrees_at_every_tensor_read(tmp_path):
    from benchmarks.architectures.transformers import bert_encoder

    path = tmp_path / "bert.onnx"
    onnx.save(bert_encoder(layers=1, hidden=64, heads=2, mlp=128, seq=16, vocab=50), str(path))
    row = run_child("compiled", str(path))
    assert row["compared"] > 5 and row["beyond"] == 0 and row["first"] is None, row
    assert row["chunks"] == 1 and row["seconds"] > 0 and row["rss_mib"] > 0


def test_the_qdq_model_is_ranked_by_quantization_steps(resnet_qdq):
    source, folded, qdq = resnet_qdq
    assert {n.op_type for n in folded.graph.node}.isdisjoint({"BatchNormalization"})
    assert sum(n.op_type == "QuantizeLinear" for n in qdq.graph.node) > 20
    report = qdq_report(folded, qdq)
    worst = report.ranked()[:10]
    assert len(report.tensors) > 25 and all(t.steps is not None and math.isfinite(t.steps) for t in worst)
    assert [t.steps for t in worst] == sorted((t.steps for t in worst), reverse=True)
    assert worst[0].steps > 1  # int8 quantization errors accumulate over 18 layers: more than one step at the worst
    # the first divergence is the first Conv, whose input and weights the QDQ model quantizes
    assert report.first is not None and report.first.node == "conv1" and report.first.steps < 10


def test_a_small_budget_splits_the_run_into_chunks(resnet_qdq, tmp_path):
    _, folded, qdq = resnet_qdq
    ref, sub = tmp_path / "fp32.onnx", tmp_path / "qdq.onnx"
    onnx.save(folded, str(ref))
    onnx.save(qdq, str(sub))
    small = run_child("memory", str(ref), str(sub), 64 << 10)
    whole = run_child("memory", str(ref), str(sub), None)
    assert whole["chunks"] == 1 and small["chunks"] > 3
    assert small["compared"] == whole["compared"] > 25
    # memory does not grow with the chunks (each chunk once made two sessions of the whole model: +30 MiB each)
    assert small["rss_mib"] < whole["rss_mib"] + 48, (small, whole)


def test_the_unfolded_source_pairs_the_batchnorm_with_the_qdq_conv_that_absorbed_it(resnet_qdq):
    """quant_pre_process folds each BatchNormalization into its Conv and the quantizer names that Conv's
    output after the Relu it folds: against the unfolded source that value is the BatchNormalization's
    output (it was paired with the Conv's, reading 100+ 'quantization steps')."""
    source, _, qdq = resnet_qdq
    report = qdq_report(source, qdq)
    first = report.first
    assert first is not None and first.op == "BatchNormalization" and first.steps < 10, first
    assert max(t.steps for t in report.tensors if t.steps is not None) < 100
