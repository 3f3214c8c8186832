"""ViT- and BERT-style transformer encoders, as torch.onnx exports them."""
from __future__ import annotations

__all__ = ["TRANSFORMERS"]

TRANSFORMERS: dict = {}
