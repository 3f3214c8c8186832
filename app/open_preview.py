"""A big model's first picture while it loads.

Opening a 10,000-node model spends most of its time building the onnx_ir model, inferring shapes
and making the view of every node, although it opens showing ~26 collapsed groups. Once the file
has passed its checks, the load's worker makes those boxes from the protobuf
(core.views.scope_preview), lays them out and hands them to the UI thread, which draws them
(canvas mode "preview": looked at, panned and zoomed, not worked on) while the load goes on. The
loaded model's view replaces the picture; a load that fails or is cancelled after it brings back
what was on screen before.
"""
from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, Signal

from core.errors import Cancelled
from core.views.layout import layout
from core.views.scope_preview import preview_view

from app.canvas import prepare_display
from app.graph_items import node_size

__all__ = ["OpenPreview"]

logger = logging.getLogger(__name__)

PAINT_WAIT_S = 0.5  # the worker waits at most this long for the UI thread to draw the picture


class OpenPreview(QObject):
    """One per main window: makes the preview on the load's worker and shows it on the UI thread."""

    _ready = Signal(object, object, object, object)  # job, view, layout, extras (worker -> UI thread)

    def __init__(self, window, current_load):
        super().__init__(window)
        self.canvas = window.canvas
        self.current_load = current_load  # () -> the load job running now (None when none)
        self.last_seconds: float | None = None  # open -> the picture drawn, for the last open that had one
        self._t0 = 0.0
        self._painted = threading.Event()
        self._ready.connect(self._show)

    def start(self, t0: float) -> None:
        """A load begins (UI thread), at `t0` (time.perf_counter())."""
        self._t0 = t0
        self.last_seconds = None

    def make(self, job, proto, title: str) -> None:
        """On the load's worker, once the file is checked: the picture, when the model is big
        enough to open collapsed; waits (briefly) until the UI thread has drawn it, so the rest
        of the load does not hold the GIL meanwhile. A picture that cannot be made is left out
        (logged): it must never stop a model that passed its checks from opening."""
        try:
            view = preview_view(proto, title)
            if view is None or job.is_cancelled():
                return
            measure, direction = self.canvas.measure, self.canvas.direction
            result = layout(view, {n.id: node_size(n, measure) for n in view.nodes}, cancel=job.is_cancelled, direction=direction)
            extras = prepare_display(view, result, job)
        except Cancelled:
            raise
        except Exception:  # noqa: BLE001 - the loaded view comes anyway
            logger.exception("no first picture for %s", title)
            return
        self._painted.clear()
        self._ready.emit(job, view, result, extras)
        self._painted.wait(PAINT_WAIT_S)
        job.report(0.1, f"Loading {title}: the picture is a preview until the model is built")

    def _show(self, job, view, result, extras) -> None:
        try:
            if job is not self.current_load():
                return  # a load replaced since
            self.canvas.show_preview(view, result, extras)
            self.canvas.viewport().repaint()
            self.last_seconds = time.perf_counter() - self._t0
        finally:
            self._painted.set()

    def load_failed(self) -> None:
        """The load failed or was cancelled (UI thread): the picture gives way to what was on
        screen before (when it opens, the model's own view replaces the picture anyway)."""
        if self.canvas.mode == "preview":
            self.canvas.show_model()
