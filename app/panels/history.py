"""History: the document's undo stack as a list (QUndoView). Clicking an entry undoes or redoes
everything up to it; the entry the file was saved at carries the clean mark."""
from __future__ import annotations

from PySide6.QtWidgets import QDockWidget, QStyle, QUndoView

__all__ = ["create_panel", "AREA"]

AREA = "right"


def create_panel(window) -> QDockWidget:
    view = QUndoView(window.document.undo_stack)
    view.setEmptyLabel("Opened model")
    view.setCleanIcon(window.style().standardIcon(QStyle.SP_DialogSaveButton))
    view.setObjectName("history-view")
    dock = QDockWidget("History", window)
    dock.setObjectName("panel-history")
    dock.setWidget(view)
    return dock
