"""The graph canvas: a QGraphicsView that draws any `core.views.viewgraph.ViewGraph`.

By default it shows the open document's ONNX graph (`core.views.viewgraph.from_graph`) and redraws
itself whenever the document changes (an edit, undo or redo) or is replaced (a model opened).
Layout runs on a worker thread (`core.views.layout.layout`: dot for model-sized graphs, a layered
fallback for big ones); until it is done the old scene stays on screen.

Big views (OVERVIEW_ITEMS nodes + edges or more, e.g. DenseNet-121) are drawn lazily: the worker
also renders the whole graph into an overview image, which is what a zoomed-out view paints, and
node/edge items are created only for the part of the scene the viewport reaches. So on big views
`canvas.node_items` / `canvas.edge_items` hold only the items made so far: read positions from
`canvas.layout_result.boxes[id]` (centre x, y and w, h), and call `canvas.select(ids)` or
`canvas.center_on(id)`, which create what they need. Decorations (highlights, overlay, ghosts)
are kept by id and applied to items whenever they are created.

API for panels and other views (everything takes view node ids: ONNX node ids in the model view,
whatever ids the shown ViewGraph uses otherwise)::

    canvas.show_view(view, fit=True)       draw any ViewGraph (a lowering stage, a rewrite preview)
    canvas.show_model()                    back to the document's ONNX graph
    canvas.mode                            "model" or "view"; canvas.view is the ViewGraph shown
    canvas.select(ids, center=False)       select nodes (model mode: also the document selection)
    canvas.center_on(id)                   scroll to a node (zooming in to a readable scale)
    canvas.set_highlight(role, ids, color) outline nodes (and the edges between them) for a role,
    canvas.clear_highlight(role)             e.g. "rewrite-match", "lineage"; roles stack
    canvas.set_overlay(values, legend)     heat colours {id: value} with a legend; None clears
    canvas.set_ghosts(removed, added)      rewrite preview: removed nodes faded with a red dashed
                                             outline, added ones with a green dashed outline
    canvas.clear_ghosts()
    canvas.fit() / canvas.zoom_100() / canvas.zoom_by(f) / canvas.zoom()
    canvas.find_bar.open()                 the Ctrl+F search bar
    canvas.node_items[id] / layout_result  items made so far / every node's box (see above)
    canvas.busy                            a layout is running (tests: wait for viewShown)

Signals::

    nodeActivated(id)          double-click or Enter on a node
    viewSelectionChanged(list) the selected view node ids changed (any mode)
    viewShown(object)          a ViewGraph is on screen (after its layout)
    zoomChanged(float)         the scale changed (1.0 = 100 %)
    busyChanged(bool, str)     layout started/finished (the main window shows progress)
    progressed(float, str)     layout progress, 0..1
"""
from __future__ import annotations

import gc
import logging
import time
from collections.abc import Hashable, Iterable

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QImage, QKeySequence, QPainter, QPainterPath, QPen, QShortcut
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsScene,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QToolButton,
    QWidget,
)

from core.views.layout import Layout, layout
from core.views.viewgraph import ViewGraph, find_nodes, from_graph

from app.document import Document
from app.graph_items import EdgeItem, NodeItem, node_size
from app.group_items import GroupItem
from app.scopes import with_group_totals
from app.style import CATEGORY_COLORS, HIGHLIGHT_COLORS, TextMeasure, category_colors
from app.workers import Job

__all__ = ["GraphCanvas", "Minimap", "FindBar"]

logger = logging.getLogger(__name__)

MIN_SCALE = 0.002
MAX_SCALE = 4.0
READABLE_SCALE = 0.7  # opening a graph whose fit is smaller than this starts at 100 % (top) instead
OVERVIEW_ITEMS = 800  # from this many items (nodes + edges) on: overview image + items made on demand
OVERVIEW_MAX_PX = 8192  # longest side of that image


class GraphCanvas(QGraphicsView):
    nodeActivated = Signal(object)
    viewSelectionChanged = Signal(list)
    viewShown = Signal(object)
    zoomChanged = Signal(float)
    busyChanged = Signal(bool, str)
    progressed = Signal(float, str)

    def __init__(self, document: Document, parent: QWidget | None = None):
        super().__init__(parent)
        self.document = document
        self.measure = TextMeasure()
        self.view: ViewGraph | None = None
        self.layout_result: Layout | None = None
        self.mode = "model"
        self.node_items: dict[Hashable, NodeItem] = {}
        self.edge_items: list[EdgeItem] = []
        self._model_cache: tuple | None = None  # (graph id, revision, view, layout, extras)
        self._highlights: dict[str, tuple[set, QColor]] = {}
        self._overlay: tuple[dict, str] | None = None
        self._ghosts: tuple[set, set] = (set(), set())
        self._job: Job | None = None
        self._syncing = False
        self._pending_state: dict = {}
        self.last_timings: dict[str, float] = {}
        self._layer: _Layer | None = None  # switch for all items (hidden while the overview image draws)
        self._lazy: DisplayExtras | None = None  # set for huge graphs: overview image + item grid
        self._created_cells: set = set()
        self._edge_item_of: dict[int, EdgeItem] = {}
        self._overlay_max = 0.0
        self._degree: tuple[dict, dict] = ({}, {})
        self.model_view = from_graph  # graph -> what model mode draws (app.scopes: groups collapsed)
        self.scopes = None  # app.scopes.ScopeController, when installed

        self.setScene(self._new_scene())
        self.setRenderHint(QPainter.Antialiasing, False)
        self.setRenderHint(QPainter.TextAntialiasing, True)
        self.setDragMode(QGraphicsView.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.AnchorViewCenter)
        self.setViewportUpdateMode(QGraphicsView.MinimalViewportUpdate)
        self.setOptimizationFlag(QGraphicsView.DontAdjustForAntialiasing, True)
        self.setBackgroundBrush(QColor("#f6f7f9"))
        self.setFrameShape(QFrame.NoFrame)
        self.setFocusPolicy(Qt.StrongFocus)

        self.minimap = Minimap(self)
        self.find_bar = FindBar(self)
        self.legend = QLabel(self)
        self.legend.setStyleSheet("QLabel { background: rgba(255,255,255,230); border: 1px solid #c9ced4; border-radius: 4px; padding: 4px 8px; }")
        self.legend.hide()
        self.key = QLabel(self)  # colour key of the op categories (View ▸ Colour Key)
        self.key.setStyleSheet(self.legend.styleSheet())
        self.key.setText(  # entries wrap as wholes on a narrow canvas (see _place_key)
            "&nbsp; ".join(
                f"<span style='color:{CATEGORY_COLORS[c][1]}'>■</span>&nbsp;{c}"
                for c in ("convolution", "matmul", "elementwise", "activation", "normalization", "pooling", "shape", "other")
            )
        )
        self.key.hide()
        self.horizontalScrollBar().valueChanged.connect(self.minimap.update)
        self.verticalScrollBar().valueChanged.connect(self.minimap.update)

        document.graphReplaced.connect(self._on_graph_replaced)
        document.graphChanged.connect(self._on_graph_changed)
        document.selectionChanged.connect(self._on_document_selection)
        document.tensorSelected.connect(self._on_tensor_selected)

    # ---- public API --------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._job is not None

    def show_view(self, view: ViewGraph, fit: bool = True) -> None:
        """Draw `view` (laid out in the background); `mode` becomes "view" until show_model()."""
        self.mode = "view"
        self._layout_and_show(view, {"fit": fit})

    def show_model(self, fit: bool = False) -> None:
        """Show the document's ONNX graph again (cached layout when the graph has not changed)."""
        self.mode = "model"
        graph = self.document.graph
        if graph is None:
            self._clear()
            return
        cache = self._model_cache
        state = {"fit": fit, "initial": not fit}
        if cache is not None and cache[0] == id(graph) and cache[1] == graph.revision:
            self._display(cache[2], cache[3], state, cache[4])
        else:
            self._layout_and_show(self.model_view(graph), state)

    def prime_model_layout(self, graph, view: ViewGraph, result: Layout, extras: "DisplayExtras | None" = None) -> None:
        """Hand over a layout computed together with loading, so opening lays out only once."""
        self._model_cache = (id(graph), graph.revision, view, result, extras)

    def show_model_layout(self, view: ViewGraph, result: Layout, keep=None) -> None:
        """Show a model view laid out by the caller (a group opened in place), keeping the node
        `keep = (id, offset from the viewport centre)` where it was on screen."""
        self.mode = "model"
        self.prime_model_layout(self.document.graph, view, result, prepare_display(view, result))
        self._display(view, result, {"keep": keep} if keep is not None else {"fit": False}, self._model_cache[4])

    def select(self, ids: Iterable[Hashable], center: bool = False) -> None:
        ids = [i for i in ids if self._make_node(i) is not None] if self.view is not None else []
        self._syncing = True
        try:
            scene = self.scene()
            scene.clearSelection()
            for i in ids:
                self.node_items[i].setSelected(True)
        finally:
            self._syncing = False
        self._on_scene_selection()
        if center and ids:
            self.center_on(ids[0])

    def selected_ids(self) -> list:
        return [it.node_id for it in self.scene().selectedItems() if isinstance(it, NodeItem)]

    def center_on(self, node_id: Hashable) -> None:
        box = self.layout_result.boxes.get(node_id) if self.layout_result is not None else None
        if box is None:
            return
        if self.zoom() < 0.6:
            self._set_scale(1.0)
        self.centerOn(QPointF(box.x, box.y))

    def set_highlight(self, role: str, ids: Iterable[Hashable], color: str | QColor = "#00a3d9") -> None:
        self._highlights[role] = (set(ids), QColor(color))
        self._apply_highlights()

    def clear_highlight(self, role: str) -> None:
        if self._highlights.pop(role, None) is not None:
            self._apply_highlights()

    def set_overlay(self, values: dict | None, legend: str = "") -> None:
        """Heat colours: each node with a value is filled from pale yellow (low) to red (high)."""
        self._overlay = (dict(values), legend) if values else None
        self._apply_overlay()

    def set_ghosts(self, removed_ids: Iterable[Hashable] = (), added_ids: Iterable[Hashable] = ()) -> None:
        self._ghosts = (set(removed_ids), set(added_ids))
        self._apply_ghosts()

    def clear_ghosts(self) -> None:
        self.set_ghosts((), ())

    def zoom(self) -> float:
        return self.transform().m11()

    def zoom_by(self, factor: float) -> None:
        self._set_scale(self.zoom() * factor)

    def zoom_100(self) -> None:
        center = self.mapToScene(self.viewport().rect().center())
        self._set_scale(1.0)
        self.centerOn(center)

    def fit(self) -> None:
        rect = self.scene().sceneRect()
        if rect.isEmpty():
            return
        self.fitInView(rect, Qt.KeepAspectRatio)
        if self.zoom() > 1.5:
            self._set_scale(1.5)
            self.centerOn(rect.center())
        self._zoomed()

    def fit_scale(self) -> float:
        rect = self.scene().sceneRect()
        vp = self.viewport().rect()
        if rect.isEmpty() or vp.isEmpty():
            return 1.0
        return min(vp.width() / rect.width(), vp.height() / rect.height())

    # ---- document signals --------------------------------------------------------------------
    def _on_graph_replaced(self) -> None:
        self.mode = "model"
        self._highlights.clear()
        self._overlay = None
        self._ghosts = (set(), set())
        self.show_model()

    def _on_graph_changed(self) -> None:
        if self.mode != "model" or self.document.graph is None:
            self._model_cache = None
            return
        self._layout_and_show(self.model_view(self.document.graph), {"keep": self._view_anchor()})

    def _on_document_selection(self, ids: list) -> None:
        if self.mode == "model" and not self._syncing and set(ids) != set(self.selected_ids()):
            self.select(ids, center=len(ids) == 1 and not self._visible(ids[0]))

    def _on_tensor_selected(self, name: str) -> None:
        """Highlight a picked tensor's producer and consumers (and its edges)."""
        if not name or self.view is None:
            self.clear_highlight("tensor")
            self._apply_highlights()
            return
        ids = set()
        for n in self.view.nodes:
            d = n.data
            if d.get("tensor") == name or name in d.get("badge_tensors", ()) or name in d.get("inputs", ()) or name in d.get("outputs", ()):
                ids.add(n.id)
        self.set_highlight("tensor", ids, HIGHLIGHT_COLORS["tensor"])

    # ---- layout and scene building ------------------------------------------------------------
    def _layout_and_show(self, view: ViewGraph, state: dict) -> None:
        if self._job is not None:
            self._job.cancel()
            self._job.done.disconnect()
        measure = self.measure
        t0 = time.perf_counter()

        def work(job: Job):
            gc.disable()  # see MainWindow.open_model: GC passes over big heaps stall the UI thread
            try:
                sizes = {n.id: node_size(n, measure) for n in view.nodes}
                job.check()
                result = layout(view, sizes, cancel=job.is_cancelled, progress=lambda f: job.report(0.9 * f, "Laying out the graph"))
                return result, prepare_display(view, result, job)
            finally:
                gc.enable()

        job = Job(work, "Laying out the graph", self)
        self._job = job
        job.progressed.connect(self.progressed)
        job.done.connect(lambda res: self._layout_done(job, view, res[0], res[1], state, t0))
        job.failed.connect(lambda msg: self._job_ended(job, msg))
        job.cancelled.connect(lambda: self._job_ended(job, ""))
        job.finished.connect(job.deleteLater)
        self.busyChanged.emit(True, "Laying out the graph")
        job.start()

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

    def _display(self, view: ViewGraph, result: Layout, state: dict, extras: "DisplayExtras | None" = None) -> None:
        """Put `view` on screen in a fresh scene.

        Graphs up to OVERVIEW_ITEMS items get all their items at once. Bigger ones start empty:
        the pre-rendered overview image (made on the worker thread) draws the zoomed-out graph,
        and items are created only for the part of the scene the viewport shows (a grid of cells
        says which), so opening 10,000 nodes creates no items at all until the user zooms in.
        """
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
        self._layer = _Layer()
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
        self._apply_overlay()
        self._ensure_visible_items()
        self.minimap.rebuild()
        self.find_bar.refresh()
        self._zoomed()
        self.last_timings["items"] = time.perf_counter() - t0
        self.viewShown.emit(view)

    def _make_node(self, node_id: Hashable) -> NodeItem | None:
        item = self.node_items.get(node_id)
        if item is not None:
            return item
        box = self.layout_result.boxes.get(node_id) if self.layout_result is not None else None
        if box is None:
            return None
        node = self.view.node(node_id)
        item = (GroupItem if node.category == "group" else NodeItem)(node, box.w, box.h)
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
        self._decorate_edge(item)
        if not self._layer.visible:
            item.setVisible(False)
        self.scene().addItem(item)
        self._edge_item_of[index] = item
        self.edge_items.append(item)
        return item

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

    def _new_scene(self) -> QGraphicsScene:
        scene = QGraphicsScene(self)
        scene.setItemIndexMethod(QGraphicsScene.BspTreeIndex)
        scene.selectionChanged.connect(self._on_scene_selection)
        return scene

    def _initial_view(self) -> None:
        """Fit when the whole graph stays readable; otherwise 100 % at the graph's top."""
        if self.fit_scale() >= READABLE_SCALE:
            self.fit()
            return
        self._set_scale(1.0)
        boxes = self.layout_result.boxes if self.layout_result is not None else {}
        if boxes:
            top = min(boxes.values(), key=lambda b: (b.y, b.x))
            vp_h = self.viewport().height()
            self.centerOn(QPointF(top.x, top.y + vp_h / 2 - 60))

    def _clear(self) -> None:
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

    # ---- decorations -------------------------------------------------------------------------
    def _decorate_node(self, item: NodeItem) -> None:
        highlights = {role: color for role, (ids, color) in self._highlights.items() if item.node_id in ids}
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
        return _heat(float(v) / hi if hi > 0 else 0.0), f"{float(v):.3g}"

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

    def _apply_ghosts(self) -> None:
        self._redecorate()

    def _apply_overlay(self) -> None:
        values, legend = self._overlay if self._overlay else ({}, "")
        if values:
            values = with_group_totals(values, self.view)  # a collapsed group shows its nodes' total
            self._overlay = (values, legend)
        known = self.layout_result.boxes if self.layout_result is not None else {}
        self._overlay_max = max((float(v) for k, v in values.items() if k in known), default=0.0)
        self._redecorate()
        if values:
            hi = self._overlay_max
            self.legend.setText(f"{legend}  (max {hi:.3g})" if legend else f"max {hi:.3g}")
            self.legend.adjustSize()
            self.legend.move(10, 10)
            self.legend.show()
        else:
            self.legend.hide()

    # ---- interaction -------------------------------------------------------------------------
    def _on_scene_selection(self) -> None:
        if self._syncing:
            return
        try:
            ids = self.selected_ids()
        except RuntimeError:  # scene being torn down
            return
        self.viewSelectionChanged.emit(ids)
        if self.mode == "model":
            self._syncing = True
            try:
                self.document.set_selection(ids)
                if ids:
                    self.document.set_selected_tensor("")
            finally:
                self._syncing = False

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.LeftButton:
            item = self.itemAt(event.position().toPoint())
            if isinstance(item, EdgeItem):
                self.scene().clearSelection()
                if self.mode == "model" and item.edge.label:
                    self.document.set_selected_tensor(item.edge.label)
                event.accept()
                return
            if isinstance(item, NodeItem):
                badge = item.badge_at(item.mapFromScene(self.mapToScene(event.position().toPoint())))
                super().mousePressEvent(event)
                tensors = item.node.data.get("badge_tensors", [])
                if badge is not None and self.mode == "model" and badge < len(tensors):
                    self.document.set_selected_tensor(tensors[badge])
                return
            if item is None and self.mode == "model":
                self.document.set_selected_tensor("")
        super().mousePressEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:
        if self.overview_active():
            # the overview is a picture: double-click dives in to 100 % where the user points
            target = self.mapToScene(event.position().toPoint())
            self._set_scale(1.0)
            self.centerOn(target)
            event.accept()
            return
        item = self.itemAt(event.position().toPoint())
        if isinstance(item, NodeItem):
            self.nodeActivated.emit(item.node_id)
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def keyPressEvent(self, event) -> None:
        if event.key() in (Qt.Key_Return, Qt.Key_Enter):
            ids = self.selected_ids()
            if ids:
                self.nodeActivated.emit(ids[0])
                return
        if event.key() == Qt.Key_Escape and self.find_bar.isVisible():
            self.find_bar.close_bar()
            return
        super().keyPressEvent(event)

    def wheelEvent(self, event) -> None:
        delta = event.angleDelta().y() or event.pixelDelta().y()
        if delta == 0:
            return
        if event.modifiers() & Qt.ShiftModifier and not event.modifiers() & Qt.ControlModifier:
            super().wheelEvent(event)  # Shift+wheel scrolls
            return
        self._set_scale(self.zoom() * (1.0015 ** delta))

    def _set_scale(self, s: float) -> None:
        s = max(MIN_SCALE, min(MAX_SCALE, s))
        cur = self.zoom()
        if cur > 0 and abs(s - cur) > 1e-9:
            self.scale(s / cur, s / cur)
        self._zoomed()

    def _zoomed(self) -> None:
        self._update_overview_mode()
        self._ensure_visible_items()
        self.zoomChanged.emit(self.zoom())
        self.minimap.update()

    def show_key(self, on: bool) -> None:
        """Show or hide the colour key (bottom left)."""
        self.key.setVisible(on)
        self._place_key()

    def _place_key(self) -> None:
        vp = self.viewport().geometry()
        # one line when it fits beside the minimap, else wrapped to the room there is
        room = vp.width() - 20  # the minimap has a strip of its own beside the viewport
        self.key.setWordWrap(False)
        self.key.adjustSize()
        if self.key.width() > room > 80:
            self.key.setWordWrap(True)
            self.key.resize(room, self.key.heightForWidth(room))
        self.key.move(vp.left() + 10, vp.bottom() - self.key.height() - 10)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_key()
        self.minimap.place()
        self.find_bar.place()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.minimap.place()
        self.find_bar.place()


class _Layer:
    """All node and edge items as one switch: hidden while the overview image stands in for
    them (kept top-level: a common parent item would defeat the scene's BSP culling)."""

    def __init__(self):
        self.visible = True
        self.canvas: GraphCanvas | None = None

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


def prepare_display(view: ViewGraph, result: Layout, job: Job | None = None) -> DisplayExtras | None:
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


def render_overview(view: ViewGraph, result: Layout, max_px: int, job: Job | None = None) -> tuple[QImage, QRectF]:
    """The whole laid-out graph as an image (boxes in category colours, edges as hairlines),
    at most `max_px` on its longest side. Safe on a worker thread; returns (image, scene rect)."""
    w, h = max(result.width, 1.0), max(result.height, 1.0)
    scale = min(max_px / w, max_px / h, 1.0)
    img = QImage(max(1, int(w * scale)), max(1, int(h * scale)), QImage.Format_ARGB32_Premultiplied)
    img.fill(QColor(0, 0, 0, 0))
    p = QPainter(img)
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
    p.end()
    return img, QRectF(0, 0, w, h)


def _heat(t: float) -> QColor:
    """Pale yellow (0) -> orange (0.5) -> red (1)."""
    t = max(0.0, min(1.0, t))
    stops = [(0.0, (255, 247, 214)), (0.5, (255, 160, 70)), (1.0, (214, 39, 40))]
    for (t0, c0), (t1, c1) in zip(stops, stops[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return QColor(*(round(a + (b - a) * f) for a, b in zip(c0, c1)))
    return QColor(*stops[-1][1])


class Minimap(QWidget):
    """The whole graph in a corner: boxes in their category colours and the visible area.

    Drawn from the layout's boxes into a cached image (no scene rendering), so it is cheap to
    rebuild for 10,000 nodes; click or drag to move the view. Hidden when everything fits.
    """

    MAX_W = 170
    MAX_H = 230

    def __init__(self, canvas: GraphCanvas):
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

        if canvas._lazy is not None:
            # huge graph: shrink the overview image instead of drawing 10,000 boxes again
            p.setRenderHint(QPainter.SmoothPixmapTransform, True)
            r = canvas._lazy.rect
            p.drawImage(QRectF(r.x() * sx + ox, r.y() * sy + oy, r.width() * sx, r.height() * sy), canvas._lazy.image_for(max(sx, sy)))
        else:
            for n in canvas.view.nodes:
                b = boxes.get(n.id)
                if b is not None:
                    mark(b, category_colors(n.category)[1])
        for _role, (ids, color) in canvas._highlights.items():
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


class FindBar(QFrame):
    """Ctrl+F: find nodes by op type, node name or tensor name; Enter = next hit, Shift+Enter = previous."""

    def __init__(self, canvas: GraphCanvas):
        super().__init__(canvas)
        self.canvas = canvas
        self.hits: list = []
        self.index = -1
        self.setObjectName("FindBar")
        self.setStyleSheet("#FindBar { background: #ffffff; border: 1px solid #b8c0c8; border-radius: 5px; }")
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 4, 4, 4)
        row.setSpacing(4)
        self.edit = QLineEdit(self)
        self.edit.setPlaceholderText("Find op type, node or tensor name…")
        self.edit.setClearButtonEnabled(True)
        self.edit.setMinimumWidth(240)
        self.count = QLabel("", self)
        self.count.setMinimumWidth(56)
        prev_btn = QToolButton(self, text="▲", toolTip="Previous hit (Shift+Enter)", autoRaise=True)
        next_btn = QToolButton(self, text="▼", toolTip="Next hit (Enter)", autoRaise=True)
        close_btn = QToolButton(self, text="✕", toolTip="Close (Esc)", autoRaise=True)
        for w in (self.edit, self.count, prev_btn, next_btn, close_btn):
            row.addWidget(w)
        self.edit.textChanged.connect(self._search)
        self.edit.returnPressed.connect(self.next_hit)
        prev_btn.clicked.connect(self.previous_hit)
        next_btn.clicked.connect(self.next_hit)
        close_btn.clicked.connect(self.close_bar)
        QShortcut(QKeySequence("Shift+Return"), self.edit, activated=self.previous_hit, context=Qt.WidgetShortcut)
        QShortcut(QKeySequence("Escape"), self.edit, activated=self.close_bar, context=Qt.WidgetShortcut)
        self.hide()

    def open(self) -> None:
        self.place()
        self.show()
        self.raise_()
        self.edit.setFocus()
        self.edit.selectAll()

    def close_bar(self) -> None:
        self.hide()
        self.canvas.clear_highlight("search")
        self.canvas.setFocus()

    def place(self) -> None:
        self.adjustSize()
        vp = self.canvas.viewport().geometry()
        self.move(vp.right() - self.width() - 12, vp.top() + 10)

    def refresh(self) -> None:
        """Re-run the search on a new view (kept open across relayouts)."""
        if self.isVisible() and self.edit.text():
            self._search(self.edit.text())

    def search(self, text: str) -> list:
        """Set the query (as if typed) and return the hits."""
        self.edit.setText(text)
        return list(self.hits)

    def _search(self, text: str) -> None:
        view = self.canvas.view
        scopes = self.canvas.scopes
        boxes = self.canvas.layout_result.boxes if self.canvas.layout_result is not None else {}
        if scopes is not None and scopes.active:  # hits inside collapsed groups count too
            self.hits = scopes.find(text)
            shown = {scopes.visible_id(h) for h in self.hits}
        else:
            self.hits = find_nodes(view, text) if view is not None else []
            self.hits = [h for h in self.hits if h in boxes]
            shown = self.hits
        self.index = -1
        self._update_count()
        if self.hits:
            self.canvas.set_highlight("search", shown, HIGHLIGHT_COLORS["search"])
        else:
            self.canvas.clear_highlight("search")

    def _update_count(self) -> None:
        if not self.edit.text():
            self.count.setText("")
        elif not self.hits:
            self.count.setText("no hits")
        else:
            self.count.setText(f"{self.index + 1 if self.index >= 0 else 0}/{len(self.hits)}")

    def _go(self, step: int) -> None:
        if not self.hits:
            return
        self.index = (self.index + step) % len(self.hits)
        node_id = self.hits[self.index]
        if self.canvas.scopes is not None and self.canvas.scopes.active:
            index = self.index
            self.canvas.scopes.reveal(node_id)  # expand to node (the new view re-runs the search)
            self.index = index
        self.canvas.select([node_id])
        self.canvas.center_on(node_id)
        self._update_count()

    def next_hit(self) -> None:
        self._go(1)

    def previous_hit(self) -> None:
        self._go(-1)
