"""Help ▸ Start Page, Guided Tour of the MLC Levels, Keyboard Shortcuts and About.

The shortcut list is read from the window itself (every QAction with a shortcut, where its menu
or panel is, and the panels' QShortcuts named by the button whose tooltip gives their key), so it
cannot fall behind the code. The tour walks the chain of abstraction levels (DESIGN.md: ONNX
graph → Relax → Relax after graph passes → tensor programs → fused → scheduled → target code), one
sentence each with the panel that shows it; a link selects that stage in the Lowering panel. About
reads every version at run time (core.about).
"""
from __future__ import annotations

import weakref

import html
import logging
import re
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, qVersion
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractButton,
    QDialog,
    QDialogButtonBox,
    QDockWidget,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from core.about import library_versions, workbench_version
from core.compiler.levels import Level

__all__ = ["install", "HELP_ENTRIES", "TOUR", "TOUR_SAMPLE", "shortcut_rows", "ShortcutsDialog", "TourDialog",
           "AboutDialog", "about_text", "show_shortcuts", "show_tour", "show_about"]

logger = logging.getLogger(__name__)

HELP_ENTRIES = ("&Start Page", "Guided &Tour of the MLC Levels", "&Keyboard Shortcuts", "&About MLC Workbench")
TOUR_SAMPLE = Path(__file__).resolve().parents[1] / "resources" / "models" / "mlp.onnx"

# (level, one sentence, the panels that show it, the Lowering stage it links to: a stage name, or
# "last <level>" for the last stage at that level; None: the model graph on the canvas)
TOUR = (
    ("ONNX graph", "The model as exported: operators (MatMul, Conv, …) on named tensors, saying what to compute, not how.",
     "the canvas, the Inspector", None),
    ("Relax", "TVM's graph-level IR: each ONNX op imported as a Relax call (R.matmul, R.nn.conv2d), shapes symbolic where the model's are.",
     "Lowering (stage “Relax import”)", "Relax import"),
    ("Relax after graph passes", "Whole-graph rewrites in Relax: constants folded, weights pre-arranged, layouts chosen, library calls dispatched.",
     "Lowering (the last graph-level stage)", f"last {Level.GRAPH}"),
    ("Tensor programs (TIR)", "LegalizeOps turns every op into call_tir of a tensor program: explicit loops over buffers, one TIR function per op.",
     "Lowering (stage “LegalizeOps”; double-click a call for its kernel)", "LegalizeOps"),
    ("Fused TIR", "FuseOps groups ops that can share one loop nest (matmul + add + relu) and FuseTIR merges them into one kernel: fewer trips through memory.",
     "Lowering (stage “FuseTIR”)", "FuseTIR"),
    ("Scheduled TIR", "Each kernel's loops are split, reordered, vectorized and parallelized for the target (dlight rules, or tuning); the Schedule panel does it by hand.",
     "Lowering (stage “ScheduleTIR”), Schedule", "ScheduleTIR"),
    ("Target code", "LLVM IR (and assembly) for the CPU, or CUDA C for the GPU; Compile & Run builds it, checks it against onnxruntime and measures it.",
     "Lowering (the last stage), Compile & Run", f"last {Level.TARGET_CODE}"),
)


def install(window) -> None:
    """Start Page, the tour and the shortcut list first in window.help_menu, About last."""
    menu = window.help_menu
    first = menu.actions()[0] if menu.actions() else None
    entries = (
        (HELP_ENTRIES[0], lambda: window.start_page.show_page(), None, "The samples, the recent files and what is where"),
        (HELP_ENTRIES[1], lambda: show_tour(window), None, "From the ONNX graph down to LLVM IR / CUDA, one sentence a level, with the panel that shows it"),
        (HELP_ENTRIES[2], lambda: show_shortcuts(window), QKeySequence("Ctrl+/"), "Every key the workbench answers to, read from its actions"),
    )
    for text, slot, keys, tip in entries:
        act = QAction(text, window)
        if keys is not None:
            act.setShortcut(keys)
        act.setStatusTip(tip)
        act.triggered.connect(lambda _c=False, s=slot: s())
        menu.insertAction(first, act)
    menu.insertSeparator(first)
    menu.addSeparator()
    about = menu.addAction(HELP_ENTRIES[3], lambda: show_about(window))
    about.setMenuRole(QAction.AboutRole)
    about.setStatusTip("The versions of the workbench, Python, Qt, TVM, onnx, onnxruntime and NumPy")


# ---- keyboard shortcuts ----------------------------------------------------------------------
def _clean(text: str) -> str:
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").replace("…", "").strip()


def _menu_paths(window) -> dict[QAction, str]:
    paths: dict[QAction, str] = {}

    def walk(menu: QMenu, prefix: str) -> None:
        for act in menu.actions():
            if act.menu() is not None:
                walk(act.menu(), f"{prefix} ▸ {_clean(act.text())}")
            elif not act.isSeparator():
                paths.setdefault(act, prefix)

    for top in window.menuBar().actions():
        if top.menu() is not None:
            walk(top.menu(), _clean(top.text()))
    return paths


def _where(window, obj) -> str:
    """The panel (dock title) or the part of the window an object lives in."""
    w = obj
    while w is not None and w is not window:
        if isinstance(w, QDockWidget):
            title = re.sub(r" \(\d+\)$", "", w.windowTitle())  # "Problems (3)"
            return f"{title} panel"
        if w is getattr(window, "canvas", None):
            return "Canvas"
        w = w.parent()
    return "Window"


def _keys(seqs) -> str:
    return ", ".join(s.toString(QKeySequence.NativeText) for s in seqs if not s.isEmpty())


def shortcut_rows(window) -> list[tuple[str, str, str]]:
    """(keys, command, where) for every QAction with a shortcut in `window` (menus first, in menu
    order) and every QShortcut, named by its whatsThis or by the button whose tooltip gives its key."""
    menus = _menu_paths(window)
    rows: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str]] = set()

    def add(keys: str, command: str, where: str) -> None:
        if keys and (keys, command) not in seen:
            seen.add((keys, command))
            rows.append((keys, command, where))

    for act in menus:  # menu order
        add(_keys(act.shortcuts()), _clean(act.text()), menus[act])
    for act in window.findChildren(QAction):
        if act in menus or act.menu() is not None:
            continue
        holders = [o for o in act.associatedObjects() if isinstance(o, QWidget)]
        where = _where(window, holders[0]) if holders else _where(window, act.parent())
        add(_keys(act.shortcuts()), _clean(act.text() or act.toolTip()), where)
    buttons = window.findChildren(QAbstractButton)
    for sc in window.findChildren(QShortcut):
        keys = _keys([sc.key()])
        if not keys:
            continue
        command = sc.whatsThis()
        where = _where(window, sc.parent())
        if not command:
            button = next((b for b in buttons if b.text() and re.search(rf"(^|[\s(]){re.escape(keys)}($|[\s),.])", b.toolTip())), None)
            if button is None:
                continue  # a key local to a field (Escape in the find bar): nothing to name it by
            command, where = _clean(button.text()), _where(window, button)
        add(keys, command, where)
    return rows


class ShortcutsDialog(QDialog):
    """A filterable table of `shortcut_rows(window)`."""

    def __init__(self, window):
        super().__init__(window)
        self.setObjectName("shortcuts-dialog")
        self.setWindowTitle("Keyboard Shortcuts")
        self.rows = shortcut_rows(window)
        lay = QVBoxLayout(self)
        self.filter = QLineEdit(placeholderText="Filter by key, command or place…")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._filter)
        lay.addWidget(self.filter)
        self.table = QTableWidget(len(self.rows), 3)
        self.table.setHorizontalHeaderLabels(["Keys", "Command", "Where"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectRows)
        for r, row in enumerate(self.rows):
            for c, text in enumerate(row):
                item = QTableWidgetItem(text)
                if c == 0:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(r, c, item)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeToContents)
        lay.addWidget(self.table, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.resize(640, 620)

    def _filter(self, text: str) -> None:
        t = text.strip().lower()
        for r, row in enumerate(self.rows):
            self.table.setRowHidden(r, bool(t) and not any(t in cell.lower() for cell in row))


# ---- guided tour -----------------------------------------------------------------------------
class TourDialog(QDialog):
    """The MLC levels, one sentence each; a level's link shows it (the model graph, or its stage
    in the Lowering panel once the model is lowered)."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.setObjectName("tour-dialog")
        self.setWindowTitle("Guided Tour of the MLC Levels")
        lay = QVBoxLayout(self)
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        self.text.anchorClicked.connect(lambda url: self.show_level(int(url.toString().partition(":")[2])))
        self.text.setHtml(self._html())
        lay.addWidget(self.text, 1)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        lay.addWidget(self.note)
        buttons = QDialogButtonBox()
        self.lower_open = QPushButton("Lower the Open Model")
        self.lower_open.clicked.connect(self.lower_open_model)
        self.open_sample = QPushButton("Open the MLP Sample and Lower It")
        self.open_sample.setToolTip(str(TOUR_SAMPLE))
        self.open_sample.clicked.connect(self.open_sample_and_lower)
        buttons.addButton(self.lower_open, QDialogButtonBox.ActionRole)
        buttons.addButton(self.open_sample, QDialogButtonBox.ActionRole)
        buttons.addButton(QDialogButtonBox.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.resize(720, 600)
        window.document.graphReplaced.connect(self._update_buttons)
        self._update_buttons()

    def _html(self) -> str:
        rows = []
        for i, (level, sentence, panels, _stage) in enumerate(TOUR):
            rows.append(f"<tr><td><b>{i + 1}.</b></td><td><a href='level:{i}'><b>{html.escape(level)}</b></a><br/>"
                        f"{html.escape(sentence)}<br/><span style='color:#7b8794'>Shown in: {html.escape(panels)}</span></td></tr>")
        return ("<p>Compiling a model is a chain of transformations, each at a lower level of abstraction: a computational "
                "graph becomes tensor programs, then code for the hardware. The workbench shows every link of the chain. "
                "Lower a model (Ctrl+L, or a button below), then click a level to see it.</p><table cellspacing='6'>"
                + "".join(rows) + "</table>")

    def _update_buttons(self) -> None:
        lowering = self._lowering()
        self.lower_open.setEnabled(self.window.document.graph is not None and lowering is not None)
        self.open_sample.setEnabled(lowering is not None and TOUR_SAMPLE.is_file())

    def _lowering(self):
        dock = self.window.panels.get("lowering")
        return dock.widget() if dock is not None else None

    def lower_open_model(self) -> None:
        panel = self._lowering()
        if panel is not None and self.window.document.graph is not None:
            panel.start()
            self.note.setText("Lowering… click a level above when it is done.")

    def open_sample_and_lower(self) -> None:
        """Open mlp.onnx (asking about unsaved edits first) and lower it as soon as it is open."""
        doc = self.window.document

        def opened() -> None:
            doc.graphReplaced.disconnect(opened)
            if doc.graph is not None and doc.path is not None and Path(doc.path).resolve() == TOUR_SAMPLE:
                QTimer.singleShot(0, self.lower_open_model)

        doc.graphReplaced.connect(opened)
        if not self.window.open_model(str(TOUR_SAMPLE)):
            doc.graphReplaced.disconnect(opened)

    def show_level(self, index: int) -> bool:
        """Show level `index` of TOUR: the model graph, or its stage in the Lowering panel."""
        _level, _sentence, _panels, stage = TOUR[index]
        w = self.window
        if w.document.graph is None:
            self.note.setText("Open a model first (or the MLP sample, below).")
            return False
        if stage is None:
            w.canvas.show_model(fit=True)
            self.note.setText("The ONNX graph is on the canvas.")
            return True
        panel = self._lowering()
        stages = list(getattr(panel, "stages", []) or []) if panel is not None else []
        if stage.startswith("last "):
            at = [s for s in stages if s.level == stage[5:]]
            found = at[-1] if at else None
        else:
            found = next((s for s in stages if s.name == stage), None)
        if found is None:
            self.note.setText("Lower the model first (Ctrl+L, or “Lower the Open Model” below), then click the level again.")
            return False
        panel.dock.show()
        panel.dock.raise_()
        panel.select_stage(found.index)
        self.note.setText(f"Stage {found.index}, “{found.name}”, is selected in the Lowering panel and drawn on the canvas.")
        return True


# ---- about -----------------------------------------------------------------------------------
def about_text() -> dict[str, str]:
    """Name -> version of everything About lists, read now."""
    try:
        from PySide6 import __version__ as pyside
    except ImportError:  # pragma: no cover
        pyside = "?"
    versions = {"MLC Workbench": workbench_version()}
    libs = library_versions()
    versions["Python"] = libs.pop("Python")
    versions["Qt"] = qVersion()
    versions["PySide6"] = pyside
    versions.update(libs)
    return versions


class AboutDialog(QDialog):
    def __init__(self, window):
        super().__init__(window)
        self.setObjectName("about-dialog")
        self.setWindowTitle("About MLC Workbench")
        self.versions = about_text()
        lay = QVBoxLayout(self)
        rows = "".join(f"<tr><td>{html.escape(k)}</td><td><b>{html.escape(v)}</b></td></tr>" for k, v in self.versions.items())
        self.label = QLabel(
            "<h2>MLC Workbench</h2><p>See, edit and compile ONNX models with Apache TVM,<br/>"
            "one level of the compiler at a time.</p><table cellspacing='4'>" + rows + "</table>")
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.label)
        buttons = QDialogButtonBox(QDialogButtonBox.Close)
        copy = buttons.addButton("Copy Versions", QDialogButtonBox.ActionRole)
        copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.plain_text()))
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def plain_text(self) -> str:
        return "\n".join(f"{k} {v}" for k, v in self.versions.items())


# the dialogs each window has open, by kind (kept here, not as attributes of the window)
_OPEN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _show(window, kind: str, make) -> QDialog:
    """One non-modal dialog of a kind per window, brought to the front when asked for again."""
    dialogs = _OPEN.setdefault(window, {})
    dialog = dialogs.get(kind)
    if dialog is None:
        dialog = dialogs[kind] = make(window)
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()
    return dialog


def show_shortcuts(window) -> ShortcutsDialog:
    old = _OPEN.get(window, {}).pop("shortcuts", None)
    if old is not None:  # actions may have come and gone: read them again
        old.deleteLater()
    return _show(window, "shortcuts", ShortcutsDialog)


def show_tour(window) -> TourDialog:
    return _show(window, "tour", TourDialog)


def show_about(window) -> AboutDialog:
    return _show(window, "about", AboutDialog)
