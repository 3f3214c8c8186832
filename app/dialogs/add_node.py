"""The "Add node" dialog: pick any op the model's opsets define, wire its inputs, set attributes.

The op list comes from `core.model.edits.available_ops` (onnx.defs schemas for the model's own opset
imports, so a model on opset 17 is not offered Gelu); attributes are listed from the schema with
their defaults filled in, and only values the user changes (plus required ones) are written to the
node, as exporters do. OK builds a `core.model.edits.InsertNode` and pushes it on the document's undo
stack; if the core refuses it, the sentence is shown in the dialog and the dialog stays open.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core import WorkbenchError
from core.model.edits import InsertNode, OpSpec, available_ops, format_attribute_value, parse_attribute_text

__all__ = ["AddNodeDialog"]


class AddNodeDialog(QDialog):
    def __init__(self, document, parent=None, inputs: list[str] | None = None, insert_on: str | None = None, op_type: str = ""):
        super().__init__(parent)
        self.document = document
        self.graph = document.graph
        self.prefill = list(inputs or [])
        self.insert_on = insert_on
        self.edit: InsertNode | None = None
        self.specs = available_ops(self.graph)
        self.spec: OpSpec | None = None
        self.input_boxes: list[QComboBox] = []
        self.tensor_names = [v.name for v in self.graph.values if v.name]
        self.setWindowTitle("Add Node" if not insert_on else f"Insert Node after '{insert_on}'")
        self.resize(820, 560)

        self.search = QLineEdit(placeholderText="Search ops (e.g. relu, conv, norm)…")
        self.search.setClearButtonEnabled(True)
        self.op_list = QListWidget()
        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.addWidget(self.search)
        lv.addWidget(self.op_list)
        self.count_label = QLabel("")
        lv.addWidget(self.count_label)

        self.title = QLabel("")
        self.title.setStyleSheet("font-weight: bold; font-size: 13pt;")
        self.doc_label = QLabel("")
        self.doc_label.setWordWrap(True)
        self.doc_label.setTextFormat(Qt.PlainText)
        self.doc_label.setStyleSheet("color: #46505a;")
        self.name_edit = QLineEdit(placeholderText="automatic")
        self.outputs_spin = QSpinBox()
        self.outputs_spin.setToolTip("How many outputs the node has (ops such as Split take a variable number)")
        self.inputs_form = QFormLayout()
        self.attr_table = QTableWidget(0, 3)
        self.attr_table.setHorizontalHeaderLabels(["Attribute", "Type", "Value"])
        self.attr_table.horizontalHeader().setSectionResizeMode(2, QHeaderView.Stretch)
        self.attr_table.verticalHeader().hide()
        self.insert_on_box = QCheckBox(f"Rewire the readers of '{insert_on}' to the new node's output")
        self.insert_on_box.setChecked(True)
        self.insert_on_box.setVisible(bool(insert_on))
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setStyleSheet("color: #b3261e;")
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(6, 0, 0, 0)
        rv.addWidget(self.title)
        rv.addWidget(self.doc_label)
        form = QFormLayout()
        form.addRow("Node name", self.name_edit)
        form.addRow("Outputs", self.outputs_spin)
        self._outputs_label = form.labelForField(self.outputs_spin)
        rv.addLayout(form)
        rv.addWidget(QLabel("<b>Inputs</b>"))
        rv.addLayout(self.inputs_form)
        rv.addWidget(QLabel("<b>Attributes</b> (defaults from the op schema; * required)"))
        rv.addWidget(self.attr_table, 1)
        rv.addWidget(self.insert_on_box)
        rv.addWidget(self.status)

        split = QSplitter()
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([260, 560])
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.button(QDialogButtonBox.Ok).setText("Insert")
        self.buttons.accepted.connect(self.apply)
        self.buttons.rejected.connect(self.reject)
        outer = QVBoxLayout(self)
        outer.addWidget(split, 1)
        outer.addWidget(self.buttons)

        self.search.textChanged.connect(self._filter)
        self.op_list.currentItemChanged.connect(lambda cur, _prev: self._select(cur))
        self.op_list.itemDoubleClicked.connect(lambda _item: self.apply())
        self._filter(op_type)
        if op_type:
            self.search.setText(op_type)
        self.search.setFocus()

    # ---- op list -----------------------------------------------------------------------------
    def _filter(self, text: str) -> None:
        q = text.strip().lower()
        hits = [s for s in self.specs if q in s.op_type.lower() or (s.domain and q in s.domain.lower())]
        hits.sort(key=lambda s: (not s.op_type.lower().startswith(q), s.op_type.lower() != q, s.op_type.lower(), s.domain))
        if q:
            hits.sort(key=lambda s: (s.op_type.lower() != q, not s.op_type.lower().startswith(q)))
        self.op_list.clear()
        for s in hits:
            item = QListWidgetItem(s.op_type if not s.domain else f"{s.op_type}  ({s.domain})")
            item.setData(Qt.UserRole, s)
            item.setToolTip(f"{s.qualified_name}, since opset {s.since_version}")
            self.op_list.addItem(item)
        self.count_label.setText(f"{len(hits)} of {len(self.specs)} ops in the model's opsets")
        if hits:
            self.op_list.setCurrentRow(0)
        else:
            self._select(None)

    def select_op(self, op_type: str, domain: str = "") -> None:
        """Select an op by name (for scripts and tests)."""
        self.search.setText(op_type)
        for i in range(self.op_list.count()):
            s = self.op_list.item(i).data(Qt.UserRole)
            if s.op_type == op_type and s.domain == domain:
                self.op_list.setCurrentRow(i)
                return
        raise KeyError(op_type)

    # ---- the chosen op -----------------------------------------------------------------------
    def _select(self, item: QListWidgetItem | None) -> None:
        spec = item.data(Qt.UserRole) if item is not None else None
        self.spec = spec
        self.status.setText("")
        while self.inputs_form.rowCount():
            self.inputs_form.removeRow(0)
        self.input_boxes = []
        self.attr_table.setRowCount(0)
        self.buttons.button(QDialogButtonBox.Ok).setEnabled(spec is not None)
        if spec is None:
            self.title.setText("No op matches")
            self.doc_label.setText("")
            return
        self.title.setText(f"{spec.qualified_name}  ·  since opset {spec.since_version}")
        doc = spec.doc.split("\n\n")[0].replace("\n", " ").strip()
        self.doc_label.setText(doc[:400] + ("…" if len(doc) > 400 else ""))
        slots: list[tuple[str, bool]] = []
        for p in spec.inputs:
            if p.variadic:
                count = max(2, spec.min_input - len(slots), len(self.prefill) - len(slots))
                base = len(slots)
                slots += [(f"{p.name}[{k}]", base + k >= spec.min_input) for k in range(count)]
            else:
                slots.append((p.name, p.optional))
        for i, (name, optional) in enumerate(slots):
            box = QComboBox()
            box.setEditable(True)
            box.addItem("")
            box.addItems(self.tensor_names)
            box.setCurrentText(self.prefill[i] if i < len(self.prefill) else "")
            box.setInsertPolicy(QComboBox.NoInsert)
            box.lineEdit().setPlaceholderText("(omitted)" if optional else "tensor name")
            self.inputs_form.addRow(f"{name}{'' if optional else ' *'}", box)
            self.input_boxes.append(box)
        attrs = sorted(spec.attributes.values(), key=lambda a: (not a.required, a.name))
        self.attr_table.setRowCount(len(attrs))
        for r, a in enumerate(attrs):
            name = QTableWidgetItem(a.name + (" *" if a.required else ""))
            name.setFlags(name.flags() & ~Qt.ItemIsEditable)
            name.setToolTip(a.description)
            name.setData(Qt.UserRole, a)
            kind = QTableWidgetItem(a.type_name)
            kind.setFlags(kind.flags() & ~Qt.ItemIsEditable)
            value = QTableWidgetItem("" if a.default is None else format_attribute_value(a.default))
            value.setToolTip(a.description)
            for c, it in enumerate((name, kind, value)):
                self.attr_table.setItem(r, c, it)
        self.attr_table.resizeColumnToContents(0)
        variable = spec.max_output > spec.min_output
        self.outputs_spin.setRange(max(spec.min_output, 1), min(spec.max_output, 64))
        self.outputs_spin.setValue(max(spec.min_output, 1))
        self.outputs_spin.setVisible(variable)
        self._outputs_label.setVisible(variable)

    def set_attribute_text(self, name: str, text: str) -> None:
        """Type a value into an attribute row (for scripts and tests)."""
        for r in range(self.attr_table.rowCount()):
            if self.attr_table.item(r, 0).data(Qt.UserRole).name == name:
                self.attr_table.item(r, 2).setText(text)
                return
        raise KeyError(name)

    def build_edit(self) -> InsertNode:
        """The InsertNode the form describes (raises WorkbenchError on unreadable values)."""
        spec = self.spec
        if spec is None:
            raise WorkbenchError("Choose an op first.")
        inputs = [b.currentText().strip() for b in self.input_boxes]
        while inputs and not inputs[-1]:
            inputs.pop()
        attributes = {}
        for r in range(self.attr_table.rowCount()):
            a = self.attr_table.item(r, 0).data(Qt.UserRole)
            text = self.attr_table.item(r, 2).text()
            default_text = "" if a.default is None else format_attribute_value(a.default)
            if text == default_text and not a.required:
                continue  # left at the schema default: keep it implicit
            if not text.strip() and not a.required:
                continue
            attributes[a.name] = parse_attribute_text(text, a.type, a.name, like=a.default)
        name = self.name_edit.text().strip() or None
        insert_on = self.insert_on if self.insert_on and self.insert_on_box.isChecked() and self.insert_on in inputs else None
        return InsertNode(self.graph, spec.op_type, inputs, attributes, domain=spec.domain, name=name, insert_on=insert_on,
                          num_outputs=self.outputs_spin.value())

    def apply(self) -> bool:
        """Insert the node; on refusal show why and stay open. True when inserted."""
        try:
            edit = self.build_edit()
            self.document.push(edit, show_errors=False)
        except WorkbenchError as e:
            self.status.setText(str(e))
            return False
        self.edit = edit
        self.accept()
        return True
