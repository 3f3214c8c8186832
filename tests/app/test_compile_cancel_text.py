"""Cancel in Compile & Run says what it waits for, read from the progress event's flags (never its
text): nothing in a step that polls cancel, the round in progress in a step that stops in rounds,
otherwise the TVM pass running now, which cannot be interrupted, with the time it has left."""
from __future__ import annotations

import time

from core.progress import Progress


def test_cancel_says_what_it_waits_for(window):
    panel = window.panels["compile"].widget()
    panel._step_seconds = {"LegalizeOps": 2.0}
    panel._compile_progress(Progress(0.2, "compile: LegalizeOps", step="LegalizeOps", cancellable=False))
    panel._step_started = time.perf_counter() - 0.5
    text = panel.cancel_text()
    assert text.startswith("Cancelling: LegalizeOps is one TVM pass and cannot be interrupted; it ends in about 1.")
    assert "it took 2.0 s last time" in text
    panel._compile_progress(Progress(0.3, "compile: FuseOps", step="FuseOps", cancellable=False))  # never timed: no estimate, still said
    assert panel.cancel_text() == "Cancelling: FuseOps is one TVM pass and cannot be interrupted; the compile stops when it ends…"
    for step in ("code generation", "ScheduleTIR", "check against onnxruntime", "measure"):
        panel._compile_progress(Progress(0.6, step, step=step, cancellable=True))
        assert panel.cancel_text() == "Cancelling…"
    panel._compile_progress(Progress(0.3, "tuning K: 16 trials", step="MetaSchedule tuning", cancellable=False,
                                     stops_after="the measuring round in progress"))
    assert panel.cancel_text() == "Cancelling: MetaSchedule tuning stops after the measuring round in progress…"


def test_cancel_follows_the_events_flag_not_the_step_name(window):
    """The same step name reads both ways: what decides is `cancellable` (a pass list whose
    scheduling step runs to its end, or a renamed step that polls cancel). Cancel's tooltip
    follows the flag too."""
    panel = window.panels["compile"].widget()
    panel._step_seconds = {}
    panel._compile_progress(Progress(0.4, "compile: ScheduleTIR", step="ScheduleTIR", cancellable=False))
    assert panel.cancel_text().startswith("Cancelling: ScheduleTIR is one TVM pass and cannot be interrupted")
    assert panel.cancel_btn.toolTip() == "ScheduleTIR cannot be interrupted: Cancel stops the job when it ends."
    panel._compile_progress(Progress(0.4, "compile: MySchedule", step="MySchedule", cancellable=True))
    assert panel.cancel_text() == "Cancelling…"
    assert panel.cancel_btn.toolTip() == "Cancel stops the job at once."
    panel._compile_progress(Progress(0.1, "Winograd conv 1 of 2", step="Winograd choice", cancellable=False,
                                     stops_after="the conv being measured"))
    assert panel.cancel_btn.toolTip() == "Cancel stops the job after the conv being measured."
