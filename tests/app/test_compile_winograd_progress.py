"""The Tune box during tuning's "Winograd choice" step (core.compiler.tuning.winograd_choice): the bar and
the status line say which conv of how many is being measured, and Cancel stops the step after
that conv, as the other tuning steps stop after their measuring round.

The compile is the real one (import, passes, the Winograd choice's search for convs to decide);
only measuring a conv (`_tune_one`: three builds and runs, 10-20 s) is replaced by one that takes
until Cancel, and the builder/runner processes it would start by in-process ones."""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.core.compiler.tuning.test_tuning_confirm import _Builder, _Runner
from tests.core.compiler.passes.layout.test_winograd import _model, _weight


def two_convs(path) -> str:
    """Two 3x3 stride-1 convs of different workloads (16 -> 32 -> 32 channels at 14x14), each with
    a choice to make: the Winograd choice measures them one after the other."""
    rng = np.random.default_rng(5)
    inits = [_weight(rng, "w1", (32, 16, 3, 3)), _weight(rng, "w2", (32, 32, 3, 3))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["y"], name="relu2")]
    onnx.save(_model(nodes, inits, [1, 16, 14, 14], [1, 32, 14, 14]), str(path))
    return str(path)


@pytest.mark.isa
def test_the_winograd_choice_reports_each_conv_and_cancel_stops_after_it(window, qtbot, monkeypatch, tmp_path):
    from core.compiler.tuning import runners as tuning_runners, winograd_choice

    measured = []

    def measure_until_cancel(call, target, builder, runner, confirm_runner, cancel=None):
        measured.append(winograd_choice.conv_key(call))
        while not cancel():
            time.sleep(0.02)
        return None

    monkeypatch.setattr(winograd_choice, "_tune_one", measure_until_cancel)
    monkeypatch.setattr(tuning_runners, "local_builder", lambda *a, **k: _Builder())
    monkeypatch.setattr(tuning_runners, "local_runner", lambda threads=None: _Runner(lambda position: 1e-3))
    assert window.open_model(two_convs(tmp_path / "two_convs.onnx"), wait=True)
    panel = window.panels["compile"].widget()
    panel.tune.setChecked(True)
    panel.tune_minutes.setValue(2)
    panel.set_tune_db(str(tmp_path / "db"))
    panel.start()
    qtbot.waitUntil(lambda: "Winograd choice: conv 1 of " in panel.progress.toolTip() and bool(measured), timeout=60_000)
    total = int(panel.progress.toolTip().split("conv 1 of ")[1].split(":")[0])
    assert total >= 2 and measured and panel.progress.toolTip().endswith(measured[0])
    assert panel.progress.format().endswith(f"1 of {total}")  # the bar: which of how many (elided to its width)
    # the choice's part of the bar, before the kernels' tuning: compile's 5-15 % (the compile is 70 % of the bar)
    assert int(0.7 * 0.05 * 1000) <= panel.progress.value() < int(0.7 * 0.15 * 1000)
    assert panel.status.text().startswith(f"Tuning (budget 2 min): Winograd choice: conv 1 of {total}: conv2d ")
    assert "Cancel stops it after the conv being measured." in panel.status.text()
    panel.cancel()
    assert panel.status.text() == "Cancelling: Winograd choice stops after the conv being measured…"
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert panel.progress.format() == "cancelled" and panel.result is None
    assert len(measured) == 1  # no conv after the cancelled one
    assert "stay in the database" in panel.status.text()
