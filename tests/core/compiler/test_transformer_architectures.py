"""The ViT / BERT / GPT-2 architectures of benchmarks.architectures.transformers, at small sizes, compile
with the default CPU schedules (cpu_rows for softmax and layer norms, cpu_matmul with fused GELU,
cpu_math's exp/erf/tanh) and match onnxruntime: the compile's own verification and a second run
on other inputs."""
from __future__ import annotations

import numpy as np
import pytest

from core.compiler.compile import compile_model
from core.compiler.check.reference import ort_run
from benchmarks.architectures.transformers import bert_encoder, gpt2_blocks, vit_encoder
from core.model.onnx_io import load_model_bytes
from tests.helpers import random_feeds

SMALL = {
    # 17 tokens: an odd softmax row, a padded matmul tile
    "vit": lambda: vit_encoder(layers=1, hidden=48, heads=2, mlp=96, image=32, patch=8, classes=10),
    "bert": lambda: bert_encoder(layers=1, hidden=64, heads=2, mlp=128, seq=24, vocab=50),
    "gpt2": lambda: gpt2_blocks(layers=1, hidden=64, heads=2, seq=20),
}


@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_transformer_compiles_and_matches_onnxruntime(name):
    model = SMALL[name]()
    art = compile_model(load_model_bytes(model.SerializeToString(), f"{name}.onnx"), "cpu")
    verification = art.manifest.verification
    assert verification.checked and verification.reference == "onnxruntime", verification
    feeds = random_feeds(model, seed=5)
    if "attention_mask" in feeds:
        feeds["attention_mask"] = np.array([[1] * 17 + [0] * 7], np.int64)  # padding at the end
    for ours, ref in zip(art.run(feeds), ort_run(model.SerializeToString(), feeds)):
        np.testing.assert_allclose(ours, ref, rtol=1e-3, atol=1e-4)
