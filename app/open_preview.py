"""A big model on screen before its onnx_ir model is built.

Opening a 10,000-node model spends a third of its time building the onnx_ir model, which
nothing on screen needs. Once the file has passed its checks and its shapes are inferred, the
load's worker makes the model's view from the protobuf (core.views.scope_preview.open_view: the
same view, groups and parameter counts the loaded model gets), and, when it opens collapsed, lays
it out and hands it to the UI thread, which draws it (canvas mode "preview": looked at, panned
and zoomed, not worked on) while the onnx_ir model is built. The loaded model then adopts that
view, its groups and its layout (`take`): nothing is made twice. A load that fails or is
cancelled after the picture brings back what was on screen before.
"""
from __future__ import annotations

import logging
import threading
import time

from PySide6.QtCore import QObject, Signal

from pathlib import Path

from core.errors import Cancelled
from core.views.layout import layout
from core.views.scope_preview import open_view

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
        self._made: tuple | None = None  # (job, OpenView, layout, extras) of the load running now
        self._ready.connect(self._show)

    def start(self, t0: float) -> None:
        """A load begins (UI thread), at `t0` (time.perf_counter())."""
        self._t0 = t0
        self.last_seconds = None

    def make(self, job, proto, types, path) -> None:
        """On the load's worker, once the file is checked and its shapes inferred (`types`): the
        view a big model opens with, drawn now when it opens collapsed; waits (briefly) until the
        UI thread has drawn it, so the rest of the load does not hold the GIL meanwhile. A view
        that cannot be made is left out (logged): the loaded model makes its own, as small
        models do; this must never stop a model that passed its checks from opening."""
        self._made = None
        title = Path(path).name
        try:
            opened = open_view(proto, types, title, Path(path).parent, fold=self.canvas.scopes.fold_quantized)
            if opened is None or job.is_cancelled():
                return
            if not opened.collapsed:  # every node drawn: laid out once the model is built
                self._made = (job, opened, None, None)
                return
            view = opened.view
            measure, direction = self.canvas.measure, self.canvas.direction
            result = layout(view, {n.id: node_size(n, measure) for n in view.nodes}, cancel=job.is_cancelled, direction=direction)
            extras = prepare_display(view, result, job)
        except Cancelled:
            raise
        except Exception:  # noqa: BLE001 - the loaded model makes its own view
            logger.exception("no early view for %s", title)
            return
        self._made = (job, opened, result, extras)
        self._painted.clear()
        self._ready.emit(job, view, result, extras)
        self._painted.wait(PAINT_WAIT_S)
        job.report(0.1, f"Loading {title}: drawn; building the model to work on")

    def take(self, job):
        """On the load's worker, once the model is built: (OpenView, layout or None, extras or
        None) made for `job` by `make`, or None (a small model, or none could be made)."""
        made, self._made = self._made, None
        if made is None or made[0] is not job:
            return None
        return made[1:]

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
