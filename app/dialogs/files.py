"""File and folder dialogs that start somewhere sensible and remember where the user went.

Each kind of file has its own remembered folder in the settings (`dirs/<kind>`: "model",
"export", "artifact", "npy", "onnx-out"): the folder the last file of that kind was picked in.
Before a first pick, a dialog starts in the open model's folder, else the home folder; a folder
that has since gone is skipped the same way. A dialog that writes (Save, Export) never starts inside
the Python installation (a model opened from a wheel's test data lives in site-packages) or in a
folder it cannot write: there it starts in the home folder.

`ask_new_folder` is for outputs that are folders (an exported artifact): the user may type a
name that does not exist yet, which the caller creates; an existing folder is accepted as well.
"""
from __future__ import annotations

import logging
import os
import sys
import sysconfig
from pathlib import Path

from PySide6.QtWidgets import QFileDialog

__all__ = ["start_dir", "remember_dir", "open_file", "save_file", "open_folder", "ask_new_folder"]

logger = logging.getLogger(__name__)


def start_dir(window, kind: str, writing: bool = False) -> str:
    """Where a dialog for `kind` opens: the remembered folder, else the model's, else home. A
    dialog `writing` skips folders inside the Python installation and folders it cannot write."""
    value = window.settings.value(f"dirs/{kind}", "")
    path = getattr(window.document, "path", None)
    for folder in (Path(str(value)) if value else None, Path(path).resolve().parent if path else None):
        if folder is not None and folder.is_dir() and not (writing and not _writable_place(folder)):
            return str(folder)
    return str(Path.home())


def _installation_dirs() -> list[Path]:
    """Folders of the Python installation: site-packages and the environment's prefixes."""
    paths = sysconfig.get_paths()
    found = {paths.get("purelib"), paths.get("platlib"), sys.prefix, sys.base_prefix, sys.exec_prefix}
    return [Path(p).resolve() for p in found if p and p != "/"]


def _writable_place(folder: Path) -> bool:
    """A folder a user would write an output into: writable, and not inside the installation."""
    folder = folder.resolve()
    if any(folder == d or d in folder.parents for d in _installation_dirs()):
        return False
    return os.access(folder, os.W_OK)


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
    folder = start_dir(window, kind, writing=True)
    start = str(Path(folder) / suggested) if suggested else folder
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
    start = str(Path(start_dir(window, kind, writing=True)) / suggested)
    path, _ = QFileDialog.getSaveFileName(parent, title, start, "Folders (*)", "", QFileDialog.DontConfirmOverwrite)
    if path:
        remember_dir(window, kind, path)
    return path
