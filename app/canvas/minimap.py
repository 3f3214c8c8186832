"""The minimap: the whole graph in a small inset floating over a corner of the canvas, with the
visible area marked."""
from __future__ import annotations

import logging

from PySide6.QtCore import QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPen
from PySide6.QtWidgets import QWidget

from app.style import category_colors

__all__ = ["Minimap", "CORNERS"]

logger = logging.getLogger(__name__)

CORNERS = ("bottom-right", "top-right", "bottom-left", "top-left")  # in order of preference


class Minimap(QWidget):
    """The whole graph in a corner: boxes in their category colours and the visible area.

    A small inset (at most MAX_SIDE pixels a side, and never more than MAX_SHARE of the canvas)
    floating over the viewport on a translucent card, as Netron's or VS Code's: it takes no width
    from the graph. Fit (GraphCanvas.fit) picks the corner where it covers no box (`corner`).
    Drawn from the layout's boxes into a cached image (no scene rendering), so it is cheap to
    rebuild for 10,000 nodes; click or drag to move the view. Hidden when everything fits.
    """

    MAX_SIDE = 180
    MAX_SHARE = 0.3  # of the viewport's width and height
    MARGIN = 10  # from the viewport's edges

    def __init__(self, canvas):
        super().__init__(canvas)
        self.canvas = canvas
        self.image: QImage | None = None
        self._map: tuple[float, float, float, float] | None = None  # sx, sy, ox, oy
        self.corner = CORNERS[0]
        self.setCursor(Qt.PointingHandCursor)
        self.setAttribute(Qt.WA_TranslucentBackground, True)
        self.enabled_by_user = True
        self.hide()

    def bound(self) -> tuple[int, int]:
        """The largest size the inset may take on the present viewport."""
        vp = self.canvas.viewport().rect()
        return (max(40, min(self.MAX_SIDE, int(vp.width() * self.MAX_SHARE))),
                max(40, min(self.MAX_SIDE, int(vp.height() * self.MAX_SHARE))))

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
        max_w, max_h = self.bound()
        if aspect >= max_w / max_h:
            w, h = max_w, max(24, int(max_w / aspect))
        else:
            w, h = max(24, int(max_h * aspect)), max_h
        self.resize(w, h)
        img = QImage(w, h, QImage.Format_ARGB32_Premultiplied)
        img.fill(QColor(255, 255, 255, 200))  # translucent: the graph under it stays faintly visible
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
        p.setPen(QColor(154, 164, 173, 220))
        p.drawRect(0, 0, w - 1, h - 1)
        p.end()
        self.image = img
        self.place()
        self.update()

    def rect_at(self, corner: str) -> QRect:
        """Where the inset lies in `corner`, in the canvas's coordinates."""
        vp = self.canvas.viewport().geometry()
        m = self.MARGIN
        x = vp.left() + m if corner.endswith("left") else vp.left() + vp.width() - self.width() - m
        y = vp.top() + m if corner.startswith("top") else vp.top() + vp.height() - self.height() - m
        return QRect(x, y, self.width(), self.height())

    def wanted(self) -> bool:
        """Shown: there is a graph, the user has not turned the map off, and the graph does not
        fit at the present zoom (nor is the canvas too small to hold the inset beside the graph)."""
        if self.image is None or not self.enabled_by_user:
            return False
        vp = self.canvas.viewport().rect()
        if vp.width() < 2.5 * self.width() or vp.height() < 2.5 * self.height():
            return False
        return self.canvas.fit_scale() < self.canvas.zoom() * 0.999

    def place(self) -> None:
        self._show(self.wanted())

    def _show(self, on: bool) -> None:
        if on:
            self.move(self.rect_at(self.corner).topLeft())
            self.raise_()
        if on != self.isVisible():
            self.setVisible(on)

    def update(self) -> None:  # noqa: D401 - also re-evaluate visibility when the view moves
        if self.image is not None and self.wanted() != self.isVisible():
            self.place()
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
        self.canvas.keep_view()
        self.canvas.centerOn(QPointF((pos.x() - ox) / sx, (pos.y() - oy) / sy))

    def mousePressEvent(self, event) -> None:
        self._jump(event.position())
        event.accept()

    def mouseMoveEvent(self, event) -> None:
        if event.buttons() & Qt.LeftButton:
            self._jump(event.position())
        event.accept()
