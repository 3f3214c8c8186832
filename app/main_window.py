"""The main window: the graph canvas in the middle, panels docked around it.

`MainWindow` owns one `Document` (the open model + undo stack) and one `GraphCanvas`. Panels are
modules under `app.panels` listed in `app.panels.PANELS`; each exposes `create_panel(window) ->
QDockWidget` and is created at start-up, then docked with `add_panel` (side from the module's
optional `AREA`: "left", "right" or "bottom"). Panels reach the model through `window.document`
and the view through `window.canvas`; they change the graph only with `window.document.push(edit)`.

Opening a file loads, builds the view and lays it out on a worker thread (progress and Cancel in
the status bar); a bad file shows one sentence and leaves the open model and its unsaved edits alone.
"""
from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
import time
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QSizePolicy,
    QToolButton,
)

from core import WorkbenchError, load_model
from core.views.layout import layout

from app.canvas import GraphCanvas, prepare_display
from app.document import Document
from app.graph_items import node_size
from app.workers import Job, error_text, start_job

__all__ = ["MainWindow", "run", "DOC_PAGES", "DOCS_ROOT"]

logger = logging.getLogger(__name__)

APP_NAME = "MLC Workbench"
ORG_NAME = "mlc-workbench"
MAX_RECENT = 10
# Help ▸ Documentation: the README (the front door) and the reference pages under docs/, opened
# in the desktop's viewer for Markdown. They ship with a checkout, not with an installed wheel.
DOCS_ROOT = Path(__file__).resolve().parents[1]
DOC_PAGES = (
    ("&Getting Started (README)", "README.md"),
    ("The G&UI", "docs/gui.md"),
    ("&Command Line", "docs/command-line.md"),
    ("The C&ompiler: Pipeline and Packages", "docs/compiler.md"),
    ("Re&write Rules", "docs/rewrites.md"),
    ("&Quantized Models", "docs/quantization.md"),
    ("&Tuning", "docs/tuning.md"),
    ("&Scheduling a Kernel by Hand", "docs/scheduling.md"),
    ("&Artifacts", "docs/artifacts.md"),
    ("&Deploying to ARM64 Devices", "docs/deploy.md"),
    ("&Measuring", "docs/measuring.md"),
    ("&Performance Figures", "docs/performance.md"),
    ("&Reliability and Safety", "docs/reliability.md"),
    ("P&ython API", "docs/python-api.md"),
    ("Setting Up and T&esting", "docs/setup.md"),
)
_AREAS = {"left": Qt.LeftDockWidgetArea, "right": Qt.RightDockWidgetArea, "bottom": Qt.BottomDockWidgetArea, "top": Qt.TopDockWidgetArea}


class MainWindow(QMainWindow):
    def __init__(self, settings: QSettings | None = None, load_panels: bool = True) -> None:
        super().__init__()
        self.settings = settings if settings is not None else QSettings(ORG_NAME, APP_NAME)
        self.document = Document(self)
        self.canvas = GraphCanvas(self.document, self)
        from app.start_page import StartPage, stacked_over  # over the canvas while no model is open

        self.start_page = StartPage(self)
        self.setCentralWidget(stacked_over(self, self.canvas, self.start_page))
        from app.scopes import ScopeController

        self.scopes = ScopeController(self.canvas)
        from app.open_preview import OpenPreview

        self.open_preview = OpenPreview(self, lambda: self._load_job)  # a big model's first picture while it loads
        self.setAcceptDrops(True)
        self.setDockNestingEnabled(True)
        self.panels: dict[str, QDockWidget] = {}
        self.panel_errors: dict[str, str] = {}
        self._load_job: Job | None = None
        self._load_result: bool | None = None
        self.last_open_seconds = 0.0
        self.last_open_phases: dict[str, float] = {}  # seconds per step of the last open (worker side)
        self.last_open_cpu: dict[str, float] = {}  # the same steps' CPU seconds on the worker thread
        # Called with the new Graph on the open worker, after the layout and before the graph is
        # handed to the UI (while it is still that thread's alone): panels compute here what they
        # would otherwise compute on the UI thread as the model appears (the Inspector's model
        # facts). A hook must only read the graph; one that fails is logged and skipped.
        self.open_hooks: list = []

        self._build_status_bar()
        self._build_menus()
        self.scopes.install_actions(self)
        from app.compare import install_actions as install_compare

        install_compare(self)
        self.document.dirtyChanged.connect(self._update_title)
        self.document.pathChanged.connect(lambda _p: self._update_title())
        self.document.graphReplaced.connect(self._update_status)
        self.document.graphChanged.connect(self._update_status)
        self.canvas.viewSelectionChanged.connect(lambda _ids: self._update_status())
        self.canvas.viewShown.connect(lambda _v: self._update_status())
        self.canvas.zoomChanged.connect(lambda z: self.zoom_label.setText(f"{z * 100:.0f} %"))
        self.canvas.busyChanged.connect(self._canvas_busy)
        self.canvas.progressed.connect(self._progress)

        if load_panels:
            self._create_panels()
        from app.edit_actions import EditActions  # keys, context menu, drag-to-connect, save guard

        self.edit_actions = EditActions(self)
        from app.subgraphs import SubgraphNavigator  # If / Loop / Scan bodies on the canvas

        self.subgraphs = SubgraphNavigator(self)
        from app.autosave import Autosaver  # unsaved edits survive a crash (app.autosave)

        self.autosaver = Autosaver(self)
        self._default_geometry()
        geometry = self.settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = self.settings.value("window/state")
        if state is not None:
            self.restoreState(state)
        else:  # dock sizes only stick once the window has its real size: again right after showing
            QTimer.singleShot(250, self._default_dock_sizes)
        # View settings of the last session (the canvas is still empty: nothing is laid out twice)
        self.direction_action.setChecked(_as_bool(self.settings.value("view/leftToRight", False)))
        self.edge_shapes_action.setChecked(_as_bool(self.settings.value("view/edgeShapes", False)))
        self._update_title()
        self.start_page.refresh()

    # ---- panels ------------------------------------------------------------------------------
    def _create_panels(self) -> None:
        from app.panels import PANELS

        for name in PANELS:
            try:
                module = importlib.import_module(f"app.panels.{name}")
                dock = module.create_panel(self)
            except Exception as e:  # noqa: BLE001 - one broken panel must not take the window down
                logger.exception("panel %s failed to load", name)
                self.panel_errors[name] = f"{type(e).__name__}: {e}"
                continue
            if dock is None:
                continue
            if not dock.objectName():
                dock.setObjectName(f"panel-{name}")
            if self.dockWidgetArea(dock) == Qt.NoDockWidgetArea:
                self.add_panel(dock, _AREAS.get(getattr(module, "AREA", "right"), Qt.RightDockWidgetArea))
            self.panels[name] = dock
        if "compile" in self.panels:  # the bottom tab a first start shows: Compile & Run, not the last one added
            self.panels["compile"].raise_()
        if self.panel_errors:
            self.statusBar().showMessage("Some panels failed to load: " + ", ".join(self.panel_errors), 8000)

    def _default_geometry(self) -> None:
        """First start: most of the screen, and docks that leave the canvas the larger part."""
        screen = QApplication.primaryScreen()
        avail = screen.availableGeometry() if screen is not None else None
        if avail is not None and avail.width() > 400:
            self.resize(min(1600, int(avail.width() * 0.92)), min(1000, int(avail.height() * 0.92)))
        else:
            self.resize(1400, 900)
        self._default_dock_sizes()

    def _default_dock_sizes(self) -> None:
        """The canvas dominates: a narrow rule list on the left, the inspector on the right, and
        the bottom tabs (Compile & Run, Lowering, Problems) about a fifth of the height."""
        width, height = max(self.width(), 800), max(self.height(), 600)
        sizes = {Qt.LeftDockWidgetArea: min(300, width // 6), Qt.RightDockWidgetArea: min(330, width // 5),
                 Qt.BottomDockWidgetArea: max(170, min(240, height // 5)), Qt.TopDockWidgetArea: 160}
        by_area: dict = {}
        for dock in self.findChildren(QDockWidget):
            if not dock.isFloating():
                by_area.setdefault(self.dockWidgetArea(dock), []).append(dock)
        for area, docks in by_area.items():
            if area in (Qt.LeftDockWidgetArea, Qt.RightDockWidgetArea):
                self.resizeDocks(docks, [sizes[area]] * len(docks), Qt.Horizontal)
            elif area in (Qt.BottomDockWidgetArea, Qt.TopDockWidgetArea):
                self.resizeDocks(docks, [sizes[area]] * len(docks), Qt.Vertical)

    def add_panel(self, dock: QDockWidget, area: Qt.DockWidgetArea = Qt.RightDockWidgetArea) -> None:
        """Dock a panel and list it in the View menu. Panels on the same side become tabs."""
        if not dock.objectName():
            dock.setObjectName(f"panel-{dock.windowTitle() or id(dock)}")
        same_side = [d for d in self.findChildren(QDockWidget) if d is not dock and self.dockWidgetArea(d) == area and not d.isFloating()]
        self.addDockWidget(area, dock)
        if same_side:
            self.tabifyDockWidget(same_side[0], dock)
            same_side[0].raise_()
        self.panels_menu.addAction(dock.toggleViewAction())

    # ---- menus and status --------------------------------------------------------------------
    def _action(self, menu: QMenu, text: str, slot, shortcut=None, tip: str = "") -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(QKeySequence(shortcut))
        if tip:
            act.setStatusTip(tip)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _build_menus(self) -> None:
        mb = self.menuBar()
        file_menu = mb.addMenu("&File")
        self._action(file_menu, "&Open…", self.open_dialog, QKeySequence.Open, "Open an ONNX model")
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        file_menu.addSeparator()
        self.save_action = self._action(file_menu, "&Save", self.save, QKeySequence.Save)
        self.save_as_action = self._action(file_menu, "Save &As…", self.save_as, QKeySequence.SaveAs)
        file_menu.addSeparator()
        from app.export_image import install_actions as install_export  # Export Image… (PNG / SVG)

        install_export(self, file_menu)
        file_menu.addSeparator()
        self._action(file_menu, "Open Compiled &Artifact…", self._open_compiled_artifact,
                     tip="Load an exported artifact folder (runs its native code, after asking) and measure it")
        file_menu.addSeparator()
        self._action(file_menu, "&Close", self.close_model, "Ctrl+W", "Close the model (the start page shows)")
        self._action(file_menu, "&Quit", self.close, QKeySequence.Quit)
        self.file_menu = file_menu

        edit_menu = mb.addMenu("&Edit")
        self.undo_action = self.document.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcut(QKeySequence.Undo)
        self.redo_action = self.document.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcut(QKeySequence.Redo)
        edit_menu.addAction(self.undo_action)
        edit_menu.addAction(self.redo_action)
        edit_menu.addSeparator()
        self._action(edit_menu, "&Find…", self.canvas.find_bar.open, QKeySequence.Find, "Find nodes by op type, name or tensor")
        self.edit_menu = edit_menu

        view_menu = mb.addMenu("&View")
        self._action(view_menu, "&Fit Graph", self.canvas.fit, "Ctrl+0",
                     "Fit the graph to the canvas; a big graph is shown from its start at a scale where op names stay readable")
        self._action(view_menu, "&Whole Graph", self.canvas.fit_all, "Ctrl+Shift+0", "Everything in view, however small")
        self._action(view_menu, "Actual Size (100 %)", self.canvas.zoom_100, "Ctrl+1")
        self._action(view_menu, "Zoom &In", lambda: self.canvas.zoom_by(1.25), QKeySequence.ZoomIn)
        self._action(view_menu, "Zoom &Out", lambda: self.canvas.zoom_by(0.8), QKeySequence.ZoomOut)
        view_menu.addSeparator()
        self._action(view_menu, "Show the &Model Graph", lambda: self.canvas.show_model(fit=False), "Ctrl+M")
        minimap = QAction("Overview Map", self, checkable=True, checked=True)
        minimap.toggled.connect(self._toggle_minimap)
        view_menu.addAction(minimap)
        self.key_action = QAction("Colour &Key", self, checkable=True, checked=False)
        self.key_action.setToolTip("Show which colour stands for which kind of op")
        self.key_action.toggled.connect(self.canvas.show_key)
        view_menu.addAction(self.key_action)
        self.direction_action = QAction("&Left to Right Layout", self, checkable=True)
        self.direction_action.setShortcut("Ctrl+Shift+L")
        self.direction_action.setToolTip("Lay graphs out left to right instead of top to bottom")
        self.direction_action.toggled.connect(self._set_direction)
        view_menu.addAction(self.direction_action)
        self.edge_shapes_action = QAction("Tensor &Shapes on Edges", self, checkable=True)
        self.edge_shapes_action.setToolTip("Label every edge with its tensor's shape (otherwise on hover, or zoomed in)")
        self.edge_shapes_action.toggled.connect(self._set_edge_shapes)
        view_menu.addAction(self.edge_shapes_action)
        view_menu.addSeparator()
        self.panels_menu = view_menu.addMenu("&Panels")
        self.view_menu = view_menu

        help_menu = mb.addMenu("&Help")  # the documentation pages: the README, then docs/
        for i, (title, rel) in enumerate(DOC_PAGES):
            if i == 1:
                help_menu.addSeparator()
            self._action(help_menu, title, lambda _checked=False, rel=rel: self.open_doc(rel), tip=f"Open {rel}")
        self.help_menu = help_menu
        from app import help_dialogs  # Start Page, Guided Tour, Keyboard Shortcuts, About

        help_dialogs.install(self)

    def open_doc(self, rel: str) -> bool:
        """Open a documentation page (a path under the checkout, e.g. docs/compiler.md) in the
        desktop's viewer; says so in the status bar when the page is not there (an installed wheel)."""
        path = DOCS_ROOT / rel
        if not path.is_file():
            self.statusBar().showMessage(f"The documentation page {rel} is not here: it ships with a checkout of the workbench.", 8000)
            return False
        return QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))

    def _open_compiled_artifact(self) -> None:
        """File > Open Compiled Artifact: the Compile & Run panel asks, loads and measures."""
        dock = self.panels.get("compile")
        if dock is not None:
            dock.show()
            dock.raise_()
            dock.widget().open_artifact_dialog()

    def _toggle_minimap(self, on: bool) -> None:
        self.canvas.minimap.enabled_by_user = on
        self.canvas.minimap.place()

    def _build_status_bar(self) -> None:
        sb = self.statusBar()
        self.info_label = QLabel("")
        # long status text is cut, never a reason for the window to grow
        self.info_label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.info_label.setMinimumWidth(40)
        self.zoom_label = QLabel("")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(False)
        self.progress_label = QLabel("")
        self.cancel_button = QToolButton(text="Cancel")
        self.cancel_button.clicked.connect(self.cancel_work)
        sb.addWidget(self.info_label, 1)
        for w in (self.progress_label, self.progress, self.cancel_button):
            sb.addPermanentWidget(w)
            w.hide()
        sb.addPermanentWidget(self.zoom_label)

    def _set_busy(self, busy: bool, text: str = "") -> None:
        for w in (self.progress_label, self.progress, self.cancel_button):
            w.setVisible(busy)
        self.progress_label.setText(text)
        if busy:
            self.progress.setValue(0)

    def _canvas_busy(self, busy: bool, message: str) -> None:
        if self._load_job is not None:
            return  # the load's own progress is showing
        self._set_busy(busy, message)
        if not busy and message:
            QMessageBox.warning(self, "Layout failed", message)

    def _progress(self, fraction: float, text: str) -> None:
        self.progress.setValue(int(fraction * 1000))
        if text:
            self.progress_label.setText(text)

    def cancel_work(self) -> None:
        if self._load_job is not None:
            self._load_job.cancel()
        self.canvas.cancel()

    def _update_title(self) -> None:
        path = self.document.path
        name = path.name if path else "untitled"
        self.setWindowTitle(f"{name}[*] — {APP_NAME}" if self.document.graph is not None else APP_NAME)
        self.setWindowModified(self.document.is_dirty)

    def _update_status(self) -> None:
        view = self.canvas.view
        graph = self.document.graph
        if graph is None:
            self.info_label.setText("No model open — File ▸ Open or drop an .onnx file here")
            return
        parts = []
        if view is not None:
            where = "model" if self.canvas.mode == "model" else view.title
            parts.append(f"{where}: {len(view.nodes)} nodes shown")
        if self.canvas.mode == "model":
            parts.append(f"{len(graph)} ONNX nodes")
        ids = self.canvas.selected_ids()
        if len(ids) == 1 and view is not None:
            n = view.node(ids[0])
            name = n.data.get("name") or ""
            parts.append(f"selected: {n.label}" + (f" '{name}'" if name else ""))
        elif ids:
            parts.append(f"{len(ids)} selected")
        lo = self.canvas.layout_result
        if lo is not None:
            parts.append(f"layout: {lo.method} {lo.seconds:.2f} s")
        self.info_label.setText("   ·   ".join(parts))

    def _set_direction(self, left_to_right: bool) -> None:
        self.settings.setValue("view/leftToRight", left_to_right)
        self.canvas.set_direction("LR" if left_to_right else "TB")

    def _set_edge_shapes(self, on: bool) -> None:
        self.settings.setValue("view/edgeShapes", on)
        self.canvas.set_edge_shapes(on)

    # ---- opening -----------------------------------------------------------------------------
    def open_dialog(self) -> None:
        from app.dialogs.files import open_file

        path = open_file(self, self, "model", "Open ONNX model", "ONNX models (*.onnx);;All files (*)")
        if path:
            self.open_model(path)

    def open_model(self, path: str | os.PathLike, wait: bool = False, allow_absolute_external: bool = False) -> bool:
        """Open a model: load, view and layout run on a worker thread.

        Returns True when the load started (or, with `wait=True`, when the model is open and
        drawn). Unsaved edits are asked about first; a bad file shows its sentence and keeps the
        current model. `allow_absolute_external` is for the workbench's own autosaves (see
        core.load_model)."""
        if not self._confirm_discard():
            return False
        if self._load_job is not None:
            self._load_job.cancel()
        # the model being replaced can be collected again; nothing frozen yet: no model was
        # opened here before, and the full collection below (~70 ms of held GIL even with
        # nothing to free) is not needed
        replacing = gc.get_freeze_count() > 0
        gc.unfreeze()
        path = str(path)
        measure = self.canvas.measure
        direction = self.canvas.direction
        t0 = time.perf_counter()

        def work(job: Job):
            phases, cpu = {}, {}  # wall and this thread's CPU seconds per step (busy hosts: CPU is the steadier figure)
            t, c = time.perf_counter(), time.thread_time()

            def lap(step: str) -> None:
                nonlocal t, c
                phases[step], t = time.perf_counter() - t, time.perf_counter()
                cpu[step], c = time.thread_time() - c, time.thread_time()

            job.report(0.02, f"Loading {Path(path).name}")
            # Loading builds hundreds of thousands of IR objects that live as long as the model
            # is open: no cyclic GC passes over them while they are made (each full pass holds
            # the GIL, i.e. stalls the UI), and afterwards they leave the GC's scans for good.
            # The view and layout add a few hundred thousand more; the same holds for them.
            # Models replaced earlier were unfrozen above and are garbage in reference cycles:
            # one collection first frees them (skipping it froze every old model for good: a
            # leak of ~3 MB per open, see scripts/open_close_memory.py).
            if replacing:
                gc.collect()
            else:
                gc.collect(1)  # the young generations only: cheap
            gc.disable()
            try:
                graph = load_model(path, allow_absolute_external=allow_absolute_external,
                                   checked=lambda proto, types: self.open_preview.make(job, proto, types, path))
                gc.freeze()
                lap("load")
                job.check()
                job.report(0.3, "Building the view")
                made = self.open_preview.take(job)  # a big model's view, made (and drawn) while it was built
                if made is not None:
                    view, (result, extras) = self.canvas.scopes.adopt(graph, made[0]), made[1:]
                else:
                    view, result, extras = self.canvas.model_view(graph), None, None  # big graphs: groups collapsed (app.scopes)
                lap("view")
                job.check()
                if result is None:
                    sizes = {n.id: node_size(n, measure) for n in view.nodes}
                    result = layout(view, sizes, cancel=job.is_cancelled, progress=lambda f: job.report(0.35 + 0.55 * f, "Laying out the graph"), direction=direction)
                lap("layout")
                if extras is None:
                    extras = prepare_display(view, result, job)
                lap("overview")
                for hook in list(self.open_hooks):
                    try:
                        hook(graph)
                    except Exception:  # noqa: BLE001 - a panel's extra must not fail the open
                        logger.exception("open hook %r failed", hook)
                lap("hooks")
            finally:
                gc.freeze()
                gc.enable()
            self.last_open_phases, self.last_open_cpu = phases, cpu
            return graph, view, result, extras

        self._load_result = None
        self.open_preview.start(t0)
        self._set_busy(True, f"Opening {Path(path).name}")
        job = self._load_job = start_job(
            work, f"Opening {Path(path).name}", self, progressed=lambda p: self._progress(p.fraction, p.message),
            done=lambda res: self._load_done(job, path, res, t0), failed=lambda exc: self._load_failed(job, path, error_text(exc, job.title)),
            cancelled=lambda: self._load_cancelled(job), delete_later=True,
        )
        self.start_page.refresh()
        if not wait:
            return True
        loop = QEventLoop()

        def check():
            if self._load_result is not None and (self._load_result is False or not self.canvas.busy):
                loop.quit()

        timer = QTimer()
        timer.timeout.connect(check)
        timer.start(5)
        loop.exec()
        timer.stop()
        return bool(self._load_result)

    def _load_done(self, job: Job, path: str, result, t0: float) -> None:
        if job is not self._load_job:
            return
        self._load_job = None
        self._set_busy(False)
        graph, view, lo, extras = result
        self.canvas.prime_model_layout(graph, view, lo, extras)
        self.canvas.set_empty_message(None)
        self.document.set_graph(graph, path)
        self.last_open_seconds = time.perf_counter() - t0
        self._add_recent(path)
        if lo.notes:
            self.statusBar().showMessage("; ".join(lo.notes), 8000)
        self._load_result = True

    def _load_failed(self, job: Job, path: str, message: str) -> None:
        if job is not self._load_job:
            return
        self._load_job = None
        self._set_busy(False)
        self._load_result = False
        self.open_preview.load_failed()
        if self.document.graph is None:  # nothing else to show: the canvas keeps saying why
            self.canvas.set_empty_message(f"Could not open {Path(path).name}.\n{message}\n\nFile ▸ Open (Ctrl+O) another model, or drop one here.")
        self.start_page.refresh()
        QMessageBox.warning(self, "Cannot open model", message)

    def _load_cancelled(self, job: Job) -> None:
        if job is not self._load_job:
            return
        self._load_job = None
        self._set_busy(False)
        self._load_result = False
        self.open_preview.load_failed()
        self.start_page.refresh()
        self.statusBar().showMessage("Opening cancelled.", 4000)

    @property
    def loading(self) -> bool:
        """A model is being opened (the start page stays away meanwhile)."""
        return self._load_job is not None

    def close_model(self) -> bool:
        """File ▸ Close: drop the model (asking about unsaved edits first); the start page shows."""
        if self.document.graph is None or not self._confirm_discard():
            return False
        if self._load_job is not None:
            self._load_job.cancel()
        self.canvas.set_empty_message(None)
        self.document.set_graph(None, None)
        return True

    # ---- recent files ------------------------------------------------------------------------
    def recent_files(self) -> list[str]:
        value = self.settings.value("recentFiles", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _add_recent(self, path: str) -> None:
        path = str(Path(path).resolve())
        files = [p for p in self.recent_files() if p != path]
        self.settings.setValue("recentFiles", [path] + files[: MAX_RECENT - 1])
        self.settings.setValue("dirs/model", str(Path(path).parent))  # File > Open starts here next time

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = self.recent_files()
        for p in files:
            act = self.recent_menu.addAction(Path(p).name)
            act.setToolTip(p)
            act.setStatusTip(p)
            act.triggered.connect(lambda _=False, p=p: self.open_model(p))
        if files:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear List", lambda: self.settings.setValue("recentFiles", []))
        else:
            self.recent_menu.addAction("(none)").setEnabled(False)

    # ---- saving and closing ------------------------------------------------------------------
    def save(self) -> bool:
        if self.document.graph is None:
            return False
        if self.document.path is None:
            return self.save_as()
        return self._save_to(None)

    def save_as(self) -> bool:
        if self.document.graph is None:
            return False
        from app.dialogs.files import save_file

        name = Path(self.document.path).name if self.document.path else "model.onnx"
        path = save_file(self, self, "model", "Save ONNX model", "ONNX models (*.onnx)", suggested=name)
        if not path:
            return False
        if not path.endswith(".onnx"):
            path += ".onnx"
        return self._save_to(path)

    def _save_to(self, path) -> bool:
        if not self.edit_actions.before_save(path):  # invalid model / overwriting the source: ask
            return False
        try:
            target = self.document.save(path)
        except WorkbenchError as e:
            QMessageBox.warning(self, "Cannot save", str(e))
            return False
        self._add_recent(str(target))
        saved = self.document.last_save
        self.statusBar().showMessage(saved.describe() if saved is not None else f"Saved {target}", 8000)
        return True

    def _confirm_discard(self) -> bool:
        """Ask about unsaved edits; True when it is fine to drop the current model."""
        if not self.document.is_dirty:
            return True
        name = self.document.path.name if self.document.path else "the model"
        answer = QMessageBox.question(
            self,
            "Unsaved changes",
            f"Save the changes to {name} first?",
            QMessageBox.Save | QMessageBox.Discard | QMessageBox.Cancel,
            QMessageBox.Save,
        )
        if answer == QMessageBox.Save:
            return self.save()
        return answer == QMessageBox.Discard

    def closeEvent(self, event) -> None:
        if not self._confirm_discard():
            event.ignore()
            return
        self.autosaver.stop()  # a clean close leaves no autosave to recover
        self.cancel_work()
        for job in self.findChildren(Job):  # panels' jobs too: a running QThread must not be destroyed
            job.cancel()
            job.wait(10000)
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/state", self.saveState())
        super().closeEvent(event)

    # ---- drag and drop -----------------------------------------------------------------------
    @staticmethod
    def _dropped_model(event) -> str | None:
        md = event.mimeData()
        if not md.hasUrls():
            return None
        for url in md.urls():
            if url.isLocalFile() and url.toLocalFile().lower().endswith(".onnx"):
                return url.toLocalFile()
        return None

    def dragEnterEvent(self, event) -> None:
        if self._dropped_model(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:
        self.dragEnterEvent(event)

    def dropEvent(self, event) -> None:
        path = self._dropped_model(event)
        if path:
            event.acceptProposedAction()
            QTimer.singleShot(0, lambda: self.open_model(path))


def run(model_path: str | None) -> int:
    from app.workers import cancel_all

    app = QApplication.instance() or QApplication(sys.argv)
    app.setApplicationName(APP_NAME)
    app.setOrganizationName(ORG_NAME)
    app.aboutToQuit.connect(cancel_all)
    from app import autosave, crash

    crash.install()  # unexpected errors: a dialog, and the app goes on (app.crash)
    w = MainWindow()
    w.show()
    w.raise_()
    w.activateWindow()
    w.canvas.setFocus()
    if autosave.offer_recovery(w):  # a crashed session's unsaved edits come first
        model_path = None
    if model_path:
        w.open_model(model_path)
    return app.exec()


def _as_bool(value) -> bool:
    """A QSettings value as a bool (INI files give back the strings "true" / "false")."""
    return value in (True, "true", "1", 1)
