"""Scene building for the canvas: background layout, items (all at once or on demand), overview mode.

`SceneBuilder` is a mixin of `GraphCanvas`. A view is laid out on a worker thread
(`core.views.layout.layout`) while the old scene stays on screen; `_display` then puts it into a
fresh scene. Huge views get no items up front (see app.canvas.overview).
"""
from __future__ import annotations

import gc
import logging
import time
from collections.abc import Hashable

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QGraphicsScene

from core.views.layout import Layout, layout
from core.views.viewgraph import ViewGraph

from app.canvas.overview import DisplayExtras, ItemLayer, prepare_display
from app.graph_items import EdgeItem, NodeItem, node_size
from app.scope_items import ScopeBoxItem
from app.style import HIGHLIGHT_COLORS
from app.workers import Job, error_text, start_job

__all__ = ["SceneBuilder"]

logger = logging.getLogger(__name__)



class SceneBuilder:
    """Layout jobs, scene and item creation, lazy items and the overview image of a GraphCanvas."""

    # ---- layout and scene building ------------------------------------------------------------
    def _layout_and_show(self, view: ViewGraph, state: dict) -> None:
        if self._job is not None:
            self._job.cancel()
            self._job.done.disconnect()
        measure = self.measure
        direction = self.direction
        t0 = time.perf_counter()

        def work(job: Job):
            gc.disable()  # see MainWindow.open_model: GC passes over big heaps stall the UI thread
            try:
                sizes = {n.id: node_size(n, measure) for n in view.nodes}
                job.check()
                result = layout(view, sizes, cancel=job.is_cancelled, progress=lambda f: job.report(0.9 * f, "Laying out the graph"), direction=direction)
                return result, prepare_display(view, result, job)
            finally:
                gc.enable()

        self.busyChanged.emit(True, "Laying out the graph")
        job = self._job = start_job(
            work, "Laying out the graph", self, progressed=lambda p: self.progressed.emit(p.fraction, p.message),
            done=lambda res: self._layout_done(job, view, res[0], res[1], state, t0),
            failed=lambda exc: self._job_ended(job, error_text(exc, job.title)), cancelled=lambda: self._job_ended(job, ""), delete_later=True,
        )

    def _abandon_layout(self) -> None:
        """Drop a layout still running for an earlier request: what is shown now replaces it.
        (A model shown from its cached layout while a lowering stage's layout ran used to be
        replaced by that stage when its layout ended, with the canvas still in model mode.)"""
        job, self._job = self._job, None
        if job is not None:
            job.cancel()
            job.done.disconnect()
            self.busyChanged.emit(False, "")

    def cancel(self) -> None:
        """Stop a running layout (the current scene stays)."""
        if self._job is not None:
            self._job.cancel()

    def _job_ended(self, job: Job, message: str) -> None:
        if self._job is job:
            self._job = None
            self.busyChanged.emit(False, message)

    def _layout_done(self, job: Job, view: ViewGraph, result: Layout, extras, state: dict, t0: float) -> None:
        if self._job is not job:
            return
        self._job = None
        self.last_timings["layout"] = time.perf_counter() - t0
        if self.mode == "model" and self.document.graph is not None and view.data.get("source") == "onnx":
            self._model_cache = (id(self.document.graph), self.document.graph.revision, view, result, extras)
        self._display(view, result, state, extras)
        self.busyChanged.emit(False, "")

    def _display(self, view: ViewGraph, result: Layout, state: dict, extras: DisplayExtras | None = None) -> None:
        """Put `view` on screen in a fresh scene.

        Graphs up to OVERVIEW_ITEMS items get all their items at once. Bigger ones start empty:
        the pre-rendered overview image (made on the worker thread) draws the zoomed-out graph,
        and items are created only for the part of the scene the viewport shows (a grid of cells
        says which), so opening 10,000 nodes creates no items at all until the user zooms in.
        """
        self._abandon_layout()
        t0 = time.perf_counter()
        scene = self._new_scene()
        scene.setSceneRect(QRectF(-40, -40, result.width + 80, result.height + 80))
        old = self.scene()
        keep = state.get("keep")
        transform = self.transform()
        self._syncing = True
        self.setScene(scene)
        self._syncing = False
        try:
            old.selectionChanged.disconnect(self._on_scene_selection)
        except (RuntimeError, TypeError):
            pass
        old.deleteLater()
        self.view = view
        self.layout_result = result
        self._lazy = extras
        out_deg: dict = {}
        in_deg: dict = {}
        for e in view.edges:
            out_deg[e.src] = out_deg.get(e.src, 0) + 1
            in_deg[e.dst] = in_deg.get(e.dst, 0) + 1
        self._degree = (out_deg, in_deg)
        self._created_cells = set()
        self._edge_item_of = {}
        self.node_items = {}
        self.edge_items = []
        self._layer = ItemLayer()
        self._layer.canvas = self
        if extras is None:
            for n in view.nodes:
                self._make_node(n.id)
            for k in range(len(view.edges)):
                self._make_edge(k)
        if self.mode == "model":
            self.select(self.document.selection)
            if self.document.selected_tensor:
                self._on_tensor_selected(self.document.selected_tensor)
        self.minimap.rebuild()  # before fitting: Fit places the map where it covers no box
        self.keep_view()
        self.setAlignment(Qt.AlignCenter)  # (Fit may align a graph to one side, beside the minimap)
        if keep is not None:
            self.setTransform(transform)
            anchor_id, offset = keep
            box = result.boxes.get(anchor_id)
            if box is not None:
                self.centerOn(QPointF(box.x, box.y) - offset)
        elif state.get("fit"):
            self.fit()
        else:
            self._initial_view()
        self.setInteractive(self.mode != "preview")  # a loading model's picture: nothing to select yet
        self._ensure_visible_items()
        self.find_bar.refresh()
        self._zoomed()
        self.last_timings["items"] = time.perf_counter() - t0
        if self.mode == "preview":
            self.previewShown.emit(view)
            return
        self._apply_overlay()
        self.viewShown.emit(view)

    def _make_node(self, node_id: Hashable) -> NodeItem | None:
        item = self.node_items.get(node_id)
        if item is not None:
            return item
        box = self.layout_result.boxes.get(node_id) if self.layout_result is not None else None
        if box is None:
            return None
        node = self.view.node(node_id)
        item = (ScopeBoxItem if node.category == "group" else NodeItem)(node, box.w, box.h)
        item.setPos(box.x - box.w / 2, box.y - box.h / 2)
        self._decorate_node(item)
        if not self._layer.visible:
            item.setVisible(False)
        self.scene().addItem(item)
        self.node_items[node_id] = item
        return item

    def _make_edge(self, index: int) -> EdgeItem | None:
        item = self._edge_item_of.get(index)
        if item is not None:
            return item
        pts = self.layout_result.routes[index]
        if len(pts) < 2:
            return None
        edge = self.view.edges[index]
        fan_out = self._degree[0].get(edge.src, 0) > 1
        fan_in = self._degree[1].get(edge.dst, 0) > 1
        item = EdgeItem(edge, pts, 0.5 if fan_out == fan_in else (0.72 if fan_out else 0.28), in_fan=fan_out or fan_in)
        item.always_label = self.edge_shapes
        self._decorate_edge(item)
        if not self._layer.visible:
            item.setVisible(False)
        self.scene().addItem(item)
        self._edge_item_of[index] = item
        self.edge_items.append(item)
        return item

    @property
    def item_layer(self):
        """The layer of node and edge items a huge graph's overview image stands in for (None when drawn in full)."""
        return self._layer

    def make_items_in(self, rect) -> None:
        """A huge graph (app.canvas.overview) has items only for the grid cells the viewport reached:
        make those of `rect` (scene coordinates) too, e.g. for an image export of the whole graph."""
        extras = self.overview
        if extras is None or self.view is None:
            return
        ids = [n.id for n in self.view.nodes]
        cell = extras.cell
        for cx in range(int(rect.left() // cell), int(rect.right() // cell) + 1):
            for cy in range(int(rect.top() // cell), int(rect.bottom() // cell) + 1):
                nodes, edges = extras.grid.get((cx, cy), ((), ()))
                for i in nodes:
                    self._make_node(ids[i])
                for k in edges:
                    self._make_edge(k)

    def _ensure_visible_items(self) -> None:
        """Lazy scenes: create the items of the grid cells around the visible area."""
        extras = self._lazy
        if extras is None or self.view is None or self.overview_active():
            return
        r = self.mapToScene(self.viewport().rect()).boundingRect()
        margin_x, margin_y = r.width() * 0.25, r.height() * 0.25
        cell = extras.cell
        x0, x1 = int((r.left() - margin_x) // cell), int((r.right() + margin_x) // cell)
        y0, y1 = int((r.top() - margin_y) // cell), int((r.bottom() + margin_y) // cell)
        grid = extras.grid
        ids = [n.id for n in self.view.nodes]
        for cx in range(x0, x1 + 1):
            for cy in range(y0, y1 + 1):
                key = (cx, cy)
                if key in self._created_cells:
                    continue
                self._created_cells.add(key)
                nodes, edges = grid.get(key, ((), ()))
                for i in nodes:
                    self._make_node(ids[i])
                for k in edges:
                    self._make_edge(k)

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        super().scrollContentsBy(dx, dy)
        if self._lazy is not None:
            self._ensure_visible_items()

    # ---- overview image (huge graphs, zoomed out) -------------------------------------------
    def overview_active(self) -> bool:
        """True when the zoom is so small that the pre-rendered image stands in for the items."""
        extras = self._lazy
        if extras is None:
            return False
        return self.zoom() <= extras.switch_scale

    def _update_overview_mode(self) -> None:
        active = self.overview_active()
        if self._layer is not None and self._layer.visible == active:
            self._layer.setVisible(not active)
            self.viewport().update()

    def drawBackground(self, painter: QPainter, rect: QRectF) -> None:
        painter.fillRect(rect, self.backgroundBrush())
        if self._lazy is not None and self.overview_active():
            painter.setRenderHint(QPainter.SmoothPixmapTransform, True)
            painter.drawImage(self._lazy.rect, self._lazy.image_for(self.zoom()))

    def drawForeground(self, painter: QPainter, rect: QRectF) -> None:
        if self.view is None and self.empty_message:
            self._draw_empty(painter)
            return
        self.paint_marks(painter)
        if self._lazy is None or not self.overview_active() or self.layout_result is None:
            return
        # the overview image has no selection or highlights: mark those nodes on top of it
        px = 1.0 / max(self.zoom(), 1e-6)
        boxes = self.layout_result.boxes
        marks: dict = {}
        if self._overlay:
            for nid in self._overlay[0]:
                item = self.node_items.get(nid)
                if item is not None and item.overlay is not None:
                    marks[nid] = item.overlay
        for role, (ids, color) in self._highlights.items():
            for nid in ids:
                marks[nid] = color
        for nid in self.selected_ids():
            marks[nid] = QColor(HIGHLIGHT_COLORS["selection"])
        for nid, color in marks.items():
            b = boxes.get(nid)
            if b is None:
                continue
            grow = max(0.0, 4 * px - b.w / 2)
            painter.fillRect(QRectF(b.x - b.w / 2 - grow, b.y - b.h / 2 - grow, b.w + 2 * grow, b.h + 2 * grow), color)

    def _draw_empty(self, painter: QPainter) -> None:
        """Nothing to draw: say why and what to do, in the middle of the viewport."""
        painter.save()
        painter.resetTransform()
        vp = self.viewport().rect()
        box = QRectF(vp).adjusted(vp.width() * 0.15, vp.height() * 0.3, -vp.width() * 0.15, -vp.height() * 0.3)
        painter.setPen(QColor("#5b6570"))
        font = painter.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        painter.setFont(font)
        painter.drawText(box, Qt.AlignCenter | Qt.TextWordWrap, self.empty_message)
        painter.restore()

    def _new_scene(self) -> QGraphicsScene:
        scene = QGraphicsScene(self)
        scene.setItemIndexMethod(QGraphicsScene.BspTreeIndex)
        scene.selectionChanged.connect(self._on_scene_selection)
        return scene

    def _initial_view(self) -> None:
        """A newly opened graph: fitted (readably: see GraphCanvas.fit), at most at 100 %."""
        self.fit()
        if self.zoom() > 1.0:
            self._set_scale(1.0)
            self.centerOn(self.scene().sceneRect().center())
        self._refit = self._initial_view

    def _clear(self) -> None:
        self._abandon_layout()
        old = self.scene()
        self.setScene(self._new_scene())
        old.deleteLater()
        self.view = None
        self.layout_result = None
        self.node_items = {}
        self.edge_items = []
        self._edge_item_of = {}
        self._layer = None
        self._lazy = None
        self.minimap.rebuild()

    def _view_anchor(self):
        """The node nearest the viewport centre and its offset, to keep the view steady on relayout."""
        center = self.mapToScene(self.viewport().rect().center())
        best = None
        boxes = self.layout_result.boxes if self.layout_result is not None else {}
        for nid, b in boxes.items():
            d = (b.x - center.x()) ** 2 + (b.y - center.y()) ** 2
            if best is None or d < best[0]:
                best = (d, nid, QPointF(b.x, b.y) - center)
        return None if best is None else (best[1], best[2])

    def _visible(self, node_id) -> bool:
        b = self.layout_result.boxes.get(node_id) if self.layout_result is not None else None
        if b is None:
            return False
        return self.mapToScene(self.viewport().rect()).boundingRect().contains(QRectF(b.x - b.w / 2, b.y - b.h / 2, b.w, b.h))
