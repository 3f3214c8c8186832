"""The canvas's scene items: cheap, custom-painted boxes and edges.

Thousands of these live in one scene, so each is a bare QGraphicsItem with a fixed bounding rect,
no shadows and no child items. Text is laid out once into QStaticText (created on first paint, so
building 10,000 items costs no text layout) and painting switches to plain rectangles / hairlines
when zoomed out (level of detail). In between (LABEL_LOD..TEXT_LOD, the scales a fit of a big
graph lands on) a box shows its title alone, enlarged so that it stays READABLE_PX tall on screen
(elided to the box, the full text in the tooltip): a fitted graph never turns into blank boxes.
"""
from __future__ import annotations

import math
from collections.abc import Hashable

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFontMetricsF, QPainter, QPainterPath, QPainterPathStroker, QPen, QPolygonF, QStaticText
from PySide6.QtWidgets import QGraphicsItem, QStyle, QStyleOptionGraphicsItem

from core.views.viewgraph import ViewEdge, ViewNode

from app.box_sizes import BADGE_MAX_WIDTH, BADGE_SEP, BODY_MARK, PAD_X, PAD_Y, STRIPE, badge_text, node_size
from app.style import HIGHLIGHT_COLORS, category_colors, node_fonts

# node_size (app.box_sizes) stays importable from here, where the items it sizes live
__all__ = ["NodeItem", "EdgeItem", "GroupItem", "ChipItem", "item_fonts", "node_size", "outline_pen", "text_colors", "title_zoom",
           "BADGE_MAX_WIDTH", "GHOST_COLORS"]

TEXT_LOD = 0.6  # below this scale, boxes are drawn without their detail and badges
LABEL_LOD = 0.1  # from this scale up to TEXT_LOD, the title alone, enlarged to READABLE_PX
READABLE_PX = 9.0  # on-screen height of that enlarged title
MIN_READABLE_PX = 7.0  # ... or as small as this when the whole title then fits its box
SHAPE_LOD = 1.3  # from this scale up, edges show their tensor shape
_FONTS = None
_METRICS = None


def item_fonts():
    """The three node fonts (title, detail, badges) and their metrics, made once on the UI thread."""
    global _FONTS, _METRICS
    if _FONTS is None:
        _FONTS = node_fonts()
        _METRICS = [QFontMetricsF(f) for f in _FONTS]
    return _FONTS, _METRICS


def title_zoom(label: str, width: float) -> float:
    """The smallest zoom at which a box `width` wide shows `label` whole (not elided) when zoomed
    out, at least MIN_READABLE_PX tall (see NodeItem._paint_title): what Fit stops at."""
    _, metrics = item_fonts()
    fm = metrics[0]
    advance = fm.horizontalAdvance(label)
    if advance <= 0:
        return 0.0
    k_fit = (width - STRIPE - 8) / advance  # the most the title can be enlarged and still fit
    return MIN_READABLE_PX / (fm.height() * max(k_fit, 1e-3)) * 1.01


_CHIP_FONT = None


def _chip_font():
    """The badge font in bold: a value chip's."""
    global _CHIP_FONT
    if _CHIP_FONT is None:
        fonts, _ = item_fonts()
        _CHIP_FONT = type(fonts[2])(fonts[2])
        _CHIP_FONT.setBold(True)
    return _CHIP_FONT


GHOST_COLORS = {"removed": "#c62828", "added": "#2e9e44"}  # only in the old / the new graph


def outline_pen(ghost: str | None, selected: bool, accent, width: float) -> QPen:
    """A box's outline: dashed green / red for a node only in the new / old graph of a preview or
    comparison, the selection colour when selected, else the category accent `width` wide."""
    if ghost in GHOST_COLORS:
        return QPen(QColor(GHOST_COLORS[ghost]), 2.0, Qt.DashLine)
    if selected:
        return QPen(QColor(HIGHLIGHT_COLORS["selection"]), 2.5)
    return QPen(accent, width)


def text_colors(fill: QColor) -> tuple[QColor, QColor, QColor]:
    """(title, detail, badge) text colours that read on `fill`: white on dark fills (the io boxes,
    the hot end of the heat map), near-black on light ones; never grey on a saturated colour."""
    r, g, b = (c / 255.0 for c in (fill.red(), fill.green(), fill.blue()))
    lum = 0.2126 * r ** 2.2 + 0.7152 * g ** 2.2 + 0.0722 * b ** 2.2
    if lum < 0.3:
        return QColor("#ffffff"), QColor("#f1f3f5"), QColor("#f1f3f5")
    if fill.saturation() > 90:  # a heat colour: the dark greys of the pastel boxes would blur
        return QColor("#111417"), QColor("#111417"), QColor("#2a2118")
    return QColor("#1b1f23"), QColor("#454d55"), QColor("#5b4a2a")


class NodeItem(QGraphicsItem):
    """One view node. `highlights` maps a role to a colour (rings drawn outside the box)."""

    def __init__(self, node: ViewNode, w: float, h: float):
        super().__init__()
        self.node = node
        self.node_id: Hashable = node.id
        self.rect = QRectF(0, 0, w, h)
        self._bounds = self.rect.adjusted(-5, -5, 5, 5)
        self.highlights: dict[str, QColor] = {}
        self.overlay: QColor | None = None
        self.overlay_text = ""
        self.ghost = ""  # "", "removed" or "added"
        self._texts: list[tuple[QStaticText, QPointF, int]] | None = None
        self._title: tuple[float, str] | None = None  # (scale, elided title) of the zoomed-out title
        self._badge_spans: list[tuple[float, float, int]] = []
        self.setFlag(QGraphicsItem.ItemIsSelectable, True)
        self.setZValue(1)
        if node.tooltip:
            self.setToolTip(node.tooltip)

    def boundingRect(self) -> QRectF:
        return self._bounds

    def shape(self) -> QPainterPath:
        p = QPainterPath()
        p.addRect(self.rect)
        return p

    def _layout_text(self) -> None:
        fonts, metrics = item_fonts()
        texts = []
        y = PAD_Y
        x = STRIPE + PAD_X
        avail = self.rect.width() - x - PAD_X + 2
        lines = [(self.node.label, 0)]
        if self.node.detail:
            lines.append((self.node.detail, 1))
        badges = badge_text(self.node)
        if badges:
            lines.append((badges, 2))
        for text, fi in lines:
            fm = metrics[fi]
            shown = fm.elidedText(text, Qt.ElideRight, avail) if fm.horizontalAdvance(text) > avail else text
            st = QStaticText(shown)
            st.setTextFormat(Qt.PlainText)
            st.prepare(font=fonts[fi])
            texts.append((st, QPointF(x, y + (1 if fi == 2 else 0)), fi))
            if fi == 2:
                # x ranges of each badge, for clicking one to inspect its tensor
                cx = x
                for k, b in enumerate(self.node.badges):
                    bw = fm.horizontalAdvance(b)
                    self._badge_spans.append((cx, min(cx + bw, x + avail), k))
                    cx += bw + fm.horizontalAdvance(BADGE_SEP)
                self._badge_y = (y, y + fm.height() + 1)
            y += fm.height()
        self._texts = texts

    def badge_at(self, pos: QPointF) -> int | None:
        """Index of the badge under `pos` (item coordinates), or None."""
        if not self.node.badges:
            return None
        if self._texts is None:
            self._layout_text()
        y0, y1 = self._badge_y
        if not (y0 <= pos.y() <= y1):
            return None
        for a, b, k in self._badge_spans:
            if a <= pos.x() <= b:
                return k
        return None

    def _paint_title(self, painter: QPainter, lod: float) -> None:
        """The title alone, scaled up so it stays READABLE_PX tall on screen (as far as the box
        allows), elided to the box's width."""
        fonts, metrics = item_fonts()
        fm = metrics[0]
        rect = self.rect
        # as big as READABLE_PX, smaller (down to MIN_READABLE_PX) when that lets the whole title
        # fit the box, and never taller than the box
        room = rect.width() - STRIPE - 8
        k_fit = room / max(fm.horizontalAdvance(self.node.label), 1.0)
        k = max(min(READABLE_PX / (fm.height() * lod), k_fit), MIN_READABLE_PX / (fm.height() * lod))
        k = min(k, (rect.height() - 2) / fm.height())
        k = max(1.0, int(k * 10) / 10)  # a step of 0.1 (rounded down): the elided text is remade only when k moves
        if self._title is None or self._title[0] != k:
            avail = (rect.width() - STRIPE - 8) / k
            text = self.node.label
            self._title = (k, fm.elidedText(text, Qt.ElideRight, avail) if fm.horizontalAdvance(text) > avail else text)
        text = self._title[1]
        if not text or text == "…":
            return
        fill = self.overlay if self.overlay is not None else category_colors(self.node.category)[0]
        painter.save()
        painter.translate(rect.x() + STRIPE + 4, rect.center().y() - fm.height() * k / 2)
        painter.scale(k, k)
        painter.setFont(fonts[0])
        painter.setPen(text_colors(fill)[0])
        painter.drawText(QPointF(0, fm.ascent()), text)
        painter.restore()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        fill, accent = category_colors(self.node.category)
        if self.overlay is not None:
            fill = self.overlay
        selected = bool(option.state & QStyle.State_Selected)
        rect = self.rect
        if self.ghost == "removed":
            painter.setOpacity(0.35)
        if lod < TEXT_LOD:
            # zoomed out: a flat box, the strongest highlight as its colour
            if selected:
                painter.fillRect(rect.adjusted(-4, -4, 4, 4), QColor(HIGHLIGHT_COLORS["selection"]))
            elif self.highlights:
                painter.fillRect(rect.adjusted(-4, -4, 4, 4), next(iter(self.highlights.values())))
            painter.fillRect(rect, accent if self.overlay is None and lod < LABEL_LOD else fill)
            if lod >= LABEL_LOD:
                painter.fillRect(QRectF(rect.x(), rect.y(), STRIPE, rect.height()), accent)
                self._paint_title(painter, lod)
            return
        painter.setRenderHint(QPainter.Antialiasing, True)
        for k, color in enumerate(self.highlights.values()):
            painter.setPen(QPen(color, 3.0))
            painter.setBrush(Qt.NoBrush)
            d = 2.5 + 3 * k if k < 2 else 2.5
            painter.drawRoundedRect(rect.adjusted(-d, -d, d, d), 5, 5)
        painter.setPen(outline_pen(self.ghost, selected, accent, 1.0))
        painter.setBrush(QBrush(fill))
        painter.drawRoundedRect(rect, 4, 4)
        painter.setRenderHint(QPainter.Antialiasing, False)
        painter.fillRect(QRectF(rect.x() + 1, rect.y() + 1, STRIPE, rect.height() - 2), accent)
        if self._texts is None:
            self._layout_text()
        fonts, _ = item_fonts()
        colors = text_colors(fill)
        for st, pt, fi in self._texts:
            painter.setFont(fonts[fi])
            painter.setPen(colors[fi])
            painter.drawStaticText(pt, st)
        if self.node.data.get("subgraphs"):
            # two stacked squares, top right: this box holds graphs (double-click opens them)
            x, y, s = rect.right() - BODY_MARK - 5, rect.top() + 5, BODY_MARK
            painter.setPen(QPen(accent, 1.2))
            painter.setBrush(QColor("#ffffff"))
            painter.drawRect(QRectF(x + 3, y, s - 3, s - 3))
            painter.drawRect(QRectF(x, y + 3, s - 3, s - 3))


class EdgeItem(QGraphicsItem):
    """One tensor use: a spline from the producer's box to the consumer's, with an arrowhead."""

    PEN = None

    def __init__(self, edge: ViewEdge, points: list[tuple[float, float]], label_at: float = 0.5, in_fan: bool = False):
        """`label_at`: where along the curve the shape label sits (0 = source, 1 = target).
        Edges of a fan (several leaving one box or entering one box) show their label on hover
        only: side by side, a fan's labels would cover each other."""
        super().__init__()
        self.in_fan = in_fan
        self.edge = edge
        path = QPainterPath(QPointF(*points[0]))
        for i in range(1, len(points) - 2, 3):
            path.cubicTo(QPointF(*points[i]), QPointF(*points[i + 1]), QPointF(*points[i + 2]))
        if len(points) == 2:
            path.lineTo(QPointF(*points[1]))
        self.path = path
        self.arrow = self._arrowhead(points)
        self._bounds = path.boundingRect().united(self.arrow.boundingRect()).adjusted(-3, -3, 3, 3)
        self._label_at: QPointF | None = None
        if edge.detail:
            # the shape label (hover / zoomed in) sits right of the curve's midpoint: inside bounds
            self._label_at = path.pointAtPercent(label_at)
            _, metrics = item_fonts()
            tw = metrics[2].horizontalAdvance(edge.detail) + 12
            th = metrics[2].height() + 2
            self._bounds = self._bounds.united(QRectF(self._label_at.x(), self._label_at.y() - th / 2, tw, th))
        self._shape: QPainterPath | None = None
        self.highlight: QColor | None = None
        self.hovered = False
        self.faded = False
        self.always_label = False  # View > Tensor Shapes on Edges: the shape label at every readable zoom
        self.setZValue(0)
        self.setAcceptHoverEvents(True)
        tip = edge.label + (f": {edge.detail}" if edge.detail else "")
        if tip:
            self.setToolTip(tip)

    @staticmethod
    def _arrowhead(points) -> QPolygonF:
        (x0, y0), (x1, y1) = points[-2], points[-1]
        dx, dy = x1 - x0, y1 - y0
        n = math.hypot(dx, dy) or 1.0
        ux, uy = dx / n, dy / n
        size = 7.0
        bx, by = x1 - ux * size, y1 - uy * size
        return QPolygonF([QPointF(x1, y1), QPointF(bx - uy * size * 0.45, by + ux * size * 0.45), QPointF(bx + uy * size * 0.45, by - ux * size * 0.45)])

    def boundingRect(self) -> QRectF:
        return self._bounds

    def shape(self) -> QPainterPath:
        if self._shape is None:
            stroker = QPainterPathStroker()
            stroker.setWidth(7.0)
            self._shape = stroker.createStroke(self.path)
        return self._shape

    def hoverEnterEvent(self, event) -> None:
        self.hovered = True
        self.update()

    def hoverLeaveEvent(self, event) -> None:
        self.hovered = False
        self.update()

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        color = self.highlight if self.highlight is not None else QColor("#6f7c88")
        if self.faded:
            painter.setOpacity(0.3)
        width = 2.4 if (self.highlight is not None or self.hovered) else 1.2
        if lod < TEXT_LOD:
            pen = QPen(color, 0 if self.highlight is None else 2.0 / max(lod, 0.01))
            painter.setPen(pen)
            painter.setBrush(Qt.NoBrush)
            painter.drawPath(self.path)
            return
        painter.setRenderHint(QPainter.Antialiasing, True)
        painter.setPen(QPen(color, width))
        painter.setBrush(Qt.NoBrush)
        painter.drawPath(self.path)
        painter.setPen(Qt.NoPen)
        painter.setBrush(color)
        painter.drawPolygon(self.arrow)
        if self.edge.detail and (self.hovered or self.always_label or (lod >= SHAPE_LOD and not self.in_fan)):
            fonts, metrics = item_fonts()
            painter.setFont(fonts[2])
            mid = self._label_at if self._label_at is not None else self.path.pointAtPercent(0.5)
            # float32 is the common case: zoomed-in labels say only the unusual; hover says all
            text = self.edge.detail if self.hovered else self.edge.detail.removesuffix(" float32")
            tw = metrics[2].horizontalAdvance(text)
            th = metrics[2].height()
            box = QRectF(mid.x() + 4, mid.y() - th / 2, tw + 6, th)
            painter.setBrush(QColor(255, 255, 255, 225))
            painter.drawRoundedRect(box, 3, 3)
            painter.setPen(QColor("#2d3a45"))
            painter.drawText(box, Qt.AlignCenter, text)


class GroupItem(QGraphicsItem):
    """An outline around the boxes of one group (a fused kernel's ONNX nodes); its value goes on a
    `ChipItem` at the top right, outside every box: the kernel's time is the group's, not its
    nodes'. The outline is the union of the boxes (padded) and of bridges along the edges inside
    the group, so a chain reads as one shape and unrelated boxes between are not swallowed."""

    PAD = 7.0

    def __init__(self, rects: list[QRectF], bridges: list[QRectF], color: QColor):
        super().__init__()
        path = QPainterPath()
        path.setFillRule(Qt.WindingFill)
        for r in rects:
            path.addRoundedRect(r.adjusted(-self.PAD, -self.PAD, self.PAD, self.PAD), 7, 7)
        for r in bridges:
            path.addRect(r)
        self.path = path.simplified()
        self.color = QColor(color)
        self._bounds = self.path.boundingRect().adjusted(-2, -2, 2, 2)
        self.setZValue(-1)  # under edges and boxes

    def boundingRect(self) -> QRectF:
        return self._bounds

    def shape(self) -> QPainterPath:
        return QPainterPath()  # never takes the mouse: the boxes inside stay clickable

    def chip_anchor(self) -> QPointF:
        """Where a chip sits: the outline's top right corner, just above the topmost box."""
        b = self.path.boundingRect()
        return QPointF(b.right() - 4, b.top() + self.PAD - 2)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        lod = option.levelOfDetailFromTransform(painter.worldTransform())
        fill = QColor(self.color)
        fill.setAlpha(70)
        painter.setRenderHint(QPainter.Antialiasing, True)
        painter.setPen(QPen(self.color.darker(135), 1.6 if lod >= 0.3 else 0.5 / max(lod, 0.01)))
        painter.setBrush(fill)
        painter.drawPath(self.path)


class ChipItem(QGraphicsItem):
    """A small white label with dark text (a group's value), above boxes and edges, its right
    bottom corner at `anchor`. Drawn at the same size on screen at every zoom (it ignores the
    view's scaling), so the figure stays readable on a fitted graph; hidden when the graph is
    so small that chips would cover it."""

    HIDE_BELOW = 0.2  # canvas zoom under which chips are not drawn

    def __init__(self, anchor: QPointF, text: str, color: QColor, tooltip: str = ""):
        super().__init__()
        fm = QFontMetricsF(_chip_font())
        tw, th = fm.horizontalAdvance(text) + 8, fm.height() + 1  # small: it sits in the gap above its boxes
        self.text = text
        self.color = QColor(color)
        self.rect = QRectF(-tw, -th, tw, th)  # in screen pixels, from the anchor
        self.setPos(anchor)
        self.setFlag(QGraphicsItem.ItemIgnoresTransformations, True)
        self.setZValue(3)
        if tooltip:
            self.setToolTip(tooltip)

    def scene_rect_at_100(self) -> QRectF:
        """Where the chip lies in the scene at 100 % (for keeping chips apart)."""
        return self.rect.translated(self.pos())

    def boundingRect(self) -> QRectF:
        return self.rect.adjusted(-1, -1, 1, 1)

    def paint(self, painter: QPainter, option: QStyleOptionGraphicsItem, widget=None) -> None:
        views = self.scene().views() if self.scene() is not None else []
        if views and views[0].transform().m11() < self.HIDE_BELOW:
            return  # the group's colour says it
        painter.setRenderHint(QPainter.Antialiasing, True)
        painter.setPen(QPen(self.color.darker(135), 1.2))
        painter.setBrush(QColor("#ffffff"))
        painter.drawRoundedRect(self.rect, 4, 4)
        painter.setFont(_chip_font())
        painter.setPen(QColor("#111417"))
        painter.drawText(self.rect, Qt.AlignCenter, self.text)
