"""benchmarks.architectures.transformers: the ViT / BERT / GPT-2 encoders are valid ONNX that onnx's
strict shape inference and onnxruntime accept, carry the exporter idioms the CPU rules must handle,
and build fast."""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest

from benchmarks.architectures import ARCHITECTURES
from benchmarks.architectures.transformers import TRANSFORMERS
from tests.helpers import ort_run, random_feeds

IDIOMS = {
    "vit_encoder": {"Conv", "Concat", "LayerNormalization", "Erf", "Softmax", "Div", "Gemm"},
    "bert_encoder": {"Gather", "ReduceMean", "Pow", "Sqrt", "Erf", "Cast", "Unsqueeze", "Softmax", "Tanh"},
    "gpt2_blocks": {"Gemm", "Split", "Where", "Tanh", "Pow", "LayerNormalization", "Softmax"},
}


def test_registered_in_the_architectures_the_benchmark_measures():
    assert set(TRANSFORMERS) == set(IDIOMS) and set(TRANSFORMERS) <= set(ARCHITECTURES)


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_builds_fast_passes_strict_shape_inference_and_runs_in_onnxruntime(name):
    t0 = time.perf_counter()
    model = TRANSFORMERS[name]()
    assert time.perf_counter() - t0 < 2.0  # < 1 s on a quiet machine; slack for a busy one
    assert IDIOMS[name] <= {n.op_type for n in model.graph.node}
    assert all(n.name.startswith("/") for n in model.graph.node)  # torch.onnx's scoped names
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    typed = {vi.name for vi in inferred.graph.value_info}
    assert all(o in typed or o in {x.name for x in model.graph.output} for n in model.graph.node for o in n.output)
    outs = ort_run(model.SerializeToString(), random_feeds(model, seed=1))
    for out, vi in zip(outs, model.graph.output):
        assert list(out.shape) == [d.dim_value for d in vi.type.tensor_type.shape.dim]
        assert np.isfinite(out).all() and out.std() > 0.1  # weights scaled so activations neither vanish nor blow up
    assert TRANSFORMERS[name]().SerializeToString() == model.SerializeToString()  # seeded: the same model every time


def test_vit_has_the_requested_geometry():
    model = TRANSFORMERS["vit_encoder"]()
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in inferred.graph.value_info}
    scores = [n.output[0] for n in model.graph.node if n.op_type == "Softmax"]
    assert len(scores) == 4 and shapes[scores[0]] == [1, 3, 197, 197]
