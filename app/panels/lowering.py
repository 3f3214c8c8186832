"""Lowering: the model stepped down through TVM's abstraction levels, one stage at a time.

Left, the stages (core.compiler.lowering.lower: ONNX graph, Relax import, one per pass, target code) with
their level and seconds; "Hide unchanged stages" drops passes that changed nothing. Middle, the
selected stage's IR (app.ir_view: pygments-highlighted, lines changed since the previous stage
marked, a unified diff one toggle away). Right, the pass pipeline: tick to enable/disable, drag
to reorder, Re-run (stages before the first edit come from the cache).

Selecting a stage draws its graph on the canvas. Clicking a node shows its IR lines, outlines on
the canvas every node that came from the same ONNX nodes (role "lineage") and selects those ONNX
nodes in the document (the inspector shows them); "Show in model" switches to the ONNX graph with
them outlined. Double-clicking a call expands it into its fused function / TIR kernel ("Back"
returns); a TIR kernel also opens in the Schedule panel (app.panels.schedule), as it stands
before ScheduleTIR. Keys: Ctrl+L lower, Alt+Down / Alt+Up next / previous stage.

Beside the target, the CPU the code is for (app.panels.cpu_choice, as in the Compile panel): an
ARM64 device lowers to AArch64 code and ends in its assembly.

Lowering runs on a worker thread (app.workers.Job) with progress and Cancel; the GUI only shows
what core.compiler.lowering computed.
"""
from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QKeySequence, QPainter, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core.errors import Cancelled, WorkbenchError
from core.compiler.lowering import LoweringCache, Stage, lower
from core.compiler.levels import Level
from core.compiler.pipeline.pass_list import PASSES, PassSpec, default_pipeline, validate
from core.compiler.target import TargetKind
from core.progress import Progress

from app.ir_view import IRView
from app.workers import Job, error_text, start_job

__all__ = ["create_panel", "LoweringPanel", "AREA", "LINEAGE_COLOR"]

logger = logging.getLogger(__name__)

AREA = "bottom"
LINEAGE_COLOR = "#c026d3"
LEVEL_COLORS = {Level.GRAPH: "#3f73b0", Level.TENSOR_PROGRAM: "#4e9a45", Level.TARGET_CODE: "#b8621c"}


class _Line(QLabel):
    """One line of plain text, elided at the label's width and whole in its tooltip: a long status
    or error never asks the dock for more height or width (the canvas would shrink)."""

    def __init__(self, text: str = ""):
        super().__init__()
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)
        self.setMinimumWidth(20)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setText(text)
        self.setToolTip(text)

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.ElideRight, rect.width())
        self.style().drawItemText(painter, rect, int(Qt.AlignLeft | Qt.AlignVCenter), self.palette(), self.isEnabled(), shown, self.foregroundRole())


def _one_line(label: QLabel) -> QLabel:
    """A rich-text label kept to one line: clipped at the right, never widening or growing the dock."""
    label.setWordWrap(False)
    label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)
    label.setMinimumWidth(20)
    return label


class LoweringPanel(QWidget):
    def __init__(self, window, dock: QDockWidget | None = None):
        super().__init__()
        self.window = window
        self.dock = dock
        self.cache = LoweringCache()
        self.stages: list[Stage] = []
        self.error = ""
        self.lowered_for = ""  # the device or CPU the stages were lowered for, where the user chose one
        self.job: Job | None = None
        self.view_job: Job | None = None
        self.current: Stage | None = None
        self.expanded: str | None = None  # function shown instead of the stage's main
        self.origin: list[int] = []
        self.stale = False
        self.generation = 0  # bumped when another model is opened: older results are dropped

        # -- stages
        self.target_box = QComboBox()
        self.target_box.addItems(list(TargetKind))
        self.target_box.setToolTip("Target: CPU (LLVM) or CUDA (CUDA C is generated without a GPU)")
        self.target_box.currentTextChanged.connect(self._target_changed)
        # the CPU the code is for (the Compile panel's choice: this host, an x86-64 CPU, an ARM64
        # device): an ARM64 choice lowers to AArch64 code, its assembly the last stage
        from app.panels.cpu_choice import CpuChoice

        self.cpu_box = CpuChoice()
        self.cpu_box.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.cpu_box.setMinimumContentsLength(9)
        self.lower_button = QPushButton("Lower")
        self.lower_button.setToolTip("Lower the model through the pipeline (Ctrl+L)")
        self.lower_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(6)
        keep = self.progress.sizePolicy()  # shown while lowering; its room kept, so the list does not jump
        keep.setRetainSizeWhenHidden(True)
        self.progress.setSizePolicy(keep)
        self.progress.hide()
        self.stage_tree = QTreeWidget()
        self.stage_tree.setColumnCount(4)
        self.stage_tree.setHeaderLabels(["#", "Stage", "Level", "Seconds"])
        self.stage_tree.setRootIsDecorated(False)
        self.stage_tree.setUniformRowHeights(True)
        header = self.stage_tree.header()  # ~18 rows: fit the columns to their text, the stage name takes the rest
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.Stretch)
        self.stage_tree.currentItemChanged.connect(self._stage_selected)
        # the list has the column's height but for one row of controls and one status line: four
        # stages show in a low dock, before the first run as after it, and it never asks for more
        self.stage_tree.setMinimumHeight(self.stage_tree.fontMetrics().height() * 4)
        self.stage_tree.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Ignored)
        self.hide_unchanged = QCheckBox("Hide unchanged")
        self.hide_unchanged.setToolTip("Hide the stages whose pass changed nothing")
        self.hide_unchanged.toggled.connect(self._apply_filter)
        self.status = _Line("Press Lower (Ctrl+L) to step the model down to target code.")

        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        lv.setSpacing(3)
        row = QHBoxLayout()
        row.addWidget(self.target_box)
        row.addWidget(self.cpu_box)
        for b in (self.lower_button, self.cancel_button):  # the style's 80 px minimum widened the panel
            b.setMinimumWidth(b.fontMetrics().horizontalAdvance(b.text()) + 20)
            row.addWidget(b)
        row.addWidget(self.hide_unchanged)
        row.addStretch(1)
        lv.addLayout(row)
        lv.addWidget(self.progress)
        lv.addWidget(self.stage_tree, 1)
        lv.addWidget(self.status)

        # -- IR
        self.header = _one_line(QLabel(""))
        self.header.setTextFormat(Qt.RichText)
        self.ir = IRView()
        self.diff_box = QCheckBox("Show diff")
        self.diff_box.setToolTip("Show a unified diff against the previous stage instead of the full text")
        self.diff_box.toggled.connect(self.ir.set_show_diff)
        self.origin_label = _Line("")
        self.show_model_button = QPushButton("Show in model")
        self.show_model_button.setToolTip("Switch the canvas to the ONNX graph with the clicked node's origin outlined")
        self.show_model_button.clicked.connect(self.show_origin_in_model)
        self.show_model_button.setEnabled(False)
        self.back_button = QPushButton("Back")
        self.back_button.setToolTip("Back from the expanded function to the stage's graph")
        self.back_button.clicked.connect(self.collapse)
        self.back_button.hide()
        mid = QWidget()
        mv = QVBoxLayout(mid)
        mv.setContentsMargins(0, 0, 0, 0)
        mv.addWidget(self.header)
        mv.addWidget(self.ir, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.diff_box)
        bottom.addWidget(self.origin_label, 1)
        bottom.addWidget(self.back_button)
        bottom.addWidget(self.show_model_button)
        self.compare_button = QPushButton("Compare…")
        self.compare_button.setToolTip("This stage's graph beside the one before the last step that changed it, differences marked")
        self.compare_button.clicked.connect(self.compare_with_previous)
        bottom.addWidget(self.compare_button)
        mv.addLayout(bottom)

        # -- passes
        self.pass_list = QListWidget()
        self.pass_list.setDragDropMode(QAbstractItemView.InternalMove)
        self.pass_list.setDefaultDropAction(Qt.MoveAction)
        self.pass_list.itemChanged.connect(self._passes_edited)
        self.pass_list.model().rowsMoved.connect(self._passes_edited)
        self.rerun_button = QPushButton("Re-run")
        self.rerun_button.setToolTip("Lower again with this pipeline; unchanged stages come from the cache")
        self.rerun_button.clicked.connect(self.start)
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Back to the default pipeline for the target")
        self.reset_button.clicked.connect(self.reset_passes)
        self.pass_status = _Line("")
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        rv.addWidget(QLabel("Passes (tick, drag to reorder)"))
        rv.addWidget(self.pass_list, 1)
        rb = QHBoxLayout()
        rb.addWidget(self.rerun_button)
        rb.addWidget(self.reset_button)
        rv.addLayout(rb)
        rv.addWidget(self.pass_status)

        split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(mid)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([400, 700, 230])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(split)

        self.reset_passes()
        QShortcut(QKeySequence("Ctrl+L"), window, activated=self.start, context=Qt.WindowShortcut)
        QShortcut(QKeySequence("Alt+Down"), window, activated=lambda: self.step(1), context=Qt.WindowShortcut)
        QShortcut(QKeySequence("Alt+Up"), window, activated=lambda: self.step(-1), context=Qt.WindowShortcut)
        canvas = window.canvas
        canvas.viewSelectionChanged.connect(self._canvas_selection)
        canvas.nodeActivated.connect(self._canvas_activated)
        window.document.graphChanged.connect(self._model_changed)
        window.document.graphReplaced.connect(self._model_replaced)

    # ---- pipeline editing --------------------------------------------------------------------
    def target_kind(self) -> TargetKind:
        """The target chosen in the combo box (its text is a TargetKind's value)."""
        return TargetKind.parse(self.target_box.currentText())

    def specs(self) -> list[PassSpec]:
        """The pipeline as the pass list shows it (order and ticks)."""
        out = []
        for i in range(self.pass_list.count()):
            item = self.pass_list.item(i)
            out.append(PassSpec(item.data(Qt.UserRole), enabled=item.checkState() == Qt.Checked))
        return out

    def set_specs(self, specs: list[PassSpec]) -> None:
        self.pass_list.blockSignals(True)
        self.pass_list.clear()
        for spec in specs:
            info = PASSES[spec.name]
            item = QListWidgetItem(spec.name + ("  •" if info.required else ""))
            item.setData(Qt.UserRole, spec.name)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable | Qt.ItemIsDragEnabled)
            item.setCheckState(Qt.Checked if spec.enabled else Qt.Unchecked)
            item.setToolTip(f"{info.level}: {info.description}" + ("\nRequired to build a runnable module." if info.required else ""))
            item.setForeground(QBrush(QColor(LEVEL_COLORS.get(info.level, "#333"))))
            self.pass_list.addItem(item)
        self.pass_list.blockSignals(False)
        self._passes_edited()

    def reset_passes(self) -> None:
        self.set_specs(default_pipeline(self.target_kind()))

    def _target_changed(self, target: str) -> None:
        self.cpu_box.setVisible(self.target_kind() is TargetKind.CPU)  # CUDA's host CPU is this machine
        self.reset_passes()

    def _passes_edited(self, *_args) -> None:
        specs = self.specs()
        document = getattr(self.window, "document", None)
        if document is not None:  # what a compile for this target builds with
            document.set_pipeline(self.target_kind(), specs)
        problems = validate(specs)
        self.pass_status.setText(problems[0] if problems else "")
        self.pass_status.setStyleSheet("color: #b00020;" if problems else "")
        self.rerun_button.setEnabled(not problems and self.job is None)

    # ---- running -----------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.job is not None

    def start(self) -> None:
        """Lower the document's graph with the current pipeline, off the UI thread."""
        graph = self.window.document.graph
        if graph is None or self.job is not None:
            return
        specs = self.specs()
        problems = validate(specs)
        if problems:
            self.status.setText(problems[0])
            return
        if self.dock is not None:  # shown, at the size the user gave it: the canvas draws the stages
            self.dock.show()
            self.dock.raise_()
        snapshot = graph.clone()  # the user may keep editing while this runs
        target = self.target_kind()
        cpu = self.cpu_box.choice() if target is TargetKind.CPU else None
        cache = self.cache
        # the status names a device or CPU the user chose (not this host)
        named = cpu is not None and (cpu.cpu is not None or cpu.foreign_arch)
        self.lowered_for = (cpu.device or cpu.describe()) if named else ""  # short: the status line is the stage list's width

        def work(job: Job):
            try:
                # another CPU than this host's: its target (TVM and LLVM's checks on the worker); an ARM64 device's assembly too
                built_for = cpu.target() if cpu is not None and (cpu.cpu is not None or cpu.foreign_arch) else target
                stages = lower(snapshot, built_for, specs, cache=cache, cancel=job.is_cancelled, progress=job.report,
                               assembly=cpu is not None and cpu.foreign_arch)
                return stages, ""
            except Cancelled as e:
                return e.stages, "Cancelled."
            except WorkbenchError as e:
                return getattr(e, "stages", []) or [], str(e)

        generation = self.generation
        self.lower_button.setEnabled(False)
        self.rerun_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.progress.show()
        self.status.setText("Lowering…")
        # a result for a model that has been replaced meanwhile is dropped (wanted)
        self.job = start_job(
            work, "Lowering", self, progressed=self._progressed, ended=lambda _job: self._finish_job(),
            done=self._done, failed=self._failed, cancelled=lambda: self._done(([], "Cancelled.")),
            wanted=lambda: generation == self.generation,
        )

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setText("Cancelling after the current step…")

    def _progressed(self, event: Progress) -> None:
        self.progress.setValue(int(event.fraction * 1000))
        self.status.setText(f"Lowering: {event.message}")

    def _finish_job(self) -> None:
        self.job = None
        self.lower_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress.hide()
        self._passes_edited()

    def _failed(self, exc: BaseException) -> None:
        message = error_text(exc, "Lowering")
        self.error = message
        self.status.setText(message)
        self.status.setStyleSheet("color: #b00020;")

    def _done(self, result) -> None:
        stages, error = result
        previous = self.current.name if self.current is not None else None
        self.error = error
        self.stale = False
        if stages or not self.stages:
            self.stages = list(stages)
        self.progress.setValue(1000 if not error else self.progress.value())
        total = sum(s.seconds for s in self.stages)
        cached = sum(1 for s in self.stages if s.cached)
        if error:
            self.status.setText(error + (f" The {len(stages)} stage(s) before it are listed." if stages else ""))
            self.status.setStyleSheet("color: #b00020;")
        else:
            built = f" for {self.lowered_for}" if self.lowered_for else ""
            self.status.setText(f"{len(self.stages)} stages{built}, {total:.2f} s" + (f" ({cached} from the cache)" if cached else "") + ".")
            self.status.setStyleSheet("")
        self._fill_tree(previous)

    def _fill_tree(self, select_name: str | None) -> None:
        self.stage_tree.blockSignals(True)
        self.stage_tree.clear()
        for s in self.stages:
            item = QTreeWidgetItem([str(s.index), s.name, s.level, f"{s.seconds:.3f}"])
            item.setData(0, Qt.UserRole, s.index)
            item.setForeground(2, QBrush(QColor(LEVEL_COLORS.get(s.level, "#333"))))
            item.setTextAlignment(3, Qt.AlignRight | Qt.AlignVCenter)
            tip = f"{s.name} — made by {s.pass_name}"
            if not s.changed:
                tip += "\nThe pass changed nothing."
                for col in (0, 1, 3):
                    item.setForeground(col, QBrush(QColor("#9a9a9a")))
            if s.cached:
                tip += "\nReused from the cache."
                item.setText(3, f"{s.seconds:.3f} ↺")
            if s.pass_seconds and len(s.pass_seconds) > 1:
                tip += "\n" + "\n".join(f"{'  ' * d}{n}: {t:.3f} s" for n, t, d in s.pass_seconds[:12])
            for col in range(4):
                item.setToolTip(col, tip)
            self.stage_tree.addTopLevelItem(item)
        self.stage_tree.blockSignals(False)
        self._apply_filter()
        target = None
        if select_name:
            target = next((s for s in self.stages if s.name == select_name), None)
        if target is None and self.stages:
            target = self.stages[-1] if self.error else self.stages[min(1, len(self.stages) - 1)]
        if target is not None:
            self.select_stage(target.index)

    def _apply_filter(self) -> None:
        hide = self.hide_unchanged.isChecked()
        for i in range(self.stage_tree.topLevelItemCount()):
            s = self.stages[i]
            self.stage_tree.topLevelItem(i).setHidden(hide and not s.changed)

    # ---- stage display -----------------------------------------------------------------------
    def visible_indices(self) -> list[int]:
        return [i for i in range(self.stage_tree.topLevelItemCount()) if not self.stage_tree.topLevelItem(i).isHidden()]

    def select_stage(self, index: int) -> None:
        if 0 <= index < self.stage_tree.topLevelItemCount():
            self.stage_tree.setCurrentItem(self.stage_tree.topLevelItem(index))

    def step(self, delta: int) -> None:
        """Next (+1) or previous (-1) visible stage."""
        visible = self.visible_indices()
        if not visible:
            return
        cur = self.current.index if self.current is not None else visible[0]
        if delta > 0:
            nxt = next((i for i in visible if i > cur), None)
        else:
            nxt = next((i for i in reversed(visible) if i < cur), None)
        if nxt is not None:
            self.select_stage(nxt)

    def _previous_text(self, stage: Stage) -> str | None:
        if stage.index == 0:
            return None
        prev = self.stages[stage.index - 1]
        return prev.text if prev.language == stage.language else None

    def _stage_selected(self, item, _old=None) -> None:
        index = item.data(0, Qt.UserRole) if item is not None else None
        if index is None or not 0 <= index < len(self.stages):
            return  # the tree is being emptied (another model opened): nothing to show
        stage = self.stages[index]
        self.current = stage
        self.expanded = None
        self.back_button.hide()
        self.origin = []
        self.origin_label.setText("")
        self.show_model_button.setEnabled(False)
        self.ir.set_ir(stage.text, stage.language, self._previous_text(stage))
        self._update_header()
        canvas = self.window.canvas
        canvas.clear_highlight("lineage")
        if stage.index == 0:
            canvas.show_model(fit=False)
            return
        self._with_view(stage, lambda view, s=stage: self._show_view(s, view))

    def _update_header(self) -> None:
        s = self.current
        if s is None:
            self.header.setText("")
            return
        color = LEVEL_COLORS.get(s.level, "#333")
        where = f" › <b>{self.expanded}</b>" if self.expanded else ""
        note = "" if self.ir.highlighted else " · highlighting off for this size"
        self.header.setText(
            f"<b>{s.index}. {s.name}</b>{where} &nbsp;<span style='color:{color}'>{s.level}</span> · {s.pass_name} · "
            f"{s.seconds:.3f} s · {s.text.count(chr(10)) + 1} lines · {self.ir.summary()}{note}")
        self.header.setToolTip(self.header.text())  # all of it, where the line is cut at the panel's width

    def compare_with_previous(self):
        """Open a Compare window: the current stage beside the nearest earlier stage whose graph
        differs (unchanged steps are skipped). Returns the window (None when there is nothing)."""
        stage = self.current
        if stage is None or stage.index == 0:
            self.status.setText("Select a stage after the first to compare it with the one before.")
            return None
        earlier = next((s for s in reversed(self.stages[: stage.index]) if s.changed or s.index == 0), self.stages[stage.index - 1])
        from app.compare import CompareWindow

        w = CompareWindow(self.window)
        w.setWindowFlag(Qt.Window, True)
        w.compare_views(earlier.view, stage.view, f"{earlier.index} {earlier.name}", f"{stage.index} {stage.name}")
        w.show()
        return w

    def _with_view(self, stage: Stage, then) -> None:
        """Build a stage's view off the UI thread (big modules take a moment), then call `then(view)`."""
        if stage.view_if_built is not None:
            then(stage.view_if_built)
            return
        self.view_job = start_job(
            lambda _job: stage.view, "Building the stage graph", self,
            done=then, failed=lambda exc: self.status.setText(error_text(exc, "Building the stage graph")), wanted=lambda: self.current is stage and self.expanded is None,
        )

    def _show_view(self, stage: Stage, view) -> None:
        if view is not None:
            self.window.canvas.show_view(view)

    # ---- nodes: lines, lineage, expansion ----------------------------------------------------
    def _node(self, node_id):
        canvas = self.window.canvas
        view = canvas.view
        if view is None:
            return None
        try:
            return view.node(node_id)
        except KeyError:
            return None

    def _canvas_selection(self, ids: list) -> None:
        if self.current is None or not ids:
            return
        canvas = self.window.canvas
        if self.current.index == 0 or canvas.mode == "model":
            if self.current.index == 0 and isinstance(ids[0], int):
                lines = self.current.lines_of(ids[0])  # the stage's own view knows the listing's lines
                if lines:
                    self.ir.show_lines(*lines)
            return
        node = self._node(ids[0])
        if node is None:
            return
        line = node.data.get("line")
        if line:
            self.ir.show_lines(line, line)
        self.origin = list(node.origin)
        self._show_origin()

    def _show_origin(self) -> None:
        canvas = self.window.canvas
        graph = self.window.document.graph
        if not self.origin:
            self.origin_label.setText("No ONNX origin recorded for this node.")
            canvas.clear_highlight("lineage")
            self.show_model_button.setEnabled(False)
            return
        names = []
        for i in self.origin[:6]:
            try:
                n = graph.node(i)
                names.append(f"{n.label} ({n.op_type})")
            except KeyError:
                names.append(f"#{i} (edited away)")
        more = f" and {len(self.origin) - 6} more" if len(self.origin) > 6 else ""
        self.origin_label.setText("From ONNX: " + ", ".join(names) + more)
        origin = set(self.origin)
        view = canvas.view
        same = [n.id for n in view.nodes if origin & set(n.origin)] if view is not None else []
        canvas.set_highlight("lineage", same, LINEAGE_COLOR)
        self.show_model_button.setEnabled(True)
        # the inspector follows the document selection: the ONNX nodes this came from
        self.window.document.set_selection([i for i in self.origin if graph.has_node(i)])

    def show_origin_in_model(self) -> None:
        """The ONNX graph, with the clicked node's origin outlined and in view."""
        canvas = self.window.canvas
        graph = self.window.document.graph
        ids = [i for i in self.origin if graph.has_node(i)]
        canvas.show_model(fit=False)
        canvas.set_highlight("lineage", ids, LINEAGE_COLOR)
        if ids:
            canvas.center_on(ids[0])

    def _canvas_activated(self, node_id) -> None:
        if self.current is None or self.current.mod is None or self.window.canvas.mode != "view":
            return
        node = self._node(node_id)
        callee = node.data.get("callee") if node is not None else None
        if not callee or callee not in self.current.functions:
            return
        self.expand(callee)
        self._schedule_kernel(callee)

    def _schedule_kernel(self, kernel: str) -> None:
        """A TIR kernel double-clicked: open it in the Schedule panel as it stands before
        ScheduleTIR (core.compiler.lowering.kernel_to_schedule)."""
        from core.compiler.lowering import kernel_to_schedule

        panel = getattr(self.window, "schedule_panel", None)
        stage = self.current
        if panel is None or stage is None or self.target_kind() is not TargetKind.CPU:
            return
        found = kernel_to_schedule(self.stages, stage, kernel)
        if found is None:
            return
        mod, ids = found
        graph = self.window.document.graph
        labels = [graph.node(i).label for i in ids if graph is not None and graph.has_node(i)]
        panel.open_from_module(mod, kernel, onnx_nodes=labels)

    def expand(self, function: str) -> None:
        """Show one fused function / kernel of the current stage: its graph and its lines."""
        stage = self.current
        if stage is None:
            return
        try:
            view = stage.function_view(function)
        except KeyError:
            return
        self.expanded = function
        self.back_button.show()
        self.window.canvas.show_view(view)
        span = stage.function_lines(function)
        if span:
            self.ir.show_lines(*span)
        self._update_header()

    def collapse(self) -> None:
        if self.current is None:
            return
        self.expanded = None
        self.back_button.hide()
        self._update_header()
        self._with_view(self.current, lambda view, s=self.current: self._show_view(s, view))

    # ---- model changes -----------------------------------------------------------------------
    def _model_changed(self) -> None:
        if self.stages and not self.stale:
            self.stale = True
            self.status.setText("The model changed since these stages were made: Lower again to update them.")

    def _model_replaced(self) -> None:
        self.generation += 1
        if self.job is not None:
            self.job.cancel()
        self.cache.clear()
        # the tree first, without its signals: clearing it moves the current item, and the
        # selection handler must not look up a stage in a list that is already gone
        self.stage_tree.blockSignals(True)
        self.stage_tree.clear()
        self.stage_tree.blockSignals(False)
        self.stages = []
        self.current = None
        self.expanded = None
        self.origin = []
        self.error = ""
        self.stale = False
        self.back_button.hide()
        self.origin_label.setText("")
        self.show_model_button.setEnabled(False)
        self.progress.setValue(0)
        self.progress.hide()
        self.ir.set_ir("", "")
        self.header.setText("")
        self.status.setText("Press Lower (Ctrl+L) to step the model down to target code.")
        self.status.setStyleSheet("")


def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Lowering", window)
    dock.setObjectName("panel-lowering")
    panel = LoweringPanel(window, dock)
    dock.setWidget(panel)
    window.lowering_panel = panel
    return dock
