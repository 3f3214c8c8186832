"""Editing in the GUI: actions, keys, the canvas context menu, drag-to-connect, inspector editing,
and the save guard. Every change is a `core.model.edits` command pushed with `Document.push`; nothing
here touches the Graph itself.

Keys (active while the canvas has focus, so text fields keep their own Delete/F2):
    Delete            delete the selected nodes (on a graph-output node: stop exposing that output)
    Shift+Delete      delete and reconnect (the readers read the node's matching input instead)
    Ctrl+I            insert a node after the selected node's output
    Ctrl+Shift+A      add a node (op search over the model's opsets)
    F2                rename the selected node (or a graph input/output tensor)
    Ctrl+Z / Ctrl+Shift+Z / Ctrl+Y   undo / redo (Edit menu entries name the command)

Connecting: press on the lower edge of a node (its output port: the cursor turns into a cross
and a dot appears), drag onto another node, release; if the target has several inputs a menu asks
which one. Inspector: double-click a node's name, an attribute value, an input or an output to
edit it in place; right-click for "Add attribute" (schema attributes with their defaults),
"Remove attribute", "Disconnect", "Replace weights from .npy".

Saving (the policy a careful editor follows): Save on the file the model was opened from asks
once per session before overwriting it, offering Save As instead; saving a model that fails
validation asks first and names the first problem; the write itself is atomic
(`core.save_model`: temporary file + rename). Closing with unsaved edits asks (main window).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QPointF, Qt, QTimer
from PySide6.QtGui import QAction, QBrush, QColor, QCursor, QKeySequence, QPen
from PySide6.QtWidgets import (
    QApplication,
    QGraphicsEllipseItem,
    QGraphicsLineItem,
    QInputDialog,
    QLineEdit,
    QMenu,
    QMessageBox,
    QTreeWidgetItem,
)

from core import EditError, WorkbenchError
from core.model.edits import (
    AddGraphOutput,
    CompoundEdit,
    DeleteNode,
    RemoveAttribute,
    RemoveGraphOutput,
    RenameNode,
    RenameTensor,
    ReplaceInitializer,
    SetAttribute,
    SetInput,
    SetInputShape,
    format_attribute_value,
    node_text,
    op_spec,
    parse_attribute_text,
    parse_shape_text,
)
from core.model.validation import check

from app.graph_items import EdgeItem, NodeItem

__all__ = ["EditActions", "PORT_COLOR"]

logger = logging.getLogger(__name__)

PORT_COLOR = "#1f6feb"
PORT_ZONE = 7.0  # screen pixels at the bottom of a node box that act as its output port


class EditActions(QObject):
    """The window's editing controller. Created by the main window after its panels."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.document = window.document
        self.canvas = window.canvas
        # for tests and scripts: replaceable prompts (the defaults show menus / message boxes)
        self.slot_chooser: Callable[[int, list[tuple[int, str]]], int | None] = self._choose_slot_menu
        self.output_chooser: Callable[[int, list[str]], str | None] = self._choose_output_menu
        self.ask: Callable[[str, str, list[str]], str] = self._ask_box
        self.show_menu: Callable[[QMenu, object], None] = lambda menu, global_pos: menu.exec(global_pos)
        self._overwrite_ok: set[Path] = set()
        self._drag: dict | None = None
        self._press: tuple | None = None  # (port item, viewport pos) until the pointer moves
        self._port_dot: QGraphicsEllipseItem | None = None
        self._inspector_pending: dict | None = None

        self._build_actions()
        self.canvas.viewport().installEventFilter(self)
        self.canvas.installEventFilter(self)  # keyboard context menu (Menu key, Shift+F10) reaches the view
        self.document.selectionChanged.connect(lambda _ids: self._update_enabled())
        self.document.graphReplaced.connect(self._on_graph_replaced)
        self.document.graphChanged.connect(self._update_enabled)
        self._hook_inspector()
        self._update_enabled()

    # ---- actions and keys ---------------------------------------------------------------------
    def _make(self, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        act = QAction(text, self.window)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
            # keys act on the canvas only: a Delete typed in a panel's text field stays there
            act.setShortcutContext(Qt.WidgetWithChildrenShortcut)
            self.canvas.addAction(act)
        if tip:
            act.setStatusTip(tip)
            act.setToolTip(tip)
        act.triggered.connect(lambda _checked=False: slot())
        return act

    def _build_actions(self) -> None:
        w = self.window
        redo = w.redo_action
        keys = [QKeySequence(QKeySequence.Redo), QKeySequence("Ctrl+Shift+Z"), QKeySequence("Ctrl+Y")]
        unique: list[QKeySequence] = []
        for k in keys:
            if not k.isEmpty() and k not in unique:
                unique.append(k)
        redo.setShortcuts(unique)
        self.delete_action = self._make("&Delete", lambda: self.delete_selection(False), QKeySequence.Delete, "Delete the selected nodes")
        self.delete_bridge_action = self._make(
            "Delete and &Reconnect", lambda: self.delete_selection(True), "Shift+Delete",
            "Delete the selected nodes; their readers read the matching input instead",
        )
        self.insert_after_action = self._make("&Insert Node After…", self.insert_after_selection, "Ctrl+I",
                                              "Insert a node on the selected node's output")
        self.add_node_action = self._make("&Add Node…", lambda: self.add_node(), "Ctrl+Shift+A", "Add a node of any op in the model's opsets")
        self.rename_action = self._make("Re&name…", self.rename_selection, "F2", "Rename the selected node or graph input/output")
        menu = w.edit_menu
        first = menu.actions()[2] if len(menu.actions()) > 2 else None  # after Undo, Redo
        for act in (self.delete_action, self.delete_bridge_action, None, self.insert_after_action, self.add_node_action, self.rename_action, None):
            if act is None:
                if first is not None:
                    menu.insertSeparator(first)
                else:
                    menu.addSeparator()
            elif first is not None:
                menu.insertAction(first, act)
            else:
                menu.addAction(act)

    def _model_ready(self) -> bool:
        return self.document.graph is not None and self.canvas.mode == "model"

    def _update_enabled(self) -> None:
        ready = self._model_ready()
        sel = self.document.selection if ready else []
        nodes = [i for i in sel if isinstance(i, int)]
        self.delete_action.setEnabled(bool(sel))
        self.delete_bridge_action.setEnabled(bool(nodes))
        self.insert_after_action.setEnabled(len(sel) == 1 and self._output_tensors(sel[0]) != [])
        self.add_node_action.setEnabled(self.document.graph is not None)
        self.rename_action.setEnabled(len(sel) == 1)

    def _on_graph_replaced(self) -> None:
        self._overwrite_ok.clear()
        self._update_enabled()

    def _error(self, e: Exception) -> None:
        QMessageBox.warning(self.window, "Cannot apply the edit", str(e))

    def push(self, make_edit: Callable[[], object]) -> bool:
        """Build an edit (its constructor may refuse) and push it; errors are shown, never raised."""
        try:
            edit = make_edit()
        except WorkbenchError as e:
            self._error(e)
            return False
        return self.document.push(edit)

    # ---- what the selection refers to ---------------------------------------------------------
    def _output_tensors(self, view_id: Hashable) -> list[str]:
        graph = self.document.graph
        if graph is None:
            return []
        if isinstance(view_id, int):
            if not graph.has_node(view_id):
                return []
            return [v.name for v in graph.node(view_id).output_values if v.name]
        if isinstance(view_id, str) and view_id.startswith("input:"):
            return [view_id[len("input:"):]]
        return []

    @staticmethod
    def _io_tensor(view_id: Hashable) -> tuple[str, str] | None:
        if isinstance(view_id, str) and ":" in view_id:
            kind, name = view_id.split(":", 1)
            if kind in ("input", "output"):
                return kind, name
        return None

    # ---- commands -----------------------------------------------------------------------------
    def delete_selection(self, bridge: bool = False) -> bool:
        if not self._model_ready():
            return False
        graph = self.document.graph
        sel = self.document.selection
        edits = []
        try:
            for i in sel:
                if isinstance(i, int) and graph.has_node(i):
                    edits.append(DeleteNode(graph, i, bridge=bridge))
                elif (io := self._io_tensor(i)) and io[0] == "output" and not bridge:
                    edits.append(RemoveGraphOutput(graph, io[1]))
                elif io and io[0] == "input":
                    raise EditError(f"Graph input '{io[1]}' cannot be deleted; delete the nodes that read it or change its shape instead.")
        except WorkbenchError as e:
            self._error(e)
            return False
        if not edits:
            return False
        edit = edits[0] if len(edits) == 1 else CompoundEdit(
            f"{'Delete and reconnect' if bridge else 'Delete'} {len(edits)} nodes", edits
        )
        ok = self.document.push(edit)
        if ok:
            self.document.set_selection([])
        return ok

    def add_node(self, inputs: list[str] | None = None, insert_on: str | None = None, op_type: str = "", exec_dialog: bool = True):
        """Open the Add Node dialog (returned; with exec_dialog=False it is only shown, for tests)."""
        from app.dialogs.add_node import AddNodeDialog

        if self.document.graph is None:
            return None
        dialog = AddNodeDialog(self.document, self.window, inputs=inputs, insert_on=insert_on, op_type=op_type)
        if exec_dialog:
            dialog.exec()
            if dialog.edit is not None and dialog.edit.node_id is not None:
                self.document.set_selection([dialog.edit.node_id])
        else:
            dialog.show()
        return dialog

    def insert_after_selection(self) -> None:
        sel = self.document.selection if self._model_ready() else []
        if len(sel) != 1:
            return
        outs = self._output_tensors(sel[0])
        if not outs:
            return
        tensor = outs[0] if len(outs) == 1 else self.output_chooser(sel[0], outs)
        if tensor:
            self.add_node(inputs=[tensor], insert_on=tensor)

    def _text(self, title: str, label: str, text: str) -> str | None:
        value, ok = QInputDialog.getText(self.window, title, label, QLineEdit.Normal, text)
        return value if ok else None

    def rename_selection(self) -> None:
        sel = self.document.selection if self._model_ready() else []
        if len(sel) != 1:
            return
        graph = self.document.graph
        i = sel[0]
        if isinstance(i, int) and graph.has_node(i):
            n = graph.node(i)
            new = self._text("Rename Node", f"New name for {node_text(n)}:", n.name)
            if new is not None and new != n.name:
                self.push(lambda: RenameNode(graph, i, new))
        elif io := self._io_tensor(i):
            self.rename_tensor(io[1])

    def rename_tensor(self, name: str) -> None:
        graph = self.document.graph
        new = self._text("Rename Tensor", f"New name for tensor '{name}':", name)
        if new is not None and new != name:
            self.push(lambda: RenameTensor(graph, name, new))

    def set_input_shape(self, name: str) -> None:
        graph = self.document.graph
        v = graph.value(name)
        current = ", ".join("?" if d is None else str(d) for d in (v.shape or ()))
        text = self._text("Set Input Shape", f"Shape of '{name}' (sizes, names such as batch, or ?):", current)
        if text is None:
            return
        self.push(lambda: SetInputShape(graph, name, parse_shape_text(text)))

    def replace_initializer(self, name: str, path: str | None = None) -> None:
        graph = self.document.graph
        if path is None:
            from app.dialogs.files import open_file

            path = open_file(self.window, self.window, "npy", f"Replace '{name}' with", "NumPy arrays (*.npy);;All files (*)")
            if not path:
                return
        self.push(lambda: ReplaceInitializer(graph, name, path))

    # ---- connecting ---------------------------------------------------------------------------
    def input_slots(self, node_id: int) -> list[tuple[int, str]]:
        """(index, menu text) of the inputs a tensor can be connected to, including one more
        optional input when the op takes it."""
        graph = self.document.graph
        n = graph.node(node_id)
        spec = op_spec(n.op_type, n.domain, graph.opset_imports.get(n.domain or "", graph.opset) or None)
        count = len(n.inputs)
        limit = count + 1 if spec is None else min(spec.max_input, max(count + 1, len(spec.inputs)))
        out = []
        for k in range(limit):
            role = spec.input_name(k) if spec is not None else f"input {k}"
            current = n.inputs[k] if k < count else ""
            out.append((k, f"{role} (input {k}): {current}" if current else f"{role} (input {k}): not connected"))
        return out

    def connect(self, src_view_id: Hashable, dst_view_id: Hashable, slot: int | None = None) -> bool:
        """Connect the source's output to one of the target node's inputs (asks which when needed)."""
        if not self._model_ready() or src_view_id == dst_view_id:
            return False
        graph = self.document.graph
        outs = self._output_tensors(src_view_id)
        if not outs:
            return False
        tensor = outs[0] if len(outs) == 1 else self.output_chooser(src_view_id, outs)
        if not tensor:
            return False
        if isinstance(dst_view_id, str) and dst_view_id.startswith("output:"):
            return self.push(lambda: AddGraphOutput(graph, tensor))
        if not isinstance(dst_view_id, int) or not graph.has_node(dst_view_id):
            return False
        if slot is None:
            options = self.input_slots(dst_view_id)
            if not options:
                return False
            slot = options[0][0] if len(options) == 1 else self.slot_chooser(dst_view_id, options)
        if slot is None:
            return False
        return self.push(lambda: SetInput(graph, dst_view_id, slot, tensor))

    def _choose_slot_menu(self, node_id: int, options: list[tuple[int, str]]) -> int | None:
        menu = QMenu(self.canvas)
        menu.addSection(f"Connect to {node_text(self.document.graph.node(node_id))}")
        for k, text in options:
            menu.addAction(text).setData(k)
        chosen = menu.exec(QCursor.pos())
        return None if chosen is None else chosen.data()

    def _choose_output_menu(self, node_id: Hashable, outputs: list[str]) -> str | None:
        menu = QMenu(self.canvas)
        menu.addSection("Which output?")
        for name in outputs:
            menu.addAction(name).setData(name)
        chosen = menu.exec(QCursor.pos())
        return None if chosen is None else chosen.data()

    # ---- canvas events: context menu and drag-to-connect --------------------------------------
    def _port_at(self, viewport_pos) -> NodeItem | None:
        """The node whose output port (lower edge) is under the pointer."""
        item = self._node_at(viewport_pos)
        if item is None or not self._output_tensors(item.node_id):
            return None
        p = item.mapFromScene(self.canvas.mapToScene(viewport_pos))
        zone = min(PORT_ZONE / max(self.canvas.zoom(), 1e-3), item.rect.height() * 0.4)
        return item if p.y() >= item.rect.bottom() - zone else None

    def _node_at(self, viewport_pos) -> NodeItem | None:
        """The node box under the pointer, even where an edge's end lies on top of it."""
        for item in self.canvas.items(viewport_pos):
            if isinstance(item, NodeItem):
                return item
        return None

    def _show_port(self, item: NodeItem | None) -> None:
        if item is None:
            if self._port_dot is not None:
                if self._port_dot.scene() is not None:
                    self._port_dot.scene().removeItem(self._port_dot)
                self._port_dot = None
                self.canvas.viewport().unsetCursor()
            return
        c = QPointF(item.pos().x() + item.rect.center().x(), item.pos().y() + item.rect.bottom())
        if self._port_dot is None or self._port_dot.scene() is not self.canvas.scene():
            self._show_port(None)
            dot = QGraphicsEllipseItem(-5, -5, 10, 10)
            dot.setBrush(QBrush(QColor(PORT_COLOR)))
            dot.setPen(QPen(QColor("white"), 1.5))
            dot.setZValue(50)
            dot.setAcceptedMouseButtons(Qt.NoButton)
            self.canvas.scene().addItem(dot)
            self._port_dot = dot
        self._port_dot.setPos(c)
        self.canvas.viewport().setCursor(Qt.CrossCursor)
        outs = self._output_tensors(item.node_id)
        self.window.statusBar().showMessage(f"Drag from here onto another node to connect '{outs[0] if len(outs) == 1 else 'an output'}' to one of its inputs", 3000)

    def _start_drag(self, item: NodeItem) -> None:
        start = QPointF(item.pos().x() + item.rect.center().x(), item.pos().y() + item.rect.bottom())
        line = QGraphicsLineItem()
        pen = QPen(QColor(PORT_COLOR), 2, Qt.DashLine)
        pen.setCosmetic(True)
        line.setPen(pen)
        line.setZValue(60)
        line.setLine(start.x(), start.y(), start.x(), start.y())
        self.canvas.scene().addItem(line)
        self._drag = {"src": item.node_id, "line": line, "start": start}

    def eventFilter(self, obj, event) -> bool:  # noqa: C901 - one switch over event types
        et = event.type()
        if obj is self.canvas:
            if et == QEvent.ContextMenu and self._model_ready() and event.reason() == event.Reason.Keyboard:
                sel = [i for i in self.document.selection if i in self.canvas.node_items]
                item = self.canvas.node_items[sel[0]] if sel else None
                menu = self.context_menu(item)
                at = self.canvas.mapFromScene(item.sceneBoundingRect().center()) if item is not None else self.canvas.viewport().rect().center()
                self.show_menu(menu, self.canvas.viewport().mapToGlobal(at))
                return True
            return False
        if et == QEvent.ContextMenu and self._model_ready():
            item = self.canvas.itemAt(event.pos())
            menu = self.context_menu(item)
            if menu is not None:
                self.show_menu(menu, event.globalPos())
                return True
            return False
        if et == QEvent.MouseButtonPress and event.button() == Qt.LeftButton and self._model_ready():
            # a press on a port is still a click (select, pick a badge) until the pointer moves
            pos = event.position().toPoint()
            item = self._port_at(pos)
            self._press = (item, pos) if item is not None else None
            return False
        if et == QEvent.MouseMove:
            pos = event.position().toPoint()
            if self._drag is None and self._press is not None and event.buttons() & Qt.LeftButton:
                item, at = self._press
                if (pos - at).manhattanLength() >= QApplication.startDragDistance():
                    self._press = None
                    self._start_drag(item)
            if self._drag is not None:
                s = self._drag["start"]
                p = self.canvas.mapToScene(pos)
                self._drag["line"].setLine(s.x(), s.y(), p.x(), p.y())
                target = self._node_at(pos)
                if target is not None and target.node_id != self._drag["src"]:
                    self.canvas.set_highlight("connect-target", [target.node_id], PORT_COLOR)
                else:
                    self.canvas.clear_highlight("connect-target")
                return True
            if not event.buttons() and self._model_ready():
                self._show_port(self._port_at(pos))
            return False
        if et == QEvent.MouseButtonRelease and event.button() == Qt.LeftButton:
            self._press = None
            if self._drag is None:
                return False
            drag, self._drag = self._drag, None
            line = drag["line"]
            if line.scene() is not None:
                line.scene().removeItem(line)
            self.canvas.clear_highlight("connect-target")
            target = self._node_at(event.position().toPoint())
            if target is not None and target.node_id != drag["src"]:
                src, dst = drag["src"], target.node_id
                # after the release has been handled: a slot menu must not run inside the event
                QTimer.singleShot(0, lambda: self.connect(src, dst))
            return False  # the view still sees the release (its press went to the source node)
        if et == QEvent.Leave:
            self._show_port(None)
        return False

    def context_menu(self, item) -> QMenu | None:
        """The right-click menu for a canvas item (None item: the background)."""
        graph = self.document.graph
        if graph is None:
            return None
        menu = QMenu(self.canvas)
        w = self.window
        if isinstance(item, NodeItem):
            vid = item.node_id
            if vid not in self.document.selection:
                self.canvas.select([vid])
            io = self._io_tensor(vid)
            if isinstance(vid, int) and graph.has_node(vid):
                n = graph.node(vid)
                menu.addSection(node_text(n))
                menu.addAction(self.delete_action)
                menu.addAction(self.delete_bridge_action)
                menu.addSeparator()
                menu.addAction(self.insert_after_action)
                menu.addAction(self.rename_action)
                outs = [v for v in n.output_values if v.name]
                for v in outs:
                    if not v.is_graph_output:
                        menu.addAction(f"Make '{v.name}' a Graph Output", lambda name=v.name: self.push(lambda: AddGraphOutput(graph, name)))
                weights = [v for v in n.input_values if v is not None and v.is_initializer]
                if weights:
                    sub = menu.addMenu("Replace Weights from .npy")
                    for v in weights:
                        sub.addAction(f"'{v.name}' ({v.dtype} {v.shape_text})…", lambda name=v.name: self.replace_initializer(name))
            elif io and io[0] == "input":
                menu.addSection(f"Graph input '{io[1]}'")
                menu.addAction("Set Input Shape…", lambda name=io[1]: self.set_input_shape(name))
                menu.addAction("Rename Tensor…", lambda name=io[1]: self.rename_tensor(name))
                menu.addAction(self.insert_after_action)
            elif io and io[0] == "output":
                menu.addSection(f"Graph output '{io[1]}'")
                menu.addAction("Remove Graph Output", lambda name=io[1]: self.push(lambda: RemoveGraphOutput(graph, name)))
                menu.addAction("Rename Tensor…", lambda name=io[1]: self.rename_tensor(name))
        elif isinstance(item, EdgeItem) and item.edge.label:
            t = item.edge.label
            menu.addSection(f"Tensor '{t}'")
            menu.addAction("Insert Node Here…", lambda: self.add_node(inputs=[t], insert_on=t))
            menu.addAction("Rename Tensor…", lambda: self.rename_tensor(t))
            if graph.has_value(t) and not graph.value(t).is_graph_output:
                menu.addAction("Make Graph Output", lambda: self.push(lambda: AddGraphOutput(graph, t)))
        menu.addSeparator()
        menu.addAction(self.add_node_action)
        menu.addSeparator()
        menu.addAction(w.undo_action)
        menu.addAction(w.redo_action)
        return menu

    # ---- inspector editing --------------------------------------------------------------------
    def _inspector(self):
        dock = getattr(self.window, "panels", {}).get("inspector")
        return dock.widget() if dock is not None else None

    def _hook_inspector(self) -> None:
        tree = self._inspector()
        if tree is None:
            return
        tree.itemDoubleClicked.connect(self._inspector_start_edit)
        tree.itemChanged.connect(self._inspector_changed)
        tree.itemDelegate().closeEditor.connect(lambda *_: QTimer.singleShot(0, self._inspector_editor_closed))
        tree.setContextMenuPolicy(Qt.CustomContextMenu)
        tree.customContextMenuRequested.connect(self._inspector_menu)
        tree.setToolTip("Double-click a name, attribute, input or output to edit it; right-click for more")

    def _selected_node(self):
        graph = self.document.graph
        if not self._model_ready():
            return None
        sel = self.document.selection
        if len(sel) == 1 and isinstance(sel[0], int) and graph.has_node(sel[0]) and not self.document.selected_tensor:
            return graph.node(sel[0])
        return None

    def _row(self, item: QTreeWidgetItem) -> tuple[str, str, int] | None:
        parent = item.parent()
        if parent is None:
            return None
        return parent.text(0), item.text(0), parent.indexOfChild(item)

    def _editable_text(self, n, section: str, key: str, index: int) -> str | None:
        if section == "Node" and key == "name":
            return n.name
        if section == "Attributes" and key in n.attributes:
            return format_attribute_value(n.attributes[key])
        if section == "Inputs" and index < len(n.inputs):
            return n.inputs[index]
        if section == "Outputs" and index < len(n.outputs):
            return n.outputs[index]
        return None

    def _inspector_start_edit(self, item: QTreeWidgetItem, _column: int = 1) -> bool:
        """Turn an inspector row into an in-place editor (double-click). True when editing."""
        n = self._selected_node()
        row = self._row(item)
        if n is None or row is None:
            return False
        section, key, index = row
        text = self._editable_text(n, section, key, index)
        if text is None:
            return False
        tree = self._inspector()
        self._inspector_pending = {"item": item, "section": section, "key": key, "index": index, "node": n.id, "text": text}
        tree.blockSignals(True)
        item.setFlags(item.flags() | Qt.ItemIsEditable)
        item.setText(1, text)
        tree.blockSignals(False)
        tree.editItem(item, 1)
        return True

    def _inspector_editor_closed(self) -> None:
        if self._inspector_pending is not None:  # closed without a change
            self._inspector_pending = None
            self._inspector().refresh()

    def _inspector_changed(self, item: QTreeWidgetItem, column: int) -> None:
        pending = self._inspector_pending
        if pending is None or item is not pending["item"] or column != 1:
            return
        self._inspector_pending = None
        text = item.text(1)
        tree = self._inspector()
        if text == pending["text"]:
            QTimer.singleShot(0, tree.refresh)
            return
        QTimer.singleShot(0, lambda: self.apply_inspector_edit(pending["node"], pending["section"], pending["key"], pending["index"], text))

    def apply_inspector_edit(self, node_id: int, section: str, key: str, index: int, text: str) -> bool:
        """Apply what was typed into an inspector row (also the scripted twin of in-place editing)."""
        graph = self.document.graph
        tree = self._inspector()
        ok = False
        try:
            if section == "Node" and key == "name":
                ok = self.document.push(RenameNode(graph, node_id, text.strip()))
            elif section == "Attributes":
                n = graph.node(node_id)
                attr = n.ir.attributes[key]
                current = n.attributes[key]
                value = parse_attribute_text(text, attr.type, key, like=current)
                ok = self.document.push(SetAttribute(graph, node_id, key, value))
            elif section == "Inputs":
                ok = self.document.push(SetInput(graph, node_id, index, text.strip() or None))
            elif section == "Outputs":
                old = graph.node(node_id).outputs[index]
                ok = self.document.push(RenameTensor(graph, old, text.strip()))
        except WorkbenchError as e:
            self._error(e)
        if not ok and tree is not None:
            tree.refresh()
        return ok

    def _inspector_menu(self, pos) -> None:
        tree = self._inspector()
        menu = self.inspector_menu(tree.itemAt(pos))
        if menu is not None and not menu.isEmpty():
            self.show_menu(menu, tree.viewport().mapToGlobal(pos))

    def inspector_menu(self, item: QTreeWidgetItem | None) -> QMenu | None:
        graph = self.document.graph
        if graph is None or not self._model_ready():
            return None
        menu = QMenu(self._inspector())
        tensor = self.document.selected_tensor
        if tensor and graph.has_value(tensor):
            v = graph.value(tensor)
            if v.is_initializer:
                menu.addAction(f"Replace '{tensor}' from .npy…", lambda: self.replace_initializer(tensor))
            menu.addAction("Rename Tensor…", lambda: self.rename_tensor(tensor))
            return menu
        n = self._selected_node()
        if n is None:
            return None
        row = self._row(item) if item is not None else None
        if row is not None and self._editable_text(n, *row) is not None:
            menu.addAction("Edit…", lambda: self._inspector_start_edit(item))
        if row is not None and row[0] == "Attributes" and row[1] in n.attributes:
            key = row[1]
            menu.addAction(f"Remove Attribute '{key}'", lambda: self.push(lambda: RemoveAttribute(graph, n.id, key)))
        if row is not None and row[0] == "Inputs" and row[2] < len(n.inputs) and n.inputs[row[2]]:
            idx = row[2]
            menu.addAction("Disconnect", lambda: self.push(lambda: SetInput(graph, n.id, idx, None)))
            v = graph.value(n.inputs[idx]) if graph.has_value(n.inputs[idx]) else None
            if v is not None and v.is_initializer:
                menu.addAction(f"Replace '{v.name}' from .npy…", lambda name=v.name: self.replace_initializer(name))
        spec = op_spec(n.op_type, n.domain, graph.opset_imports.get(n.domain or "", graph.opset) or None)
        if spec is not None:
            missing = [a for a in spec.attributes.values() if a.name not in n.attributes]
            if missing:
                sub = menu.addMenu("Add Attribute")
                for a in sorted(missing, key=lambda a: a.name):
                    default = "" if a.default is None else format_attribute_value(a.default)
                    label = f"{a.name}  ({a.type_name}{', default ' + default if default else ''})"
                    act = sub.addAction(label, lambda a=a, default=default: self._add_attribute(n.id, a, default))
                    act.setToolTip(a.description)
        return menu

    def _add_attribute(self, node_id: int, spec_attr, default: str) -> None:
        graph = self.document.graph
        text = self._text("Add Attribute", f"{spec_attr.name} ({spec_attr.type_name}):", default)
        if text is None:
            return
        try:
            value = parse_attribute_text(text, spec_attr.type, spec_attr.name, like=spec_attr.default)
        except WorkbenchError as e:
            self._error(e)
            return
        self.push(lambda: SetAttribute(graph, node_id, spec_attr.name, value))

    # ---- saving -------------------------------------------------------------------------------
    def _ask_box(self, title: str, text: str, buttons: list[str]) -> str:
        box = QMessageBox(QMessageBox.Warning, title, text, parent=self.window)
        made = {name: box.addButton(name, QMessageBox.RejectRole if name == "Cancel" else QMessageBox.AcceptRole) for name in buttons}
        box.setDefaultButton(made.get("Cancel") or next(iter(made.values())))
        box.exec()
        clicked = box.clickedButton()
        return next((name for name, b in made.items() if b is clicked), "Cancel")

    def before_save(self, path) -> bool:
        """Called by the main window before writing; False cancels this save.

        Asks when the model fails validation, and (once per opened model) before plain Save
        overwrites the file the model was opened from, offering Save As instead."""
        graph = self.document.graph
        if graph is None:
            return False
        problems = check(graph)
        if problems:
            more = f"\n\n…and {len(problems) - 1} more (see the Problems panel)." if len(problems) > 1 else ""
            answer = self.ask(
                "Save an invalid model?",
                f"The edited model does not pass validation:\n\n{problems[0].sentence}{more}\n\n"
                "onnxruntime and other tools may refuse it. Save it anyway?",
                ["Save Anyway", "Cancel"],
            )
            if answer != "Save Anyway":
                return False
        source = self.document.path
        if path is None and source is not None and source.resolve() not in self._overwrite_ok:
            answer = self.ask(
                "Overwrite the original model?",
                f"Saving replaces {source.name}, the file this model was opened from, with the edited model.\n\n"
                "Overwrite it, or save the edited model under a new name?",
                ["Overwrite", "Save As…", "Cancel"],
            )
            if answer == "Save As…":
                QTimer.singleShot(0, self.window.save_as)
                return False
            if answer != "Overwrite":
                return False
            self._overwrite_ok.add(source.resolve())
        return True
