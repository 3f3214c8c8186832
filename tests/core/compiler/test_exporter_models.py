"""Transformers written the way exporters write them compile and match onnxruntime on real inputs.

The models (tests/core/compiler/exporter_models.py) reproduce torch.onnx's opset-17 idioms:
ConstantOfShape of computed shapes, Shape -> Gather -> Unsqueeze -> Concat chains, Div on shapes,
Expand to computed shapes, Where masks, ReduceSum with axes as an input, LayerNormalization.
"""
from __future__ import annotations

import numpy as np
import pytest

from core.compiler.compile import compile_model
from core.compiler.reference import ort_run
from core.model.onnx_io import load_model_bytes
from tests.core.compiler.exporter_models import bert_encoder, vit_encoder


def _compile(model, name: str, dims: dict[str, int]):
    return compile_model(load_model_bytes(model.SerializeToString(), f"{name}.onnx"), "cpu", verify_dims=dims)


def test_bert_encoder_as_torch_onnx_writes_it_compiles_and_matches_with_a_padding_mask():
    model = bert_encoder()
    ops = {n.op_type for n in model.graph.node}
    assert {"ConstantOfShape", "Expand", "Where", "LayerNormalization", "ReduceSum", "Div", "Concat"} <= ops
    art = _compile(model, "bert", {"batch": 2, "sequence": 8})
    assert art.manifest["verification"]["checked"] and art.manifest["verification"]["reference"] == "onnxruntime"
    rng = np.random.default_rng(3)
    # another sequence length than the check's, and a padded second row
    feeds = {"input_ids": rng.integers(0, 100, (2, 11)).astype(np.int64),
             "attention_mask": np.array([[1] * 11, [1] * 6 + [0] * 5], np.int64)}
    ours, ref = art.run(feeds), ort_run(model.SerializeToString(), feeds)
    assert [o.shape for o in ours] == [(2, 11, 64), (2, 64)]
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


def test_vit_encoder_with_a_class_token_expanded_to_the_batch_compiles_and_matches():
    model = vit_encoder()
    art = _compile(model, "vit", {"batch": 2})
    feeds = {"pixel_values": np.random.default_rng(4).standard_normal((3, 3, 32, 32)).astype(np.float32)}
    np.testing.assert_allclose(art.run(feeds)[0], ort_run(model.SerializeToString(), feeds)[0], rtol=1e-3, atol=1e-4)
