"""The find bar (Ctrl+F): search the shown graph by op type, node or tensor name.

Hits are outlined on the canvas and listed under the search field (op type, node name and what
matched); Enter / Shift+Enter or the arrows step through them, a click on a row jumps to it.
"""
from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem, QToolButton, QVBoxLayout

from core.views.viewgraph import find_nodes

from app.style import HIGHLIGHT_COLORS

__all__ = ["FindBar"]

logger = logging.getLogger(__name__)


class FindBar(QFrame):
    """Ctrl+F: find nodes by op type, node name or tensor name; Enter = next hit, Shift+Enter = previous."""

    def __init__(self, canvas):
        super().__init__(canvas)
        self.canvas = canvas
        self.hits: list = []
        self.index = -1
        self.setObjectName("FindBar")
        self.setStyleSheet("#FindBar { background: #ffffff; border: 1px solid #b8c0c8; border-radius: 5px; }")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(6, 4, 4, 4)
        outer.setSpacing(3)
        row = QHBoxLayout()
        row.setSpacing(4)
        outer.addLayout(row)
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
        self.results = QListWidget(self)  # every hit; click one to go there
        self.results.setObjectName("FindResults")
        self.results.setUniformItemSizes(True)
        self.results.setMaximumHeight(220)
        self.results.itemClicked.connect(lambda item: self.go_to(self.results.row(item)))
        self.results.itemActivated.connect(lambda item: self.go_to(self.results.row(item)))
        self.results.hide()
        outer.addWidget(self.results)
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
        self._fill_results(text)
        if self.hits:
            self.canvas.set_highlight("search", shown, HIGHLIGHT_COLORS["search"])
        else:
            self.canvas.clear_highlight("search")

    LIST_LIMIT = 500  # rows listed; the count and the arrows still cover every hit

    def _fill_results(self, text: str) -> None:
        self.results.clear()
        scopes = self.canvas.scopes
        view = scopes.full_view if scopes is not None and scopes.active else self.canvas.view  # hits may be inside groups
        q = text.strip().lower()
        for node_id in self.hits[: self.LIST_LIMIT]:
            label, name, tensors, tip = self._describe(view, node_id)
            via = ""
            if q and q not in label.lower() and q not in name.lower():
                matched = [t for t in tensors if t and q in t.lower()]
                via = f"  · {matched[0]}" if matched else ""
            item = QListWidgetItem(f"{label}  {name}{via}".strip())
            item.setToolTip(tip or label)
            self.results.addItem(item)
        if len(self.hits) > self.LIST_LIMIT:
            more = QListWidgetItem(f"… {len(self.hits) - self.LIST_LIMIT:,} more (use the arrows)")
            more.setFlags(Qt.NoItemFlags)
            self.results.addItem(more)
        self.results.setVisible(bool(self.hits))
        self.results.setFixedHeight(min(220, 6 + self.results.sizeHintForRow(0) * min(len(self.hits) + 1, 10)) if self.hits else 0)
        self.place()

    def _describe(self, view, node_id) -> tuple[str, str, list, str]:
        """(label, name, tensors, tooltip) of a hit: from the view, or from the model for a node
        inside a collapsed group (app.scopes), which has no box of its own."""
        try:
            n = view.node(node_id)
        except (KeyError, AttributeError):
            graph = self.canvas.document.graph
            if graph is not None and isinstance(node_id, int) and graph.has_node(node_id):
                node = graph.node(node_id)
                return node.op_type, node.label, [v for v in list(node.inputs) + list(node.outputs) if v], ""
            return str(node_id), "", [], ""
        name = str(n.data.get("name") or n.data.get("tensor") or "")
        return n.label, name, list(n.data.get("inputs", ())) + list(n.data.get("outputs", ())), n.tooltip

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
        self.go_to((self.index + step) % len(self.hits))

    def go_to(self, index: int) -> None:
        """Select hit `index`, centre the canvas on it, mark its row."""
        if not 0 <= index < len(self.hits):
            return
        self.index = index
        if index < self.results.count():
            self.results.setCurrentRow(index)
        node_id = self.hits[self.index]
        if self.canvas.scopes is not None and self.canvas.scopes.active:
            index = self.index
            self.canvas.scopes.reveal(node_id)  # expand to node (the new view re-runs the search)
            self.index = index
            if index < self.results.count():
                self.results.setCurrentRow(index)
        self.canvas.select([node_id])
        self.canvas.center_on(node_id)
        self._update_count()

    def next_hit(self) -> None:
        self._go(1)

    def previous_hit(self) -> None:
        self._go(-1)
