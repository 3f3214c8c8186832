"""GraphCanvas: the QGraphicsView that draws any ViewGraph, its public API and its interaction.

Scene building lives in app.canvas.scene, decorations in app.canvas.decorations, huge-graph
overview in app.canvas.overview, the minimap and find bar in their own modules.
"""
from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QFrame, QGraphicsView, QLabel, QWidget

from core.views.layout import Layout
from core.views.viewgraph import ViewGraph, from_graph

from app.canvas.decorations import Decorations
from app.canvas.find_bar import FindBar
from app.canvas.minimap import CORNERS, Minimap
from app.canvas.overview import DisplayExtras, ItemLayer, prepare_display
from app.canvas.scene import SceneBuilder
from app.document import Document
from app.graph_items import TEXT_LOD, EdgeItem, NodeItem, title_zoom
from app.style import CATEGORY_COLORS, HIGHLIGHT_COLORS, TextMeasure
from app.workers import Job

__all__ = ["GraphCanvas", "MIN_SCALE", "MAX_SCALE", "FIT_MIN_SCALE"]

logger = logging.getLogger(__name__)

MIN_SCALE = 0.002
MAX_SCALE = 4.0
EMPTY_MESSAGE = "No model open.\nFile ▸ Open (Ctrl+O), Open Recent, or drop an .onnx file here."
FIT_MIN_SCALE = 0.3  # Fit goes no smaller (more when titles need it: GraphCanvas.readable_zoom)


class GraphCanvas(SceneBuilder, Decorations, QGraphicsView):
    nodeActivated = Signal(object)
    tensorActivated = Signal(str)  # double-click on a weight badge (the Inspector opens its values)
    viewSelectionChanged = Signal(list)
    viewShown = Signal(object)
    previewShown = Signal(object)  # a loading model's first picture is on screen (show_preview)
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
        self._init_decorations()
        self._job: Job | None = None
        self._syncing = False
        self._pending_state: dict = {}
        self.last_timings: dict[str, float] = {}
        self._layer: ItemLayer | None = None  # switch for all items (hidden while the overview image draws)
        self._lazy: DisplayExtras | None = None  # set for huge graphs: overview image + item grid
        self._created_cells: set = set()
        self._edge_item_of: dict[int, EdgeItem] = {}
        self._degree: tuple[dict, dict] = ({}, {})
        self.direction = "TB"  # "LR": graphs laid out left to right (View > Left to Right)
        self.edge_shapes = False  # View > Tensor Shapes on Edges
        self.model_view = from_graph  # graph -> what model mode draws (app.scopes: groups collapsed)
        self.scopes = None  # app.scopes.ScopeController, when installed
        self.empty_message = EMPTY_MESSAGE  # drawn on an empty canvas (set_empty_message)
        self._readable: tuple | None = None  # ((id(view), id(layout)), readable_zoom)
        self._minimap_bound: tuple[int, int] | None = None  # the minimap's size limit it was built for
        self._refit = None  # fit / fit_all / _initial_view: what a resize redoes until the user moves the view
        self._refitting = False
        self._refit_sizes: set = set()  # viewport sizes refitted at since the last move (no ping-pong with scroll bars)

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
        self.horizontalScrollBar().actionTriggered.connect(self.keep_view)  # user actions only
        self.verticalScrollBar().actionTriggered.connect(self.keep_view)
        self.verticalScrollBar().valueChanged.connect(self.minimap.update)

        document.graphReplaced.connect(self._on_graph_replaced)
        document.graphChanged.connect(self._on_graph_changed)
        document.selectionChanged.connect(self._on_document_selection)
        document.tensorSelected.connect(self._on_tensor_selected)

    # ---- public API --------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._job is not None

    @property
    def overview(self) -> DisplayExtras | None:
        """A huge view's overview image and item grid (app.canvas.overview); None when it is drawn as items."""
        return self._lazy

    def show_view(self, view: ViewGraph, fit: bool = True) -> None:
        """Draw `view` (laid out in the background); `mode` becomes "view" until show_model()."""
        self.mode = "view"
        self._layout_and_show(view, {"fit": fit})

    def show_preview(self, view: ViewGraph, result: Layout, extras: DisplayExtras | None = None) -> None:
        """Draw a big model's view while its onnx_ir model is built (app.open_preview), placed as
        the model's own view will be: to look at, not to work on (no selection, overlay or
        activation; `mode` is "preview") until the loaded model's view replaces it (or
        show_model() brings back the one before)."""
        self.mode = "preview"
        self._display(view, result, {"fit": False, "initial": True}, extras)

    def show_model(self, fit: bool = False, keep: bool = False) -> None:
        """Show the document's ONNX graph again (cached layout when the graph has not changed).
        `keep`: at the present zoom, around the node now nearest the centre (leaving a rewrite
        preview, whose nodes are mostly the model's)."""
        anchor = self._view_anchor() if keep and self.view is not None else None
        self.mode = "model"
        graph = self.document.graph
        if graph is None:
            self._clear()
            return
        cache = self._model_cache
        state = {"keep": anchor} if anchor is not None else {"fit": fit, "initial": not fit}
        if cache is not None and cache[0] == id(graph) and cache[1] == graph.revision:
            self._display(cache[2], cache[3], state, cache[4])
        else:
            self._layout_and_show(self.model_view(graph), state)

    def forget_model_layout(self) -> None:
        """The model's next show lays it out anew (how it is drawn changed: View ▸ Quantized Ops)."""
        self._model_cache = None

    def prime_model_layout(self, graph, view: ViewGraph, result: Layout, extras: DisplayExtras | None = None) -> None:
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
        self.keep_view()
        if self.zoom() < 0.6:
            self._set_scale(1.0)
        self.centerOn(QPointF(box.x, box.y))

    def zoom(self) -> float:
        return self.transform().m11()

    def zoom_by(self, factor: float) -> None:
        self.keep_view()
        self._set_scale(self.zoom() * factor)

    def set_zoom(self, scale: float) -> None:
        """Show the graph at `scale` (1.0 = 100 %, clamped to MIN_SCALE..MAX_SCALE), as another view's."""
        self.keep_view()
        self._set_scale(scale)

    def keep_view(self, *_args) -> None:
        """The user moved the view (scroll, zoom, drag, the minimap): a resize keeps it as it is
        instead of fitting the graph again, as it does after Fit and on opening (the docks
        settling after a model opens used to push the start of a fitted graph off the canvas)."""
        self._refit = None
        self._refit_sizes = set()

    def zoom_100(self) -> None:
        self.keep_view()
        center = self.mapToScene(self.viewport().rect().center())
        self._set_scale(1.0)
        self.centerOn(center)

    def readable_zoom(self) -> float:
        """The zoom from which every box's title reads whole (FIT_MIN_SCALE..TEXT_LOD): where Fit
        stops. Zoomed out, a box shows its title enlarged to stay readable, elided to the box
        (app.graph_items.title_zoom); a long op name in a narrow box needs a larger zoom."""
        if self.view is None or self.layout_result is None:
            return FIT_MIN_SCALE
        key = (id(self.view), id(self.layout_result))
        if self._readable is None or self._readable[0] != key:
            boxes = self.layout_result.boxes
            need: dict[tuple[str, float], float] = {}  # memoised: big graphs repeat a few labels
            for n in self.view.nodes:
                b = boxes.get(n.id)
                if b is not None and (n.label, b.w) not in need:
                    need[(n.label, b.w)] = title_zoom(n.label, b.w)
            zoom = min(TEXT_LOD, max([FIT_MIN_SCALE, *need.values()]))
            self._readable = (key, zoom)
        return self._readable[1]

    def fit(self) -> None:
        """Fit the graph to the canvas, but never below `readable_zoom()`, where box titles start
        to be cut: a graph too big for that is shown from where it starts (its top, or its left
        end when laid out left to right), zoomed in past the readable zoom by as much as it is
        too long (twice too long: twice the readable zoom), up to 100 % and as far as its
        breadth fits; the minimap goes in a corner where it covers no box (the breadth narrowed
        to make room when no corner is free). `fit_all` shows everything whatever the scale."""
        rect = self.scene().sceneRect()
        vp = self.viewport().rect()
        if rect.isEmpty() or vp.isEmpty():
            return
        readable = self.readable_zoom()
        self.setAlignment(Qt.AlignCenter)
        if self.fit_scale() >= readable:
            self.fit_all()
            self._refit = self.fit
            return
        lr = self.direction == "LR"
        across = vp.height() / rect.height() if lr else vp.width() / rect.width()
        # past the readable zoom by as much as the graph is too long for it (one just too long
        # stays nearly whole), up to 100 % and the canvas's breadth
        scale = max(readable, min(1.0, across, readable * readable / self.fit_scale()))
        self._fit_start(scale, across >= scale)
        if self.minimap.wanted() and self._place_minimap() > 0:
            # every corner covers a box: leave a strip beside the graph's breadth for the map
            mm = self.minimap
            room = (vp.height() - mm.height() - 2 * mm.MARGIN) / rect.height() if lr else (vp.width() - mm.width() - 2 * mm.MARGIN) / rect.width()
            if room >= readable:
                # the graph's breadth now leaves a strip free: put the graph against the other side
                self.setAlignment(Qt.AlignTop | Qt.AlignHCenter if lr else Qt.AlignLeft | Qt.AlignVCenter)
                self._fit_start(min(scale, room), True)
                self._place_minimap()
        self._zoomed()
        self._refit = self.fit

    def _fit_start(self, scale: float, whole_breadth: bool) -> None:
        """Show the graph at `scale` from where it starts, across its breadth centred (or from
        its edge when it does not fit)."""
        rect = self.scene().sceneRect()
        vp = self.viewport().rect()
        self._set_scale(scale)
        s = self.zoom()
        boxes = self.layout_result.boxes if self.layout_result is not None else {}
        if not boxes:
            self.centerOn(rect.center())
        elif self.direction == "LR":
            first = min(boxes.values(), key=lambda b: (b.x, b.y))
            y = rect.center().y() if whole_breadth else first.y
            self.centerOn(QPointF(first.x - first.w / 2 - 20 + vp.width() / (2 * s), y))
        else:
            first = min(boxes.values(), key=lambda b: (b.y, b.x))
            x = rect.center().x() if whole_breadth else first.x
            self.centerOn(QPointF(x, first.y - first.h / 2 - 20 + vp.height() / (2 * s)))

    def boxes_on_screen(self) -> list[QRectF]:
        """The boxes in view, in the canvas's (widget) coordinates: what the minimap must not cover."""
        if self.layout_result is None:
            return []
        visible = self.mapToScene(self.viewport().rect()).boundingRect()
        s = self.zoom()
        off = self.viewport().geometry().topLeft()
        out = []
        for b in self.layout_result.boxes.values():
            r = QRectF(b.x - b.w / 2, b.y - b.h / 2, b.w, b.h)
            if r.intersects(visible):
                out.append(QRectF((r.x() - visible.x()) * s + off.x(), (r.y() - visible.y()) * s + off.y(), r.width() * s, r.height() * s))
        return out

    def _place_minimap(self) -> float:
        """Put the minimap in the corner where it covers the least of the boxes in view (none,
        usually; the first corner of CORNERS that is free, avoiding the find bar, legend and
        key); returns the area of boxes it still covers."""
        mm = self.minimap
        boxes = self.boxes_on_screen()
        taken = [w.geometry() for w in (self.find_bar, self.legend, self.key) if w.isVisible()]
        best = None
        for rank, corner in enumerate(CORNERS):
            r = QRectF(mm.rect_at(corner)).adjusted(-4, -4, 4, 4)
            covered = sum((r & b).width() * (r & b).height() for b in boxes if r.intersects(b))
            cost = (covered, any(r.intersects(QRectF(t)) for t in taken), rank)
            if best is None or cost < best[0]:
                best = (cost, corner)
        mm.corner = best[1]
        mm.place()
        return best[0][0]

    def fit_all(self) -> None:
        """The whole graph in view, however small (at most 150 %)."""
        rect = self.scene().sceneRect()
        if rect.isEmpty():
            return
        self.fitInView(rect, Qt.KeepAspectRatio)
        if self.zoom() > 1.5:
            self._set_scale(1.5)
            self.centerOn(rect.center())
        self._zoomed()
        self._refit = self.fit_all

    def set_direction(self, direction: str) -> None:
        """Lay graphs out top to bottom ("TB") or left to right ("LR"); the shown graph is laid out again."""
        if direction == self.direction:
            return
        self.direction = direction
        self._model_cache = None
        if self.view is not None:
            self._layout_and_show(self.view, {"fit": True})

    def set_empty_message(self, text: str | None = None) -> None:
        """What an empty canvas says (None: the default hint); e.g. why the last open failed."""
        self.empty_message = text or EMPTY_MESSAGE
        self.viewport().update()

    def set_edge_shapes(self, on: bool) -> None:
        """Tensor shapes on every edge (on demand: at 100 % they crowd a dense graph)."""
        self.edge_shapes = on
        for e in self.edge_items:
            e.always_label = on
            e.update()

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
        self.keep_view()  # a click may start dragging the view
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
        if isinstance(item, NodeItem) and self.mode != "preview":
            badge = item.badge_at(item.mapFromScene(self.mapToScene(event.position().toPoint())))
            tensors = item.node.data.get("badge_tensors", [])
            if badge is not None and self.mode == "model" and badge < len(tensors):
                self.tensorActivated.emit(tensors[badge])
            else:
                self.nodeActivated.emit(item.node_id)
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def keyPressEvent(self, event) -> None:
        self.keep_view()
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and self.mode != "preview":
            ids = self.selected_ids()
            if ids:
                self.nodeActivated.emit(ids[0])
                return
        if event.key() == Qt.Key_Escape and self.find_bar.isVisible():
            self.find_bar.close_bar()
            return
        super().keyPressEvent(event)

    def wheelEvent(self, event) -> None:
        self.keep_view()
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
        # one line when it fits beside the minimap (a bottom corner's), else wrapped to the room there is
        mm = self.minimap
        room = vp.width() - 20 - (mm.width() + mm.MARGIN if mm.isVisible() and mm.corner.startswith("bottom") else 0)
        self.key.setWordWrap(False)
        self.key.adjustSize()
        if self.key.width() > room > 80:
            self.key.setWordWrap(True)
            self.key.resize(room, self.key.heightForWidth(room))
        self.key.move(vp.left() + 10, vp.bottom() - self.key.height() - 10)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.minimap.image is not None and self.minimap.bound() != self._minimap_bound:
            self._minimap_bound = self.minimap.bound()
            self.minimap.rebuild()  # its size follows the viewport's (at most MAX_SHARE of it)
        self.minimap.place()
        self._place_key()
        size = self.viewport().size().toTuple()
        if self._refit is not None and not self._refitting and self.view is not None and size not in self._refit_sizes:
            self._refit_sizes.add(size)
            self._refitting = True  # a fit that brings scroll bars resizes the viewport again
            try:
                self._refit()
            finally:
                self._refitting = False
        self.find_bar.place()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.minimap.place()
        self.find_bar.place()
