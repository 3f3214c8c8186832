"""Background jobs: long work (loading, layout) runs on a QThread, never on the UI thread.

A `Job` runs a plain Python function `work(job)` on its own thread. The function may call
`job.report(fraction, text)` and must poll `job.cancelled` (or pass `job.is_cancelled` to
core functions that take a `cancel` callback). Results come back to the UI thread through queued
signals: `done(result)`, `failed(message)`, `cancelled()`. Work functions create no Qt objects
other than plain values: every QObject and QGraphicsItem is made on the UI thread.
"""
from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QThread, Signal

from core.errors import WorkbenchError
from core.layout import LayoutCancelled

__all__ = ["Job", "JobCancelled"]

logger = logging.getLogger(__name__)


class JobCancelled(Exception):
    """Raise from a work function to stop it; the job then emits `cancelled`."""


class Job(QThread):
    done = Signal(object)
    failed = Signal(str)
    cancelled = Signal()
    progressed = Signal(float, str)

    def __init__(self, work: Callable[["Job"], Any], title: str = "", parent=None):
        super().__init__(parent)
        self.work = work
        self.title = title
        self._cancel = False

    @property
    def cancelled_requested(self) -> bool:
        return self._cancel

    def is_cancelled(self) -> bool:
        return self._cancel

    def cancel(self) -> None:
        self._cancel = True

    def report(self, fraction: float, text: str = "") -> None:
        self.progressed.emit(float(fraction), text or self.title)

    def check(self) -> None:
        """Raise JobCancelled when cancel was requested."""
        if self._cancel:
            raise JobCancelled()

    def run(self) -> None:  # worker thread
        try:
            result = self.work(self)
        except (JobCancelled, LayoutCancelled):
            self.cancelled.emit()
            return
        except WorkbenchError as e:
            self.failed.emit(str(e))
            return
        except Exception as e:  # noqa: BLE001 - reported in one line; the traceback goes to the log
            logger.error("%s failed:\n%s", self.title or "background job", traceback.format_exc())
            self.failed.emit(f"{self.title or 'The background job'} failed with an internal error: {type(e).__name__}: {e}")
            return
        if self._cancel:
            self.cancelled.emit()
        else:
            self.done.emit(result)
