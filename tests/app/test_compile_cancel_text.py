"""Cancel in Compile & Run says what it waits for: nothing in the steps that poll it, otherwise
the TVM pass running now, which cannot be interrupted, with the time it has left."""
from __future__ import annotations

import time


def test_cancel_says_what_it_waits_for(window):
    panel = window.panels["compile"].widget()
    panel._step_seconds = {"LegalizeOps": 2.0}
    panel._compile_progress(0.2, "compile: LegalizeOps")
    panel._step_started = time.perf_counter() - 0.5
    text = panel.cancel_text()
    assert text.startswith("Cancelling: LegalizeOps is one TVM pass and cannot be interrupted; it ends in about 1.")
    assert "it took 2.0 s last time" in text
    panel._compile_progress(0.3, "compile: FuseOps")  # never timed: no estimate, still said
    assert panel.cancel_text() == "Cancelling: FuseOps is one TVM pass and cannot be interrupted; the compile stops when it ends…"
    for step in ("compile: code generation", "compile: ScheduleTIR", "compile: check against onnxruntime", "measure: latency"):
        panel._compile_progress(0.6, step)
        assert panel.cancel_text() == "Cancelling…"
