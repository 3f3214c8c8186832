"""The minimap: the whole graph in a corner of the canvas, with the visible area marked."""
from __future__ import annotations

import logging

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPen
from PySide6.QtWidgets import QWidget

from app.style import category_colors

__all__ = ["Minimap"]

logger = logging.getLogger(__name__)


class Minimap(QWidget):
    """The whole graph in a corner: boxes in their category colours and the visible area.

    Drawn from the layout's boxes into a cached image (no scene rendering), so it is cheap to
    rebuild for 10,000 nodes; click or drag to move the view. Hidden when everything fits.
    """

    MAX_W = 170
    MAX_H = 230

    def __init__(self, canvas):
        super().__init__(canvas)
        self.canvas = canvas
        self.image: QImage | None = None
        self._map: tuple[float, float, float, float] | None = None  # sx, sy, ox, oy
        self.setCursor(Qt.PointingHandCursor)
        self.enabled_by_user = True
        self.hide()

    def rebuild(self) -> None:
        canvas = self.canvas
        lo = canvas.layout_result
        if lo is None or canvas.view is None or not lo.boxes:
            self.image = None
            self._show(False)
            return
        rect = canvas.scene().sceneRect()
        # aspect kept within 1:4 so very tall graphs still get a usable width
        aspect = max(0.25, min(4.0, rect.width() / max(rect.height(), 1.0)))
        if aspect >= self.MAX_W / self.MAX_H:
            w, h = self.MAX_W, max(40, int(self.MAX_W / aspect))
        else:
            w, h = max(40, int(self.MAX_H * aspect)), self.MAX_H
        self.resize(w, h)
        img = QImage(w, h, QImage.Format_ARGB32_Premultiplied)
        img.fill(QColor(255, 255, 255, 235))
        sx, sy = (w - 8) / rect.width(), (h - 8) / rect.height()
        ox, oy = 4 - rect.x() * sx, 4 - rect.y() * sy
        self._map = (sx, sy, ox, oy)
        p = QPainter(img)
        boxes = lo.boxes

        def mark(b, color):
            p.fillRect(QRectF(b.x * sx + ox - b.w * sx / 2, b.y * sy + oy - b.h * sy / 2, max(1.5, b.w * sx), max(1.2, b.h * sy)), color)

        overview = canvas.overview
        if overview is not None:
            # huge graph: shrink the overview image instead of drawing 10,000 boxes again
            p.setRenderHint(QPainter.SmoothPixmapTransform, True)
            r = overview.rect
            p.drawImage(QRectF(r.x() * sx + ox, r.y() * sy + oy, r.width() * sx, r.height() * sy), overview.image_for(max(sx, sy)))
        else:
            for n in canvas.view.nodes:
                b = boxes.get(n.id)
                if b is not None:
                    mark(b, category_colors(n.category)[1])
        for _role, (ids, color) in canvas.highlights.items():
            for nid in ids:
                b = boxes.get(nid)
                if b is not None:
                    mark(b, color)
        p.setPen(QColor("#9aa4ad"))
        p.drawRect(0, 0, w - 1, h - 1)
        p.end()
        self.image = img
        self.place()
        self.update()

    def place(self) -> None:
        if self.image is None or not self.enabled_by_user:
            self._show(False)
            return
        fits = self.canvas.fit_scale() >= self.canvas.zoom() * 0.999
        self._show(not fits)

    def _show(self, on: bool) -> None:
        """Show or hide the map in a strip of its own right of the viewport (the canvas's
        viewport margin), so it never covers the graph. Stable: the strip only narrows the
        viewport, which cannot make a graph that did not fit fit."""
        margin = self.width() + 16 if on else 0
        if self.canvas.viewportMargins().right() != margin:
            self.canvas.setViewportMargins(0, 0, margin, 0)
        if on:
            vp = self.canvas.viewport().geometry()
            self.move(vp.right() + 9, vp.bottom() - self.height() - 6)
        if on != self.isVisible():
            self.setVisible(on)

    def update(self) -> None:  # noqa: D401 - also re-evaluate visibility when the view moves
        if self.image is not None and self.enabled_by_user:
            fits = self.canvas.fit_scale() >= self.canvas.zoom() * 0.999
            if fits == self.isVisible():
                self._show(not fits)
        super().update()

    def paintEvent(self, event) -> None:
        if self.image is None or self._map is None:
            return
        p = QPainter(self)
        p.drawImage(0, 0, self.image)
        sx, sy, ox, oy = self._map
        r = self.canvas.mapToScene(self.canvas.viewport().rect()).boundingRect()
        view_rect = QRectF(r.x() * sx + ox, r.y() * sy + oy, max(4.0, r.width() * sx), max(4.0, r.height() * sy))
        p.setPen(QPen(QColor("#d9480f"), 1.5))
        p.setBrush(QColor(217, 72, 15, 30))
        p.drawRect(view_rect.intersected(QRectF(0, 0, self.width(), self.height())))
        p.end()

    def _jump(self, pos) -> None:
        if self._map is None:
            return
        sx, sy, ox, oy = self._map
        self.canvas.centerOn(QPointF((pos.x() - ox) / sx, (pos.y() - oy) / sy))

    def mousePressEvent(self, event) -> None:
        self._jump(event.position())

    def mouseMoveEvent(self, event) -> None:
        if event.buttons() & Qt.LeftButton:
            self._jump(event.position())
