"""Autosave and crash recovery: hours of unsaved edits survive a crash, a kill or a power cut.

While a window's model has unsaved edits, an `Autosaver` writes it every `interval_ms` (60 s) when
it changed since the last autosave, and on demand before risky work (`save_now`: compile and
tuning run native code that could take the process down). Autosaves go to a per-user folder
(QStandardPaths' AppLocalDataLocation/autosave, or $MLCWB_AUTOSAVE_DIR), never beside or over the
user's file: `<session>.onnx` (written atomically by core.save_model: temporary file, then
rename) plus `<session>.json` naming the original file, the time and the owning process.

A clean end removes the autosave: saving (the model is clean again), discarding the edits, closing
the window. What is left on the next start belongs to a process that died: `pending_recoveries`
lists those (skipping autosaves of other instances still running) and `offer_recovery` asks the
user, loads the model with its edits, points it back at the original file and marks it unsaved.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from PySide6.QtCore import QObject, QStandardPaths, QTimer
from PySide6.QtWidgets import QMessageBox

from core import WorkbenchError, save_model

__all__ = ["Autosaver", "Recovery", "autosave_dir", "pending_recoveries", "offer_recovery", "recover", "DEFAULT_INTERVAL_MS"]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 60_000
_SESSIONS = count(1)


def autosave_dir() -> Path:
    """The per-user autosave folder ($MLCWB_AUTOSAVE_DIR overrides it, e.g. in tests)."""
    env = os.environ.get("MLCWB_AUTOSAVE_DIR")
    if env:
        return Path(env)
    base = QStandardPaths.writableLocation(QStandardPaths.AppLocalDataLocation)
    if not base:
        base = str(Path.home() / ".local" / "share" / "mlc-workbench")
    return Path(base) / "autosave"


def _process_start(pid: int) -> float | None:
    """When process `pid` started (None when it is not running): pid plus start time names a
    process uniquely, so a reused pid is not mistaken for the autosave's owner."""
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - no such process (or no access): not running for our purpose
        return None


class Autosaver(QObject):
    """Periodic autosave of one window's document (see the module docstring)."""

    def __init__(self, window, interval_ms: int = DEFAULT_INTERVAL_MS, folder: str | os.PathLike | None = None):
        super().__init__(window)
        self.window = window
        self.document = window.document
        self.folder = Path(folder) if folder is not None else autosave_dir()
        self.session = f"session-{os.getpid()}-{next(_SESSIONS)}"
        self.changes = 0  # graph changes seen; compared with the count at the last autosave
        self._saved_changes = -1
        self.last_error = ""
        self.last_saved_at: float | None = None
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        self.document.graphChanged.connect(self._changed)
        self.document.graphReplaced.connect(self._replaced)
        self.document.dirtyChanged.connect(self._dirty_changed)

    @property
    def model_path(self) -> Path:
        return self.folder / f"{self.session}.onnx"

    @property
    def info_path(self) -> Path:
        return self.folder / f"{self.session}.json"

    def _changed(self) -> None:
        self.changes += 1

    def _replaced(self) -> None:
        self.changes += 1
        if not self.document.is_dirty:
            self.discard()

    def _dirty_changed(self, dirty: bool) -> None:
        if not dirty:  # saved, or undone back to the file's state: nothing to recover any more
            self.discard()

    def tick(self) -> None:
        """Timer: autosave when there are unsaved edits the last autosave does not have."""
        if self.document.is_dirty and self.changes != self._saved_changes:
            self.save_now("periodic")

    def save_now(self, reason: str = "") -> bool:
        """Write the autosave now (before risky work, or from the crash handler); True when the
        model with its unsaved edits is on disk. Never raises: an autosave must not be the error."""
        doc = self.document
        if doc.graph is None or not doc.is_dirty:
            return False
        if self.changes == self._saved_changes and self.model_path.exists():
            return True
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            save_model(doc.graph, self.model_path)
            info = {
                "original": str(doc.path) if doc.path else "",
                "saved_at": time.time(),
                "pid": os.getpid(),
                "process_start": _process_start(os.getpid()),
                "reason": reason,
                "edits": doc.undo_stack.count(),
            }
            tmp = self.info_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(info))
            os.replace(tmp, self.info_path)
        except Exception as e:  # noqa: BLE001 - reported in the status bar and log, never raised
            self.last_error = f"Autosave to {self.folder} failed: {e}"
            logger.warning(self.last_error)
            return False
        self._saved_changes = self.changes
        self.last_saved_at = time.time()
        self.last_error = ""
        return True

    def discard(self) -> None:
        """Remove this session's autosave (the edits were saved or dropped, or the window closed)."""
        _remove_files(self.model_path, self.info_path)
        self._saved_changes = -1

    def stop(self) -> None:
        """Clean end of the window: no more autosaves, and none left behind."""
        self.timer.stop()
        self.discard()


@dataclass
class Recovery:
    """An autosave left by a process that ended without closing its window."""

    model: Path
    info: Path
    original: str  # the file the edits were made to ('' when it had none)
    saved_at: float
    edits: int

    def describe(self) -> str:
        name = Path(self.original).name if self.original else "an untitled model"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved_at))
        return f"{name} with {self.edits} unsaved edit{'s' if self.edits != 1 else ''} (autosaved {when})"

    def remove(self) -> None:
        _remove_files(self.model, self.info)


def _remove_files(model: Path, info: Path) -> None:
    """Delete an autosave: the model, its external-data file and its info (missing ones are fine)."""
    for p in (model, info, model.with_name(model.name + ".data")):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            logger.warning("cannot remove autosave %s: %s", p, e)


def pending_recoveries(folder: str | os.PathLike | None = None) -> list[Recovery]:
    """Autosaves whose process is gone (newest first); those of running instances are skipped."""
    folder = Path(folder) if folder is not None else autosave_dir()
    out = []
    for info_path in folder.glob("session-*.json"):
        model = info_path.with_suffix(".onnx")
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            continue
        if not model.is_file():
            continue
        pid, started = info.get("pid"), info.get("process_start")
        if isinstance(pid, int) and started is not None:
            alive = _process_start(pid)
            if alive is not None and abs(alive - started) < 1.0:
                continue  # another workbench still running owns it
        out.append(Recovery(model, info_path, str(info.get("original", "")), float(info.get("saved_at", 0.0)), int(info.get("edits", 0))))
    return sorted(out, key=lambda r: r.saved_at, reverse=True)


def recover(window, recovery: Recovery) -> bool:
    """Open the autosaved model in `window` as the original file with unsaved edits; the old
    autosave is replaced by this window's own before it is removed."""
    if not window.open_model(str(recovery.model), wait=True):
        return False
    doc = window.document
    recent = [p for p in window.recent_files() if p != str(recovery.model.resolve())]
    window.settings.setValue("recentFiles", recent)
    if recovery.original:
        original = Path(recovery.original)
        doc.path = original
        doc.graph.path = original
        doc.pathChanged.emit(str(original))
    else:
        doc.path = None
        doc.pathChanged.emit("")
    doc.undo_stack.resetClean()  # unsaved: the edits are not in the original file
    autosaver = getattr(window, "autosaver", None)
    if autosaver is None or autosaver.save_now("recovered"):
        recovery.remove()
    window.statusBar().showMessage(f"Recovered {recovery.describe()}; save it to keep the edits.", 10000)
    return True


def offer_recovery(window, folder: str | os.PathLike | None = None) -> bool:
    """At start-up: ask about each autosave a crashed session left; True when one was recovered."""
    recovered = False
    for r in pending_recoveries(folder):
        if recovered:
            break  # one window holds one model; the rest stay for the next start
        box = QMessageBox(QMessageBox.Warning, "Recover unsaved work?",
                          "MLC Workbench did not close cleanly last time.", QMessageBox.NoButton, window)
        box.setObjectName("recovery-prompt")
        box.setInformativeText(f"Recover {r.describe()}?\n\nThe autosave is {r.model}.")
        recover_button = box.addButton("Recover", QMessageBox.AcceptRole)
        discard_button = box.addButton("Discard", QMessageBox.DestructiveRole)
        box.addButton("Later", QMessageBox.RejectRole)
        box.setDefaultButton(recover_button)
        box.exec()
        clicked = box.clickedButton()
        if clicked is recover_button:
            try:
                recovered = recover(window, r)
            except WorkbenchError as e:  # pragma: no cover - open_model reports its own errors
                QMessageBox.warning(window, "Cannot recover", str(e))
        elif clicked is discard_button:
            r.remove()
    return recovered
