"""Accuracy: find where numbers go wrong, tensor by tensor (core.accuracy; the GUI's `main.py debug`).

Two comparisons: the compiled program of the open model against onnxruntime (read at its fused
kernels' outputs), or another ONNX model against the open one (the model before an edit, a
quantized version, another opset). Both run on the compile check's inputs and tolerances (Check…,
shared with Compile & Run). The result lists every compared tensor, worst first; the canvas colours
each node by its error (units of the tolerance, or quantization steps) and rings the first
divergence: the earliest node beyond tolerance whose inputs agree. Click a row to show its node;
double-click (or View Values) to see both values, their difference and its histogram; Show Kernel
opens the kernel that computes it in the Lowering panel.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QColor, QFont, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.workers import Job, error_text, start_job

__all__ = ["create_panel", "AccuracyPanel", "AREA", "DIVERGENCE_ROLE", "COLUMNS"]

logger = logging.getLogger(__name__)

AREA = "bottom"
DIVERGENCE_ROLE = "divergence"
DIVERGENCE_COLOR = "#d62728"
COLUMNS = ["Node", "Op", "Output", "Max abs", "× tol", "Steps", "Range", "Kernel"]
COMPILED, AGAINST = "Compiled program vs onnxruntime", "Another model vs this one…"


def _fmt(x) -> str:
    if x is None:
        return ""
    return f"{x:.3g}" if math.isfinite(x) else str(x)


class AccuracyPanel(QWidget):
    def __init__(self, window, dock: QDockWidget):
        super().__init__()
        self.window = window
        self.dock = dock
        self.report = None
        self.job: Job | None = None
        self.other_path: str | None = None
        self.generation = 0
        self.stale = False
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        row = QHBoxLayout()
        self.mode = QComboBox()
        self.mode.setObjectName("accuracy-mode")
        self.mode.addItems([COMPILED, AGAINST])
        self.mode.setToolTip("Compare the compiled program with onnxruntime, or another ONNX model with the open one")
        self.target = QComboBox()
        self.target.addItems(["cpu", "cuda"])
        self.target.setToolTip("The compiled program's target (CUDA needs a GPU here)")
        self.other_label = QLabel("")
        self.check_btn = QPushButton("Check…")
        self.check_btn.setToolTip("Inputs (seeded random, or an .npz file) and tolerances: the compile check's, shared with Compile & Run")
        self.run_btn = QPushButton("Debug")
        self.run_btn.setObjectName("accuracy-run")
        self.run_btn.setToolTip("Compare tensor by tensor and ring the first divergence (Ctrl+Shift+D)")
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setEnabled(False)
        self.values_btn = QPushButton("View Values")
        self.values_btn.setToolTip("Both values of the selected tensor, their difference and its histogram")
        self.kernel_btn = QPushButton("Show Kernel")
        self.kernel_btn.setToolTip("The kernel that computes the selected tensor, in the Lowering panel")
        for w in (QLabel("Compare:"), self.mode, self.target, self.other_label, self.check_btn, self.run_btn, self.cancel_btn):
            row.addWidget(w)
        row.addStretch(1)
        row.addWidget(self.values_btn)
        row.addWidget(self.kernel_btn)
        layout.addLayout(row)
        self.status = QLabel("Debug compares two computations of the open model tensor by tensor and rings where they first part.")
        self.status.setObjectName("accuracy-status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("accuracy-table")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectRows)
        self.table.setSelectionMode(QTableWidget.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(False)
        layout.addWidget(self.table, 1)
        self.mode.currentTextChanged.connect(self._mode_changed)
        self.run_btn.clicked.connect(self.start)
        self.cancel_btn.clicked.connect(self.cancel)
        self.check_btn.clicked.connect(self._check_dialog)
        self.values_btn.clicked.connect(self.view_values)
        self.kernel_btn.clicked.connect(self.show_kernel)
        self.table.itemSelectionChanged.connect(self._row_selected)
        self.table.itemDoubleClicked.connect(lambda _item: self.view_values())
        doc = window.document
        doc.graphReplaced.connect(self._reset)
        doc.graphChanged.connect(self._mark_stale)
        window.canvas.viewShown.connect(self._apply_overlay)
        self._mode_changed(self.mode.currentText())
        self._update_buttons()

    # -- choosing ------------------------------------------------------------------------

    def _mode_changed(self, text: str) -> None:
        against = text == AGAINST
        self.target.setVisible(not against)
        self.other_label.setVisible(against)
        if against and self.other_path is None and self.isVisible():
            self.choose_other()
        self._show_other()

    def _show_other(self) -> None:
        self.other_label.setText(Path(self.other_path).name if self.other_path else "(no model chosen)")
        self.other_label.setToolTip(self.other_path or "")

    def choose_other(self) -> str | None:
        from app.dialogs.files import open_file

        path = open_file(self.window, self, "model", "Model to compare with the open one", "ONNX models (*.onnx);;All files (*)")
        if path:
            self.other_path = path
            self._show_other()
        return path or None

    def _check(self):
        dock = self.window.panels.get("compile")
        return getattr(dock.widget(), "check", None) if dock is not None else None

    def _check_dialog(self) -> None:
        dock = self.window.panels.get("compile")
        if dock is not None:
            dock.widget().check_dialog()

    # -- running -------------------------------------------------------------------------

    def start(self, mode: str | None = None, other: str | None = None) -> Job | None:
        """Debug the open model (`mode`: COMPILED or AGAINST, default the combo's; `other`: the model
        to compare, default the chosen one); the job's result shows when it ends."""
        graph = self.window.document.graph
        if graph is None or (self.job is not None and self.job.isRunning()):
            return None
        if other is not None:  # before the mode: choosing AGAINST without a model asks for one
            self.other_path = other
            self._show_other()
        if mode is not None:
            self.mode.setCurrentText(mode)
        against = self.mode.currentText() == AGAINST
        if against and not self.other_path and not self.choose_other():
            return None
        check = self._check()
        options = {"inputs": check.inputs, "rtol": check.rtol, "atol": check.atol} if check is not None else {}
        target = self.target.currentText()
        other_path = self.other_path
        this_name = Path(self.window.document.path).name if getattr(self.window.document, "path", None) else "the open model"
        self.generation += 1
        generation = self.generation

        def work(job: Job):
            from core import load_model
            from core.accuracy.debug import debug_compiled, debug_models

            progress = lambda f, text: job.report(f, text)  # noqa: E731
            if against:
                other_graph = load_model(other_path)
                return debug_models(graph, other_graph, reference=this_name, subject=Path(other_path).name,
                                    progress=progress, cancel=job.is_cancelled, **options)
            return debug_compiled(graph, target, progress=progress, cancel=job.is_cancelled, **options)

        self.status.setStyleSheet("")
        self.status.setText("Comparing…")
        self.job = start_job(work, "Debugging accuracy", self, done=self._done, failed=self._failed, cancelled=self._cancelled,
                             progressed=self._progress, ended=lambda _job: self._update_buttons(),
                             wanted=lambda: generation == self.generation)
        self._update_buttons()
        return self.job

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _progress(self, p) -> None:
        self.status.setText(p.message if hasattr(p, "message") else str(p))
        bar = getattr(self.window, "progress", None)
        if bar is not None:
            bar.setValue(int(1000 * max(0.0, min(1.0, getattr(p, "fraction", 0.0)))))

    def _failed(self, exc: BaseException) -> None:
        self.status.setStyleSheet("color: #b00020")
        self.status.setText(error_text(exc, "The accuracy debugger"))

    def _cancelled(self) -> None:
        self.status.setText("Debug cancelled.")

    def _done(self, report) -> None:
        self.report = report
        self.stale = False
        self._fill(report)
        self._apply_overlay()
        text = report.summary()
        if report.notes:
            text += "\n" + "\n".join(f"• {n}" for n in report.notes)
        self.status.setStyleSheet("")
        self.status.setText(text)
        if report.first is not None:
            self.show_first()

    def _update_buttons(self) -> None:
        busy = self.job is not None and self.job.isRunning()
        self.run_btn.setEnabled(not busy and self.window.document.graph is not None)
        self.cancel_btn.setEnabled(busy)
        t = self.selected()
        self.values_btn.setEnabled(t is not None and not busy)
        self.kernel_btn.setEnabled(t is not None and bool(t.kernel))

    # -- the result ----------------------------------------------------------------------

    def _fill(self, report) -> None:
        rows = report.ranked()
        self.table.setRowCount(len(rows))
        self.table.setHorizontalHeaderItem(7, QTableWidgetItem("Kernel" if report.mode == "compiled" else "Other tensor"))
        bold = QFont(self.table.font())
        bold.setBold(True)
        for r, t in enumerate(rows):
            cells = [t.node, t.op, t.output, _fmt(t.max_abs), _fmt(t.tol_units), _fmt(t.steps),
                     f"{t.range[0]:.3g}..{t.range[1]:.3g}" if t.range else "", (t.kernel or "") if report.mode == "compiled" else (t.other or "")]
            first = report.first is not None and t.output == report.first.output
            for c, text in enumerate(cells):
                item = QTableWidgetItem(("▶ " if first and c == 0 else "") + text)
                item.setData(Qt.UserRole, t.output)
                if c >= 3:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                if not t.ok:
                    item.setForeground(QColor("#b00020"))
                if first:
                    item.setFont(bold)
                    item.setToolTip("The first divergence: the earliest node beyond tolerance whose inputs agree")
                self.table.setItem(r, c, item)
        self.table.setColumnHidden(5, not any(t.steps is not None for t in rows))
        self.table.setColumnHidden(7, not any((t.kernel if report.mode == "compiled" else t.other) for t in rows))
        self.table.resizeColumnsToContents()

    def selected(self):
        if self.report is None:
            return None
        items = self.table.selectedItems()
        return self.report.tensor(items[0].data(Qt.UserRole)) if items else None

    def _row_selected(self) -> None:
        self._update_buttons()
        t = self.selected()
        if t is None or self.stale:
            return
        graph = self.window.document.graph
        if graph is not None and graph.has_node(t.node_id):
            self.window.document.set_selection([t.node_id])
            self.window.canvas.center_on(t.node_id)

    def show_first(self) -> None:
        """Select the first divergence's row (which selects and centres its node)."""
        if self.report is None or self.report.first is None:
            return
        for r in range(self.table.rowCount()):
            if self.table.item(r, 0).data(Qt.UserRole) == self.report.first.output:
                self.table.selectRow(r)
                self.table.scrollToItem(self.table.item(r, 0))
                return

    def overlay_values(self) -> dict[int, float]:
        """ONNX node id -> its worst output's error (quantization steps where known, else units of the tolerance)."""
        if self.report is None or self.stale:
            return {}
        return self.report.node_errors()

    def _apply_overlay(self, *_args) -> None:
        canvas = self.window.canvas
        values = self.overlay_values()
        if values and getattr(canvas, "mode", "model") == "model":
            stepped = any(t.steps is not None for t in self.report.tensors)
            unit = "steps" if stepped else "× tol"
            legend = "error: quantization steps (× tolerance where no scale)" if stepped else "error: × tolerance"
            canvas.set_overlay(values, legend, unit=unit)
            first = self.report.first
            canvas.ring_roles = set(canvas.ring_roles) | {DIVERGENCE_ROLE}
            canvas.set_highlight(DIVERGENCE_ROLE, [first.node_id] if first is not None else [], DIVERGENCE_COLOR)
        else:
            canvas.clear_highlight(DIVERGENCE_ROLE)

    def view_values(self):
        """Open both values of the selected tensor side by side: at once where they were kept, else
        computed again on a worker (a compiled program's tensor means a build); returns the dialog
        or, while it is being computed, None."""
        t = self.selected()
        if t is None:
            return None
        report = self.report
        if t.output in report.kept:
            return self._open_pair(report, t, *report.kept[t.output])
        self.status.setText(self.status.text().split("\n⚠")[0] + f"\n⚠ Computing '{t.output}' again to show its values…")
        generation = self.generation
        self.values_job = start_job(lambda _job: report.pair(t.output), "Reading the tensor", self,
                                    done=lambda pair: self._open_pair(report, t, *pair),
                                    failed=lambda e: QMessageBox.warning(self, "View values", error_text(e, "Reading the tensor")),
                                    wanted=lambda: generation == self.generation)
        return None

    def _open_pair(self, report, t, ours, ref):
        from app.dialogs.tensor_pair import TensorPairViewer
        from core.accuracy.report import describe

        checked = "Compiled" if report.mode == "compiled" else report.subject
        reference = report.runtime if report.mode == "compiled" else report.reference
        dialog = TensorPairViewer(t.output, ours, ref, ours_title=checked, reference_title=reference or "Reference",
                                  figures=f"{t.op} node '{t.node}': {describe(t)}", parent=self.window)
        dialog.show()
        return dialog

    def show_kernel(self) -> bool:
        """The selected tensor's kernel in the Lowering panel: the last stage that has it, expanded."""
        t = self.selected()
        dock = self.window.panels.get("lowering")
        if t is None or not t.kernel or dock is None:
            return False
        panel = dock.widget()
        dock.show()
        dock.raise_()
        if self._expand_kernel(panel, t.kernel):
            return True
        if not getattr(panel, "stages", None) and not panel.running and not self.stale:
            panel.start()  # not lowered yet: lower, then open the kernel once the stages are there
            self._await_stages(panel, t.kernel, tries=600)
            return False
        self.status.setText(self.status.text().split("\n⚠")[0] + f"\n⚠ Kernel {t.kernel} is not among the Lowering panel's stages (lower the model again).")
        return False

    @staticmethod
    def _expand_kernel(panel, kernel: str) -> bool:
        for stage in reversed(getattr(panel, "stages", []) or []):
            try:
                if stage.function_lines(kernel):
                    panel.select_stage(stage.index)
                    panel.expand(kernel)
                    return True
            except KeyError:
                continue
        return False

    def _await_stages(self, panel, kernel: str, tries: int) -> None:
        from PySide6.QtCore import QTimer

        if panel.running and tries > 0:
            QTimer.singleShot(200, lambda: self._await_stages(panel, kernel, tries - 1))
        elif getattr(panel, "stages", None):
            self._expand_kernel(panel, kernel)

    # -- model changes -------------------------------------------------------------------

    def _mark_stale(self) -> None:
        if self.report is not None and not self.stale:
            self.stale = True
            self.status.setText(self.status.text() + "\n(The model changed since: Debug again to compare the edited model.)")
            self.window.canvas.set_overlay(None)
            self._apply_overlay()

    def _reset(self) -> None:
        self.generation += 1
        if self.job is not None and self.job.isRunning():
            self.job.cancel()
        self.report = None
        self.stale = False
        self.table.setRowCount(0)
        self.status.setStyleSheet("")
        self.status.setText("Debug compares two computations of the open model tensor by tensor and rings where they first part.")
        self.window.canvas.clear_highlight(DIVERGENCE_ROLE)
        self._update_buttons()


def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Accuracy", window)
    dock.setObjectName("panel-accuracy")
    panel = AccuracyPanel(window, dock)
    dock.setWidget(panel)
    dock.panel = panel
    action = QAction("Debug Accuracy", window)
    action.setShortcut(QKeySequence("Ctrl+Shift+D"))
    action.setToolTip("Compare the compiled program (or another model) with the reference, tensor by tensor")
    action.triggered.connect(lambda: (dock.show(), dock.raise_(), panel.start()))
    window.addAction(action)
    dock.debug_action = action
    return dock
