"""Inspector: what the selected node or tensor is.

A node shows its op, name, domain, attributes and its inputs/outputs with shapes and dtypes; a
tensor (click an edge or a constant badge) shows its shape, dtype, producer and consumers, and for
constants min/max/mean and the first values. The rows come from `core.views.viewgraph.node_facts` /
`tensor_facts`, so `inspect`-style scripts see the same facts. In a non-model view (a lowering
stage) it shows the view node's own label, detail and lineage.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QLabel, QTreeWidget, QTreeWidgetItem

from core.views.viewgraph import node_facts, tensor_facts

__all__ = ["create_panel", "InspectorPanel", "AREA"]

AREA = "right"


class InspectorPanel(QTreeWidget):
    def __init__(self, window):
        super().__init__()
        self.window = window
        self.setColumnCount(2)
        self.setHeaderLabels(["Property", "Value"])
        self.setRootIsDecorated(True)
        self.setAlternatingRowColors(True)
        self.setUniformRowHeights(True)
        self.setWordWrap(False)
        self.setColumnWidth(0, 130)
        self.setTextElideMode(Qt.ElideMiddle)
        # empty state: a word-wrapped hint over the (empty) table, readable at any dock width
        self.empty_hint = QLabel(self.viewport())
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setAlignment(Qt.AlignHCenter | Qt.AlignTop)
        self.empty_hint.setStyleSheet(f"color: {self.palette().placeholderText().color().name()}; padding: 12px 10px;")
        self.empty_hint.hide()
        doc = window.document
        doc.selectionChanged.connect(lambda _ids: self.refresh())
        doc.tensorSelected.connect(lambda _name: self.refresh())
        doc.graphChanged.connect(self.refresh)
        doc.graphReplaced.connect(self.refresh)
        window.canvas.viewSelectionChanged.connect(lambda _ids: self.refresh())
        window.canvas.viewShown.connect(lambda _v: self.refresh())
        self.refresh()

    def rows(self) -> list[tuple[str, str, str]]:
        """What is shown, as (section, key, value) rows (for tests and copy/paste)."""
        if self.topLevelItemCount() == 0 and self.empty_hint.text():
            return [("Inspector", "", self.empty_hint.text())]
        out = []
        for i in range(self.topLevelItemCount()):
            top = self.topLevelItem(i)
            if top.childCount() == 0:
                out.append(("Inspector", "", top.text(0)))
            for j in range(top.childCount()):
                ch = top.child(j)
                out.append((top.text(0), ch.text(0), ch.text(1)))
        return out

    def _place_hint(self) -> None:
        self.empty_hint.setGeometry(0, 0, self.viewport().width(), max(60, self.viewport().height() // 2))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_hint()

    def refresh(self) -> None:
        rows = self._facts()
        self.setUpdatesEnabled(False)
        self.clear()
        sections: dict[str, QTreeWidgetItem] = {}
        if len(rows) == 1 and rows[0][0] == "Inspector":  # a hint, not facts
            self.empty_hint.setText(rows[0][2])
            self._place_hint()
            self.empty_hint.show()
            self.setUpdatesEnabled(True)
            return
        self.empty_hint.hide()
        self.empty_hint.setText("")
        for section, key, value in rows:
            top = sections.get(section)
            if top is None:
                top = QTreeWidgetItem([section, ""])
                font = top.font(0)
                font.setBold(True)
                top.setFont(0, font)
                top.setFirstColumnSpanned(True)
                self.addTopLevelItem(top)
                sections[section] = top
            item = QTreeWidgetItem([key, value])
            item.setToolTip(1, value)
            top.addChild(item)
        self.expandAll()
        self.setUpdatesEnabled(True)

    def _facts(self) -> list[tuple[str, str, str]]:
        doc = self.window.document
        canvas = self.window.canvas
        graph = doc.graph
        if graph is None:
            return [("Inspector", "", "Open a model to inspect it.")]
        if canvas.mode == "model":
            tensor = doc.selected_tensor
            if tensor and graph.has_value(tensor):
                return tensor_facts(graph, tensor)
            ids = doc.selection
            if len(ids) == 1:
                nid = ids[0]
                if isinstance(nid, int) and graph.has_node(nid):
                    return node_facts(graph, nid)
                view = canvas.view
                if view is not None:
                    try:
                        vn = view.node(nid)
                    except KeyError:
                        vn = None
                    if vn is not None and vn.data.get("tensor") and graph.has_value(vn.data["tensor"]):
                        return tensor_facts(graph, vn.data["tensor"])
                    if vn is not None and vn.data.get("kind") == "scope":
                        return group_facts(vn)
            if len(ids) > 1:
                return self._many(ids)
            return [("Inspector", "", "Select a node, an edge or a weight badge.")]
        ids = canvas.selected_ids()
        view = canvas.view
        if view is None or not ids:
            return [("Inspector", "", "Select a node.")]
        if len(ids) > 1:
            return self._many(ids)
        vn = view.node(ids[0])
        rows = [("Node", "label", vn.label), ("Node", "detail", vn.detail or "—"), ("Node", "category", vn.category)]
        for b in vn.badges:
            rows.append(("Constants", "", b))
        if vn.tooltip:
            rows.append(("Node", "about", vn.tooltip.replace("\n", "  ")))
        if vn.origin:
            labels = [graph.node(i).label for i in vn.origin if isinstance(i, int) and graph.has_node(i)]
            rows.append(("Lineage", "ONNX nodes", ", ".join(labels) or ", ".join(map(str, vn.origin))))
        return rows

    def _many(self, ids) -> list[tuple[str, str, str]]:
        view = self.window.canvas.view
        counts: dict[str, int] = {}
        for i in ids:
            try:
                label = view.node(i).label if view is not None else str(i)
            except KeyError:
                continue
            counts[label] = counts.get(label, 0) + 1
        rows = [("Selection", "nodes", str(len(ids)))]
        rows += [("Selection", k, str(v)) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])]
        return rows


def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Inspector", window)
    dock.setObjectName("panel-inspector")
    dock.setWidget(InspectorPanel(window))
    dock.setMinimumWidth(280)
    return dock


def group_facts(vn) -> list[tuple[str, str, str]]:
    """Rows for a collapsed group's box (core.views.scopes.group_node): what is inside and what
    crosses its border."""
    d = vn.data
    rows = [("Group", "path", d.get("path", "")), ("Group", "nodes", f"{d.get('size', 0):,}"),
            ("Group", "parameters", f"{d.get('params', 0):,}"), ("Group", "open", "double-click, Enter or +")]
    rows += [("Ops", op, str(k)) for op, k in d.get("ops", {}).items()]
    details = d.get("shapes", {})
    rows += [("Inputs", t, details.get(t, "")) for t in d.get("inputs", [])[:20]]
    rows += [("Outputs", t, details.get(t, "")) for t in d.get("outputs", [])[:20]]
    return rows
