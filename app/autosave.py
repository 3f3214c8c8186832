"""Autosave and crash recovery: hours of unsaved edits survive a crash, a kill or a power cut.

While a window's model has unsaved edits, an `Autosaver` writes it every `interval_ms` (60 s) when
it changed since the last autosave, and on demand before risky work (`save_now`: compile and
tuning run native code that could take the process down). Autosaves go to a per-user folder
(QStandardPaths' AppLocalDataLocation/autosave, or $MLCWB_AUTOSAVE_DIR), never beside or over the
user's file:

* `<session>.onnx`: the model as it is (written atomically by core.save_model). Weights in an
  external data file are referenced by absolute path, not copied (a 2 GB model costs no 2 GB per
  autosave); only weights that exist in memory alone go with it, in `<session>.onnx.data`.
* `<session>.journal.json` (+ `<session>.blobs/` for arrays): the undo history since the file
  was opened or last saved, as data (core.model.journal), with the file's size and time.
* `<session>.json`: the original file, the time, the owning process and the count of unsaved edits.

A clean end removes the autosave: saving (the model is clean again), discarding the edits, closing
the window. What is left on the next start belongs to a process that died: `pending_recoveries`
lists those (skipping autosaves of other instances still running) and `offer_recovery` asks the
user. Recovering opens the original file and replays the journal, so Undo and Redo work as
before the crash; when that is impossible (the file changed, an edit no longer applies) it opens
the autosaved model without history and says why. An autosave that cannot be loaded at all is
reported once with the reason and moved to the `failed` folder beside the autosaves.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from PySide6.QtCore import QObject, QStandardPaths, QTimer
from PySide6.QtWidgets import QMessageBox

from core import WorkbenchError, load_model, save_model
from core.model import journal
from core.files import atomic_write
from core.model.external_data import content_fingerprint, data_files, referenced_files

__all__ = ["Autosaver", "Recovery", "autosave_dir", "pending_recoveries", "offer_recovery", "recover", "DEFAULT_INTERVAL_MS", "FAILED"]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 60_000
FAILED = "failed"  # autosaves that could not be loaded are moved here, out of the offer list
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
        # What the journal replays from: the file (path, size, mtime_ns) holding the model as it
        # was at undo-stack index `base_index` (opened or saved there); None when no file does.
        self.base: tuple[str, int, int] | None = None
        self.base_index = 0
        self.inherited_edits = 0  # unsaved edits recovered without their history (see recover)
        self.journal_note = ""  # why the last autosave has no journal ('' when it has one)
        self._blobs: journal.Blobs | None = None
        self._encoded: dict[int, tuple[object, dict]] = {}
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        self.document.graphChanged.connect(self._changed)
        self.document.graphReplaced.connect(self._replaced)
        self.document.dirtyChanged.connect(self._dirty_changed)
        self.document.saved.connect(self._set_base)

    @property
    def model_path(self) -> Path:
        return self.folder / f"{self.session}.onnx"

    @property
    def info_path(self) -> Path:
        return self.folder / f"{self.session}.json"

    @property
    def journal_path(self) -> Path:
        return self.folder / f"{self.session}.journal.json"

    @property
    def blobs_path(self) -> Path:
        return self.folder / f"{self.session}.blobs"

    def _set_base(self, *_args) -> None:
        """The document is clean: its file holds the model at the current undo index."""
        doc = self.document
        self.base, self.base_index, self.inherited_edits = None, doc.undo_stack.index(), 0
        if doc.graph is None or doc.path is None:
            return
        try:
            st = Path(doc.path).stat()
        except OSError:
            return
        self.base = (str(Path(doc.path).resolve()), st.st_size, st.st_mtime_ns)

    def unsaved_edits(self) -> int:
        """How many edits separate the model from its file (recovered ones included)."""
        stack = self.document.undo_stack
        clean = stack.cleanIndex()
        if clean >= 0:
            return abs(stack.index() - clean) + (self.inherited_edits if stack.index() >= clean else 0)
        return stack.index() + self.inherited_edits

    def _changed(self) -> None:
        self.changes += 1

    def _replaced(self) -> None:
        self.changes += 1
        self._encoded.clear()
        if not self.document.is_dirty:
            self.discard()
            self._set_base()

    def _dirty_changed(self, dirty: bool) -> None:
        if not dirty:  # saved, or undone back to the file's state: nothing to recover any more
            self.discard()
            self._set_base()

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
            saved = save_model(doc.graph, self.model_path, external="reference")
            self._write_journal(fingerprint=None if saved.data_file else content_fingerprint(doc.graph))
            info = {
                "original": str(doc.path) if doc.path else "",
                "saved_at": time.time(),
                "pid": os.getpid(),
                "process_start": _process_start(os.getpid()),
                "reason": reason,
                "edits": self.unsaved_edits(),
                "journal": self.journal_path.name if not self.journal_note else None,
                "journal_note": self.journal_note,
            }
            _write_json(self.info_path, info)
        except Exception as e:  # noqa: BLE001 - reported in the status bar and log, never raised
            self.last_error = f"Autosave to {self.folder} failed: {e}"
            logger.warning(self.last_error)
            return False
        self._saved_changes = self.changes
        self.last_saved_at = time.time()
        self.last_error = ""
        return True

    def _write_journal(self, fingerprint: str | None) -> None:
        """Write the undo history since `base` as data, or remove the journal and say why not."""
        stack = self.document.undo_stack
        note = ""
        if self.base is None:
            note = "the model's file was not opened or saved in this session"
        elif stack.cleanIndex() != self.base_index or stack.index() < self.base_index:
            note = "edits before the last save were undone"
        else:
            try:
                st = Path(self.base[0]).stat()
                if (st.st_size, st.st_mtime_ns) != self.base[1:]:
                    note = f"{self.base[0]} changed on disk since it was opened"
            except OSError:
                note = f"{self.base[0]} is gone"
        entries: list[dict] = []
        if not note:
            if self._blobs is None:
                self._blobs = journal.Blobs(self.blobs_path)
            live = {}
            try:
                for i in range(self.base_index, stack.count()):
                    cmd = stack.command(i)
                    edit = getattr(cmd, "edit", None)
                    if edit is None:
                        raise journal.NotJournaled(f"the undo step '{cmd.text()}' is not an edit")
                    cached = self._encoded.get(id(cmd))
                    if cached is None or cached[0] is not cmd:
                        entry = journal.encode_edit(edit, self._blobs)
                        entry.update(next_id=getattr(cmd, "next_id", None), description=edit.description)
                        cached = (cmd, entry)
                    live[id(cmd)] = cached
                    entries.append(cached[1])
            except journal.NotJournaled as e:
                note = str(e)
            self._encoded = live
        self.journal_note = note
        if note:
            logger.info("autosave without undo history: %s", note)
            _remove_files(self.journal_path)
            return
        _write_json(self.journal_path, {
            "version": journal.JOURNAL_VERSION,
            "base": {"path": self.base[0], "size": self.base[1], "mtime_ns": self.base[2]},
            "entries": entries,
            "index": stack.index() - self.base_index,
            "fingerprint": fingerprint,
        })

    def discard(self) -> None:
        """Remove this session's autosave (the edits were saved or dropped, or the window closed)."""
        _remove_files(self.model_path, *data_files(self.model_path), self.info_path,
                      self.journal_path, self.blobs_path)
        self._blobs = None
        self._encoded.clear()
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
    journal: Path | None = None  # the undo history, when it could be written down

    def describe(self) -> str:
        name = Path(self.original).name if self.original else "an untitled model"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.saved_at))
        return f"{name} with {self.edits} unsaved edit{'s' if self.edits != 1 else ''} (autosaved {when})"

    @property
    def files(self) -> list[Path]:
        stem = self.model.with_suffix("")
        return [self.model, self.info, *data_files(self.model),
                stem.with_name(stem.name + ".journal.json"), stem.with_name(stem.name + ".blobs")]

    def remove(self, keep: set[Path] | frozenset = frozenset()) -> None:
        """Delete the autosave's files, except those in `keep` (e.g. a data file the recovered
        model still reads its weights from)."""
        _remove_files(*(p for p in self.files if p.resolve() not in keep))

    def set_aside(self) -> Path:
        """Move the autosave into the `failed` folder (kept for the user, not offered again)."""
        failed = self.model.parent / FAILED
        failed.mkdir(parents=True, exist_ok=True)
        for p in self.files:
            if p.exists():
                try:
                    os.replace(p, failed / p.name)
                except OSError as e:
                    logger.warning("cannot move %s to %s: %s", p, failed, e)
        return failed


def _write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data).encode())


def _remove_files(*paths: Path) -> None:
    """Delete autosave files and folders (missing ones are fine)."""
    for p in paths:
        try:
            if p.is_dir():
                shutil.rmtree(p)
            else:
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
        if info_path.name.endswith(".journal.json"):
            continue
        model = info_path.with_suffix(".onnx")
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(info, dict) or not model.is_file():
            continue
        pid, started = info.get("pid"), info.get("process_start")
        if isinstance(pid, int) and started is not None:
            alive = _process_start(pid)
            if alive is not None and abs(alive - started) < 1.0:
                continue  # another workbench still running owns it
        name = info.get("journal")
        jpath = folder / name if isinstance(name, str) and name == f"{model.stem}.journal.json" else None
        try:
            r = Recovery(model, info_path, str(info.get("original", "")), float(info.get("saved_at", 0.0)), int(info.get("edits", 0)),
                         jpath if jpath is not None and jpath.is_file() else None)
        except (TypeError, ValueError):
            continue
        out.append(r)
    return sorted(out, key=lambda r: r.saved_at, reverse=True)


def _replay_journal(window, recovery: Recovery) -> None:
    """Open the original file and replay the journal through the undo stack (raises
    WorkbenchError saying why it cannot; the window may then hold part of the replay)."""
    from rewrites import get_rule

    try:
        data = json.loads(recovery.journal.read_text())
    except (OSError, ValueError) as e:
        raise journal.ReplayError(f"its journal cannot be read ({e}).") from None
    if not isinstance(data, dict) or data.get("version") != journal.JOURNAL_VERSION or not isinstance(data.get("entries"), list):
        raise journal.ReplayError("its journal is not one this version writes.")
    base = data.get("base") or {}
    path = Path(str(base.get("path", "")))
    try:
        st = path.stat()
    except OSError:
        raise journal.ReplayError(f"{path}, which the edits were made to, is gone.") from None
    if (st.st_size, st.st_mtime_ns) != (base.get("size"), base.get("mtime_ns")):
        raise journal.ReplayError(f"{path} changed on disk after the edits were made.")
    if not window.open_model(str(path), wait=True):
        raise journal.ReplayError(f"{path} cannot be opened.")
    doc = window.document
    entries = data["entries"]
    blobs = journal.Blobs(recovery.journal.with_name(recovery.model.stem + ".blobs"))
    journal.replay(doc.graph, entries, blobs, lambda e: doc.push(e, show_errors=False), {"rules": get_rule})
    index = data.get("index", len(entries))
    if not isinstance(index, int) or not 0 <= index <= len(entries):
        raise journal.ReplayError(f"its journal's position ({index}) is not within its {len(entries)} edits.")
    doc.undo_stack.setIndex(index)
    expected = data.get("fingerprint")
    if expected is not None and content_fingerprint(doc.graph) != expected:
        raise journal.ReplayError("the replayed edits do not give the autosaved model.")


def recover(window, recovery: Recovery) -> bool:
    """Bring back a crashed session's model: the original file with the journal's edits replayed
    (Undo and Redo work), or else the autosaved model, unsaved, without history. An autosave that
    cannot be loaded is reported once and moved to the `failed` folder."""
    doc = window.document
    autosaver = getattr(window, "autosaver", None)
    note = ""
    with_history = False
    if recovery.journal is not None:
        try:
            _replay_journal(window, recovery)
            with_history = True
        except WorkbenchError as e:
            note = str(e)
            logger.warning("recovering %s without its undo history: %s", recovery.model, note)
            doc.undo_stack.clear()  # a partial replay is not the user's work: nothing to ask about
    else:
        note = "the autosave has no journal of the edits"
    if not with_history:
        try:
            load_model(recovery.model, allow_absolute_external=True)  # a bad autosave: say why, once
        except WorkbenchError as e:
            where = recovery.set_aside()
            QMessageBox.warning(window, "Cannot recover", f"The autosave of {recovery.describe()} cannot be loaded: {e} "
                                f"It was moved to {where} and will not be offered again.")
            return False
        if not window.open_model(str(recovery.model), wait=True, allow_absolute_external=True):
            recovery.set_aside()
            return False
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
        if autosaver is not None:
            autosaver.base = None  # no file holds this state: later autosaves have no journal
            autosaver.inherited_edits = recovery.edits
    if autosaver is None or autosaver.save_now("recovered"):
        # a model recovered without history may read weights from the old autosave's data file
        recovery.remove(keep=referenced_files(doc.graph.model) if doc.graph is not None else frozenset())
    how = "with its undo history" if with_history else f"without its undo history ({note.rstrip('.')})"
    window.statusBar().showMessage(f"Recovered {recovery.describe()} {how}; save it to keep the edits.", 15000)
    window.last_recovery_note = "" if with_history else note
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
        history = "with its undo history" if r.journal is not None else "without undo history"
        box.setInformativeText(f"Recover {r.describe()}, {history}?\n\nThe autosave is {r.model}.")
        recover_button = box.addButton("Recover", QMessageBox.AcceptRole)
        discard_button = box.addButton("Discard", QMessageBox.DestructiveRole)
        box.addButton("Later", QMessageBox.RejectRole)
        box.setDefaultButton(recover_button)
        box.exec()
        clicked = box.clickedButton()
        if clicked is recover_button:
            try:
                recovered = recover(window, r)
            except WorkbenchError as e:  # pragma: no cover - recover reports its own errors
                QMessageBox.warning(window, "Cannot recover", str(e))
        elif clicked is discard_button:
            r.remove()
    return recovered
