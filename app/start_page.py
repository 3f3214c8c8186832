"""The start page: what the canvas area shows while no model is open.

It says what to open and where things are: the recent files (the window's File ▸ Open Recent
list), the bundled samples in resources/models/ with one line on what each shows, the panels
with one line each ("what is where"), and the way to the guided tour and the shortcut list.
Every entry is a link: a sample or a recent file opens, a panel comes to the front.

The page lies over the canvas in the same cell of the central area (`stacked_over`), so the
canvas keeps its size and its own empty-state text; when the last open failed, the page repeats
that text at its top. It shows while `window.document.graph` is None and no open is under way
(`window.loading`): first start without a model, File ▸ Close, a failed or cancelled open.
"""
from __future__ import annotations

import html
import logging
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QGridLayout, QTextBrowser, QWidget

__all__ = ["StartPage", "SAMPLES_DIR", "SAMPLE_LINES", "PANEL_LINES", "samples", "stacked_over"]

logger = logging.getLogger(__name__)

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "resources" / "models"
# what each bundled sample is there to show (core.model.samples builds them)
SAMPLE_LINES = {
    "mlp": "The MLC course's running example: linear + ReLU layers (MatMul, Add, Relu) with a symbolic batch; "
           "the quickest model to lower and compile.",
    "small_cnn": "Conv + BatchNorm + ReLU blocks with a residual Add: what the fusion and folding rewrites are for.",
    "tiny_transformer": "One encoder block as exporters write it (decomposed LayerNorm, attention, GELU): "
                        "rewrites that fuse it back, and a graph with many small ops.",
    "mm_relu": "relu(A @ B) on 128×128, the course's first tensor program: lower it and schedule its one kernel by hand.",
}
# "what is where": (panel key in window.panels, the name shown, one line)
PANEL_LINES = (
    ("inspector", "Inspector", "the selected node, tensor or the model: attributes, shapes, weights and their values."),
    ("rewrites", "Rewrites", "fusion, folding and clean-up rules with their match counts; preview, apply and verify."),
    ("history", "History", "every edit and rewrite, undoable; click a step to go back to it."),
    ("lowering", "Lowering", "the model stepped down through TVM's levels, one pass at a time: IR text and its graph."),
    ("compile", "Compile & Run", "build for CPU or GPU, check against onnxruntime, measure latency and memory, export."),
    ("accuracy", "Accuracy", "where the compiled program (or another model) first differs from onnxruntime, node by node."),
    ("schedule", "Schedule", "one TIR kernel scheduled by hand (split, reorder, vectorize…) and measured."),
    ("problems", "Problems", "what the ONNX checker and shape inference say is wrong, each row a link to its node."),
)


def samples() -> list[Path]:
    """The bundled sample models, the ones described in SAMPLE_LINES first."""
    found = {p.stem: p for p in sorted(SAMPLES_DIR.glob("*.onnx"))}
    ordered = [found.pop(name) for name in SAMPLE_LINES if name in found]
    return ordered + list(found.values())


def stacked_over(parent: QWidget, below: QWidget, above: QWidget) -> QWidget:
    """A widget holding `above` over `below` in one cell: both always have the same geometry, so
    the one below keeps its size (and its layout, fit and overlays) while hidden from view."""
    holder = QWidget(parent)
    grid = QGridLayout(holder)
    grid.setContentsMargins(0, 0, 0, 0)
    grid.addWidget(below, 0, 0)
    grid.addWidget(above, 0, 0)
    above.raise_()
    return holder


_CSS = """
body { color: #1f2933; }
h1 { font-size: 22pt; font-weight: 600; margin-bottom: 2px; }
h2 { font-size: 13pt; font-weight: 600; margin-top: 18px; margin-bottom: 6px; color: #334e68; }
a { color: #1d5fa7; text-decoration: none; }
.dim { color: #7b8794; }
.note { background-color: #fff4e5; color: #8a3c00; }
td { padding: 3px 6px 3px 0px; vertical-align: top; }
"""


class StartPage(QTextBrowser):
    """The page itself: rich text with links (`follow` handles them; none leaves the app)."""

    def __init__(self, window, parent: QWidget | None = None):
        super().__init__(parent)
        self.window = window
        self.setObjectName("start-page")
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setAcceptDrops(False)  # a dropped .onnx goes on to the main window, which opens it
        self.viewport().setAcceptDrops(False)
        self.setFrameShape(QTextBrowser.NoFrame)
        self.document().setDefaultStyleSheet(_CSS)
        self.document().setDocumentMargin(28)
        self.anchorClicked.connect(self.follow)
        self._recent: list[str] = []
        self.asked = False  # Help ▸ Start Page over an open model, until Escape or "Back to the graph"
        window.document.graphReplaced.connect(self._model_replaced)

    # ---- when it shows -----------------------------------------------------------------------
    def wanted(self) -> bool:
        if getattr(self.window, "loading", False):
            return False
        return self.window.document.graph is None or self.asked

    def show_page(self) -> None:
        """Help ▸ Start Page: over the canvas even while a model is open (Escape goes back)."""
        self.asked = True
        self.refresh()
        self.setFocus()

    def back_to_graph(self) -> None:
        self.asked = False
        self.refresh()
        self.window.canvas.setFocus()

    def _model_replaced(self) -> None:
        self.asked = False
        self.refresh()

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key_Escape and self.asked and self.window.document.graph is not None:
            self.back_to_graph()
            return
        super().keyPressEvent(event)

    def refresh(self) -> None:
        """Show (with fresh recent files and the last failure) or hide, as the window's state asks."""
        if self.wanted():
            self.setHtml(self.page_html())
            self.show()
            self.raise_()
        else:
            self.hide()

    # ---- content -----------------------------------------------------------------------------
    def page_html(self) -> str:
        w = self.window
        self._recent = [p for p in w.recent_files()]
        parts = ["<h1>MLC Workbench</h1>",
                 "<p class='dim'>See, edit and compile ONNX models with Apache TVM, one level of the compiler at a time.</p>"]
        if w.document.graph is not None:
            name = html.escape(Path(w.document.path).name if w.document.path else "the open model")
            parts.append(f"<p><a href='action:back'><b>← Back to the graph</b></a> <span class='dim'>({name}; Escape)</span></p>")
        note = self._failure_note()
        if note:
            parts.append(f"<table width='100%' cellpadding='6' bgcolor='#fff4e5'><tr><td class='note'>{note}</td></tr></table>")
        parts.append("<p><a href='action:open'><b>Open a model…</b></a> <span class='dim'>(Ctrl+O, or drop an .onnx file here)</span>"
                     " &nbsp;·&nbsp; <a href='action:tour'>Guided tour of the MLC levels</a>"
                     " &nbsp;·&nbsp; <a href='action:shortcuts'>Keyboard shortcuts</a></p>")
        left = ["<h2>Start with a sample</h2><table>"]
        for path in samples():
            line = SAMPLE_LINES.get(path.stem, "A bundled sample model.")
            left.append(f"<tr><td><a href='sample:{html.escape(path.stem)}'><b>{html.escape(path.name)}</b></a></td>"
                        f"<td>{html.escape(line)}</td></tr>")
        left.append("</table><h2>Recent files</h2>")
        if not self._recent:
            left.append("<p class='dim'>None yet: models you open are listed here.</p>")
        else:
            left.append("<table>")
            for i, p in enumerate(self._recent):
                path = Path(p)
                where = html.escape(str(path.parent))
                if path.is_file():
                    left.append(f"<tr><td><a href='recent:{i}'>{html.escape(path.name)}</a></td><td class='dim'>{where}</td></tr>")
                else:
                    left.append(f"<tr><td class='dim'>{html.escape(path.name)}</td><td class='dim'>{where} (no longer there)</td></tr>")
            left.append("</table>")
        right = ["<h2>What is where</h2><table>",
                 "<tr><td><b>Canvas</b></td><td>the graph: click a node to inspect it, double-click a group or a "
                 "function to open it, right-click to edit; Ctrl+F finds a node.</td></tr>"]
        for key, name, line in PANEL_LINES:
            if key in w.panels:
                right.append(f"<tr><td><a href='panel:{key}'><b>{html.escape(name)}</b></a></td><td>{html.escape(line)}</td></tr>")
        right.append("</table><p class='dim'>Panels can be shown again from View ▸ Panels; this page from Help ▸ Start Page.</p>")
        parts.append("<table width='100%'><tr><td width='52%'>" + "".join(left) + "</td><td width='4%'></td><td width='44%'>"
                     + "".join(right) + "</td></tr></table>")
        return "<html><body>" + "".join(parts) + "</body></html>"

    def _failure_note(self) -> str:
        """The canvas's message when it says more than the default hint (why the last open failed)."""
        from app.canvas.view import EMPTY_MESSAGE

        message = getattr(self.window.canvas, "empty_message", "") or ""
        if not message or message == EMPTY_MESSAGE:
            return ""
        lines = [line for line in message.splitlines() if line.strip() and "File ▸ Open" not in line]
        return "<br/>".join(html.escape(line) for line in lines)

    # ---- links -------------------------------------------------------------------------------
    def follow(self, url: QUrl) -> None:
        """sample:NAME, recent:INDEX, panel:KEY, action:open|back|tour|shortcuts."""
        kind, _, what = url.toString().partition(":")
        w = self.window
        if kind == "sample":
            path = SAMPLES_DIR / f"{what}.onnx"
            if path.is_file():
                w.open_model(str(path))
        elif kind == "recent":
            if what.isdigit() and int(what) < len(self._recent):
                w.open_model(self._recent[int(what)])
        elif kind == "panel":
            dock = w.panels.get(what)
            if dock is not None:
                dock.show()
                dock.raise_()
                w.statusBar().showMessage(f"{dock.windowTitle()}: {_side(w, dock)}. View ▸ Panels shows or hides it.", 6000)
        elif kind == "action":
            from app import help_dialogs

            {"open": w.open_dialog, "back": self.back_to_graph, "tour": lambda: help_dialogs.show_tour(w),
             "shortcuts": lambda: help_dialogs.show_shortcuts(w)}.get(what, lambda: None)()
        else:
            logger.warning("start page: unknown link %s", url.toString())


def _side(window, dock) -> str:
    if dock.isFloating():
        return "a floating window"
    area = window.dockWidgetArea(dock)
    return {Qt.LeftDockWidgetArea: "on the left", Qt.RightDockWidgetArea: "on the right",
            Qt.BottomDockWidgetArea: "at the bottom", Qt.TopDockWidgetArea: "at the top"}.get(area, "docked")
