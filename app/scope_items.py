"""The box of a collapsed name scope on the canvas (and the frame around an open one): a stacked card with the scope's name, its size and
parameters, its op histogram and the shapes that enter and leave it.

A group box is a `NodeItem` (selection, highlights, heat overlay and ghosts work unchanged) that
draws more lines and looks like a stack of boxes, so it reads as "many nodes in here" at a glance.
"""
from __future__ import annotations

import math

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPen
from PySide6.QtGui import QPainterPath
from PySide6.QtWidgets import QGraphicsItem, QStyle, QStyleOptionGraphicsItem

from .box_sizes import SCOPE_PAD_X as PAD_X
from .box_sizes import SCOPE_PAD_Y as PAD_Y
from .box_sizes import SCOPE_STACK as STACK  # offset of the cards drawn behind the box
from .graph_items import LABEL_LOD, READABLE_PX, TEXT_LOD, NodeItem, item_fonts, outline_pen
from .style import HIGHLIGHT_COLORS, category_colors

__all__ = ["ScopeBoxItem", "ScopeFrame"]


class ScopeBoxItem(NodeItem):
    """A collapsed scope: double-click (or Enter, +) expands it."""

    def _layout_text(self) -> None:
        self._texts = []  # drawn directly in paint (few items: groups are a small part of any view)
        self._badge_spans = []
        self._badge_y = (0.0, 0.0)

    def badge_at(self, pos: QPointF) -> int | None:
        return None  # group lines are not tensors

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        fill, accent = category_colors(self.node.category)
        if self.overlay is not None:
            fill = self.overlay
        selected = bool(option.state & QStyle.State_Selected)
        r = self.rect
        card = QRectF(r.x(), r.y(), r.width() - STACK, r.height() - STACK)
        if self.ghost == "removed":
            painter.setOpacity(0.35)
        if lod < TEXT_LOD:
            # zoomed out (a fitted big graph): the card, and its name enlarged as node titles are
            if selected or self.highlights:
                color = QColor(HIGHLIGHT_COLORS["selection"]) if selected else next(iter(self.highlights.values()))
                painter.fillRect(r.adjusted(-4, -4, 4, 4), color)
            painter.fillRect(r.adjusted(STACK, STACK, 0, 0), accent)
            painter.fillRect(card, fill)
            painter.fillRect(QRectF(card.x(), card.y(), card.width(), 4), accent)
            if lod >= LABEL_LOD:
                self._paint_title(painter, lod)
            return
        painter.setRenderHint(QPainter.Antialiasing, True)
        for k, color in enumerate(self.highlights.values()):
            painter.setPen(QPen(color, 3.0))
            painter.setBrush(Qt.NoBrush)
            d = 2.5 + 3 * min(k, 1)
            painter.drawRoundedRect(r.adjusted(-d, -d, d, d), 6, 6)
        # the stack behind: two offset cards
        painter.setPen(QPen(accent, 1.0))
        painter.setBrush(QBrush(fill.darker(112)))
        painter.drawRoundedRect(card.translated(STACK, STACK), 5, 5)
        painter.drawRoundedRect(card.translated(STACK / 2, STACK / 2), 5, 5)
        painter.setPen(outline_pen(self.ghost, selected, accent, 1.4))
        painter.setBrush(QBrush(fill))
        painter.drawRoundedRect(card, 5, 5)
        painter.setRenderHint(QPainter.Antialiasing, False)
        painter.fillRect(QRectF(card.x() + 1, card.y() + 1, card.width() - 2, 4), accent)
        fonts, metrics = item_fonts()
        x = card.x() + PAD_X
        avail = card.width() - 2 * PAD_X
        y = card.y() + PAD_Y + 1
        lines = [(self.node.label, 0, QColor("#1b1f23")), (self.node.detail, 1, QColor("#454d55"))]
        lines += [(b, 2, QColor("#2d3a45")) for b in self.node.badges]
        for k, (text, fi, color) in enumerate(lines):
            fm = metrics[fi]
            room = avail - (16 if k == 0 else 0)
            shown = fm.elidedText(text, Qt.ElideRight, room) if fm.horizontalAdvance(text) > room else text
            painter.setFont(fonts[fi])
            painter.setPen(color)
            painter.drawText(QPointF(x, y + fm.ascent()), shown)
            y += fm.height() + (1 if fi == 2 else 0)
        # the expand glyph, top right
        painter.setFont(fonts[0])
        painter.setPen(accent)
        painter.drawText(QRectF(card.right() - 20, card.y() + 3, 16, 18), Qt.AlignCenter, "+")
        if self.overlay_text:
            painter.setFont(fonts[2])
            painter.setPen(QColor("#1b1f23"))
            painter.drawText(card.adjusted(0, 0, -6, -3), Qt.AlignRight | Qt.AlignBottom, self.overlay_text)


class ScopeFrame(QGraphicsItem):
    """The frame around an expanded group's nodes, its path in the title strip; double-click
    the title to collapse it again. Only the title takes clicks (the rest drags the view)."""

    TITLE_H = 16.0
    TITLE_GROWTH = 16.0  # zoomed out, the title may grow this much past its strip (half above, half below)
    MIN_TITLE_PX = 5.0  # a title smaller than this on screen is not drawn

    def __init__(self, path: str, rect: QRectF, depth: int, on_collapse):
        super().__init__()
        self.path = path
        _, metrics = item_fonts()
        need = metrics[2].horizontalAdvance("− " + path) + 14  # the title fits: widen to the right
        self.rect = rect if rect.width() >= need else QRectF(rect.x(), rect.y(), need, rect.height())
        self.on_collapse = on_collapse
        self.setZValue(-2 + 0.01 * depth)
        self.setToolTip(f"{path}: double-click the title (or select a node inside and press -) to collapse")
        self._shade = QColor(86, 102, 122, 14 + 6 * min(depth, 4))
        self._shown: tuple[float, str] | None = None  # (enlargement, elided title) last drawn

    def boundingRect(self) -> QRectF:
        g = self.TITLE_GROWTH / 2
        return self.rect.adjusted(-1, -1 - g, 1, 1)

    def _title(self) -> QRectF:
        return QRectF(self.rect.x(), self.rect.y(), self.rect.width(), self.TITLE_H)

    def shape(self) -> QPainterPath:
        p = QPainterPath()
        p.addRect(self._title())
        return p

    def title_scale(self, lod: float) -> float:
        """How much the title is enlarged at zoom `lod`: enough to stay READABLE_PX tall on
        screen, as far as the strip and TITLE_GROWTH allow (nested frames' titles stay apart)."""
        _, metrics = item_fonts()
        fh = metrics[2].height()
        # in steps of 0.1 (the elided text is remade only when the step changes), rounded up
        need = math.ceil(READABLE_PX / (fh * max(lod, 1e-6)) * 10) / 10
        return max(1.0, min(need, math.floor((self.TITLE_H + self.TITLE_GROWTH) / fh * 10) / 10))

    def title_text(self, lod: float) -> str:
        """The title as drawn at zoom `lod`: the path, its start elided when the enlarged text
        outgrows the frame (the innermost names are the ones that tell frames apart)."""
        k = self.title_scale(lod)
        if self._shown is None or self._shown[0] != k:
            _, metrics = item_fonts()
            fm = metrics[2]
            room = (self.rect.width() - 12) / k - fm.horizontalAdvance("− ")
            text = self.path if fm.horizontalAdvance(self.path) <= room else fm.elidedText(self.path, Qt.ElideLeft, room)
            self._shown = (k, "− " + text if text else "")
        return self._shown[1]

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        painter.fillRect(self.rect, self._shade)
        painter.setPen(QPen(QColor("#8795a6"), 1.0, Qt.DashLine))
        painter.setBrush(Qt.NoBrush)
        painter.drawRect(self.rect)
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        fonts, metrics = item_fonts()
        fm = metrics[2]
        k = self.title_scale(lod)
        if fm.height() * k * lod < self.MIN_TITLE_PX:
            return
        text = self.title_text(lod)
        if not text:
            return
        title = self._title()
        painter.save()
        painter.translate(title.x() + 6, title.center().y() - fm.height() * k / 2)
        painter.scale(k, k)
        painter.setFont(fonts[2])
        if k > 1.0:  # enlarged past its strip: on a card, so edges and nested frames do not garble it
            painter.fillRect(QRectF(-3, 0, fm.horizontalAdvance(text) + 6, fm.height()), QColor(246, 247, 249, 215))
        painter.setPen(QColor("#45525f"))
        painter.drawText(QPointF(0, fm.ascent()), text)
        painter.restore()

    def mousePressEvent(self, event) -> None:
        event.accept()

    def mouseDoubleClickEvent(self, event) -> None:
        event.accept()
        self.on_collapse(self.path)
