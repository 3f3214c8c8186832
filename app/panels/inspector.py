"""Inspector: what the selected node or tensor is.

A node shows its op, name, domain, attributes and its inputs/outputs with shapes and dtypes; a
tensor (click an edge or a constant badge) shows its shape, dtype, producer and consumers, and for
constants min/max/mean, the first values and "View all values…" (app.dialogs.tensor_viewer). The
rows come from `core.views.viewgraph.node_facts` / `tensor_facts`, so `inspect`-style scripts see
the same facts. With nothing selected it shows the model's properties (producer, IR version,
opsets, metadata, inputs and outputs: core.model.summary). In a non-model view (a lowering
stage) it shows the view node's own label, detail and lineage.

Values are never cut in the middle: they wrap (anywhere, for long names without spaces), and the
full text is in each row's tooltip.
"""
from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPalette, QTextLayout, QTextOption
from PySide6.QtWidgets import (
    QDockWidget,
    QHeaderView,
    QLabel,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
)

from core.model.summary import summarize
from core.views.viewgraph import constant_array, node_facts, tensor_facts

__all__ = ["create_panel", "InspectorPanel", "AREA", "model_facts"]

AREA = "right"


def _wrap_option(align=Qt.AlignLeft | Qt.AlignTop) -> QTextOption:
    option = QTextOption(align)
    option.setWrapMode(QTextOption.WrapAtWordBoundaryOrAnywhere)  # at spaces when it can, anywhere in a long name
    return option


def _wrapped_height(text: str, font, width: float) -> float:
    """Height of `text` laid out as the delegate paints it, `width` wide."""
    layout = QTextLayout(text, font)
    layout.setTextOption(_wrap_option())
    layout.beginLayout()
    height = 0.0
    while True:
        line = layout.createLine()
        if not line.isValid():
            break
        line.setLineWidth(max(width, 20.0))
        height += line.height()
    layout.endLayout()
    return height


class WrappingValues(QStyledItemDelegate):
    """Keys and values wrapped to their column's width, row heights to match: a long tensor name
    or list reads whole instead of "gpu_0/data_..., 224]". (QTreeView's own word wrap keeps one
    line per row and elides.) A hint row spanning both columns wraps to the whole width."""

    MARGIN = 4

    def __init__(self, tree: QTreeWidget):
        super().__init__(tree)
        self.tree = tree


    def _width(self, index) -> int:
        if index.column() == 1:
            return self.tree.columnWidth(1)
        depth = 1
        parent = index.parent()
        while parent.isValid():
            depth += 1
            parent = parent.parent()
        item = self.tree.itemFromIndex(index)
        spanned = item is not None and item.isFirstColumnSpanned()
        full = self.tree.viewport().width() if spanned else self.tree.columnWidth(0)
        return full - self.tree.indentation() * depth

    def sizeHint(self, option, index):
        size = super().sizeHint(option, index)
        text = index.data()
        if text and isinstance(text, str):
            size.setHeight(max(size.height(), int(_wrapped_height(text, option.font, self._width(index) - 2 * self.MARGIN)) + 5))
        return size

    def paint(self, painter, option, index) -> None:
        item = self.tree.itemFromIndex(index)
        if not index.data() or not isinstance(index.data(), str) or (item is not None and item.childCount()):
            super().paint(painter, option, index)  # section titles: one bold line
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        text, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget is not None else self.tree.style()
        style.drawControl(QStyle.CE_ItemViewItem, opt, painter, opt.widget)
        painter.save()
        selected = bool(opt.state & QStyle.State_Selected)
        painter.setPen(opt.palette.color(QPalette.HighlightedText if selected else QPalette.Text))
        painter.setFont(opt.font)
        painter.drawText(QRectF(opt.rect.adjusted(self.MARGIN, 2, -self.MARGIN, -2)), text, _wrap_option())
        painter.restore()


class InspectorPanel(QTreeWidget):
    def __init__(self, window):
        super().__init__()
        self.window = window
        self.setColumnCount(2)
        self.setHeaderLabels(["Property", "Value"])
        self.setRootIsDecorated(True)
        self.setAlternatingRowColors(True)
        self.setUniformRowHeights(False)
        self.setWordWrap(True)  # long values wrap rather than being cut in the middle
        self.setColumnWidth(0, 130)
        self.setTextElideMode(Qt.ElideRight)
        self.header().setStretchLastSection(True)
        self.header().setSectionResizeMode(0, QHeaderView.Interactive)
        self.setItemDelegate(WrappingValues(self))
        self.header().sectionResized.connect(lambda *_a: self.scheduleDelayedItemsLayout())
        self.viewer = None  # the tensor viewer last opened
        # empty state: a word-wrapped hint over the (empty) table, readable at any dock width
        self.empty_hint = QLabel(self.viewport())
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setAlignment(Qt.AlignHCenter | Qt.AlignTop)
        self.empty_hint.setStyleSheet(f"color: {self.palette().placeholderText().color().name()}; padding: 12px 10px;")
        self.empty_hint.hide()
        if isinstance(getattr(window, "open_hooks", None), list):
            window.open_hooks.append(self.prime_model_facts)  # computed on the open worker
        doc = window.document
        doc.selectionChanged.connect(lambda _ids: self.refresh())
        doc.tensorSelected.connect(lambda _name: self.refresh())
        doc.graphChanged.connect(self.refresh)
        doc.graphReplaced.connect(self.refresh)
        window.canvas.viewSelectionChanged.connect(lambda _ids: self.refresh())
        window.canvas.viewShown.connect(lambda _v: self.refresh())
        window.canvas.previewShown.connect(lambda _v: self.refresh())
        window.canvas.tensorActivated.connect(self.view_tensor)  # double-click on a weight badge
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

    def _model_facts(self, graph) -> list[tuple[str, str, str]]:
        """model_facts, computed once per graph, revision and file: every selection change, view
        switch and graph signal refreshes the panel, and summarizing a big model takes a
        noticeable fraction of a second on the UI thread."""
        key = (graph.revision, str(graph.path))
        cached = getattr(self, "_model_rows", None)  # (graph, key, rows): the graph itself, not its id
        if cached is None or cached[0] is not graph or cached[1] != key:
            self._model_rows = cached = (graph, key, model_facts(graph))
        return cached[2]

    def prime_model_facts(self, graph) -> None:
        """Compute the model facts of a graph being opened (main window's open worker): the
        panel shows them as the model appears, without summarizing it on the UI thread."""
        self._model_rows = (graph, (graph.revision, str(graph.path)), model_facts(graph))

    def refresh(self) -> None:
        rows = self._facts()
        # Every view change (an expanded group, a relayout) and selection signal lands here;
        # when the facts shown are the same, rebuilding the tree (and wrapping its values again)
        # costs ~10-20 ms of UI thread a time for nothing.
        if rows == getattr(self, "_shown_rows", None) and self.topLevelItemCount() + bool(self.empty_hint.text()) > 0:
            return
        self._shown_rows = rows
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
            if section == "Inspector":  # a hint line above facts
                hint = QTreeWidgetItem([value, ""])
                hint.setForeground(0, self.palette().placeholderText())
                self.addTopLevelItem(hint)
                hint.setFirstColumnSpanned(True)  # only takes once the item is in the tree
                continue
            top = sections.get(section)
            if top is None:
                top = QTreeWidgetItem([section, ""])
                font = top.font(0)
                font.setBold(True)
                top.setFont(0, font)
                self.addTopLevelItem(top)
                top.setFirstColumnSpanned(True)
                sections[section] = top
            item = QTreeWidgetItem([key, value])
            item.setToolTip(0, key)
            item.setToolTip(1, value)
            top.addChild(item)
            if section == "Values" and key == "all values":
                button = QPushButton("View all values…")
                button.setToolTip("Every value in a table, with a histogram; copy or save as .npy")
                button.clicked.connect(lambda _c=False, name=value: self.view_tensor(name))
                self.setItemWidget(item, 1, button)
                item.setText(1, "")
        self.expandAll()
        self.setUpdatesEnabled(True)

    def view_tensor(self, name: str):
        """Open the tensor viewer on the constant tensor `name` of the open model."""
        from app.dialogs.tensor_viewer import TensorViewer

        graph = self.window.document.graph
        data = constant_array(graph, name) if graph is not None else None
        if data is None:
            return None
        self.viewer = TensorViewer(name, data, self.window, window=self.window)
        self.viewer.show()
        return self.viewer

    def _facts(self) -> list[tuple[str, str, str]]:
        doc = self.window.document
        canvas = self.window.canvas
        graph = doc.graph
        if graph is None:
            if canvas.mode == "preview":  # a big model drawn while it is built (app.open_preview)
                return [("Inspector", "", "The model is being built: its facts and selection follow in a moment.")]
            return [("Inspector", "", "Open a model to inspect it.")]
        if canvas.mode == "model":
            tensor = doc.selected_tensor
            if tensor and graph.has_value(tensor):
                return self._tensor(graph, tensor)
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
                        return self._tensor(graph, vn.data["tensor"])
                    if vn is not None and vn.data.get("kind") == "scope":
                        return group_facts(vn)
            if len(ids) > 1:
                return self._many(ids)
            return [("Inspector", "", "Select a node, an edge or a weight badge for its details.")] + self._model_facts(graph)
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

    def _tensor(self, graph, name: str) -> list[tuple[str, str, str]]:
        rows = tensor_facts(graph, name)
        if any(section == "Values" and key == "first values" for section, key, _v in rows):
            rows.append(("Values", "all values", name))  # drawn as the viewer's button
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


def _shape(entry: dict) -> str:
    shape = entry["shape"]
    return "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def model_facts(graph) -> list[tuple[str, str, str]]:
    """The model's properties as (section, key, value) rows, from core.model.summary."""
    s = summarize(graph)
    rows = [("Model", "file", s["file"] or "(not saved)"), ("Model", "producer", s["producer"] or "(none)"),
            ("Model", "IR version", str(s["ir_version"])), ("Model", "opset", str(s["opset"]))]
    others = {d: v for d, v in s["opset_imports"].items() if d not in ("", "ai.onnx")}
    if others:
        rows.append(("Model", "other opsets", ", ".join(f"{d} v{v}" for d, v in others.items())))
    if s["graph_name"]:
        rows.append(("Model", "graph name", s["graph_name"]))
    doc = graph.model.doc_string or ""
    if doc:
        rows.append(("Model", "description", doc))
    rows.append(("Model", "nodes", f"{s['nodes']:,}"))
    p = s["params"]
    rows.append(("Model", "parameters", f"{p['count']:,} in {p['tensors']} tensors"))
    if s["functions"]:
        rows.append(("Model", "functions", ", ".join(s["functions"])))
    rows += [("Inputs", e["name"], f"{e['dtype']} {_shape(e)}") for e in s["inputs"]]
    rows += [("Outputs", e["name"], f"{e['dtype']} {_shape(e)}") for e in s["outputs"]]
    rows += [("Metadata", k, v) for k, v in s["metadata"].items()]
    top = list(s["ops"].items())[:12]
    rows += [("Ops", op, str(n)) for op, n in top]
    if len(s["ops"]) > 12:
        rows.append(("Ops", f"{len(s['ops']) - 12} more op types", ", ".join(list(s["ops"])[12:])))
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
