"""Collapsible groups on the model canvas: which name scopes are open, and opening them in place.

The canvas draws whatever ViewGraph it is given; this controller decides what that is for the
model: `model_view(graph)` is the graph with its groups (core.views.scopes) collapsed or expanded
as the user left them, big graphs starting collapsed. Double-click or Enter on a group box, or
'+', expands it; '-' collapses the group around the selection; View ▸ Expand / Collapse All.
Expanding lays out only the opened group and moves its neighbours (core.views.scope_layout), so
the rest of the graph stays where the user was looking; collapsing again brings back the layout
the user had before. Search (Ctrl+F) finds nodes inside collapsed groups too, and going to such
a hit expands the groups around it.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Hashable

from PySide6.QtCore import QObject, QPointF, Qt
from PySide6.QtGui import QAction, QKeySequence

from core.views.quantized import fold_quantized
from core.views.scope_layout import relayout
from core.views.scopes import ScopeTree, is_scope_id, scope_tree, scoped_view
from core.views.viewgraph import ViewGraph, find_nodes, from_graph

from .graph_items import node_size

__all__ = ["ScopeController"]

logger = logging.getLogger(__name__)

FRAME_GAP = 24.0  # room above an opened group for its frame's title


class ScopeController(QObject):
    """Owns the expanded-groups state of the model canvas (one per main window)."""

    def __init__(self, canvas):
        super().__init__(canvas)
        self.canvas = canvas
        self.expanded: set[str] = set()
        self.last_seconds = 0.0  # how long the last expand/collapse took (view + layout + scene)
        self._key: tuple | None = None  # (id(graph), revision) of the cached tree
        self._full: ViewGraph | None = None
        self._tree: ScopeTree | None = None
        self._graph_id: int | None = None  # the graph `expanded` belongs to
        self._layouts: dict[frozenset, tuple] = {}  # expanded set -> (view, layout), this revision
        self.fold_quantized = True  # a QDQ model's ops drawn with their Q/DQ nodes inside (core.views.quantized)
        canvas.scopes = self
        canvas.model_view = self.model_view
        canvas.nodeActivated.connect(self._activated)
        canvas.viewShown.connect(lambda _v: self._draw_frames())
        canvas.viewShown.connect(lambda _v: self._draw_stub_labels())
        self.frames: list = []
        self.stub_labels: list = []

    # ---- building the model view --------------------------------------------------------------
    def tree(self, graph) -> tuple[ViewGraph, ScopeTree]:
        """The full view and scope tree of `graph` at its current revision (cached)."""
        key = (id(graph), graph.revision, self.fold_quantized)
        if self._key != key or self._tree is None:
            full = from_graph(graph)
            if self.fold_quantized:
                full = fold_quantized(full)
            self._full, self._tree, self._key = full, scope_tree(full, graph), key
            self._layouts = {}
        return self._full, self._tree

    def adopt(self, graph, opened) -> ViewGraph:
        """Take over the view, groups and open groups made for `graph` from its protobuf while it
        loaded (core.views.scope_preview.OpenView), as `tree` and `model_view` would have made
        them; returns the view drawn. Called on the load's worker, before the UI sees `graph`."""
        opened.tree.graph = graph
        self._full, self._tree, self._key = opened.full, opened.tree, (id(graph), graph.revision, opened.fold)
        self._layouts = {}
        self._graph_id = id(graph)
        self.expanded = set(opened.expanded)
        return opened.view

    def model_view(self, graph) -> ViewGraph:
        """What the canvas shows for `graph` (called on worker threads too: it only reads)."""
        full, tree = self.tree(graph)
        if self._graph_id != id(graph):
            self._graph_id = id(graph)
            self.expanded = tree.default_expanded(len(full.nodes))
        if not tree.root.children:  # no groups (tree.groups would list them all)
            return full
        self.expanded &= set(tree.by_path)
        return scoped_view(full, tree, self.expanded)

    @property
    def paths(self) -> set[str]:
        """Paths of the current model's groups."""
        return set(self._tree.by_path) - {""} if self._tree is not None else set()

    @property
    def full_view(self) -> ViewGraph | None:
        """The model's view with every node (what search looks through)."""
        return self._full

    @property
    def active(self) -> bool:
        return self.canvas.mode == "model" and self._tree is not None and bool(self._tree.root.children) and self.canvas.document.graph is not None

    # ---- expand / collapse --------------------------------------------------------------------
    def expand(self, path: str) -> None:
        tree = self._tree
        if tree is None or path not in tree.by_path:
            return
        scope = tree.by_path[path]
        self.set_expanded(self.expanded | {path} | {a.path for a in scope.ancestors()})

    def collapse(self, path: str) -> None:
        tree = self._tree
        if tree is None or path not in tree.by_path:
            return
        below = {s.path for s in tree.by_path[path].walk()}
        self.set_expanded(self.expanded - below)

    def expand_all(self) -> None:
        if self._tree is not None:
            self.set_expanded({s.path for s in self._tree.groups}, full_layout=True)

    def collapse_all(self) -> None:
        if self._tree is not None:
            self.set_expanded(set(), full_layout=True)

    def reveal(self, node_id: Hashable) -> None:
        """Expand the groups around `node_id` so it is drawn (expand to node)."""
        if self._tree is None:
            return
        paths = self._tree.path_to(node_id)
        if any(p not in self.expanded for p in paths):
            self.set_expanded(self.expanded | set(paths))

    def visible_id(self, node_id: Hashable) -> Hashable:
        return self._tree.visible_id(node_id, self.expanded) if self._tree is not None else node_id

    def find(self, text: str) -> list:
        """Search hits in the whole model (inside collapsed groups too), in view order."""
        if self._full is None:
            return []
        return find_nodes(self._full, text)

    def set_expanded(self, expanded: set[str], full_layout: bool = False) -> None:
        """Show the model with exactly `expanded` groups open: laid out in place from the current
        picture (or the layout this set had before); `full_layout` lays everything out anew."""
        canvas = self.canvas
        graph = canvas.document.graph
        if graph is None or canvas.layout_result is None or canvas.view is None:
            return
        t0 = time.perf_counter()
        full, tree = self.tree(graph)
        old_view, old_layout = canvas.view, canvas.layout_result
        self._layouts.setdefault(frozenset(self.expanded), (old_view, old_layout))
        self.expanded = set(expanded)
        cached = self._layouts.get(frozenset(self.expanded))
        if cached is not None:
            view, result = cached
        else:
            view = scoped_view(full, tree, self.expanded)
            if full_layout:
                canvas.show_model(fit=True)
                self.last_seconds = time.perf_counter() - t0
                return
            sizes = {n.id: node_size(n, canvas.measure) for n in view.nodes if n.id not in old_layout.boxes}
            grows = len(view.nodes) >= len(old_view.nodes)
            result = relayout(old_view, old_layout, view, sizes, gap=FRAME_GAP if grows else -FRAME_GAP)
            self._layouts[frozenset(self.expanded)] = (view, result)
        canvas.show_model_layout(view, result, self._anchor(old_layout, result))
        self.last_seconds = time.perf_counter() - t0

    def _anchor(self, old, new):
        """A node the relayout did not move (it moves only what is below or beside the opened
        group), nearest the viewport centre, and its offset there: what keeps the picture still."""
        canvas = self.canvas
        center = canvas.mapToScene(canvas.viewport().rect().center())
        shared = [i for i in old.boxes if i in new.boxes]
        if not shared:
            return None
        top = min(shared, key=lambda i: old.boxes[i].y)  # above everything: moved only if all did
        still = (round(new.boxes[top].x - old.boxes[top].x, 3), round(new.boxes[top].y - old.boxes[top].y, 3))
        best = None
        for nid in shared:
            b, nb = old.boxes[nid], new.boxes[nid]
            if (round(nb.x - b.x, 3), round(nb.y - b.y, 3)) != still:
                continue
            d = (b.x - center.x()) ** 2 + (b.y - center.y()) ** 2
            if best is None or d < best[0]:
                best = (d, nid, QPointF(b.x, b.y) - center)
        return None if best is None else (best[1], best[2])

    def _draw_frames(self) -> None:
        """A frame around each expanded group's drawn nodes (titled with its path)."""
        from .scope_items import ScopeFrame

        self.frames = []
        canvas = self.canvas
        if not self.active or not self.expanded or canvas.layout_result is None:
            return
        boxes = canvas.layout_result.boxes
        tree = self._tree
        root = tree.root
        # The drawn boxes' extent per innermost group holding them (a node's scope, a collapsed
        # box's parent), then each extent added to the open groups around it: one pass over the
        # boxes and one walk up per group (with every group of a 10,000-node model open, walking
        # up from each box took ~0.3 s of the UI thread).
        held: dict[int, list] = {}  # id(scope) -> [scope, x0, y0, x1, y1]
        by_path, scope_of = tree.by_path, tree.scope_of
        for nid, b in boxes.items():
            if is_scope_id(nid):
                s = by_path.get(nid[len("scope:"):])
                s = s.parent if s is not None else None
            else:
                s = scope_of.get(nid)
            if s is None or s is root:
                continue
            x0, y0, x1, y1 = b.x - b.w / 2, b.y - b.h / 2, b.x + b.w / 2, b.y + b.h / 2
            e = held.get(id(s))
            if e is None:
                held[id(s)] = [s, x0, y0, x1, y1]
            else:
                e[1], e[2], e[3], e[4] = min(e[1], x0), min(e[2], y0), max(e[3], x1), max(e[4], y1)
        extent: dict[str, list[float]] = {}
        for s, x0, y0, x1, y1 in held.values():
            chain = []
            while s is not None and s is not root:
                chain.append(s.path)
                s = s.parent
            for p in reversed(chain):  # outermost first; stop at the first closed group
                if p not in self.expanded:
                    break
                e = extent.get(p)
                if e is None:
                    extent[p] = [x0, y0, x1, y1]
                else:
                    e[0], e[1], e[2], e[3] = min(e[0], x0), min(e[1], y0), max(e[2], x1), max(e[3], y1)
        from PySide6.QtCore import QRectF

        scene = canvas.scene()
        # an enclosing frame pads more than the open groups inside it, so nested titles stay apart
        height: dict[str, int] = {}
        for p in sorted(extent, key=lambda q: -q.count("/")):
            s = tree.by_path.get(p)
            inner = [height.get(c.path, -1) for c in s.children if c.path in extent] if s is not None else []
            height[p] = 1 + max(inner, default=-1)
        for p, (x0, y0, x1, y1) in extent.items():
            depth = p.count("/")
            pad = 6.0 + 10.0 * height[p]
            frame = ScopeFrame(p, QRectF(x0 - pad, y0 - pad - ScopeFrame.TITLE_H, x1 - x0 + 2 * pad, y1 - y0 + 2 * pad + ScopeFrame.TITLE_H), depth, self.collapse)
            scene.addItem(frame)
            self.frames.append(frame)

    def _draw_stub_labels(self) -> None:
        """Name the source at the top of each stub edge (a tensor that feeds every layer of a
        stack: core.views.scope_stacks), left of the stub, so it reads 'attention_mask ↓'."""
        from PySide6.QtGui import QColor, QFont
        from PySide6.QtWidgets import QGraphicsSimpleTextItem

        self.stub_labels = []
        canvas = self.canvas
        view, result = canvas.view, canvas.layout_result
        if canvas.mode != "model" or view is None or result is None:
            return
        font = QFont(canvas.font())
        font.setPointSizeF(7.0)
        scene = canvas.scene()
        for e, route in zip(view.edges, result.routes):
            if not e.data.get("stub") or not route:
                continue
            x, y = route[0]
            item = QGraphicsSimpleTextItem(e.data.get("stub_label") or str(e.src))
            item.setFont(font)
            item.setBrush(QColor("#5b6b7d"))
            r = item.boundingRect()
            item.setPos(x - r.width() - 3, y - r.height() / 2 + 4)
            item.setToolTip(f"{e.label}: {e.detail}\nfeeds every layer of the stack; drawn as a short stub")
            item.setZValue(-1)
            scene.addItem(item)
            self.stub_labels.append(item)

    # ---- input -------------------------------------------------------------------------------
    def _activated(self, node_id: Hashable) -> None:
        if self.active and is_scope_id(node_id):
            self.expand(node_id[len("scope:"):])

    def expand_selected(self) -> None:
        for nid in self.canvas.selected_ids():
            if is_scope_id(nid):
                self.expand(nid[len("scope:"):])
                return

    def collapse_selected(self) -> None:
        """Collapse the innermost open group around the selected node (or box)."""
        if self._tree is None:
            return
        for nid in self.canvas.selected_ids():
            paths = [p for p in self._tree.path_to(nid) if p in self.expanded]
            if paths:
                self.collapse(paths[-1])
                self.canvas.select([f"scope:{paths[-1]}"])
                return

    def install_actions(self, window) -> None:
        """Keys on the canvas (+ expand, - collapse) and View ▸ Groups."""
        def action(text, slot, shortcut=None, tip=""):
            act = QAction(text, window)
            if shortcut:
                act.setShortcut(QKeySequence(shortcut))
                act.setShortcutContext(Qt.WidgetWithChildrenShortcut)
                self.canvas.addAction(act)
            act.setStatusTip(tip)
            act.triggered.connect(lambda _checked=False: slot())
            return act

        menu = getattr(window, "view_menu", None)
        acts = [
            action("E&xpand Group", self.expand_selected, "+", "Open the selected group (also double-click or Enter)"),
            action("&Collapse Group", self.collapse_selected, "-", "Close the group around the selection"),
            action("Expand &All Groups", self.expand_all, None, "Show every node"),
            action("Collapse All &Groups", self.collapse_all, None, "One box per top-level group"),
        ]
        if menu is not None:
            sub = menu.addMenu("&Groups")
            for a in acts:
                sub.addAction(a)
            self.quantized_action = QAction("&Quantized Ops as One Box", window, checkable=True)
            self.quantized_action.setStatusTip("Draw each QDQ-quantized op with its QuantizeLinear / DequantizeLinear nodes inside its box;"
                                               " off: every Q/DQ node as a box of its own")
            settings = getattr(window, "settings", None)
            on = settings.value("view/foldQuantized", True) if settings is not None else True
            self.quantized_action.setChecked(on in (True, "true", "1", 1))
            self.fold_quantized = self.quantized_action.isChecked()
            self.quantized_action.toggled.connect(lambda on: self.set_fold_quantized(on, settings))
            menu.addAction(self.quantized_action)

    def set_fold_quantized(self, on: bool, settings=None) -> None:
        """Draw QDQ ops as one box (on) or every Q/DQ node as its own; the model is drawn again."""
        if settings is not None:
            settings.setValue("view/foldQuantized", on)
        if on == self.fold_quantized:
            return
        self.fold_quantized = on
        self.canvas.forget_model_layout()
        if self.canvas.mode == "model" and self.canvas.document.graph is not None:
            self.canvas.show_model(fit=False)
