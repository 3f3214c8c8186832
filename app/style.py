"""Colours and fonts of the canvas, in one place so every view draws categories the same way."""
from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QFontMetricsF

__all__ = ["CATEGORY_COLORS", "category_colors", "node_fonts", "TextMeasure", "HIGHLIGHT_COLORS"]

# category -> (fill, accent): pastel fill for the box, a strong accent for the stripe and border
CATEGORY_COLORS: dict[str, tuple[str, str]] = {
    "convolution": ("#dce9f7", "#3f73b0"),
    "matmul": ("#e9e0f6", "#7a59b0"),
    "elementwise": ("#e3f1df", "#4e9a45"),
    "activation": ("#fde8d2", "#e07b1f"),
    "normalization": ("#d8efee", "#2f9191"),
    "pooling": ("#faf1cc", "#b8921c"),
    "shape": ("#ececec", "#858585"),
    "io": ("#3b4a54", "#1e282e"),
    "other": ("#f7dde3", "#c65b75"),
    "group": ("#eef1f6", "#56667a"),  # a collapsed name scope (app.scope_items)
}

HIGHLIGHT_COLORS = {
    "selection": "#ff9f1a",
    "search": "#ffd400",
    "tensor": "#00a3d9",
}

_cache: dict[str, tuple[QColor, QColor]] = {}


def category_colors(category: str) -> tuple[QColor, QColor]:
    """(fill, accent) QColors of a category ('other' for unknown ones)."""
    if category not in _cache:
        fill, accent = CATEGORY_COLORS.get(category, CATEGORY_COLORS["other"])
        _cache[category] = (QColor(fill), QColor(accent))
    return _cache[category]


def node_fonts() -> tuple[QFont, QFont, QFont]:
    """(title, detail, badge) fonts of node boxes."""
    title = QFont()
    title.setPointSizeF(9.5)
    title.setBold(True)
    detail = QFont()
    detail.setPointSizeF(8.5)
    badge = QFont()
    badge.setPointSizeF(7.5)
    return title, detail, badge


class TextMeasure:
    """Text widths for the three node fonts, usable from any thread.

    Built on the UI thread (QFontMetricsF), it keeps per-character advances in plain dicts, so a
    worker thread can size 10,000 boxes without touching Qt font objects. Characters it has not
    seen count as the widest one measured.
    """

    SAMPLE = "".join(chr(c) for c in range(32, 127)) + "×→·…αβγ≤≥∑⊕"

    def __init__(self) -> None:
        self.tables: list[dict[str, float]] = []
        self.heights: list[float] = []
        self.sizes: dict = {}  # node_size memo
        for font in node_fonts():
            fm = QFontMetricsF(font)
            table = {ch: fm.horizontalAdvance(ch) for ch in self.SAMPLE}
            table["\0"] = max(table.values())
            self.tables.append(table)
            self.heights.append(fm.height())

    def width(self, text: str, font_index: int) -> float:
        table = self.tables[font_index]
        wide = table["\0"]
        return sum(table.get(ch, wide) for ch in text)
