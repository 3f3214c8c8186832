"""Progress of long work as one typed event: what compile, lowering and tuning report, and what a
GUI job carries to its panel (app.workers.Job.report).

A panel decides from the event itself what a Cancel does now (`cancellable`, `stops_after`), never
from the text it shows: the text is for people and may change.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = ["Progress", "ProgressCallback"]


@dataclass(frozen=True)
class Progress:
    """One report of a long job.

    `fraction`: how far the whole job is, 0..1. `message`: what it does now, short enough for a
    progress bar; `detail` the long form where there is one (a status line, a tooltip). `step`: the
    step running (a pass name, "code generation", "MetaSchedule tuning"; None outside steps),
    what a panel keys the step's last duration by. `cancellable`: a cancel now stops the job
    within a fraction of a second (the step polls it); otherwise the step runs on until
    `stops_after` ("the measuring round in progress"), or to its end when that is empty.
    """

    fraction: float
    message: str
    step: str | None = None
    cancellable: bool = True
    stops_after: str = ""
    detail: str = ""

    def within(self, start: float, end: float, prefix: str = "") -> "Progress":
        """This report as part of a bigger job that gives it `start`..`end` of its bar, the
        message (and detail) headed by `prefix` ("compile: ")."""
        frac = start + (end - start) * min(max(float(self.fraction), 0.0), 1.0)
        return replace(self, fraction=frac, message=prefix + self.message, detail=prefix + self.detail if self.detail else "")


ProgressCallback = Callable[[Progress], None]
