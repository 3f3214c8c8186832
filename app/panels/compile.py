"""Compile & Run: compile the open model for CPU or CUDA, measure it beside onnxruntime, export it.

* Target (CPU / CUDA), the CPU the code is for (this host, this host without AVX-512, or a named
  deployment CPU: app.panels.cpu_choice), runs, "vs onnxruntime"; Compile & Run (F5) runs `core.compiler.compile.compile_model`
  with the Lowering panel's pass list (edits included) when that panel is set to the same target
  (which checks the compiled model against onnxruntime and refuses a wrong result, naming the op)
  and then `core.compiler.measure.bench.benchmark` on a worker thread, with progress and a working Cancel.
* "Tune" (CPU; CUDA only where a GPU is here to measure on) tunes every kernel before
  scheduling: a budget in minutes for the model, in
  which every candidate config of the schedule templates is measured first and MetaSchedule then
  searches the given trials per kernel (0: template search only), and the tuning database folder
  (shared by all models; another one can be chosen for this session); candidates are measured
  here, or on the devices behind a TVM RPC tracker given as HOST:PORT:KEY. Tuning runs inside the
  compile job: its progress shows in the bar and the status line (in the Winograd choice step, which
  conv of how many), and Cancel stops it after the measuring round, or the conv, in progress (records
  measured so far stay in the database, so the next tuned
  compile resumes). After tuning, the whole model untuned and tuned are timed against each other
  (core.compiler.tuning.ab) and only records that made the model faster are kept; the status line
  and the results table show that A/B and how many kernels run on tuned schedules.
* "Check…" (app.dialogs.check) sets that check for the open model, as `compile --verify-inputs
  IN.npz --rtol R --atol A` does: seeded random inputs or an .npz file's, and the tolerances; the
  label beside it says the choice, which another model resets to the defaults. A refusal for an
  error small against the values names the atol that accepts it: the panel then offers "Accept atol
  X and compile", which the user may click (nothing is loosened otherwise).
* "symbolic dims" (shown for a model with symbolic input dims, e.g. a batch N): their values for
  the check and the measurement, "N=4, seq=128" as `compile / bench --dim` take them
  (core.model.dims); a bad value is refused in one sentence naming the dim, and the result line
  says the values used ("Compiled for CPU (znver4) with N=4 in ...").
* The results table puts ours beside onnxruntime: latency median / p90 / min, the ratio, and
  memory (parameters, activations planned vs unplanned, peak RSS), plus compile time.
* The bar chart shows where the time goes, kernel by kernel (the Relax VM's per-kernel timing);
  clicking a bar selects the ONNX nodes that kernel came from. "Heat on graph" colours the canvas
  by kernel time per ONNX node (each kernel's time split over its nodes, through lineage).
* Export writes the artifact folder (library, manifest with the measured figures, run.py, the
  compiled ONNX model, CUDA source, and recipe/: what rebuilds the library with TVM alone);
  "Save ONNX…" saves the (rewritten) model itself.
* "Open Artifact…" measures an exported artifact folder. Loading one runs the native code inside
  it (model.so), so the panel first refuses a bad folder (one sentence, nothing changes) and then
  asks, Cancel by default; only "Load and Run" loads it and times it on seeded random inputs.

A CUDA compile needs no GPU (code generation only); measuring it does, so without one the panel
says so and offers Export. Likewise code for a CPU with features this machine lacks (AVX-512 code
on an AVX2 host) is compiled and offered for Export, not run. An ARM64 device (a preset such as
Raspberry Pi 5, or "ARM64 device…") is compiled and cross-linked, never run here: the status says
what was built, Export writes the AArch64 model.so, and the device row (app.panels.device_field)
offers "Check under emulation" and "Time on device" (HOST:PORT:KEY of a TVM RPC tracker), whose
per-kernel times reach the chart and the heat badges as the host's do.

Parts in their own modules: the Tune box (app.panels.compile_tuning), Export / Save ONNX / Open
Artifact (app.panels.compile_artifact), the kernel bar chart (app.panels.kernel_chart) and the
results table's text (app.panels.compile_results).
"""
from __future__ import annotations

import logging
import re
import time

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.dialogs.check import CheckChoice, CheckDialog
from app.panels.compile_artifact import ArtifactActions
from app.panels.compile_results import built_for, result_rows, tuning_rows
from app.panels.compile_tuning import TuneControls
from app.panels.cpu_choice import CpuChoice
from app.panels.device_field import DeviceControls
from app.panels.kernel_chart import KernelChart
from app.workers import Job, error_text, start_job
from core import WorkbenchError
from core.compiler.passes.integer_conv import int8_path
from core.compiler.target import TargetKind, foreign_code
from core.progress import Progress

__all__ = ["create_panel", "CompilePanel", "AREA"]

logger = logging.getLogger(__name__)

AREA = "bottom"
_HEAT_LEGEND = "kernel time<br>(outlined: one fused kernel)"


class _DimsOnly:
    """An input spec carrying only the model's symbolic dims: what normalise_buckets reads, so the
    panel refuses a bucket that leaves a dim symbolic before the compile starts."""

    def __init__(self, names: list[str]):
        self.shape = tuple(names)


def _as_compile(event: Progress) -> Progress:
    """compile_model's event as part of Compile & Run: the first 70 % of the bar (measuring takes
    the rest), the message headed "compile: " unless it is tuning's own (which says "tuning")."""
    return event.within(0.0, 0.7, "" if event.stops_after else "compile: ")


class _StatusLabel(QLabel):
    """A word-wrapped label that asks for the height its text needs at its width: a refusal of four
    lines is read whole, the results area below giving way, rather than clipped in a low dock."""

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        if self.width() <= 0 or not self.text():
            return hint
        return QSize(hint.width(), max(hint.height(), self.heightForWidth(self.width())))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # a new width wraps the text into another number of lines


class CompilePanel(TuneControls, DeviceControls, ArtifactActions, QWidget):
    def __init__(self, window, dock: QDockWidget | None = None):
        super().__init__()
        self.window = window
        self.dock = dock
        self.job: Job | None = None
        self.artifact = None
        self.result = None
        self.stale = False
        self._tuning_job = False  # the running (or last) compile tunes
        self._event: Progress | None = None  # the running job's latest progress: what a cancel now waits for
        self._step_started = 0.0  # when its step started
        self._step_seconds: dict[str, float] = {}  # seconds per compile step, from the last compile
        self._busy_now = False
        self.spread_note = ""  # why the last measurement is not to be trusted ("" when it is)
        self.heat_kernels: list = []  # the KernelTime rows the heat map shows (last compile, or a loaded artifact of this model)
        self.generation = 0  # bumped when another model is opened: a compile of the old one is dropped

        self.target = QComboBox()
        self.target.addItem("CPU (LLVM)", TargetKind.CPU)
        self.target.addItem("CUDA (GPU code; runs where a GPU is)", TargetKind.CUDA)
        self.cpu = CpuChoice()
        self.runs = QSpinBox()
        self.runs.setRange(1, 1000)
        self.runs.setValue(10)
        self.runs.setPrefix("runs ")
        self.vs_ort = QCheckBox("vs onnxruntime")
        self.vs_ort.setChecked(True)
        self.compile_btn = QPushButton("Compile && Run")
        self.compile_btn.setDefault(True)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.setEnabled(False)
        self.export_btn = QPushButton("Export…")
        self.export_btn.setEnabled(False)
        self.save_onnx_btn = QPushButton("Save ONNX…")
        self.save_onnx_btn.setToolTip("Save the optimized (rewritten) model as an ONNX file")
        self.open_artifact_btn = QPushButton("Open Artifact…")
        self.open_artifact_btn.setToolTip("Open Compiled Artifact: load an exported folder (manifest.json + model.so) and measure it")
        self.heat = QCheckBox("Heat on graph")
        self.heat.setChecked(True)
        self._make_tune_controls()
        self._built_device = ""  # how the status names the ARM64 device the last compile was for ("Raspberry Pi 5")
        device_row = self._make_device_controls()
        # the compile check's inputs and tolerances (app.dialogs.check), per model: reset when another is opened
        self.check = CheckChoice()
        self.check_label = QLabel()
        self.check_btn = QPushButton("Check…")
        self.check_btn.setToolTip("Set the compile check: its inputs (seeded random, or an .npz file) and tolerances")
        self.accept_btn = QPushButton()  # after a refusal that says which atol accepts it: the user may take it
        # values of the open model's symbolic input dims for the check and the measurement, as
        # compile / bench --dim: shown only for a model that has some (core.model.dims)
        self.dims_label = QLabel("symbolic dims")
        self.dims = QLineEdit()
        self.dims.setFixedWidth(QFontMetrics(self.dims.font()).horizontalAdvance("batch=16, seq=128") + 16)
        self.dims_label.setMinimumHeight(self.dims.sizeHint().height())  # its text level with the field's
        # shape buckets (compile --shape-buckets): main compiled again for these sizes, e.g.
        # "batch=2,seq=96; batch=1,seq=128" (core.compiler.pipeline.buckets); shown with the dims field
        self.buckets_label = QLabel("shape buckets")
        self.buckets = QLineEdit()
        self.buckets.setPlaceholderText("none")
        self.buckets.setFixedWidth(QFontMetrics(self.buckets.font()).horizontalAdvance("batch=2,seq=96; batch=1,seq=128") + 16)
        self.buckets_label.setMinimumHeight(self.buckets.sizeHint().height())
        self.dims_used: dict[str, int] = {}  # the values the last compile was checked and measured with
        self._dims_refusal: tuple[str, str] | None = None  # (status text, style) a bad dims value replaced
        self.accept_btn.setVisible(False)
        self.suggested_atol: float | None = None
        self._show_check()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.progress.setFormat("")
        # shown from a job's start to the next model: an idle, empty bar reads as a text field; its
        # room is kept while hidden, so the row does not jump when it appears
        keep = self.progress.sizePolicy()
        keep.setRetainSizeWhenHidden(True)
        self.progress.setSizePolicy(keep)
        self.progress.hide()
        self.status = _StatusLabel("Compile the open model to see its latency, memory and where the time goes.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)

        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["", "TVM (ours)", "onnxruntime"])
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.Stretch)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.Stretch)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.NoSelection)
        self.chart = KernelChart()

        # one row of controls with the progress bar at its end, and a short results area: the
        # dock stays low so the canvas keeps most of the window (the chart scrolls when long)
        self.target.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.target.setMinimumContentsLength(10)
        self.progress.setMinimumWidth(120)
        row = QHBoxLayout()
        self.cpu.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        self.cpu.setMinimumContentsLength(16)  # 'Raspberry Pi 5 (C…': longer entries are elided
        for w in (self.target, self.cpu, self.runs, self.vs_ort, self.compile_btn, self.cancel_btn, self.export_btn, self.save_onnx_btn, self.open_artifact_btn, self.heat):
            row.addWidget(w)
        row.addWidget(self.progress, 1)
        tune_row = QHBoxLayout()
        for w in (self.tune, self.use_db, self.tune_minutes, self.tune_trials, self.tune_rpc, self.tune_db_label, self.tune_db_btn):
            tune_row.addWidget(w)
        tune_row.addStretch(1)
        tune_row.addWidget(self.check_label)
        tune_row.addWidget(self.check_btn)
        self.table.setMinimumHeight(60)
        self.chart.setMinimumHeight(60)
        chart_scroll = QScrollArea()
        chart_scroll.setWidgetResizable(True)
        chart_scroll.setFrameShape(QScrollArea.NoFrame)
        chart_scroll.setWidget(self.chart)
        chart_scroll.setMinimumHeight(60)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.table)
        split.addWidget(chart_scroll)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(row)
        lay.addLayout(tune_row)
        lay.addLayout(device_row)  # shown for an ARM64 choice or build (app.panels.device_field)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status, 1)
        # beside the result line that says the values used (the two rows above are full at 1280 px)
        status_row.addWidget(self.dims_label, 0, Qt.AlignTop)
        status_row.addWidget(self.dims, 0, Qt.AlignTop)
        status_row.addWidget(self.buckets_label, 0, Qt.AlignTop)
        status_row.addWidget(self.buckets, 0, Qt.AlignTop)
        status_row.addWidget(self.accept_btn, 0, Qt.AlignTop)
        lay.addLayout(status_row)
        lay.addWidget(split, 1)

        self.compile_btn.clicked.connect(self.start)
        self.cancel_btn.clicked.connect(self.cancel)
        self.export_btn.clicked.connect(self.export_dialog)
        self.save_onnx_btn.clicked.connect(self.save_onnx_dialog)
        self.open_artifact_btn.clicked.connect(self.open_artifact_dialog)
        self.check_btn.clicked.connect(self.check_dialog)
        self.accept_btn.clicked.connect(self.accept_suggested)
        self.heat.toggled.connect(self._apply_heat)
        self.tune.toggled.connect(self._update_tune_controls)
        self.use_db.toggled.connect(self._update_tune_controls)
        self.target.currentIndexChanged.connect(self._update_tune_controls)
        self.target.currentIndexChanged.connect(self._update_device_controls)
        self.cpu.currentIndexChanged.connect(self._update_device_controls)
        self.tune_db_btn.clicked.connect(self.choose_tune_db)
        self._update_tune_controls()
        self.chart.kernelClicked.connect(self._select_kernel)
        self.chart.kernelActivated.connect(self._schedule_kernel)
        # F5 compiles and runs from anywhere in the window (and raises this panel)
        QShortcut(QKeySequence("F5"), window, activated=self._shortcut, context=Qt.WindowShortcut)
        doc = window.document
        doc.graphChanged.connect(self._mark_stale)
        doc.graphChanged.connect(self._show_dims)
        self.dims.textChanged.connect(self._dims_edited)
        self.buckets.textChanged.connect(self._dims_edited)
        doc.graphReplaced.connect(self._reset)
        self._show_dims()
        # the heat map belongs to the ONNX graph: gone while a stage or preview is drawn, back with the model
        window.canvas.viewShown.connect(self._apply_heat)
        self._update_compile_button()
        self._update_device_controls()

    # -- the compile check ----------------------------------------------------------------

    def set_check(self, choice: CheckChoice) -> None:
        self.check = choice
        self._show_check()

    def _show_check(self) -> None:
        fm = QFontMetrics(self.check_label.font())
        self.check_label.setText(fm.elidedText(self.check.summary(), Qt.ElideMiddle, 240))
        self.check_label.setToolTip(self.check.summary() + "\n" + self.check.tooltip())

    def check_dialog(self) -> CheckDialog | None:
        """Open the check's dialog (pre-filled with the atol the last refusal suggested); OK sets it."""
        if self.window.document.graph is None:
            return None
        dialog = CheckDialog(self, self.window, self.check, self.suggested_atol)
        generation = self.generation  # its file was checked against this model: not applied to another one
        dialog.accepted.connect(lambda: generation == self.generation and self.set_check(dialog.choice()))
        dialog.open()
        return dialog

    def _offer_atol(self, exc: BaseException, message: str) -> None:
        """A refusal for an error small against the values names the atol that accepts it
        (CompiledMismatchError.accepting_atol): offer it."""
        self._clear_offer()
        self.suggested_atol = getattr(exc, "accepting_atol", None)
        if self.suggested_atol is None:
            return
        self.accept_btn.setText(f"Accept atol {self.suggested_atol:g} and compile")
        self.accept_btn.setToolTip(f"Compile this model again, accepting an error of up to {self.suggested_atol:g} in the check "
                                   "(the other settings as they are; Check… to change them)")
        self.accept_btn.setVisible(True)
        # the refusal speaks the CLI's flags: here, say where this panel does the same
        text = self.status.text().replace("compile --verify-inputs IN.npz", "Check…: inputs from an .npz file")
        self.status.setText(re.sub(r"with --atol (\S+?)(\.?)( |$)", r"with atol \1 (Check… or Accept)\2\3", text))

    def accept_suggested(self) -> None:
        """The user takes the atol the refusal named: it becomes this model's check, and it compiles."""
        if self.suggested_atol is None:
            return
        self.set_check(self.check.with_atol(self.suggested_atol))
        self._clear_offer()
        self.start()

    def _clear_offer(self) -> None:
        self.suggested_atol = None
        self.accept_btn.setVisible(False)

    # -- symbolic dims ----------------------------------------------------------------------

    def _show_dims(self) -> None:
        """The dims field for the open model's symbolic dims (hidden when it has none): values
        already set are kept, a new dim starts at 1 (what compile and bench take by default)."""
        from core.model.dims import format_dims, parse_dims, symbolic_dims

        graph = self.window.document.graph
        names = symbolic_dims(graph) if graph is not None else []
        if names != self._dim_names():
            try:
                kept = parse_dims(self.dims.text())
            except WorkbenchError:
                kept = {}
            self.dims.setText(format_dims({name: kept.get(name, 1) for name in names}))
        changed = names != self._dim_names()
        self.dims.setProperty("dim_names", names)
        self.dims.setToolTip(f"Values of the model's symbolic dims ({', '.join(names)}) for the check against "
                             "onnxruntime and the measurement, as NAME=N separated by commas (compile / bench --dim)")
        if changed or not names:
            self.buckets.clear()  # another model's buckets name other dims
        self.buckets.setToolTip(f"Shapes to compile the model for as well, each giving every symbolic dim ({', '.join(names)}) "
                                "a size, separated by ';' (compile --shape-buckets): a run with exactly such inputs uses "
                                "their static kernels, any other the general ones")
        for w in (self.dims_label, self.dims, self.buckets_label, self.buckets):
            w.setVisible(bool(names))

    def _dims_edited(self, _text: str = "") -> None:
        """A refused dims value, once the field reads right again: the refusal goes and the line it
        replaced comes back (a red sentence about a value no longer there misleads)."""
        if self._dims_refusal is None:
            return
        try:
            self.dim_values()
            self.bucket_values()
        except WorkbenchError:
            return
        text, style = self._dims_refusal
        self._dims_refusal = None
        self.status.setStyleSheet(style)
        self.status.setText(text)

    def _dim_names(self) -> list[str]:
        return list(self.dims.property("dim_names") or [])

    def dim_values(self) -> dict[str, int]:
        """{dim: value} of the dims field, checked against the open model's symbolic dims (a
        WorkbenchError names the dim of a bad value); every dim of the model has one."""
        from core.model.dims import parse_dims

        names = self._dim_names()
        if not names:
            return {}
        given = parse_dims(self.dims.text(), known=names)
        return {name: given.get(name, 1) for name in names}

    def bucket_values(self) -> list[dict[str, int]]:
        """The shape buckets field: one dict per ';'-separated entry (each as the dims field is
        read; that it names every dim is checked by compile_model, before anything compiles)."""
        from core.model.dims import parse_dims

        names = self._dim_names()
        return [parse_dims(part, known=names) for part in self.buckets.text().split(";") if part.strip()] if names else []

    # -- compile + bench ------------------------------------------------------------------


    def target_kind(self) -> TargetKind:
        """The target chosen in the combo box (its item data: a TargetKind's value)."""
        return TargetKind.parse(self.target.currentData())

    def _shortcut(self) -> None:
        if self.dock is not None:
            self.dock.show()
            self.dock.raise_()
        self.start()

    def start(self) -> None:
        graph = self.window.document.graph
        if graph is None or (self.job is not None and self.job.isRunning()):
            return
        target = self.target_kind()
        cpu_target = self.cpu.choice()  # cpu, cpu_features, and for an ARM64 device its triple and cores
        runs = self.runs.value()
        vs_ort = self.vs_ort.isChecked()
        # the document's record of the rewrites, and the pass list the user set up for this
        # target in the Lowering panel (edits included): what was stepped through is compiled
        rewrites = self.window.document.applied_rewrites
        pipeline = self.window.document.pipeline_for(target)
        tuning = self.tuning_options()
        check = self.check.compile_options()
        try:
            field = self.dims
            dims = self.dim_values()
            field = self.buckets
            buckets = self.bucket_values()
            from core.compiler.pipeline.buckets import normalise_buckets
            from core.model.dims import symbolic_dims

            normalise_buckets(buckets, [_DimsOnly(symbolic_dims(graph))])
        except WorkbenchError as exc:
            if self._dims_refusal is None:
                self._dims_refusal = (self.status.text(), self.status.styleSheet())
            self.status.setStyleSheet("color: #d62728;")
            self.status.setText(str(exc))
            field.setFocus()
            return
        self._dims_refusal = None
        self._clear_offer()
        self.dims_used = dims
        self._built_device = cpu_target.device if cpu_target.foreign_arch and target is TargetKind.CPU else ""
        self._tuning_job = bool(tuning)
        model = graph.clone()  # the worker owns its copy; edits during the compile do not race it
        autosaver = getattr(self.window, "autosaver", None)
        if autosaver is not None:
            autosaver.save_now("before compile")  # native code runs next: unsaved edits go to disk first

        def work(job: Job):
            from core.compiler.measure.bench import benchmark, measured_for_manifest
            from core.compiler.compile import compile_model
            from core.compiler.target import gpu_present

            art = compile_model(
                model, target, pipeline=pipeline, rewrites=rewrites, cancel=job.is_cancelled, **cpu_target.options(),
                progress=lambda event: job.report(_as_compile(event)), verify_dims=dims or None, shape_buckets=buckets or None,
                **check, **tuning,
            )
            if target is TargetKind.CUDA and not gpu_present():
                return art, None
            if foreign_code(art.manifest.target.cpu):  # compiled for a CPU this one cannot stand in for
                return art, None
            res = benchmark(
                art, runs=runs, vs_ort=vs_ort, cancel=job.is_cancelled, dims=dims or None,
                progress=lambda step, frac: job.report(Progress(0.7 + 0.3 * frac, f"measure: {step}", step="measure")),
            )
            art.manifest.measured = measured_for_manifest(res)
            return art, res

        if tuning:
            search = f"{tuning['tune_trials']} search trials per kernel" if tuning["tune_trials"] else "template search only"
            text = f"Compiling for {target.upper()} with tuning (budget {self.tune_minutes.value():g} min, {search})…"
        elif self._built_device:
            text = f"Compiling for {self._built_device} ({cpu_target.describe()})…"
        else:
            text = f"Compiling for {target.upper()}…"
        self._start_job(work, "Compile & Run", self._done, text, self._compile_progress, for_model=True)

    def _start_job(self, work, title: str, done, status: str | None, progressed=None, for_model: bool = False) -> None:
        """Run `work` as the panel's one background job: progress in the bar, done/failed/cancelled
        to their slots, the controls busy until it ends. A job `for_model` (a compile of the open
        model) delivers nothing once another model has been opened: its kernels name the old
        model's nodes."""
        generation = self.generation
        self._busy(True)
        if status is not None:
            self.status.setStyleSheet("")
            self.status.setText(status)
        self.job = start_job(
            work, title, self, progressed=progressed or (lambda p: self._progress(p.fraction, p.message)), ended=lambda _job: self._busy(False),
            done=done, failed=self._failed, cancelled=self._cancelled,
            wanted=(lambda: generation == self.generation) if for_model else None,
        )

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.status.setText(self.cancel_text())

    def cancel_text(self) -> str:
        """What Cancel will wait for, read from the latest progress event: nothing in a step that
        polls it (`cancellable`); the round in progress in a step that stops in rounds (tuning:
        `stops_after`); otherwise the TVM pass running now, which cannot be interrupted, with the
        time it has left by the last compile."""
        event = self._event
        if event is None or event.cancellable:
            return "Cancelling…"
        if event.stops_after:
            return f"Cancelling: {event.step} stops after {event.stops_after}…"
        step = event.step or event.message
        took = self._step_seconds.get(step)
        if took is None:
            return f"Cancelling: {step} is one TVM pass and cannot be interrupted; the compile stops when it ends…"
        left = max(0.0, took - (time.perf_counter() - self._step_started))
        return f"Cancelling: {step} is one TVM pass and cannot be interrupted; it ends in about {left:.1f} s (it took {took:.1f} s last time)…"

    def _update_compile_button(self) -> None:
        """Compile & Run only when it can run, and says why not otherwise (a silent button that
        does nothing on click reads as broken)."""
        has_model = self.window.document.graph is not None
        self.compile_btn.setEnabled(has_model and not self._busy_now)
        self.save_onnx_btn.setEnabled(has_model)
        self.check_btn.setEnabled(has_model and not self._busy_now)
        if not has_model:
            self.compile_btn.setToolTip("Open a model first: there is nothing to compile.")
        elif self._busy_now:
            self.compile_btn.setToolTip("A job is running: wait for it or Cancel it.")
        else:
            self.compile_btn.setToolTip("Compile the open model for the target, check it against onnxruntime and measure it (F5)")

    def _busy(self, on: bool) -> None:
        self.open_artifact_btn.setEnabled(not on)
        self.cancel_btn.setEnabled(on)
        self.target.setEnabled(not on)
        self.cpu.setEnabled(not on)
        self.accept_btn.setEnabled(not on)
        self.dims.setEnabled(not on)  # the values a running compile uses were read when it started
        self.buckets.setEnabled(not on)
        self.export_btn.setEnabled(not on and self.artifact is not None)
        if on:
            self._dims_refusal = None  # the status line is the job's now
            self.progress.setValue(0)
            self.progress.setFormat("")
            self.progress.show()
        else:
            self._event = None
            self.cancel_btn.setToolTip("")
        # a flag, not job.isRunning(): the thread outlives the signal that ends the work
        self._busy_now = on
        self._update_compile_button()
        self._update_tune_controls()
        self._update_device_controls()

    def _progress(self, frac: float, text: str, short: str | None = None) -> None:
        self.progress.setValue(int(frac * 1000))
        # elided to the bar (a long kernel name would wrap the text out of sight), or `short`; all of it in the tooltip
        shown = QFontMetrics(self.progress.font()).elidedText(short or text, Qt.ElideMiddle, max(40, self.progress.width() - 28))
        self.progress.setFormat(shown.replace("%", "%%"))
        self.progress.setToolTip(text)

    def _compile_progress(self, event: Progress) -> None:
        """The bar (the message; the detail in its tooltip), Cancel's tooltip from the event's
        `cancellable`, and in a step that stops in rounds (tuning, the Winograd choice: minutes,
        with a message longer than the bar shows) also the status line."""
        if self._event is None or event.step != self._event.step:
            self._step_started = time.perf_counter()
        self._event = event
        if event.cancellable:
            self.cancel_btn.setToolTip("Cancel stops the job at once.")
        elif event.stops_after:
            self.cancel_btn.setToolTip(f"Cancel stops the job after {event.stops_after}.")
        else:
            self.cancel_btn.setToolTip(f"{event.step or event.message} cannot be interrupted: Cancel stops the job when it ends.")
        if event.stops_after and self._tuning_job and not self.job.is_cancelled():
            self.status.setText(f"Tuning (budget {self.tune_minutes.value():g} min): {event.detail or event.message}. "
                                f"Cancel stops it after {event.stops_after}.")
        self._progress(event.fraction, event.detail or event.message, event.message)

    def _done(self, result) -> None:
        self.artifact, self.result = result
        art = self.artifact
        if art is not None:  # how long each step took: what a cancel in that step waits for next time
            self._step_seconds = {p.name: float(p.seconds) for p in art.manifest.passes if p.seconds is not None}
        self.stale = False
        self._busy(False)
        self.progress.setValue(1000)
        self.progress.setFormat("done")
        self._show_results()

    def _failed(self, exc: BaseException) -> None:
        message = error_text(exc, "Compile & Run")
        self._busy(False)
        self.progress.setValue(0)
        self.progress.setFormat("failed")
        self.status.setText(message[0].upper() + message[1:] if message else "The compile failed.")
        self.status.setStyleSheet("color: #d62728;")
        self._offer_atol(exc, message)
        # a refusal names the node (unsupported op, or where the results first differ): show it
        node = getattr(exc, "node_name", "") or ""
        ids = self._node_ids([node]) if node else []
        if ids:
            self.window.document.set_selection(ids)
            self.window.canvas.center_on(ids[0])

    def _cancelled(self) -> None:
        self._busy(False)
        self.progress.setValue(0)
        self.progress.setFormat("cancelled")
        if self._tuning_job:
            self.status.setText("Cancelled. Tuning records measured so far stay in the database; the next tuned compile resumes from them.")
        else:
            self.status.setText("Cancelled.")

    # -- results -------------------------------------------------------------------------

    def _show_results(self) -> None:
        art, res = self.artifact, self.result
        m = art.manifest
        v = m.verification
        self.status.setStyleSheet("")
        if v is not None and v.checked:
            check = f"outputs match {v.reference} (max abs error {v.max_abs_err:.2g})"
        else:
            check = f"not checked against onnxruntime: {v.reason if v is not None else 'no record'}"
        fixes = m.converter_fixes
        extra = f"; converter fixes used: {', '.join(fixes)}" if fixes else ""
        document = getattr(self.window, "document", None)
        graph = getattr(document, "graph", None)
        quantized = int8_path(m.kernel_lineage, (n.op_type for n in graph.nodes) if graph is not None else ())
        extra += f"; {quantized}" if quantized else ""
        tuning = m.tuning
        if tuning and tuning.kernels:
            extra += f"; {tuning.kernels_from_database} of {tuning.kernels} kernels on tuned schedules"
        if tuning and tuning.model_ab:
            from core.compiler.tuning.ab import describe_ab

            extra += f"; {describe_ab(tuning.model_ab)}"
        if res is None:
            foreign = art.target == TargetKind.CPU and foreign_code(m.target.cpu)
            if self.artifact_foreign():  # another architecture's code: cross-linked, never run here
                self.status.setText(self._foreign_arch_text(art) + (f" ({extra.removeprefix('; ')})" if extra else ""))
            else:
                where = ("This machine cannot run it: Export the artifact and run it on such a CPU." if foreign
                         else "No GPU here to run it: Export the artifact and run it where a GPU is.")
                self.status.setText(f"Compiled for {built_for(art)}{self._with_dims()} in {m.compile_seconds} s; {check}{extra}. {where}")
        else:
            ratio = f"; {res.ratio:g}× onnxruntime" if res.ratio is not None else ""
            if res.path:  # with shape buckets: which code the measurement ran
                ratio += f"; ran the {res.path}" if res.path.startswith("general") else f"; ran shape {res.path}"
            self.status.setText(f"Compiled for {built_for(art)}{self._with_dims(res.dims)} in {m.compile_seconds} s; "
                                f"{check}{ratio}{extra}.")
        rows = result_rows(res, None if res is not None else m.memory_estimate)
        rows.append(("Compile time", f"{m.compile_seconds} s", ""))
        rows += tuning_rows(m.tuning)
        self._fill_table(rows)
        self._warn_spread(res)
        self.chart.set_kernels(res.kernels if res is not None else [], empty_text=(
            "Per-kernel time appears here after Time on device (this build runs on another machine)." if res is None and art.target == TargetKind.CPU and foreign_code(m.target.cpu)
            else "Per-kernel time appears here after Compile & Run."))
        self.heat_kernels = list(res.kernels) if res is not None else []
        self._apply_heat()

    def _foreign_arch_text(self, art) -> str:
        """'Compiled for Raspberry Pi 5 (cortex-a76 +dotprod, aarch64-linux-gnu) in 2.1 s: not run on
        this x86_64 machine — export it, check it under emulation, or time it on the device.'"""
        from core.compiler.target import host_arch

        triple = str((art.manifest.target.cpu or {}).get("triple", ""))
        built = art.manifest.built_for
        if triple not in built:  # manifests name the triple in built_for since a1b7681
            built = f"{built}, {triple}"
        device = self._built_device or "an ARM64 device"
        return (f"Compiled for {device} ({built}){self._with_dims()} in {art.manifest.compile_seconds} s: not run on this "
                f"{host_arch()} machine — export it, check it under emulation, or time it on the device.")

    def _with_dims(self, measured: dict | None = None) -> str:
        """' with N=4': the symbolic dims the result was checked and measured at ('' for none)."""
        from core.model.dims import format_dims

        dims = measured or self.dims_used
        return f" with {format_dims(dims)}" if dims else ""

    def _warn_spread(self, res) -> None:
        """A median whose runs disagree widely is flagged: its cell turns orange with the reason,
        and the status line says it (after the figures it qualifies)."""
        from core.compiler.measure.bench import spread_warning

        self.spread_note = ""
        if res is None:
            return
        notes = [(1, spread_warning(res.latency_ms))]
        if res.ort_latency_ms:
            notes.append((2, spread_warning(res.ort_latency_ms)))
        for column, note in notes:
            item = self.table.item(0, column)
            if note and item is not None:
                item.setBackground(QColor("#ffe2b8"))
                item.setText("⚠ " + item.text())
                item.setToolTip(note)
        said = [n for _c, n in notes if n]
        if said:
            who = "Ours" if notes[0][1] else "onnxruntime"
            self.spread_note = f"{who}: {said[0]}"
            self.status.setText(self.status.text() + "\n⚠ " + self.spread_note)

    def _fill_table(self, rows: list[tuple[str, str, str]]) -> None:
        self.table.setRowCount(len(rows))
        for r, cells in enumerate(rows):
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                    item.setToolTip(text)  # long cells (the tuning summary) are elided
                self.table.setItem(r, c, item)

    def _node_ids(self, labels) -> list[int]:
        graph = self.window.document.graph
        if graph is None:
            return []
        by_label = {n.label: n.id for n in graph.nodes}
        return [by_label[l] for l in labels if l in by_label]

    def _heat(self) -> tuple[dict[int, float], list[dict]]:
        """(ONNX node id -> ms of the slowest kernel it is part of, kernel groups for the canvas)."""
        if not self.heat_kernels or self.stale:
            return {}, []
        from core.compiler.measure.bench import kernel_heat

        graph = self.window.document.graph
        by_label = {n.label: n.id for n in graph.nodes} if graph is not None else {}
        nodes, groups = kernel_heat(self.heat_kernels)
        values = {by_label[l]: ms for l, ms in nodes.items() if l in by_label}
        shown = []
        for g in groups:
            ids = [by_label[l] for l in g.onnx_nodes if l in by_label]
            if ids:
                tip = f"{g.name}: {g.ms:.3g} ms, from {len(ids)} ONNX node{'s' if len(ids) != 1 else ''}: " + ", ".join(g.onnx_nodes[:8])
                shown.append({"ids": ids, "value": g.ms, "label": g.name, "tooltip": tip})
        return values, shown

    def heat_values(self) -> dict[int, float]:
        """ONNX node id -> ms of kernel time (the colour the canvas overlay gives each node)."""
        return self._heat()[0]

    def _apply_heat(self, *_args) -> None:
        canvas = self.window.canvas
        values, groups = self._heat() if self.heat.isChecked() else ({}, [])
        if values and getattr(canvas, "mode", "model") == "model":
            # the scale's top is the chart's top bar, so a colour reads the same in both
            top = max((k.ms for k in self.heat_kernels), default=None)
            canvas.set_overlay(values, _HEAT_LEGEND, groups=groups, max_value=top, unit="ms")
        elif canvas.has_overlay:
            canvas.set_overlay(None)

    def _schedule_kernel(self, kernel) -> None:
        """Double-clicked bar (a KernelTime): open the kernel in the Schedule panel (on the open model, CPU)."""
        panel = getattr(self.window, "schedule_panel", None)
        if panel is not None and self.target_kind() is TargetKind.CPU:
            panel.open_from_model(kernel.name)

    def _select_kernel(self, kernel) -> None:
        ids = self._node_ids(kernel.onnx_nodes)
        if not ids:
            self.status.setText(f"Kernel {kernel.name} has no recorded ONNX lineage.")
            return
        self.window.document.set_selection(ids)
        self.window.canvas.center_on(ids[0])

    def _mark_stale(self) -> None:
        if self.artifact is not None and not self.stale:
            self.stale = True
            self.status.setText(self.status.text() + "  (The model changed since: compile again to measure the edited model.)")
            self._apply_heat()

    def _reset(self) -> None:
        self.generation += 1
        if self.job is not None and self._busy_now:
            self.job.cancel()  # a compile of the model that was replaced: its result would be dropped anyway
        self.artifact = self.result = None
        self.heat_kernels = []
        self.stale = False
        self.set_check(CheckChoice())  # the check belongs to the model: another one starts from the defaults
        self.dims.setProperty("dim_names", None)  # so do its dims' values
        self._dims_refusal = None
        self.dims.clear()
        self.dims_used = {}
        self._show_dims()
        self._clear_offer()
        self.table.setRowCount(0)
        self.chart.set_kernels([])
        self.export_btn.setEnabled(False)
        self._update_device_controls()
        self.status.setStyleSheet("")
        self.status.setText("Compile the open model to see its latency, memory and where the time goes.")
        # the bar's "done" / "exported" / "failed" was the old model's
        self.progress.setValue(0)
        self.progress.setFormat("")
        self.progress.setToolTip("")
        self.progress.hide()
        self.window.canvas.set_overlay(None)
        self._update_compile_button()

def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Compile && Run", window)
    dock.setObjectName("panel-compile")
    panel = CompilePanel(window, dock)
    dock.setWidget(panel)
    dock.panel = panel
    return dock
