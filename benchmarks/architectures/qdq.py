"""Networks as they are deployed on CPUs: an fp32 model quantized by onnxruntime's own
`quantize_static` (QDQ format, per-channel int8 weights, uint8 activations), calibrated on a few
seeded random inputs. The benchmark's quantized rows (benchmarks.common.quantized_models) and the
quantization tests use it."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

__all__ = ["quantize_qdq"]


def quantize_qdq(model: onnx.ModelProto, seed: int = 0, samples: int = 4, activations: str = "uint8") -> onnx.ModelProto:
    """`model` quantized by onnxruntime.quantization.quantize_static: QDQ format, per-channel int8
    weights, `activations` (uint8 or int8) activations, calibrated (MinMax) on `samples` seeded
    standard normal inputs."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    inp = model.graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    batches = [{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(model, src)
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)
