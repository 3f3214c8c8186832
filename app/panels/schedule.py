"""Schedule: transform one tensor program by hand and measure it on the spot.

Opened by double-clicking a TIR kernel in the Lowering panel (a stage before ScheduleTIR: the
kernel as FuseTIR wrote it) or a kernel bar in Compile & Run's chart. Left, the kernel's loop
tree (core.compiler.manual.nest: loops with extent and kind, blocks with the buffers they read
and write): drag a loop onto another loop of the same nest to swap them (a `reorder` step), or
right-click a loop or a block for the primitives that apply to it, each asking for its
arguments. Under it, the steps (the trace) with Undo / Redo. Middle, the kernel's TIR with the
lines the last step changed marked. Right, Measure (the kernel alone, beside its default
schedule and tuned record: ms, GFLOP/s, share of an estimated peak) with a chart of ms per
measured step, "Use in compile" (files the trace in the tuning database Compile & Run uses, and
turns on its "Use database"), and Export (TVM's trace as Python, or the steps and trace as JSON).

All scheduling is core.compiler.manual.session; a refused step is one red sentence and the
steps stay as they were. Opening and measuring run on worker threads (app.workers.Job).
"""
from __future__ import annotations

import json
import logging
import math

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QPainter, QPen, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QMenu,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from core.compiler.manual.session import StepRefused, describe_step

from app.ir_view import IRView
from app.workers import Job, error_text, start_job

__all__ = ["create_panel", "SchedulePanel", "LoopTree", "StepChart", "AREA"]

logger = logging.getLogger(__name__)

AREA = "bottom"
KIND_COLORS = {"parallel": "#b8621c", "vectorized": "#4e9a45", "unrolled": "#7a4eb0", "thread": "#3f73b0"}


class LoopTree(QTreeWidget):
    """The loop nest; dropping a loop on another emits loopDropped(dragged, target)."""

    loopDropped = Signal(str, str)

    def __init__(self):
        super().__init__()
        self.setColumnCount(2)
        self.setHeaderLabels(["Loop / block", "Extent · kind / buffers"])
        # the Extent column stays readable when split loops widen the names (issue 41, item 6)
        self.header().setMinimumSectionSize(96)
        self.header().setStretchLastSection(True)
        self.setDragEnabled(True)
        self.setAcceptDrops(True)
        self.setDropIndicatorShown(True)
        self.setDragDropMode(QAbstractItemView.InternalMove)
        self.setContextMenuPolicy(Qt.CustomContextMenu)

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt API
        source, target = self.currentItem(), self.itemAt(event.position().toPoint())
        event.ignore()  # the tree is rebuilt from the kernel after the step; Qt moves nothing
        if source is None or target is None or source is target:
            return
        s, t = source.data(0, Qt.UserRole), target.data(0, Qt.UserRole)
        if s and t and s[0] == "loop" and t[0] == "loop":
            self.loopDropped.emit(s[1], t[1])


class StepChart(QWidget):
    """ms per measured step (log scale), with the default schedule and the tuned record as lines."""

    def __init__(self):
        super().__init__()
        self.points: list[tuple[int, float, str]] = []
        self.default_ms: float | None = None
        self.tuned_ms: float | None = None
        self.setMinimumHeight(50)

    def set_data(self, points, default_ms=None, tuned_ms=None) -> None:
        self.points, self.default_ms, self.tuned_ms = list(points), default_ms, tuned_ms
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt API
        return QSize(280, 160)

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt API
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        p.fillRect(self.rect(), QColor("#ffffff"))
        p.setPen(QColor("#555"))
        p.drawText(QRectF(4, 2, self.width() - 8, 16), Qt.AlignLeft | Qt.AlignVCenter, "ms per step (log scale)")
        if not self.points:
            p.drawText(self.rect(), Qt.AlignCenter, "Measure to chart the kernel's time here.")
            return
        values = [ms for _, ms, _ in self.points] + [v for v in (self.default_ms, self.tuned_ms) if v]
        lo, hi = math.log10(min(values) * 0.7), math.log10(max(values) * 1.4)
        top, bottom, left, right = 20.0, self.height() - 18.0, 8.0, self.width() - 8.0

        def y(ms: float) -> float:
            return bottom - (math.log10(ms) - lo) / max(hi - lo, 1e-9) * (bottom - top)

        n = len(self.points)
        slot = (right - left) / n
        for i, (steps, ms, label) in enumerate(self.points):
            x0 = left + i * slot + slot * 0.15
            p.fillRect(QRectF(x0, y(ms), slot * 0.7, bottom - y(ms)), QColor("#3f73b0"))
            p.setPen(QColor("#222"))
            p.drawText(QRectF(x0 - 10, y(ms) - 15, slot * 0.7 + 20, 14), Qt.AlignCenter, f"{ms:.3g}")
            p.drawText(QRectF(x0 - 10, bottom + 1, slot * 0.7 + 20, 16), Qt.AlignCenter, str(steps))
        for value, color, name in ((self.default_ms, "#b00020", "default"), (self.tuned_ms, "#4e9a45", "tuned")):
            if value:
                p.setPen(QPen(QColor(color), 1.5, Qt.DashLine))
                p.drawLine(int(left), int(y(value)), int(right), int(y(value)))
                p.drawText(QRectF(left + 2, y(value) - 15, right - left, 14), Qt.AlignLeft, f"{name} {value:.3g} ms")


class SchedulePanel(QWidget):
    def __init__(self, window, dock: QDockWidget | None = None):
        super().__init__()
        self.window = window
        self.dock = dock
        self.session = None
        self.job: Job | None = None
        self.previous_text: str | None = None
        self.generation = 0

        self.header = QLabel("Double-click a TIR kernel in the Lowering panel (a stage before ScheduleTIR) "
                             "or a kernel in Compile & Run to schedule it here.")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.RichText)
        self.start_box = QComboBox()
        self.start_box.addItem("Start: naive program", "naive")
        self.start_box.addItem("Start: default schedule", "default")
        self.start_box.setToolTip("Begin from the kernel as written (the MLC course's exercise), or from the schedule compile "
                                  "gives it by default, as steps you can edit or undo back to the naive program")
        self.start_box.currentIndexChanged.connect(lambda _i: self.start_from(self.start_box.currentData()))
        self.start_line = QLabel("")
        self.start_line.setWordWrap(True)
        self.tree = LoopTree()
        self.tree.loopDropped.connect(self.drop_loop)
        self.tree.customContextMenuRequested.connect(self._tree_menu)
        self.steps_list = QListWidget()
        self.steps_list.setToolTip("The steps applied so far (the trace), oldest first")
        self.undo_btn = QPushButton("Undo")
        self.redo_btn = QPushButton("Redo")
        self.undo_btn.clicked.connect(self.undo)
        self.redo_btn.clicked.connect(self.redo)
        self.ir = IRView()
        self.measure_btn = QPushButton("Measure")
        self.measure_btn.setToolTip("Time the kernel alone as it stands (the first time also its default schedule and tuned record)")
        self.measure_btn.clicked.connect(self.measure)
        self.use_btn = QPushButton("Use in compile")
        self.use_btn.setToolTip("File the trace in the tuning database: compiles that use the database take it "
                                "where it measured fastest (Compile & Run: 'Use database')")
        self.use_btn.clicked.connect(self.use_in_compile)
        self.export_btn = QPushButton("Export")
        export_menu = QMenu(self.export_btn)
        export_menu.addAction("TVM trace as Python…", lambda: self.export_dialog("py"))
        export_menu.addAction("Steps and TVM trace as JSON…", lambda: self.export_dialog("json"))
        self.export_btn.setMenu(export_menu)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.chart = StepChart()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)

        left = QWidget()
        lv = QVBoxLayout(left)
        lv.setContentsMargins(0, 0, 0, 0)
        # small minimums: the dock shares the bottom with the other panels and stays low until a
        # kernel opens (then _show_dock makes room)
        self.tree.setMinimumHeight(40)
        self.steps_list.setMinimumHeight(24)
        self.ir.setMinimumHeight(40)
        lv.addWidget(self.start_box)
        lv.addWidget(self.start_line)
        lv.addWidget(self.tree, 3)
        lv.addWidget(QLabel("Steps"))
        lv.addWidget(self.steps_list, 1)
        ur = QHBoxLayout()
        ur.addWidget(self.undo_btn)
        ur.addWidget(self.redo_btn)
        lv.addLayout(ur)
        right = QWidget()
        rv = QVBoxLayout(right)
        rv.setContentsMargins(0, 0, 0, 0)
        buttons = QHBoxLayout()
        for b in (self.measure_btn, self.use_btn, self.export_btn):
            buttons.addWidget(b)
        rv.addLayout(buttons)
        rv.addWidget(self.result)
        rv.addWidget(self.chart, 1)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(self.ir)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([440, 600, 320])
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 2)
        lay.addWidget(self.header)
        lay.addWidget(split, 1)
        lay.addWidget(self.status)
        QShortcut(QKeySequence("Ctrl+Alt+Z"), self, activated=self.undo, context=Qt.WidgetWithChildrenShortcut)
        QShortcut(QKeySequence("Ctrl+Alt+Y"), self, activated=self.redo, context=Qt.WidgetWithChildrenShortcut)
        window.document.graphReplaced.connect(self._model_replaced)
        self._update_buttons()

    # ---- opening a kernel ---------------------------------------------------------------------
    def open_from_module(self, mod, kernel: str, onnx_nodes=None) -> None:
        """Open `kernel` of a Relax+TIR module (a Lowering stage before ScheduleTIR)."""
        from core.compiler.manual.session import session_from_module

        self._open(lambda: session_from_module(mod, kernel, "cpu", onnx_nodes=onnx_nodes, database=self._database()), kernel)

    def open_from_model(self, kernel: str) -> None:
        """Open `kernel` of the document's model (its name as FuseTIR or the compiled model names it)."""
        from core.compiler.manual.session import open_session

        graph = self.window.document.graph
        if graph is None:
            return
        snapshot = graph.clone()
        self._open(lambda: open_session(snapshot, kernel, "cpu", database=self._database()), kernel)

    def _open(self, make, kernel: str) -> None:
        if self.job is not None:
            self.job.cancel()
        self.generation += 1
        generation = self.generation
        self._show_dock()
        self.status.setStyleSheet("")
        self.status.setText(f"Opening kernel {kernel}…")
        self.job = start_job(
            lambda _job: make(), "Opening kernel", self, ended=self._job_finished, done=self._opened,
            failed=lambda exc: self._error(error_text(exc, "Opening kernel")), wanted=lambda: generation == self.generation,
        )
        self._update_buttons()

    def _opened(self, session) -> None:
        self.session = session
        self.previous_text = None
        nodes = ", ".join(session.onnx_nodes[:6]) + (" …" if len(session.onnx_nodes) > 6 else "")
        work = (f"{session.flops / 1e6:.1f} MFLOP, at least {session.bytes / 1e6:.2f} MB moved" if session.flops
                else "symbolic shapes: FLOPs unknown, cannot be measured alone")
        self.header.setText(f"<b>{session.name}</b> — {work}"
                            + (f"; ONNX: {nodes}" if nodes else "")
                            + f"<br><span style='color:#666'>{session.peak.describe()}</span>")
        self.result.setText("")
        self.chart.set_data([])
        self._set_start_box(session.start)
        self._show_start()
        self.status.setText("Right-click a loop or block for the primitives; drag a loop onto another to swap them.")
        self.refresh()

    # ---- starting point ---------------------------------------------------------------------------
    def start_from(self, start: str) -> None:
        """Begin again from 'naive' (the kernel as written) or 'default' (the default schedule as steps)."""
        if self.session is None or self.job is not None or start == self.session.start and start == "naive" and not self.session.steps:
            return
        session = self.session
        before = session.script()
        self.status.setStyleSheet("")
        self.status.setText("Turning the default schedule into steps…" if start == "default" else "Back to the naive program…")

        def done(_result) -> None:
            self.previous_text = before
            self._show_start()
            self.status.setText(f"Started from the {'default schedule' if start == 'default' else 'naive program'}: "
                                + (f"{session.default_plan().describe()}." if start == "default" else "the kernel as written."))
            self.refresh()

        self._run(lambda _job: session.start_from(start), "Starting point", done)

    def _set_start_box(self, start: str) -> None:
        self.start_box.blockSignals(True)
        self.start_box.setCurrentIndex(max(0, self.start_box.findData(start)))
        self.start_box.blockSignals(False)

    def _show_start(self) -> None:
        """One line: which start the steps began from, and the default's time beside the naive one."""
        s = self.session
        if s is None:
            self.start_line.setText("")
            return
        what = "the naive program (the kernel as written)" if s.start == "naive" else "the default schedule (its steps are below)"
        default_ms, _tuned, _kind = s.measured_baselines or (None, None, None)
        times = (f"default {default_ms:.4f} ms · naive {s.naive_ms:.4f} ms" if default_ms is not None and s.naive_ms is not None
                 else "Measure to time the default beside the naive program")
        self.start_line.setText(f"On {what} — {times}.")

    def _show_dock(self) -> None:
        if self.dock is not None:
            self.dock.show()
            self.dock.raise_()
            if self.dock.height() < 360 and not self.dock.isFloating():
                self.window.resizeDocks([self.dock], [max(360, int(self.window.height() * 0.45))], Qt.Vertical)

    def _database(self):
        panel = self._compile_panel()
        return getattr(panel, "tune_db_path", None)

    def _compile_panel(self):
        dock = getattr(self.window, "panels", {}).get("compile")
        return getattr(dock, "panel", None) if dock is not None else None

    # ---- steps ------------------------------------------------------------------------------------
    def apply_step(self, step: dict) -> bool:
        """Apply a step; a refusal is one red sentence and nothing changes."""
        if self.session is None or self.job is not None:
            return False
        before = self.session.script()
        try:
            applied = self.session.apply(step)
        except StepRefused as e:
            self._error(str(e))
            return False
        self.previous_text = before
        self.status.setStyleSheet("")
        self.status.setText(f"Applied: {describe_step(applied)}.")
        self.refresh()
        return True

    def undo(self) -> None:
        if self.session is not None and self.job is None and self.session.can_undo:
            before = self.session.script()
            step = self.session.undo()
            self.previous_text = before
            self.status.setText(f"Undone: {describe_step(step)}.")
            self.refresh()

    def redo(self) -> None:
        if self.session is not None and self.job is None and self.session.can_redo:
            before = self.session.script()
            step = self.session.redo()
            self.previous_text = before
            self.status.setText(f"Redone: {describe_step(step)}.")
            self.refresh()

    def drop_loop(self, dragged: str, target: str) -> bool:
        """Swap two loops of one nest (a reorder of the loops from the outer to the inner of them)."""
        if self.session is None:
            return False
        nest = self.session.nest()
        a, b = nest.by_name.get(dragged), nest.by_name.get(target)
        chain = next((blk.loops for blk in nest.blocks.values() if dragged in blk.loops and target in blk.loops), None)
        if a is None or b is None or chain is None:
            self._error(f"loops {dragged} and {target} are not in one nest: only loops around the same block can be swapped.")
            return False
        i, j = sorted((chain.index(dragged), chain.index(target)))
        order = chain[i : j + 1]
        order[0], order[-1] = order[-1], order[0]
        return self.apply_step({"primitive": "reorder", "loops": order})

    # ---- right-click menus ----------------------------------------------------------------------
    def actions_for(self, kind: str, name: str) -> list[tuple[str, callable]]:
        """(label, do) of the primitives for a loop or a block; `do()` asks for the arguments."""
        if self.session is None:
            return []
        nest = self.session.nest()
        lanes = self.session.peak.lanes
        if kind == "loop":
            node = nest.by_name[name]
            acts = [
                (f"split {name}…", lambda: self._ask_split(name, node.extent, lanes)),
                (f"parallel {name}", lambda: self.apply_step({"primitive": "parallel", "loop": name})),
                (f"vectorize {name}", lambda: self.apply_step({"primitive": "vectorize", "loop": name})),
                (f"unroll {name}", lambda: self.apply_step({"primitive": "unroll", "loop": name})),
            ]
            inner = node.children[0] if len(node.children) == 1 and node.children[0].kind == "loop" else None
            if inner is not None:
                acts.append((f"fuse {name} with {inner.name}", lambda: self.apply_step({"primitive": "fuse", "loops": [name, inner.name]})))
            acts.append((f"reorder from {name}…", lambda: self._ask_reorder(name)))
            return acts
        block = nest.blocks[name]
        others = [lp.name for lp in nest.loops if lp.name not in block.loops]
        acts = [
            (f"compute_inline {name}", lambda: self.apply_step({"primitive": "compute_inline", "block": name})),
            (f"reverse_compute_inline {name}", lambda: self.apply_step({"primitive": "reverse_compute_inline", "block": name})),
            (f"compute_at {name}…", lambda: self._ask_item("compute_at", name, "loop", others)),
            (f"reverse_compute_at {name}…", lambda: self._ask_item("reverse_compute_at", name, "loop", others)),
            (f"cache_read of {name}…", lambda: self._ask_item("cache_read", name, "buffer", block.reads)),
            (f"cache_write of {name}…", lambda: self._ask_item("cache_write", name, "buffer", block.writes)),
            (f"transform_layout of {name}…", lambda: self._ask_layout(name, block.reads + block.writes)),
        ]
        if "R" in block.iters:
            acts.insert(0, (f"decompose_reduction {name}…", lambda: self._ask_item("decompose_reduction", name, "loop", block.loops)))
        return acts

    def _tree_menu(self, pos) -> None:
        item = self.tree.itemAt(pos)
        data = item.data(0, Qt.UserRole) if item is not None else None
        if not data or self.job is not None:
            return
        menu = QMenu(self)
        for label, do in self.actions_for(*data):
            menu.addAction(label, do)
        menu.exec(self.tree.viewport().mapToGlobal(pos))

    def _ask_split(self, loop: str, extent, lanes: int) -> None:
        default = f"None, {lanes}" if extent is None or extent % lanes == 0 else "None, 4"
        text, ok = QInputDialog.getText(self, "split", f"Factors for {loop} (extent {extent}); None for the one left open:", text=default)
        if ok and text.strip():
            try:
                factors = [None if f.strip().lower() in ("none", "null", "") else int(f) for f in text.split(",")]
            except ValueError:
                self._error(f"split factors must be whole numbers or None, separated by commas, not '{text}'.")
                return
            self.apply_step({"primitive": "split", "loop": loop, "factors": factors})

    def _ask_reorder(self, loop: str) -> None:
        chain = next((b.loops for b in self.session.nest().blocks.values() if loop in b.loops), [loop])
        text, ok = QInputDialog.getText(self, "reorder", "New order of these loops (comma separated):", text=", ".join(chain[chain.index(loop):]))
        if ok and text.strip():
            self.apply_step({"primitive": "reorder", "loops": [x.strip() for x in text.split(",") if x.strip()]})

    def _ask_item(self, primitive: str, block: str, what: str, items: list[str]) -> None:
        if not items:
            self._error(f"{primitive} of block {block}: there is no {what} to choose.")
            return
        choice, ok = QInputDialog.getItem(self, primitive, f"{primitive} of {block}: choose the {what}", items, 0, False)
        if ok and choice:
            step = {"primitive": primitive, "block": block, what: choice}
            if primitive == "cache_write" or primitive == "cache_read":
                step["scope"] = "global"
            self.apply_step(step)

    def _ask_layout(self, block: str, buffers: list[str]) -> None:
        buffer, ok = QInputDialog.getItem(self, "transform_layout", f"Buffer of {block} to lay out anew", buffers, 0, False)
        if not ok:
            return
        node = self.session.nest().buffers.get(buffer)
        names = [f"i{k}" for k in range(len(node.shape))] if node is not None else ["i", "j"]
        text, ok = QInputDialog.getText(self, "transform_layout", "Index map (indices -> new indices):", text=f"{', '.join(names)} -> {', '.join(names)}")
        if ok and text.strip():
            self.apply_step({"primitive": "transform_layout", "block": block, "buffer": buffer, "index_map": text})

    # ---- measuring, compile, export ---------------------------------------------------------------
    def measure(self) -> None:
        if self.session is None or self.job is not None:
            return
        session = self.session
        self.status.setStyleSheet("")
        self.status.setText("Measuring the kernel alone" + ("" if session.measurements else " (and its default and tuned schedules)") + "…")
        self._run(lambda _job: session.measure(), "Measuring kernel", self._measured)

    def _measured(self, m) -> None:
        s = self.session
        tuned = f"tuned record ({m.tuned_kind}) {m.tuned_ms:.4f} ms" if m.tuned_ms is not None else "no tuned record"
        self.result.setText(f"<b>{m.ms:.4f} ms</b> after {m.steps} steps · {m.gflops:.2f} GFLOP/s · {m.peak_fraction * 100:.1f}% of the "
                            f"estimated peak<br>default schedule {m.default_ms:.4f} ms · {tuned}")
        self.result.setToolTip(s.peak.describe())
        self.chart.set_data([(x.steps, x.ms, x.label) for x in s.measurements], m.default_ms, m.tuned_ms)
        self.status.setText(f"Measured: {m.ms:.4f} ms ({m.label}).")
        self._show_start()

    def use_in_compile(self) -> None:
        if self.session is None or self.job is not None:
            return
        session, db = self.session, self._database()
        self.status.setText("Filing the trace in the tuning database (measuring it first if needed)…")
        self._run(lambda _job: session.use_in_compile(db), "Use in compile", self._filed)

    def _filed(self, filed: dict) -> None:
        if self.session.measurements:
            self._measured(self.session.measurements[-1])
        panel = self._compile_panel()
        if panel is not None and hasattr(panel, "use_db"):
            panel.use_db.setChecked(True)
        weighed = ", ".join(f"{o['kind']} {o['ms']:.4f} ms" for o in filed["options"] if o["ms"] is not None)
        self.status.setStyleSheet("")
        self.status.setText(f"Filed in {filed['database']}; compiles using the database take the {filed['choice']} schedule ({weighed}).")

    def export_python(self, path) -> None:
        header = (f"# TVM trace of kernel {self.session.name} (MLC Workbench schedule); apply it to\n"
                  f"# sch = tvm.s_tir.Schedule(tvm.IRModule({{'main': kernel}}))\n")
        with open(path, "w", encoding="utf-8") as f:
            f.write(header + self.session.trace_python() + "\n")

    def export_json(self, path) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.session.to_json(), f, indent=1)

    def export_dialog(self, kind: str) -> None:
        if self.session is None:
            return
        caption, filt = ("Export TVM trace as Python", "Python (*.py)") if kind == "py" else ("Export steps and trace as JSON", "JSON (*.json)")
        path, _ = QFileDialog.getSaveFileName(self, caption, f"{self.session.name}_trace.{kind}", filt)
        if not path:
            return
        try:
            (self.export_python if kind == "py" else self.export_json)(path)
        except OSError as e:
            self._error(f"cannot write '{path}': {e.strerror}.")
            return
        self.status.setText(f"Exported to {path}.")

    # ---- plumbing -----------------------------------------------------------------------------
    def _run(self, work, title: str, on_done) -> None:
        generation = self.generation
        # the job's exception comes as an object: error_text makes its one line
        self.job = start_job(
            work, title, self, ended=self._job_finished, done=on_done,
            failed=lambda exc: self._error(error_text(exc, title)), wanted=lambda: generation == self.generation,
        )
        self._update_buttons()

    def _job_finished(self, job) -> None:
        if self.job is job:
            self.job = None
        self._update_buttons()

    def _error(self, message: str) -> None:
        self.status.setText(message)
        self.status.setStyleSheet("color: #b00020;")

    def _update_buttons(self) -> None:
        ready = self.session is not None and self.job is None
        for b in (self.measure_btn, self.export_btn):
            b.setEnabled(ready)
        self.use_btn.setEnabled(ready and self.session.can_undo)
        self.start_box.setEnabled(ready)
        self.undo_btn.setEnabled(ready and self.session.can_undo)
        self.redo_btn.setEnabled(ready and self.session.can_redo)
        self.tree.setEnabled(ready)

    def refresh(self) -> None:
        s = self.session
        self.tree.clear()
        if s is None:
            return
        nest = s.nest()

        def add(node, parent) -> None:
            if node.kind == "loop":
                item = QTreeWidgetItem([node.name, f"{node.extent if node.extent is not None else '?'}"
                                        + ("" if node.loop_kind == "serial" else f" · {node.loop_kind}")])
                if node.loop_kind in KIND_COLORS:
                    item.setForeground(1, QColor(KIND_COLORS[node.loop_kind]))
                item.setFlags(item.flags() | Qt.ItemIsDragEnabled | Qt.ItemIsDropEnabled)
            else:
                item = QTreeWidgetItem([f"block {node.name} [{node.iters}]",
                                        f"reads {', '.join(node.reads) or '-'} · writes {', '.join(node.writes) or '-'}"])
                item.setForeground(0, QColor("#3f73b0"))
                item.setFlags(item.flags() & ~Qt.ItemIsDragEnabled)
            item.setData(0, Qt.UserRole, (node.kind, node.name))
            if parent is None:
                self.tree.addTopLevelItem(item)
            else:
                parent.addChild(item)
            for c in node.children:
                add(c, item)

        for r in nest.roots:
            add(r, None)
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        # names may take what the Extent column leaves over, never its readable minimum
        room = self.tree.viewport().width() - self.tree.header().minimumSectionSize()
        if room > 120 and self.tree.columnWidth(0) > room:
            self.tree.setColumnWidth(0, room)
        self.steps_list.clear()
        for i, step in enumerate(s.steps, 1):
            self.steps_list.addItem(f"{i}. {describe_step(step)}")
            if step.get("python"):  # a TVM trace step lists its instructions
                self.steps_list.item(i - 1).setToolTip("\n".join(step["python"]))
        self.ir.set_ir(s.script(), "tvmscript", self.previous_text)
        self._update_buttons()

    def _model_replaced(self) -> None:
        self.generation += 1
        if self.job is not None:
            self.job.cancel()
        self.session = None
        self.tree.clear()
        self.steps_list.clear()
        self.ir.set_ir("", "")
        self.result.setText("")
        self.chart.set_data([])
        self.status.setText("")  # nothing of the previous model's kernel stays (issue 41, item 7)
        self.status.setStyleSheet("")
        self.start_line.setText("")
        self._set_start_box("naive")
        self.previous_text = None
        self.header.setText("Double-click a TIR kernel in the Lowering panel or a kernel in Compile & Run to schedule it here.")
        self._update_buttons()


def create_panel(window) -> QDockWidget:
    dock = QDockWidget("Schedule", window)
    dock.setObjectName("panel-schedule")
    panel = SchedulePanel(window, dock)
    dock.setWidget(panel)
    dock.panel = panel
    window.schedule_panel = panel
    return dock
