"""First start: the canvas gets the larger part of the window; View lists the key and every dock."""
from __future__ import annotations

from PySide6.QtWidgets import QDockWidget


def test_view_menu_has_colour_key_and_dock_toggles(window, qtbot):
    texts = [a.text() for a in window.view_menu.actions()]
    assert "Colour &Key" in texts
    assert not window.canvas.key.isVisible()
    window.key_action.setChecked(True)
    assert window.canvas.key.isVisible()
    window.key_action.setChecked(False)
    assert not window.canvas.key.isVisible()
    toggles = {a.text() for a in window.panels_menu.actions()}
    assert {d.windowTitle() for d in window.findChildren(QDockWidget)} <= toggles


def test_default_dock_sizes_leave_the_canvas_most_of_the_window(window, qtbot):
    window.resize(1470, 920)
    qtbot.wait(50)
    window._default_dock_sizes()
    qtbot.wait(50)
    canvas = window.canvas.geometry()
    assert canvas.height() > 0.66 * window.height()
    assert canvas.width() > 0.55 * window.width()
    left = [d for d in window.findChildren(QDockWidget) if d.windowTitle() == "Rewrites"]
    assert left and left[0].width() < 0.25 * window.width()
