"""Docks keep the size the window gave them whatever their content does (issue 41 item 6): the
Lowering dock once grew to 40 % of the window on the first run (the canvas shrank to ~430 px) with
its stage list two rows high before it; the Rewrites dock widened itself when a preview was shown."""
from __future__ import annotations

from tests.conftest import sample


def _settle(window, qtbot) -> None:
    qtbot.wait(100)
    window._default_dock_sizes()
    qtbot.wait(100)


def test_lowering_dock_keeps_its_height_and_shows_four_stages(window, qtbot):
    window.resize(1470, 920)
    assert window.open_model(str(sample("small_cnn")), wait=True)
    dock = window.panels["lowering"]
    dock.raise_()
    _settle(window, qtbot)
    panel = window.lowering_panel
    height, canvas = dock.height(), window.canvas.height()
    rows = panel.stage_tree.fontMetrics().height() * 4
    assert panel.stage_tree.viewport().height() >= rows  # before the first run
    panel.start()
    qtbot.waitUntil(lambda: not panel.running, timeout=120_000)
    fuse = next(s for s in panel.stages if s.name.startswith("FuseOps"))
    panel.select_stage(fuse.index)
    qtbot.waitUntil(lambda: window.canvas.mode == "view" and not window.canvas.busy, timeout=60_000)
    qtbot.wait(100)
    assert dock.height() == height and window.canvas.height() == canvas
    assert panel.stage_tree.viewport().height() >= rows
    # a long line (an error) is cut at the panel's width, whole in its tooltip, and asks for no room
    panel.status.setText("Lowering failed: " + "a very long reason " * 40)
    panel.origin_label.setText("From ONNX: " + ", ".join(f"node{i} (Conv)" for i in range(40)))
    qtbot.wait(100)
    assert dock.height() == height and panel.status.toolTip().startswith("Lowering failed")


def test_rewrites_dock_keeps_its_width_on_preview(window, qtbot):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    _settle(window, qtbot)
    dock = window.panels["rewrites"]
    panel = dock.widget()
    assert panel.wait_idle(60)
    width = dock.width()
    panel.select_rule("fold-conv-bn")
    panel.match_list.setCurrentRow(0)
    panel.start_preview()
    assert panel.wait_idle(60)
    qtbot.waitUntil(lambda: window.canvas.mode == "view" and not window.canvas.busy, timeout=60_000)
    qtbot.wait(100)
    assert panel.preview is not None and panel.close_button.isVisible()
    assert dock.width() == width
    # every match is listed whole in its tooltip, the list never scrolls sideways
    item = panel.match_list.item(0)
    assert item.toolTip() == item.text() and panel.match_list.horizontalScrollBar().maximum() == 0
