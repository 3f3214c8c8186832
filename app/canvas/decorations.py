"""Decorations of the canvas's items, kept by node id and applied whenever an item is made.

Highlights (outlines per role, which stack: "rewrite-match", "lineage", "search", "tensor"), the
heat overlay ({id: value} with a legend) and the rewrite preview's ghosts (removed / added).
The overlay's legend floats in the canvas's corner that covers the fewest nodes (and none of the
canvas's other insets: the minimap, the colour key, the find bar), placed again as the view scrolls
or zooms: at the top left it once covered a graph's input node.
Zoomed out (below TEXT_LOD), ghosts and the highlight roles in `ring_roles` also get a ring drawn
over the scene with a cosmetic pen and a minimum on-screen size (`paint_marks`): there a box is a
few pixels tall and its own dashed outline a fraction of one.
`Decorations` is a mixin of `GraphCanvas`: it owns `_highlights`, `_overlay`, `_ghosts`.
"""
from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping
from types import MappingProxyType

from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, Qt, QTimer
from PySide6.QtGui import QColor, QPainter, QPen

from app.graph_items import GHOST_COLORS, TEXT_LOD, ChipItem, EdgeItem, GroupItem, NodeItem
from app.style import HIGHLIGHT_COLORS

__all__ = ["MARK_MIN_PX", "MARK_PEN_PX", "Decorations", "heat_color"]

logger = logging.getLogger(__name__)

MARK_MIN_PX = 14.0  # a marked box's ring is at least this wide and tall on screen
MARK_PEN_PX = 2.5  # its line width on screen, at every zoom (a cosmetic pen)
MARK_GAP_PX = 3.0  # between the box and its ring


def heat_color(t: float) -> QColor:
    """Pale yellow (0) -> orange (0.5) -> red (1)."""
    t = max(0.0, min(1.0, t))
    stops = [(0.0, (255, 247, 214)), (0.5, (255, 160, 70)), (1.0, (214, 39, 40))]
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return QColor(*(round(a + (b - a) * f) for a, b in zip(c0, c1)))
    return QColor(*stops[-1][1])



class Decorations:
    """Highlight, overlay and ghost state of a GraphCanvas, and its application to items."""

    def _init_decorations(self) -> None:
        self._highlights: dict[str, tuple[set, QColor]] = {}
        self._overlay: tuple[dict, str] | None = None
        self._ghosts: tuple[set, set] = (set(), set())
        self._overlay_max = 0.0
        self._overlay_groups: list[dict] | None = None
        self._overlay_scale: float | None = None
        self._group_items: list = []
        self._overlay_unit = ""
        self.ring_roles: set[str] = set()  # highlight roles ringed like ghosts (the Compare window's "changed")
        self._legend_timer = QTimer(self, singleShot=True, interval=0)  # one placement per burst of scrolling
        self._legend_timer.timeout.connect(self._place_legend)
        for bar in (self.horizontalScrollBar(), self.verticalScrollBar()):
            bar.valueChanged.connect(self._legend_moved)
            bar.rangeChanged.connect(self._legend_moved)
        self.zoomChanged.connect(self._legend_moved)

    def set_highlight(self, role: str, ids: Iterable[Hashable], color: str | QColor = "#00a3d9") -> None:
        self._highlights[role] = (set(ids), QColor(color))
        self._apply_highlights()

    @property
    def highlights(self) -> Mapping[str, tuple[set, QColor]]:
        """Role -> (view node ids, colour) of the highlights shown (read-only)."""
        return MappingProxyType(self._highlights)

    @property
    def has_overlay(self) -> bool:
        """Whether heat colours are shown (set_overlay with values)."""
        return bool(self._overlay)

    def clear_highlight(self, role: str) -> None:
        if self._highlights.pop(role, None) is not None:
            self._apply_highlights()

    def set_overlay(self, values: dict | None, legend: str = "", groups: list[dict] | None = None,
                    max_value: float | None = None, unit: str = "") -> None:
        """Heat colours: each node with a value is filled from pale yellow (low) to red (high).

        `groups` [{ids, value, label, tooltip}] outline nodes that share one value (a fused
        kernel) and put the value on one chip above them; without groups every node with a
        value gets its own chip. `max_value` fixes the top of the scale (e.g. the slowest kernel
        of the chart beside it) instead of the largest value drawn."""
        self._overlay = (dict(values), legend) if values else None
        self._overlay_groups = list(groups) if (values and groups is not None) else None
        self._overlay_scale = max_value if values else None
        self._overlay_unit = unit
        self._apply_overlay()

    def set_ghosts(self, removed_ids: Iterable[Hashable] = (), added_ids: Iterable[Hashable] = ()) -> None:
        self._ghosts = (set(removed_ids), set(added_ids))
        self._apply_ghosts()

    def clear_ghosts(self) -> None:
        self.set_ghosts((), ())

    def mark_rects(self) -> list[tuple[Hashable, QRectF, QColor]]:
        """(node id, ring in scene coordinates, colour) of every ghost and ring-role node drawn now:
        the box grown by MARK_GAP_PX on screen, and at least MARK_MIN_PX square on screen. None
        from TEXT_LOD on, where the boxes draw their own outlines and rings legibly."""
        if self.layout_result is None or self.zoom() >= TEXT_LOD:
            return []
        px = 1.0 / max(self.zoom(), 1e-6)
        boxes = self.layout_result.boxes
        marks: list[tuple[Hashable, QColor]] = []
        for role in sorted(self.ring_roles):
            ids, color = self._highlights.get(role, ((), None))
            marks += [(nid, color) for nid in ids]
        for ghost, ids in zip(("removed", "added"), self._ghosts):
            marks += [(nid, QColor(GHOST_COLORS[ghost])) for nid in ids]
        out = []
        for nid, color in marks:
            b = boxes.get(nid)
            if b is None:
                continue
            w = max(b.w + 2 * MARK_GAP_PX * px, MARK_MIN_PX * px)
            h = max(b.h + 2 * MARK_GAP_PX * px, MARK_MIN_PX * px)
            out.append((nid, QRectF(b.x - w / 2, b.y - h / 2, w, h), color))
        return out

    def paint_marks(self, painter: QPainter) -> None:
        """Draw `mark_rects` (the canvas's drawForeground calls this with the scene transform)."""
        marks = self.mark_rects()
        if not marks:
            return
        painter.save()
        painter.setRenderHint(QPainter.Antialiasing, True)
        painter.setBrush(Qt.NoBrush)
        for _nid, rect, color in marks:
            pen = QPen(color, MARK_PEN_PX)
            pen.setCosmetic(True)
            painter.setPen(pen)
            painter.drawRoundedRect(rect, 3 / max(self.zoom(), 1e-6), 3 / max(self.zoom(), 1e-6))
        painter.restore()

    # ---- decorations -------------------------------------------------------------------------
    def _decorate_node(self, item: NodeItem) -> None:
        nid = item.node_id
        members = item.node.origin if item.node.category == "group" else ()  # a collapsed group lights up for what it holds
        highlights = {role: color for role, (ids, color) in self._highlights.items() if nid in ids or (members and not ids.isdisjoint(members))}
        overlay, text = self._overlay_style(item.node_id)
        removed, added = self._ghosts
        ghost = "removed" if item.node_id in removed else ("added" if item.node_id in added else "")
        if highlights != item.highlights or overlay != item.overlay or text != item.overlay_text or ghost != item.ghost:
            item.highlights, item.overlay, item.overlay_text, item.ghost = highlights, overlay, text, ghost
            item.update()

    def _decorate_edge(self, e: EdgeItem) -> None:
        tensor = self.document.selected_tensor if self.mode == "model" else ""
        color = None
        if tensor and e.edge.label == tensor:
            color = QColor(HIGHLIGHT_COLORS["tensor"])
        else:
            for role, (ids, c) in self._highlights.items():
                if role != "tensor" and e.edge.src in ids and e.edge.dst in ids:
                    color = c
        removed = self._ghosts[0]
        faded = e.edge.src in removed or e.edge.dst in removed
        if color != e.highlight or faded != e.faded:
            e.highlight, e.faded = color, faded
            e.update()

    def _overlay_style(self, node_id) -> tuple[QColor | None, str]:
        if not self._overlay:
            return None, ""
        values, _legend = self._overlay
        v = values.get(node_id)
        if v is None:
            return None, ""
        hi = self._overlay_max
        return heat_color(float(v) / hi if hi > 0 else 0.0), _fmt(float(v), self._overlay_unit)

    def _redecorate(self) -> None:
        for item in self.node_items.values():
            self._decorate_node(item)
        for e in self.edge_items:
            self._decorate_edge(e)
        self.minimap.rebuild()
        if self._lazy is not None and self.overview_active():
            self.viewport().update()

    def _apply_highlights(self) -> None:
        self._redecorate()
        if self.ring_roles:
            self.viewport().update()  # rings reach beyond the items' own areas

    def _apply_ghosts(self) -> None:
        self._redecorate()
        self.viewport().update()

    def _apply_overlay(self) -> None:
        if self.mode == "preview":  # the values belong to the model still open, not to this picture
            return
        values, legend = self._overlay if self._overlay else ({}, "")
        if values:
            from core.views.scopes import with_group_totals

            values = with_group_totals(values, self.view)  # a collapsed group shows its nodes' total
            self._overlay = (values, legend)
        known = self.layout_result.boxes if self.layout_result is not None else {}
        drawn = max((float(v) for k, v in values.items() if k in known), default=0.0)
        self._overlay_max = self._overlay_scale if self._overlay_scale else drawn
        self._redecorate()
        self._make_groups()
        if values:
            hi, unit = self._overlay_max, self._overlay_unit
            lo_c, hi_c = heat_color(0.0).name(), heat_color(1.0).name()
            self.legend.setText(
                f"{legend}<br><span style='color:{lo_c}'>■</span>&nbsp;0 → "  # two short lines: room beside a graph
                f"<span style='color:{hi_c}'>■</span>&nbsp;{_fmt(hi, unit)}")
            self.legend.adjustSize()
            self.legend.show()
            self._place_legend()
        else:
            self.legend.hide()

    def _legend_moved(self, *_args) -> None:
        if self.legend.isVisible():
            self._legend_timer.start()

    def legend_corners(self) -> list[QRect]:
        """Where the legend may go, in the canvas's coordinates: top left, top right, bottom
        right, bottom left (preferred in that order when they cover equally little)."""
        vp = self.viewport().geometry()
        w, h, m = self.legend.width(), self.legend.height(), 10
        left, right = vp.left() + m, vp.left() + vp.width() - w - m
        top, bottom = vp.top() + m, vp.top() + vp.height() - h - m
        return [QRect(QPoint(x, y), self.legend.size()) for x, y in ((left, top), (right, top), (right, bottom), (left, bottom))]

    def _place_legend(self) -> None:
        """Move the legend to the corner that covers the least node area on screen; another inset
        of the canvas (minimap, colour key, find bar) counts as covered whole."""
        if not self.legend.isVisible():
            return
        vp = self.viewport().geometry()
        shown = self.mapToScene(self.viewport().rect()).boundingRect()
        boxes = self.layout_result.boxes.values() if self.layout_result is not None else ()
        on_screen = []
        for b in boxes:
            r = QRectF(b.x - b.w / 2, b.y - b.h / 2, b.w, b.h)
            if r.intersects(shown):
                on_screen.append(self.mapFromScene(r).boundingRect().translated(vp.topLeft()))
        insets = [w.geometry() for w in (getattr(self, name, None) for name in ("minimap", "key", "find_bar"))
                  if w is not None and w is not self.legend and w.isVisible()]

        def covered(rect: QRect) -> float:
            area = sum(rect.intersected(r).width() * rect.intersected(r).height() for r in on_screen if rect.intersects(r))
            return area + sum(rect.width() * rect.height() * 10 for r in insets if rect.intersects(r))

        corners = self.legend_corners()
        best = min(range(len(corners)), key=lambda i: (covered(corners[i]), i))
        self.legend.move(corners[best].topLeft())

    def _make_groups(self) -> None:
        """Outlines and chips of the overlay (remade whole: a few hundred items at most)."""
        for item in self._group_items:
            try:
                if item.scene() is not None:
                    item.scene().removeItem(item)
            except RuntimeError:  # went with an old scene
                pass
        self._group_items = []
        if not self._overlay or self.layout_result is None or self.view is None:
            return
        values, _legend = self._overlay
        boxes = self.layout_result.boxes
        unit = self._overlay_unit
        groups = self._overlay_groups
        if groups is None:
            groups = [{"ids": [k], "value": v, "label": "", "tooltip": ""} for k, v in values.items()]
        members: dict = {}
        for gi, g in enumerate(groups):
            for nid in g["ids"]:
                members.setdefault(nid, set()).add(gi)
        bridges: dict[int, list] = {}
        for e in self.view.edges:  # an edge inside a group is bridged, so a chain is one shape
            shared = members.get(e.src, set()) & members.get(e.dst, set())
            a, b = boxes.get(e.src), boxes.get(e.dst)
            if shared and a is not None and b is not None:
                r = QRectF(QPointF(min(a.x, b.x) - 8, min(a.y, b.y) - 8), QPointF(max(a.x, b.x) + 8, max(a.y, b.y) + 8))
                for gi in shared:
                    bridges.setdefault(gi, []).append(r)
        hi = self._overlay_max
        placed: list[QRectF] = []
        scene = self.scene()
        for gi, g in enumerate(groups):
            rects = [QRectF(b.x - b.w / 2, b.y - b.h / 2, b.w, b.h) for b in (boxes.get(i) for i in g["ids"]) if b is not None]
            if not rects:
                continue
            color = heat_color(float(g["value"]) / hi if hi > 0 else 0.0)
            outline = GroupItem(rects, bridges.get(gi, []), color)
            anchor = outline.chip_anchor()
            chip = ChipItem(anchor, _fmt(float(g["value"]), unit), color, g.get("tooltip") or g.get("label") or "")
            while any(chip.scene_rect_at_100().intersects(r) for r in placed):  # chips of groups sharing a corner: side by side
                anchor = QPointF(anchor.x() - chip.rect.width() - 4, anchor.y())
                chip = ChipItem(anchor, chip.text, color, chip.toolTip())
            placed.append(chip.scene_rect_at_100())
            for item in (outline, chip):
                scene.addItem(item)
                self._group_items.append(item)



def _fmt(value: float, unit: str) -> str:
    """A value for a chip or the legend: three significant digits and the unit."""
    return f"{value:.3g} {unit}".strip()
