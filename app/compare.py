"""Two graphs side by side, in step, with their differences marked.

A Compare window holds two canvases under two lines: the node counts, and the model-level
differences (opsets, IR version, producer, metadata, graph inputs and outputs; core.views.model_diff).
Nodes are matched by name, then by structure (core.views.diff); what only the left graph has is
drawn faded with a red dashed border, what only the right one has with a green dashed border,
matched nodes that changed (attributes, shapes, dtypes, wiring) get an orange ring, and a collapsed
group holding any of these gets the same ring. Zoomed out, these marks are rings of a fixed
on-screen size (GraphCanvas.paint_marks). Escape closes the window; it opens no larger than the
screen it is on has room for.
Zoom, pan, selection and opening groups follow from one side to the other: panning keeps the node
nearest the centre of one side at the centre of the other (the two layouts differ, so scrollbar
positions would not line up).

Uses: the model before and after its rewrites (File ▸ Compare with Saved Version), two models on
disk (File ▸ Compare with Model on Disk…), two lowering stages (`compare_views`).
"""
from __future__ import annotations

import html
import logging
import time
from collections.abc import Hashable
from pathlib import Path

from PySide6.QtCore import QPointF, QRect, Qt, QTimer
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import QLabel, QMainWindow, QSplitter, QVBoxLayout, QWidget

from core.views.diff import GraphDiff, diff_graphs, diff_views
from core.views.scopes import is_scope_id

from .canvas import GraphCanvas
from .document import Document
from .graph_items import GHOST_COLORS
from .scopes import ScopeController

__all__ = ["CompareWindow", "CHANGED_COLOR"]

logger = logging.getLogger(__name__)

CHANGED_COLOR = "#f08c00"
PREFERRED_SIZE = (1500, 900)
SCREEN_MARGIN = 24  # kept free around the window, and room for its title bar above
TITLE_BAR = 32
MODEL_LINE_ITEMS = 6  # model-level differences spelt out in the line; the rest in its tooltip


class _Side:
    def __init__(self, parent: QWidget, title: str):
        self.document = Document(parent)
        self.canvas = GraphCanvas(self.document, parent)
        self.canvas.ring_roles = {"changed"}
        self.scopes = ScopeController(self.canvas)
        self.title = QLabel(title, parent)
        self.title.setStyleSheet("QLabel { font-weight: bold; padding: 4px 8px; }")
        self.box = QWidget(parent)
        lay = QVBoxLayout(self.box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.title)
        lay.addWidget(self.canvas)
        self.only: set = set()  # ids only this side has (removed on the left, added on the right)
        self.changed: set = set()
        self.to_other: dict = {}  # node id -> matched id on the other side


class CompareWindow(QMainWindow):
    """Side-by-side comparison of two graphs (ONNX models, or any two ViewGraphs)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setAttribute(Qt.WA_DeleteOnClose, True)
        self.setWindowTitle("Compare")
        self.diff: GraphDiff | None = None
        self.timings: dict[str, float] = {}
        self.left = _Side(self, "A")
        self.right = _Side(self, "B")
        split = QSplitter(Qt.Horizontal, self)
        split.addWidget(self.left.box)
        split.addWidget(self.right.box)
        split.setSizes([750, 750])
        self.summary = QLabel("", self)
        self.summary.setStyleSheet("QLabel { padding: 4px 8px; }")
        self.model_line = QLabel("", self)  # the model-level differences (ONNX models only)
        self.model_line.setStyleSheet("QLabel { padding: 0px 8px 4px 8px; }")
        self.model_line.setWordWrap(True)
        self.model_line.hide()
        central = QWidget(self)
        lay = QVBoxLayout(central)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        lay.addWidget(self.summary)
        lay.addWidget(self.model_line)
        lay.addWidget(split, 1)
        self.setCentralWidget(central)
        self._syncing = False
        for a, b in ((self.left, self.right), (self.right, self.left)):
            a.canvas.zoomChanged.connect(lambda z, a=a, b=b: self._sync_zoom(a, b))
            a.canvas.horizontalScrollBar().valueChanged.connect(lambda _v, a=a, b=b: self._sync_pan(a, b))
            a.canvas.verticalScrollBar().valueChanged.connect(lambda _v, a=a, b=b: self._sync_pan(a, b))
            a.canvas.viewSelectionChanged.connect(lambda ids, a=a, b=b: self._sync_selection(a, b, ids))
            a.canvas.viewShown.connect(lambda _v, a=a, b=b: self._shown(a, b))
        self._add_export_menu()
        self.fit_to_screen()

    def _add_export_menu(self) -> None:
        """File ▸ Export Image…: both sides in one PNG or SVG, side by side under their titles."""
        from PySide6.QtGui import QAction, QKeySequence

        from .export_image import ask_and_export

        menu = self.menuBar().addMenu("&File")
        self.export_action = QAction("&Export Image…", self)
        self.export_action.setShortcut(QKeySequence("Ctrl+Shift+E"))
        self.export_action.setStatusTip("Both graphs, side by side with their marks, as a PNG or SVG file")
        self.export_action.triggered.connect(lambda: ask_and_export(self.parentWidget(), self, self.export_parts, "compare.png"))
        menu.addAction(self.export_action)
        menu.addAction("&Close", self.close, QKeySequence.Close)

    def export_parts(self) -> list:
        """What Export Image draws: each side's whole graph under its title (app.export_image)."""
        from .export_image import scene_part

        return [scene_part(s.canvas, title=s.title.text()) for s in self.sides]

    def fit_to_screen(self, available: QRect | None = None) -> None:
        """PREFERRED_SIZE, or less where the screen's available area (the parent's screen, else the
        primary one) is smaller, with its title bar, centred in that area."""
        if available is None:
            parent = self.parentWidget()
            screen = (parent.screen() if parent is not None else None) or QGuiApplication.primaryScreen()
            if screen is None:
                self.resize(*PREFERRED_SIZE)
                return
            available = screen.availableGeometry()
        w = max(320, min(PREFERRED_SIZE[0], available.width() - 2 * SCREEN_MARGIN))
        h = max(240, min(PREFERRED_SIZE[1], available.height() - 2 * SCREEN_MARGIN - TITLE_BAR))
        self.resize(w, h)
        # centred: the TITLE_BAR left over splits above and below, so a frame placed at this point fits too
        self.move(available.x() + (available.width() - w) // 2, available.y() + (available.height() - h) // 2)

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key_Escape:  # reaches here when the focused canvas has no use for it (find bar closed)
            self.close()
            return
        super().keyPressEvent(event)

    @property
    def sides(self) -> tuple[_Side, _Side]:
        return self.left, self.right

    # ---- what to compare ---------------------------------------------------------------------
    def compare_graphs(self, a, b, title_a: str, title_b: str) -> GraphDiff:
        """Two ONNX Graphs (copies are shown; the originals are not touched)."""
        t = time.perf_counter()
        self.diff = diff_graphs(a, b)
        self.timings = {"diff": time.perf_counter() - t}
        self._set_titles(title_a, title_b)
        self._set_model_line()
        self._prepare_marks()
        t = time.perf_counter()
        self.left.document.set_graph(a.clone(), a.path)
        self.right.document.set_graph(b.clone(), b.path)
        self.timings["views"] = time.perf_counter() - t  # copies, views, scope trees; layouts run on
        return self.diff

    def compare_views(self, a, b, title_a: str, title_b: str) -> GraphDiff:
        """Two ViewGraphs, e.g. two lowering stages."""
        self.diff = diff_views(a, b)
        self._set_titles(title_a, title_b)
        self._prepare_marks()
        self.left.canvas.show_view(a)
        self.right.canvas.show_view(b)
        return self.diff

    def _set_titles(self, title_a: str, title_b: str) -> None:
        d = self.diff
        self.left.title.setText(f"A  {title_a}")
        self.right.title.setText(f"B  {title_b}")
        self.setWindowTitle(f"Compare — {title_a}  ↔  {title_b}")
        self.summary.setText(
            f"{len(d.matched)} nodes matched ({d.by.get('name', 0)} by name, {d.by.get('structure', 0)} by structure) · "
            f"<span style='color:{CHANGED_COLOR}'>{len(d.changed)} changed</span> · "
            f"<span style='color:{GHOST_COLORS['removed']}'>{len(d.removed)} only in A</span> · "
            f"<span style='color:{GHOST_COLORS['added']}'>{len(d.added)} only in B</span>"
        )

    def _set_model_line(self) -> None:
        """Model-level differences (opset, IR version, producer, metadata, inputs and outputs), or
        that there are none: nodes alike can still behave differently under another opset."""
        changes = self.diff.model
        if not changes:
            text, tip = "Model: same opsets, IR version, producer, metadata, inputs and outputs", ""
        else:
            shown = [html.escape(c.text) for c in changes[:MODEL_LINE_ITEMS]]
            more = len(changes) - len(shown)
            text = (f"<b style='color:{CHANGED_COLOR}'>Model: {len(changes)} difference{'s' if len(changes) > 1 else ''}</b> — "
                    + " · ".join(shown) + (f" · … {more} more" if more else ""))
            tip = "\n".join(c.text for c in changes)
        self.model_line.setText(text)
        self.model_line.setToolTip(tip)
        self.model_line.show()

    def _prepare_marks(self) -> None:
        d = self.diff
        self.left.only, self.right.only = set(d.removed), set(d.added)
        self.right.changed = set(d.changed)
        self.left.changed = {a for a, b in d.matched.items() if b in d.changed}
        self.left.to_other = dict(d.matched)
        self.right.to_other = {b: a for a, b in d.matched.items()}

    # ---- marks -------------------------------------------------------------------------------
    def _shown(self, side: _Side, other: _Side) -> None:
        """Re-mark a side each time it draws (opening a group changes which ids are drawn)."""
        c = side.canvas
        scoped = side.scopes.active
        vis = side.scopes.visible_id if scoped else (lambda i: i)
        only = {i for i in side.only}
        boxes_marked = {vis(i) for i in side.only | side.changed if is_scope_id(vis(i))}
        removed, added = (only, set()) if side is self.left else (set(), only)
        c.set_ghosts(removed, added)
        c.set_highlight("changed", set(side.changed) | boxes_marked, QColor(CHANGED_COLOR))
        # the other side follows this side's open groups
        if scoped and other.scopes.active and other.scopes.expanded != side.scopes.expanded and not self._syncing:
            self._syncing = True
            try:
                other.scopes.set_expanded(set(side.scopes.expanded) & other.scopes.paths)
            finally:
                self._syncing = False

    # ---- following one side with the other ---------------------------------------------------
    def _sync_zoom(self, a: _Side, b: _Side) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            b.canvas.set_zoom(a.canvas.zoom())
        finally:
            self._syncing = False
        self._sync_pan(a, b)

    def _counterpart(self, a: _Side, b: _Side, node_id: Hashable) -> Hashable | None:
        if is_scope_id(node_id):
            return node_id if b.canvas.layout_result is not None and node_id in b.canvas.layout_result.boxes else None
        other = a.to_other.get(node_id)
        if other is None:
            return None
        return b.scopes.visible_id(other) if b.scopes.active else other

    def _sync_pan(self, a: _Side, b: _Side) -> None:
        if self._syncing or a.canvas.layout_result is None or b.canvas.layout_result is None:
            return
        ca = a.canvas
        center = ca.mapToScene(ca.viewport().rect().center())
        best = None
        for nid, box in ca.layout_result.boxes.items():
            d = (box.x - center.x()) ** 2 + (box.y - center.y()) ** 2
            if best is None or d < best[0]:
                cp = self._counterpart(a, b, nid)
                if cp is not None and cp in b.canvas.layout_result.boxes:
                    best = (d, nid, cp)
        if best is None:
            return
        _, nid, cp = best
        box_a = ca.layout_result.boxes[nid]
        box_b = b.canvas.layout_result.boxes[cp]
        self._syncing = True
        try:
            b.canvas.centerOn(QPointF(box_b.x, box_b.y) - (QPointF(box_a.x, box_a.y) - center))
        finally:
            self._syncing = False

    def _sync_selection(self, a: _Side, b: _Side, ids: list) -> None:
        if self._syncing:
            return
        mapped = [m for m in (self._counterpart(a, b, i) for i in ids) if m is not None]
        self._syncing = True
        try:
            b.canvas.select(mapped)
        finally:
            self._syncing = False


def open_compare(window, a, b, title_a: str, title_b: str) -> CompareWindow:
    """Open a Compare window for two Graphs next to the main window (kept alive by it)."""
    w = CompareWindow(window)
    w.setWindowFlag(Qt.Window, True)
    w.compare_graphs(a, b, title_a, title_b)
    w.show()
    QTimer.singleShot(0, w.raise_)
    return w


def install_actions(window) -> None:
    """File ▸ Compare with Saved Version / Compare with Model on Disk…"""
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    from core import load_model
    from core.errors import WorkbenchError

    def current():
        g = window.document.graph
        if g is None:
            QMessageBox.warning(window, "Compare", "Open a model first.")
        return g

    def with_saved():
        g = current()
        if g is None:
            return
        path = window.document.path
        if path is None or not Path(path).exists():
            QMessageBox.warning(window, "Compare", "The model has no file on disk to compare with.")
            return
        try:
            saved = load_model(path)
        except WorkbenchError as e:
            QMessageBox.warning(window, "Compare", str(e))
            return
        open_compare(window, saved, g, f"{Path(path).name} (on disk)", f"{Path(path).name} (open, with edits)")

    def with_file():
        g = current()
        if g is None:
            return
        start = str(window.document.path.parent) if window.document.path else ""
        path, _ = QFileDialog.getOpenFileName(window, "Compare with model", start, "ONNX models (*.onnx);;All files (*)")
        if not path:
            return
        try:
            other = load_model(path)
        except WorkbenchError as e:
            QMessageBox.warning(window, "Compare", str(e))
            return
        name = Path(window.document.path).name if window.document.path else "open model"
        open_compare(window, g, other, name, Path(path).name)

    menu = window.file_menu
    first = menu.actions()[2] if len(menu.actions()) > 2 else None
    for text, slot, tip in (
        ("Compare with &Saved Version", with_saved, "The model as on disk (before its rewrites and edits) beside the open one"),
        ("Compare with Model on &Disk…", with_file, "Another ONNX model beside the open one, differences marked"),
    ):
        act = QAction(text, window)
        act.setStatusTip(tip)
        act.triggered.connect(lambda _c=False, s=slot: s())
        menu.insertAction(first, act) if first is not None else menu.addAction(act)
    window.compare_with_saved = with_saved
    window.compare_with_file = with_file
