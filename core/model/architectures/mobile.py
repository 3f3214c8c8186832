"""Depthwise-separable and squeeze-excitation networks (MobileNet / EfficientNet style)."""
from __future__ import annotations

__all__ = ["MOBILE"]

MOBILE: dict = {}
