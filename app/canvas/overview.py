"""Huge graphs: a pre-rendered overview image and a grid of cells saying which items lie where.

From OVERVIEW_ITEMS nodes + edges on, the worker that lays the graph out also renders it into an
image (`render_overview`), which is what a zoomed-out canvas paints, and sorts nodes and edges into
grid cells so the canvas makes items only for the part of the scene the viewport reaches.
Everything here is safe on a worker thread (QImage and QPainter on an image, no widgets).
"""
from __future__ import annotations

import logging

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPainterPath, QPen

from core.views.layout import Layout
from core.views.viewgraph import ViewGraph

from app.style import category_colors

__all__ = ["OVERVIEW_ITEMS", "OVERVIEW_MAX_PX", "DisplayExtras", "ItemLayer", "prepare_display", "render_overview"]

logger = logging.getLogger(__name__)

OVERVIEW_ITEMS = 800  # from this many items (nodes + edges) on: overview image + items made on demand
OVERVIEW_MAX_PX = 8192  # longest side of that image


class ItemLayer:
    """All node and edge items as one switch: hidden while the overview image stands in for
    them (kept top-level: a common parent item would defeat the scene's BSP culling)."""

    def __init__(self):
        self.visible = True
        self.canvas = None  # the GraphCanvas whose items this switches

    def setVisible(self, on: bool) -> None:
        if on == self.visible or self.canvas is None:
            return
        self.visible = on
        for item in self.canvas.node_items.values():
            item.setVisible(on)
        for item in self.canvas.edge_items:
            item.setVisible(on)


class DisplayExtras:
    """What a worker prepares for drawing a huge graph: the overview image and a grid of cells
    listing the nodes and edges in each (so items can be made only where the user looks)."""

    CELL = 1200.0

    def __init__(self, image: QImage, rect: QRectF, grid: dict, cell: float):
        self.image = image
        self.rect = rect
        self.grid = grid
        self.cell = cell
        # below this zoom the image is drawn instead of items: its own resolution, but never
        # so far in that the visible area holds more than a few hundred boxes
        self.switch_scale = max(image.width() / max(rect.width(), 1.0), 0.04)
        self._mips: dict[int, QImage] = {0: image}

    def image_for(self, zoom: float) -> QImage:
        """The image at about the resolution `zoom` needs: shrinking 8192 pixels to 600 in one
        bilinear step drops whole boxes, so smaller views use smooth (area-averaged) copies at
        powers of two, made once each."""
        scale = self.image.width() / max(self.rect.width(), 1.0)
        level = 0
        while level < 8 and zoom * (2 ** (level + 1)) <= scale:
            level += 1
        mip = self._mips.get(level)
        if mip is None:
            w = max(1, self.image.width() >> level)
            h = max(1, self.image.height() >> level)
            mip = self._mips[level] = self.image.scaled(w, h, Qt.IgnoreAspectRatio, Qt.SmoothTransformation)
        return mip


def prepare_display(view: ViewGraph, result: Layout, job=None) -> DisplayExtras | None:
    """Worker-thread part of drawing: nothing for model-sized graphs; for huge ones the overview
    image and the item grid (see `GraphCanvas._display`)."""
    if len(view.nodes) + len(view.edges) < OVERVIEW_ITEMS:
        return None
    if job is not None:
        job.report(0.92, "Rendering the overview")
    image, rect = render_overview(view, result, OVERVIEW_MAX_PX, job)
    cell = DisplayExtras.CELL
    grid: dict = {}
    boxes = result.boxes
    for i, n in enumerate(view.nodes):
        b = boxes.get(n.id)
        if b is None:
            continue
        key = (int(b.x // cell), int(b.y // cell))
        grid.setdefault(key, ([], []))[0].append(i)
    for k, pts in enumerate(result.routes):
        if len(pts) < 2:
            continue
        cells = set()
        for x, y in pts:  # control points bound the curve: their cells (and those between) cover it
            cells.add((int(x // cell), int(y // cell)))
        xs = [c[0] for c in cells]
        ys = [c[1] for c in cells]
        for cx in range(min(xs), max(xs) + 1):
            for cy in range(min(ys), max(ys) + 1):
                grid.setdefault((cx, cy), ([], []))[1].append(k)
        if job is not None and k % 4000 == 0:
            job.check()
    return DisplayExtras(image, rect, grid, cell)


def render_overview(view: ViewGraph, result: Layout, max_px: int, job=None) -> tuple[QImage, QRectF]:
    """The whole laid-out graph as an image (boxes in category colours, edges as hairlines),
    at most `max_px` on its longest side. Safe on a worker thread; returns (image, scene rect)."""
    w, h = max(result.width, 1.0), max(result.height, 1.0)
    scale = min(max_px / w, max_px / h, 1.0)
    img = QImage(max(1, int(w * scale)), max(1, int(h * scale)), QImage.Format_ARGB32_Premultiplied)
    img.fill(QColor(0, 0, 0, 0))
    p = QPainter(img)
    # a cancel (job.check raises) must not leave the painter active: a painter still open on
    # its image when the frame is freed ends on an image already destroyed (a segfault)
    try:
        p.setRenderHint(QPainter.Antialiasing, True)
        p.scale(scale, scale)
        pen = QPen(QColor("#8a96a1"), 0)
        p.setPen(pen)
        for k, pts in enumerate(result.routes):
            if len(pts) >= 2:
                path = QPainterPath(QPointF(*pts[0]))
                for i in range(1, len(pts) - 2, 3):
                    path.cubicTo(QPointF(*pts[i]), QPointF(*pts[i + 1]), QPointF(*pts[i + 2]))
                p.drawPath(path)
            if job is not None and k % 2000 == 0:
                job.check()
        p.setRenderHint(QPainter.Antialiasing, False)
        boxes = result.boxes
        for k, n in enumerate(view.nodes):
            b = boxes.get(n.id)
            if b is None:
                continue
            # strong colours: this image is only seen shrunk, where pastel boxes would vanish
            p.fillRect(QRectF(b.x - b.w / 2, b.y - b.h / 2, b.w, b.h), category_colors(n.category)[1])
            if job is not None and k % 2000 == 0:
                job.check()
    finally:
        p.end()
    return img, QRectF(0, 0, w, h)
