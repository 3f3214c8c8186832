"""Unexpected errors: a dialog instead of a dead window, and the user's work kept.

`install()` routes every uncaught exception to `report_exception`: sys.excepthook (which PySide6
calls for an exception escaping a slot, a timer callback or a virtual method) and
threading.excepthook (Python threads; exceptions in a QThread's run are given to sys.excepthook
on that thread). Reports from other threads are passed to the UI thread by a queued signal.

The handler first autosaves every window with unsaved edits (app.autosave), then shows a
`CrashDialog`: one line saying what happened, the traceback under "Details", a "Copy report"
button (version, platform, traceback for a bug report) and Close. Nothing is torn down: the event
loop goes on, so the model and its undo history stay as they were. The report is also written to
the log and to a file beside the autosaves. While a dialog is open, further errors are added to it
rather than stacking dialogs (an error in a paint handler repeats on every frame).
"""
from __future__ import annotations

import logging
import os
import platform
import sys
import threading
import time
import traceback

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

__all__ = ["install", "uninstall", "report_exception", "format_report", "CrashDialog", "current_dialog"]

logger = logging.getLogger(__name__)

_state: dict = {"installed": False, "previous": None, "previous_thread": None, "bridge": None, "dialog": None, "busy": False}


def format_report(exc_type, exc_value, tb) -> str:
    """The text for a bug report: what, where, on which versions."""
    try:
        from PySide6 import __version__ as pyside_version
    except ImportError:  # pragma: no cover
        pyside_version = "?"
    lines = [
        f"MLC Workbench unexpected error at {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"{exc_type.__name__}: {exc_value}",
        f"Python {platform.python_version()} on {platform.platform()}; PySide6 {pyside_version}; thread {threading.current_thread().name}",
        "",
        "".join(traceback.format_exception(exc_type, exc_value, tb)).rstrip(),
    ]
    return "\n".join(lines)


class CrashDialog(QDialog):
    """What went wrong in one line, the details below, and a button to copy the report."""

    def __init__(self, summary: str, report: str, saved_note: str, parent=None):
        super().__init__(parent)
        self.setObjectName("crash-dialog")
        self.setWindowTitle("Unexpected error")
        self.setAttribute(Qt.WA_DeleteOnClose)
        self.reports = [report]
        layout = QVBoxLayout(self)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout.addWidget(self.message)
        self.details = QPlainTextEdit(readOnly=True)
        self.details.setLineWrapMode(QPlainTextEdit.NoWrap)
        self.details.setMinimumSize(620, 220)
        layout.addWidget(self.details, 1)
        buttons = QDialogButtonBox()
        self.copy_button = QPushButton("Copy report")
        self.copy_button.clicked.connect(self.copy_report)
        buttons.addButton(self.copy_button, QDialogButtonBox.ActionRole)
        close = buttons.addButton(QDialogButtonBox.Close)
        close.clicked.connect(self.accept)
        close.setDefault(True)
        layout.addWidget(buttons)
        self._summary = summary
        self._saved_note = saved_note
        self._refresh()

    def add(self, summary: str, report: str) -> None:
        """Another error while this dialog is open."""
        self.reports.append(report)
        self._refresh()

    def _refresh(self) -> None:
        more = f" ({len(self.reports) - 1} more since)" if len(self.reports) > 1 else ""
        self.message.setText(
            f"<b>Something went wrong inside MLC Workbench:</b> {_escape(self._summary)}{more}<br><br>"
            f"The application keeps running; the open model and its undo history are as they were. "
            f"{_escape(self._saved_note)}<br><br>Please send the report (Copy report) with the steps that led here."
        )
        self.details.setPlainText("\n\n".join(self.reports))

    def report_text(self) -> str:
        return "\n\n".join(self.reports)

    def copy_report(self) -> None:
        QApplication.clipboard().setText(self.report_text())
        self.copy_button.setText("Copied")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def current_dialog() -> CrashDialog | None:
    """The error dialog on screen, if any (for tests and screenshots)."""
    return _state["dialog"]


def _autosave_all() -> str:
    """Autosave every window with unsaved edits; the sentence to show about it."""
    saved = []
    app = QApplication.instance()
    for w in app.topLevelWidgets() if app is not None else []:
        autosaver = getattr(w, "autosaver", None)
        if autosaver is not None and w.document.is_dirty and autosaver.save_now("unexpected error"):
            saved.append(str(autosaver.model_path))
    if saved:
        return f"Your unsaved edits were autosaved to {saved[0]}; saving the model now is also safe."
    return "Saving the model now is safe."


def _write_report_file(report: str) -> str:
    try:
        from app.autosave import autosave_dir

        folder = autosave_dir().parent / "crash-reports"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text(report, encoding="utf-8")
        return str(path)
    except Exception:  # noqa: BLE001 - a report that cannot be written is still shown and logged
        return ""


def report_exception(exc_type, exc_value, tb) -> None:
    """Show (or add to) the error dialog; from any thread, never raises."""
    if issubclass(exc_type, KeyboardInterrupt):
        app = QApplication.instance()
        if app is not None:
            app.quit()
        return
    report = format_report(exc_type, exc_value, tb)
    logger.error("unexpected error:\n%s", report)
    bridge = _state["bridge"]
    if bridge is not None:
        # queued: the dialog is made by the event loop, on the UI thread, after the failing slot
        # has unwound (showing it from inside the hook left it unpainted under X11)
        bridge.reported.emit(f"{exc_type.__name__}: {exc_value}", report)
        return
    _show(f"{exc_type.__name__}: {exc_value}", report)


def _show(summary: str, report: str) -> None:
    if _state["busy"]:  # an error while handling an error: log only
        return
    _state["busy"] = True
    try:
        dialog = _state["dialog"]
        if dialog is not None:
            dialog.add(summary, report)
            return
        if QApplication.instance() is None:
            sys.__excepthook__(RuntimeError, RuntimeError(report), None)
            return
        note = _autosave_all()
        where = _write_report_file(report)
        if where:
            report = f"{report}\n\n(saved as {where})"
        parent = QApplication.activeWindow()
        dialog = CrashDialog(summary, report, note, parent)
        _state["dialog"] = dialog
        dialog.finished.connect(lambda _r: _state.update(dialog=None))
        dialog.open()  # window-modal, returns at once: the event loop that hit the error goes on
    except Exception:  # noqa: BLE001 - the handler itself must never raise
        logger.exception("the error dialog failed")
    finally:
        _state["busy"] = False


class _Bridge(QObject):
    reported = Signal(str, str)


def _thread_hook(args) -> None:
    if args.exc_type is SystemExit:
        return
    report_exception(args.exc_type, args.exc_value, args.exc_traceback)


def install() -> None:
    """Route uncaught exceptions (UI thread, Qt slots, other threads) to the error dialog."""
    if _state["installed"]:
        return
    bridge = _Bridge()
    app = QApplication.instance()
    if app is not None:
        bridge.moveToThread(app.thread())
    bridge.reported.connect(_show, Qt.QueuedConnection)
    _state.update(installed=True, previous=sys.excepthook, previous_thread=threading.excepthook, bridge=bridge)
    sys.excepthook = report_exception
    threading.excepthook = _thread_hook


def uninstall() -> None:
    """Put the previous hooks back (tests)."""
    if not _state["installed"]:
        return
    sys.excepthook = _state["previous"]
    threading.excepthook = _state["previous_thread"]
    dialog = _state["dialog"]
    if dialog is not None:
        dialog.close()
    _state.update(installed=False, previous=None, previous_thread=None, bridge=None, dialog=None)
