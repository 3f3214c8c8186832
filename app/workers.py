"""Background jobs: long work (loading, layout) runs on a QThread, never on the UI thread.

A `Job` runs a plain Python function `work(job)` on its own thread; `start_job` makes one, wires
its signals to the owner's slots and starts it (the one place that wiring is written). The function may call
`job.report(fraction, text)`, or `job.report(event)` with a core.progress.Progress (what compile and
lowering report: which step, whether a cancel now stops at once), and must poll `job.cancelled` (or
pass `job.is_cancelled` to core functions that take a `cancel` callback). The owner's `progressed`
slot receives a Progress either way. Results come back to the UI thread through queued
signals: `done(result)`, `failed(exception)`, `cancelled()`. A failure hands over the exception
object itself, so a panel reads its fields (`node_name`, `stages`) instead of parsing text;
`error_text(exc, title)` is the one line to show for it. Work functions create no Qt objects
other than plain values: every QObject and QGraphicsItem is made on the UI thread.
"""
from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QThread, Signal

from core.errors import Cancelled, WorkbenchError
from core.progress import Progress

__all__ = ["Job", "JobCancelled", "cancel_all", "start_job", "error_text"]

logger = logging.getLogger(__name__)

# raise from a work function to stop it (the job then emits `cancelled`): core's one cancel error
JobCancelled = Cancelled


def error_text(exc: BaseException, title: str = "") -> str:
    """The one line a failed job shows: a user's error as it reads, anything else as an internal
    error of the job named `title` (its traceback is in the log)."""
    if isinstance(exc, WorkbenchError):
        return str(exc)
    from core.files import user_error

    mine = user_error(exc)  # a full disk, a permission, a read-only folder: the user's, named by its path
    if mine is not None:
        return str(mine)
    return f"{title or 'The background job'} failed with an internal error: {type(exc).__name__}: {exc}"


_RUNNING: set["Job"] = set()


def cancel_all(wait_ms: int = 10000) -> None:
    """Cancel every running job and wait for them (at application exit)."""
    for job in list(_RUNNING):
        job.cancel()
    for job in list(_RUNNING):
        job.wait(wait_ms)


class Job(QThread):
    """A QThread running `work(job)`.

    Jobs have no Qt parent: a window closed (and deleted) while its job still runs must not
    destroy a running QThread (Qt aborts the process on that). A module-level set keeps each job
    alive until its thread has finished; `parent` only ties signal delivery to that object's life.
    """

    done = Signal(object)
    failed = Signal(object)  # the exception
    cancelled = Signal()
    progressed = Signal(object)  # a core.progress.Progress
    # what the worker thread emits; forwarded to the public signals on the UI thread unless the
    # owner has gone in between (a queued call cannot be taken back once posted)
    _done = Signal(object)
    _failed = Signal(object)
    _cancelled = Signal()
    _progressed = Signal(object)

    def __init__(self, work: Callable[["Job"], Any], title: str = "", parent=None):
        super().__init__(None)
        self.work = work
        self.title = title
        self._cancel = False
        self._orphaned = False
        _RUNNING.add(self)
        self.finished.connect(self._finished)
        self._done.connect(lambda r: self._orphaned or self.done.emit(r))
        self._failed.connect(lambda m: self._orphaned or self.failed.emit(m))
        self._cancelled.connect(lambda: self._orphaned or self.cancelled.emit())
        self._progressed.connect(lambda p: self._orphaned or self.progressed.emit(p))
        if parent is not None:
            # the owner going away cancels the work and silences the job: its slots belong to
            # an object that no longer exists
            parent.destroyed.connect(self._orphan)

    def _orphan(self, *_args) -> None:
        self._cancel = True
        self._orphaned = True

    def _finished(self) -> None:
        _RUNNING.discard(self)
        # A finished job keeps no hold on what its work used: slots are often lambdas that name
        # the job (a reference cycle through Qt that keeps the Job alive), and they and the work
        # closure would keep a whole replaced model with it (scripts/open_close_memory.py).
        # Queued results were delivered before `finished` (same thread, posted earlier).
        self.work = None
        import warnings

        for signal in (self.done, self.failed, self.cancelled, self.progressed):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                try:
                    signal.disconnect()
                except (RuntimeError, TypeError):
                    pass

    @property
    def cancelled_requested(self) -> bool:
        return self._cancel

    def is_cancelled(self) -> bool:
        return self._cancel

    def cancel(self) -> None:
        self._cancel = True

    def report(self, progress: Progress | float, text: str = "") -> None:
        """Report progress: a core.progress.Progress as it is, or a fraction and a text (the
        job's title when none), which is one that a cancel stops at once."""
        if not isinstance(progress, Progress):
            progress = Progress(float(progress), text or self.title)
        self._progressed.emit(progress)

    def check(self) -> None:
        """Raise JobCancelled when cancel was requested."""
        if self._cancel:
            raise JobCancelled()

    def run(self) -> None:  # worker thread
        try:
            result = self.work(self)
        except Cancelled:
            self._cancelled.emit()
            return
        except WorkbenchError as e:
            self._failed.emit(e)
            return
        except Exception as e:  # noqa: BLE001 - reported in one line (error_text); the traceback goes to the log
            logger.error("%s failed:\n%s", self.title or "background job", traceback.format_exc())
            self._failed.emit(e)
            return
        if self._cancel:
            self._cancelled.emit()
        else:
            self._done.emit(result)


def start_job(
    work: Callable[[Job], Any],
    title: str,
    owner,
    *,
    done: Callable[[Any], None] | None = None,
    failed: Callable[[BaseException], None] | None = None,
    cancelled: Callable[[], None] | None = None,
    progressed: Callable[[Progress], None] | None = None,
    ended: Callable[[Job], None] | None = None,
    wanted: Callable[[], bool] | None = None,
    delete_later: bool = False,
    start: bool = True,
) -> Job:
    """Run `work(job)` on a worker thread for `owner` and deliver its outcome on the UI thread.

    `ended(job)` is called first whatever the outcome (the owner's "not busy any more"); then
    `done(result)`, `failed(exception)` or `cancelled()` - but only while `wanted()` is true. That
    is how a panel drops a result made for a model that has since been replaced (its labels
    would land on the wrong nodes) without each panel writing its own generation check.
    Progress is delivered only while wanted too. `delete_later` frees the QThread once it has
    finished (for owners that keep no reference to the job after it ended). `start=False`
    leaves `job.start()` to the caller (to connect something else first).
    """
    job = Job(work, title, parent=owner)

    def outcome(slot, *args) -> None:
        if ended is not None:
            ended(job)
        if slot is not None and (wanted is None or wanted()):
            slot(*args)

    job.done.connect(lambda result: outcome(done, result))
    job.failed.connect(lambda exc: outcome(failed, exc))
    job.cancelled.connect(lambda: outcome(cancelled))
    if progressed is not None:
        job.progressed.connect(lambda p: (wanted is None or wanted()) and progressed(p))
    if delete_later:
        job.finished.connect(job.deleteLater)
    if start:
        job.start()
    return job
