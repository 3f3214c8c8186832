"""History: the document's undo stack as a list (QUndoView). Clicking an entry undoes or redoes
everything up to it; the entry the file was saved at carries the clean mark.

Copy as Python (a button under the list, and the list's context menu) puts the edits up to the
current entry on the clipboard as a script over onnx-ir that turns the model's file into the
edited model (core.rewrite.as_python). The edits are written down as a journal (core.model.journal)
and replayed on a fresh load of the file they start from: the file opened or last saved, as the
autosave tracks it (app.autosave). An edit the script cannot reproduce exactly is named in the
status bar and nothing is copied. The script is written and checked on a worker thread."""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QDockWidget, QStyle, QToolButton, QUndoView, QVBoxLayout, QWidget

from core import WorkbenchError

__all__ = ["create_panel", "AREA", "copy_as_python"]

logger = logging.getLogger(__name__)

AREA = "right"


def create_panel(window) -> QDockWidget:
    view = QUndoView(window.document.undo_stack)
    view.setEmptyLabel("Opened model")
    view.setCleanIcon(window.style().standardIcon(QStyle.SP_DialogSaveButton))
    view.setObjectName("history-view")
    action = QAction("Copy as Python", view)
    action.setObjectName("history-copy-python")
    action.setToolTip("Copy the edits up to the current entry as a Python script over onnx-ir that turns the "
                      "model's file into the edited model (runs without the workbench)")
    action.triggered.connect(lambda: copy_as_python(window))
    view.addAction(action)
    view.setContextMenuPolicy(Qt.ActionsContextMenu)
    button = QToolButton()
    button.setDefaultAction(action)
    button.setToolButtonStyle(Qt.ToolButtonTextOnly)
    button.setObjectName("history-copy-python-button")
    body = QWidget()
    layout = QVBoxLayout(body)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(2)
    layout.addWidget(view)
    layout.addWidget(button, 0, Qt.AlignLeft)
    dock = QDockWidget("History", window)
    dock.setObjectName("panel-history")
    dock.setWidget(body)
    dock.view = view  # the QUndoView itself (the dock's widget holds it and the button)
    return dock


def _source(window) -> tuple[Path, int]:
    """The file the current history starts from and the undo index it holds (raises WorkbenchError)."""
    doc = window.document
    stack = doc.undo_stack
    autosaver = getattr(window, "autosaver", None)
    if autosaver is not None:
        base, start = autosaver.base, autosaver.base_index
        if base is None:
            raise WorkbenchError("the model was not opened from a file or saved to one in this session.")
        if stack.index() < start or stack.cleanIndex() != start:
            raise WorkbenchError("edits made before the last save were undone, so no file holds the model they start from.")
        path = Path(base[0])
        try:
            st = path.stat()
        except OSError:
            raise WorkbenchError(f"{path}, which the edits start from, is gone.") from None
        if (st.st_size, st.st_mtime_ns) != tuple(base[1:]):
            raise WorkbenchError(f"{path} changed on disk since it was opened.")
        return path, start
    if doc.path is None or stack.cleanIndex() != 0:
        raise WorkbenchError("the model's history does not start from its file.")
    return Path(doc.path), 0


def _journal_entries(window, blobs) -> tuple[Path, list[dict]]:
    """The file the history starts from and its edits up to the current undo index as journal
    entries (read on the UI thread: the undo stack is the window's). Raises WorkbenchError."""
    from core.model import journal

    doc = window.document
    if doc.graph is None:
        raise WorkbenchError("there is no model.")
    path, start = _source(window)
    stack = doc.undo_stack
    entries = []
    for i in range(start, stack.index()):
        cmd = stack.command(i)
        edit = getattr(cmd, "edit", None)
        if edit is None:
            raise WorkbenchError(f"the step '{cmd.text()}' is not an edit of the model.")
        try:
            entry = journal.encode_edit(edit, blobs)
        except journal.NotJournaled as e:
            raise WorkbenchError(f"{e.message.rstrip('.')}, nor as Python.") from None
        entry.update(next_id=getattr(cmd, "next_id", None), description=edit.description)
        entries.append(entry)
    return path, entries


def _script(path: Path, entries: list[dict], blobs) -> str:
    """The script of `entries` (replayed on a fresh load of `path` and checked block by block: the slow part)."""
    from core.rewrite.as_python import from_journal
    from rewrites import get_rule

    return from_journal(path, entries, blobs, get_rule, files=False).text(path.name)


def copy_as_python(window):
    """History ▸ Copy as Python: the edits are read here, the script is written and checked on a
    worker (a load and a replay of the model), then put on the clipboard; the status bar says what
    happened. Returns the job (None when nothing could be read)."""
    from app.workers import error_text, start_job
    from core.model import journal

    tmp = tempfile.TemporaryDirectory(prefix="mlcwb-python-")
    try:
        blobs = journal.Blobs(Path(tmp.name))
        path, entries = _journal_entries(window, blobs)
    except WorkbenchError as e:
        tmp.cleanup()
        window.statusBar().showMessage(f"Copy as Python: nothing copied: {e.message}", 10000)
        return None
    window.statusBar().showMessage(f"Copy as Python: writing {len(entries)} edits as a script…")

    def done(text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        edits = f"{len(entries)} edit{'s' if len(entries) != 1 else ''}"
        window.statusBar().showMessage(f"Copied {edits} as Python: run it as python SCRIPT.py IN.onnx OUT.onnx.", 10000)

    def failed(e: BaseException) -> None:
        if not isinstance(e, WorkbenchError):
            logger.error("Copy as Python failed", exc_info=e)
        window.statusBar().showMessage(f"Copy as Python: nothing copied: {error_text(e, 'Copy as Python')}", 10000)

    return start_job(lambda _job: _script(path, entries, blobs), "Copy as Python", window, done=done, failed=failed,
                     ended=lambda _job: tmp.cleanup(), delete_later=True)
