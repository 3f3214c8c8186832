"""Opening the bodies of control-flow nodes (If, Loop, Scan) on the canvas.

Double-click (or Enter on) a box marked with two stacked squares: the canvas draws the node's
first body (an If's then_branch) laid out like any graph, and a bar at the canvas's top left
shows where you are - "model ▸ choose (If) ▸ then_branch" - with a button per sibling body
(else_branch) and Back. Bodies nest: a Loop inside a branch opens the same way, Back climbs one
level, and Back at the first level (or View ▸ Show the Model Graph) returns to the model. The
bodies are copies (core.views.subgraph): what is drawn can be inspected, not edited.
"""
from __future__ import annotations

import logging

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton

from core.errors import WorkbenchError
from core.views.subgraph import body_view, subgraph_attrs

__all__ = ["SubgraphNavigator"]

logger = logging.getLogger(__name__)


class _Level:
    """One opened body: the graph it belongs to, the node and attribute, its view and its own Graph."""

    def __init__(self, parent_graph, node_id, attr: str, view, body):
        self.parent_graph = parent_graph
        self.node_id = node_id
        self.attr = attr
        self.view = view
        self.body = body


class SubgraphNavigator(QObject):
    """Opens bodies on double-click and keeps the trail of opened bodies with its bar."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.canvas = window.canvas
        self.stack: list[_Level] = []
        self.bar = QFrame(self.canvas)
        self.bar.setObjectName("BodyBar")
        self.bar.setStyleSheet("#BodyBar { background: rgba(255,255,255,240); border: 1px solid #b8c0c8; border-radius: 5px; }")
        row = QHBoxLayout(self.bar)
        row.setContentsMargins(8, 3, 4, 3)
        row.setSpacing(6)
        self.path = QLabel(self.bar)
        row.addWidget(self.path)
        self.siblings = QHBoxLayout()
        self.siblings.setSpacing(2)
        row.addLayout(self.siblings)
        self.back_button = QToolButton(self.bar, text="Back", toolTip="Back to the enclosing graph", autoRaise=True)
        self.back_button.clicked.connect(self.back)
        row.addWidget(self.back_button)
        self.bar.hide()
        self.canvas.nodeActivated.connect(self._activated)
        self.canvas.viewShown.connect(self._view_shown)
        window.document.graphReplaced.connect(self._reset)

    # ---- opening and closing ------------------------------------------------------------------
    def current_graph(self):
        """The graph whose nodes the canvas shows: the model, or the innermost opened body."""
        return self.stack[-1].body if self.stack else self.window.document.graph

    def _activated(self, node_id) -> None:
        if self.canvas.mode == "model" and self.stack:
            self.stack.clear()
        if self.canvas.mode != "model" and not self._showing_body():
            return  # a lowering stage or a preview: theirs to handle
        graph = self.current_graph()
        attrs = subgraph_attrs(graph, node_id) if graph is not None else []
        if attrs:
            self.open(node_id, attrs[0])

    def open(self, node_id, attr: str, replace: bool = False) -> bool:
        """Draw body `attr` of node `node_id` of the graph now shown (`replace`: instead of the
        innermost body, i.e. switch to a sibling)."""
        if replace and self.stack:
            self.stack.pop()
        graph = self.current_graph()
        if graph is None:
            return False
        try:
            view, body = body_view(graph, node_id, attr)
        except WorkbenchError as e:
            self.window.statusBar().showMessage(str(e), 6000)
            return False
        self.stack.append(_Level(graph, node_id, attr, view, body))
        self.canvas.show_view(view, fit=True)
        self._update_bar()
        return True

    def back(self) -> None:
        """One level up: the enclosing body, or the model."""
        if not self.stack:
            return
        self.stack.pop()
        if self.stack:
            self.canvas.show_view(self.stack[-1].view, fit=True)
        else:
            self.canvas.show_model(fit=False)
        self._update_bar()

    def _reset(self) -> None:
        self.stack.clear()
        self._update_bar()

    def _showing_body(self) -> bool:
        return bool(self.stack) and self.canvas.view is self.stack[-1].view

    def _view_shown(self, view) -> None:
        # something else took the canvas (the model, a stage, a preview): the trail is over
        if self.stack and view is not self.stack[-1].view:
            self.stack.clear()
        self._update_bar()

    # ---- the bar ------------------------------------------------------------------------------
    def _update_bar(self) -> None:
        while self.siblings.count():
            item = self.siblings.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        if not self.stack:
            self.bar.hide()
            return
        parts = ["model"]
        for level in self.stack:
            node = level.parent_graph.node(level.node_id)
            parts.append(f"{node.label} ({node.op_type}) ▸ <b>{level.attr}</b>")
        self.path.setText(" ▸ ".join(parts))
        top = self.stack[-1]
        for attr in subgraph_attrs(top.parent_graph, top.node_id):
            if attr == top.attr:
                continue
            button = QToolButton(self.bar, text=attr, toolTip=f"Show {attr} instead", autoRaise=True)
            button.clicked.connect(lambda _c=False, a=attr, n=top.node_id: self.open(n, a, replace=True))
            self.siblings.addWidget(button)
        self.bar.adjustSize()
        self.bar.move(10, 10)
        self.bar.show()
        self.bar.raise_()
