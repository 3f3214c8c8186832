"""Opening another model while a panel is in any state: no unexpected error, nothing of the old
model left behind.

Each case puts one panel in a state (lowering running or done, compile running or done, rewrite
preview shown, tuning running), opens another model through the same path File > Open takes,
lets every job end, and checks that the application's exception hook (app.crash) never fired and
that the panel shows nothing of the model that was replaced. Long compiles are faked the way
tests/app/test_compile_panel.py does (a compile_model that runs until cancelled).
"""
from __future__ import annotations

import time

import pytest

from app import crash
from app.workers import _RUNNING
from tests.conftest import sample

LONG = 120_000


@pytest.fixture
def reports(monkeypatch, tmp_path):
    """Every report the crash hook would have shown as the 'Unexpected error' dialog."""
    monkeypatch.setenv("MLCWB_AUTOSAVE_DIR", str(tmp_path / "autosave"))
    seen: list[str] = []
    monkeypatch.setattr(crash, "_show", lambda summary, report: seen.append(report))
    crash.install()
    yield seen
    crash.uninstall()


def _endless_compile(monkeypatch, started: list):
    """compile_model replaced by one that reports progress (tuning's wording when asked to tune)
    and runs until it is cancelled."""
    import core.compiler.compile as core_compile

    from core.progress import Progress

    def fake(model, target, **kwargs):
        started.append(kwargs)
        progress, cancel = kwargs["progress"], kwargs["cancel"]
        tuning = bool(kwargs.get("tune_budget_s"))
        n = 0
        while not cancel():
            n += 1
            if tuning:
                progress(Progress(0.3, f"tuning fused_conv2d: {n} trials", step="MetaSchedule tuning", cancellable=False,
                                  stops_after="the measuring round in progress"))
            else:
                progress(Progress(0.3, "build", step="build"))
            time.sleep(0.02)
        raise core_compile.CompileCancelled("compile cancelled.")

    monkeypatch.setattr(core_compile, "compile_model", fake)


_EARLIER: set = set()  # jobs of earlier tests still winding down: not this test's to wait for


def _settle(window, qtbot) -> None:
    """Wait until every job of this test (old model's and new model's) has ended and the canvas is idle."""
    mine = lambda: [j for j in list(_RUNNING) if j not in _EARLIER]  # noqa: E731
    try:
        qtbot.waitUntil(lambda: not mine() and not window.canvas.busy, timeout=LONG)
    except Exception:
        raise AssertionError(f"still running: {[j.title for j in mine()]}, canvas busy {window.canvas.busy}") from None
    qtbot.wait(50)  # queued results of the last jobs
    assert window.panels["rewrites"].widget().wait_idle(60)


def _switch(window, qtbot, model: str) -> None:
    assert window.open_model(str(sample(model)), wait=True)
    assert str(window.document.path).endswith(f"{model}.onnx")
    _settle(window, qtbot)


def _lowering_running(window, qtbot, monkeypatch):
    panel = window.lowering_panel
    panel.start()
    assert panel.running
    qtbot.waitUntil(lambda: panel.progress.value() > 0, timeout=LONG)


def _lowering_done(window, qtbot, monkeypatch):
    panel = window.lowering_panel
    panel.start()
    qtbot.waitUntil(lambda: not panel.running, timeout=LONG)
    assert panel.stages
    fuse = next(s for s in panel.stages if s.name.startswith("FuseOps"))
    panel.select_stage(fuse.index)  # a stage drawn on the canvas, its IR shown
    qtbot.waitUntil(lambda: window.canvas.mode == "view" and not window.canvas.busy, timeout=LONG)


def _compile_running(window, qtbot, monkeypatch):
    started: list = []
    _endless_compile(monkeypatch, started)
    panel = window.panels["compile"].widget()
    panel.start()
    qtbot.waitUntil(lambda: bool(started) and panel.progress.value() > 0, timeout=LONG)


def _compile_done(window, qtbot, monkeypatch):
    panel = window.panels["compile"].widget()
    panel.runs.setValue(2)
    panel.start()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=LONG)
    assert window.canvas._overlay is not None  # the heat map of the compiled model


def _preview_shown(window, qtbot, monkeypatch):
    panel = window.panels["rewrites"].widget()
    assert panel.wait_idle(60)
    panel.select_rule("fold-conv-bn")
    panel.start_preview()
    assert panel.wait_idle(60)
    assert panel.preview is not None
    qtbot.waitUntil(lambda: window.canvas.mode == "view" and bool(window.canvas._ghosts[0]), timeout=LONG)


def _tuning_running(window, qtbot, monkeypatch):
    started: list = []
    _endless_compile(monkeypatch, started)
    panel = window.panels["compile"].widget()
    panel.tune.setChecked(True)
    panel.start()
    qtbot.waitUntil(lambda: bool(started) and "trials" in panel.progress.toolTip(), timeout=LONG)


STATES = {
    "lowering running": _lowering_running,
    "lowering done": _lowering_done,
    "compile running": _compile_running,
    "compile done": _compile_done,
    "rewrite preview shown": _preview_shown,
    "tuning running": _tuning_running,
}


@pytest.mark.qt_no_exception_capture
@pytest.mark.parametrize("state", list(STATES))
def test_opening_another_model_in_every_panel_state(state, reports, window, qtbot, monkeypatch):
    _EARLIER.clear()
    _EARLIER.update(_RUNNING)
    assert window.open_model(str(sample("small_cnn")), wait=True)
    STATES[state](window, qtbot, monkeypatch)
    _switch(window, qtbot, "mlp")
    assert reports == [], reports[0] if reports else ""

    # nothing of small_cnn is left: no stages, no results, no heat, no ghosts; the ONNX graph shown
    lowering = window.lowering_panel
    assert lowering.stages == [] and lowering.stage_tree.topLevelItemCount() == 0 and lowering.current is None
    assert lowering.lower_button.isEnabled()
    compile_panel = window.panels["compile"].widget()
    assert compile_panel.result is None and compile_panel.artifact is None and compile_panel.table.rowCount() == 0
    assert compile_panel.compile_btn.isEnabled() and not compile_panel.cancel_btn.isEnabled()
    rewrites = window.panels["rewrites"].widget()
    assert rewrites.preview is None
    canvas = window.canvas
    assert canvas.mode == "model" and canvas._overlay is None and canvas._ghosts == (set(), set())
    mlp_ids = {n.id for n in window.document.graph.nodes}
    assert {k for k in canvas.layout_result.boxes if isinstance(k, int)} == mlp_ids

    # and the new model works in every panel: lower it and switch back once more
    lowering.start()
    qtbot.waitUntil(lambda: not lowering.running, timeout=LONG)
    assert lowering.stages and "stages" in lowering.status.text()
    _switch(window, qtbot, "small_cnn")
    assert reports == [], reports[0] if reports else ""
    assert lowering.stages == [] and window.canvas.mode == "model"
