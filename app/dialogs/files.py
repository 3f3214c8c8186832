"""File and folder dialogs that start somewhere sensible and remember where the user went.

Each kind of file has its own remembered folder in the settings (`dirs/<kind>`: "model",
"export", "artifact", "npy", "onnx-out"): the folder the last file of that kind was picked in.
Before a first pick, a dialog starts in the open model's folder, else the home folder; a folder
that has since gone is skipped the same way.

`ask_new_folder` is for outputs that are folders (an exported artifact): the user may type a
name that does not exist yet, which the caller creates; an existing folder is accepted as well.
"""
from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtWidgets import QFileDialog

__all__ = ["start_dir", "remember_dir", "open_file", "save_file", "open_folder", "ask_new_folder"]

logger = logging.getLogger(__name__)


def start_dir(window, kind: str) -> str:
    """Where a dialog for `kind` opens: the remembered folder, else the model's, else home."""
    value = window.settings.value(f"dirs/{kind}", "")
    if value and Path(str(value)).is_dir():
        return str(value)
    path = getattr(window.document, "path", None)
    if path and Path(path).parent.is_dir():
        return str(Path(path).parent)
    return str(Path.home())


def remember_dir(window, kind: str, picked: str) -> None:
    """Remember the folder of `picked` (a file, or a folder's parent) for the next `kind` dialog."""
    p = Path(picked)
    window.settings.setValue(f"dirs/{kind}", str(p.parent))


def open_file(window, parent, kind: str, title: str, filters: str) -> str:
    path, _ = QFileDialog.getOpenFileName(parent, title, start_dir(window, kind), filters)
    if path:
        remember_dir(window, kind, path)
    return path


def save_file(window, parent, kind: str, title: str, filters: str, suggested: str = "") -> str:
    start = str(Path(start_dir(window, kind)) / suggested) if suggested else start_dir(window, kind)
    path, _ = QFileDialog.getSaveFileName(parent, title, start, filters)
    if path:
        remember_dir(window, kind, path)
    return path


def open_folder(window, parent, kind: str, title: str) -> str:
    folder = QFileDialog.getExistingDirectory(parent, title, start_dir(window, kind))
    if folder:
        remember_dir(window, kind, folder)
    return folder


def ask_new_folder(window, parent, kind: str, title: str, suggested: str) -> str:
    """A folder to write into, new or existing: a save dialog, so a new name can be typed (a
    folder picker only accepts folders that exist). Returns "" when cancelled."""
    start = str(Path(start_dir(window, kind)) / suggested)
    path, _ = QFileDialog.getSaveFileName(parent, title, start, "Folders (*)", "", QFileDialog.DontConfirmOverwrite)
    if path:
        remember_dir(window, kind, path)
    return path
