"""`bench` judges a quantized model's outputs against onnxruntime as its compile check did: in
quantization steps (a rounding-boundary step is not "outputs DIFFER"); a float model by value."""
from __future__ import annotations

import numpy as np
import onnx

from core.compiler.check.reference import random_feeds, reference_run
from core.compiler.compile import compile_model
from core.compiler.measure import bench
from core.tolerances import output_step_scales
from tests.core.compiler.qdq_models import fp32_cnn, qdq_cnn


def _compiled(model, tmp_path, name):
    path = tmp_path / name
    onnx.save(model, path)
    return compile_model(str(path), "cpu")


def test_a_step_off_matches_for_a_quantized_model_and_not_for_a_float_one(tmp_path):
    model = qdq_cnn()
    art = _compiled(model, tmp_path, "qdq.onnx")
    feeds = random_feeds(art.inputs, seed=0, model=model)
    ort_out, _ = reference_run(art.model_bytes, feeds)
    ((scale, _),) = output_step_scales(model).values()

    def ours_off_by(steps: int):
        out = ort_out[0].copy()
        out.flat[3] += np.float32(steps * np.max(scale))
        return [out]

    assert bench._within_steps(art, feeds, ours_off_by(1), ort_out)  # a value on a rounding boundary
    assert not bench._within_steps(art, feeds, ours_off_by(40), ort_out)

    plain = _compiled(fp32_cnn(), tmp_path, "fp32.onnx")
    plain_feeds = random_feeds(plain.inputs, seed=0)
    out = plain.run(plain_feeds)
    assert not bench._within_steps(plain, plain_feeds, out, [out[0] + 1e-3])
