"""Full-size architectures as PyTorch's exporter writes them, with seeded random weights.

Not bundled (generated on demand, some are tens of MB): they are what `benchmarks/` measures beyond
the light models in the onnx wheel, the kinds of network users deploy today. Each module adds its
builders to ARCHITECTURES (name -> function returning an onnx.ModelProto):

* `mobile`: depthwise-separable convolutions and squeeze-excitation blocks (MobileNet / EfficientNet);
* `transformers`: ViT- and BERT-style encoders (layer norm, attention, GELU).
"""
from __future__ import annotations

from benchmarks.architectures.mobile import MOBILE
from benchmarks.architectures.transformers import TRANSFORMERS

__all__ = ["ARCHITECTURES"]

ARCHITECTURES: dict = {**MOBILE, **TRANSFORMERS}
