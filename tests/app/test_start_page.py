"""The start page (no model open: first start, File ▸ Close, a failed open) and the Help entries
added beside the documentation: Keyboard Shortcuts, the guided tour of the MLC levels, About."""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, QUrl
from PySide6.QtGui import QTextCursor, QTextDocument

from app.start_page import PANEL_LINES, SAMPLE_LINES, samples
from tests.conftest import SAMPLE_MODELS, sample


def _click_link(qtbot, browser, text: str) -> None:
    """Click on `text` in a QTextBrowser the way a user does (the mouse on the link)."""
    cursor = browser.document().find(text, 0, QTextDocument.FindCaseSensitively)
    assert not cursor.isNull(), text
    mid = QTextCursor(cursor)
    mid.setPosition((cursor.selectionStart() + cursor.selectionEnd()) // 2)
    browser.setTextCursor(mid)
    browser.ensureCursorVisible()
    rect = browser.cursorRect(mid)
    point = QPoint(rect.center().x(), rect.center().y())
    assert browser.anchorAt(point), f"no link under {text!r}"
    qtbot.mouseClick(browser.viewport(), Qt.LeftButton, pos=point)


def test_shown_without_a_model_with_samples_panels_and_recent_files(window):
    page = window.start_page
    assert window.document.graph is None and page.isVisible()
    assert page.geometry() == window.canvas.geometry()  # over the canvas, the same size
    text = page.toPlainText()
    assert {p.name for p in samples()} == set(SAMPLE_MODELS)
    for path in samples():
        assert path.name in text and SAMPLE_LINES[path.stem][:40] in text
    for key, name, _line in PANEL_LINES:
        assert key in window.panels and name in text
    assert "None yet" in text  # recent files: none in a fresh settings file


def test_clicking_a_sample_opens_it_and_the_page_goes(window, qtbot):
    _click_link(qtbot, window.start_page, "mm_relu.onnx")
    qtbot.waitUntil(lambda: window.document.graph is not None and not window.canvas.busy, timeout=20000)
    assert window.document.path.name == "mm_relu.onnx"
    assert not window.start_page.isVisible()


def test_file_close_brings_it_back_with_the_recent_file(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    assert not window.start_page.isVisible()
    close = next(a for a in window.file_menu.actions() if a.text() == "&Close")
    close.trigger()
    assert window.document.graph is None and window.start_page.isVisible()
    assert window.canvas.view is None
    text = window.start_page.toPlainText()
    assert "Recent files" in text and "None yet" not in text
    window.start_page.follow(QUrl("recent:0"))
    qtbot.waitUntil(lambda: window.document.graph is not None and not window.canvas.busy, timeout=20000)
    assert window.document.path.name == "mlp.onnx"


def test_a_panel_link_brings_the_panel_forward(window, qtbot):
    dock = window.panels["schedule"]
    dock.hide()
    _click_link(qtbot, window.start_page, "Schedule")
    assert dock.isVisible()
    assert "Schedule" in window.statusBar().currentMessage()


def test_a_failed_open_is_said_on_the_page(window, tmp_path, messages):
    good = sample("small_cnn").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(good[: len(good) // 2])
    assert not window.open_model(str(tmp_path / "cut.onnx"), wait=True)
    assert window.start_page.isVisible()
    assert "Could not open cut.onnx" in window.start_page.toPlainText()


def test_help_start_page_over_an_open_model_and_escape_goes_back(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    entry = next(a for a in window.help_menu.actions() if a.text() == "&Start Page")
    entry.trigger()
    assert window.start_page.isVisible() and "Back to the graph" in window.start_page.toPlainText()
    qtbot.keyClick(window.start_page, Qt.Key_Escape)
    assert not window.start_page.isVisible() and window.document.graph is not None


def test_shortcuts_dialog_reads_the_actions(window):
    from app.help_dialogs import shortcut_rows, show_shortcuts

    rows = shortcut_rows(window)
    by_command = {command: keys for keys, command, _where in rows}
    assert by_command["Undo"] == "Ctrl+Z"
    assert by_command["Open"] == "Ctrl+O" and by_command["Fit Graph"] == "Ctrl+0"
    assert by_command["Export Image"] == "Ctrl+Shift+E"
    # panels' own QShortcuts, named by the button that gives the key in its tooltip
    assert any(keys == "Ctrl+L" for keys, _c, where in rows if where.startswith("Lowering"))
    # every action with a shortcut is listed (nothing hand-written)
    from PySide6.QtGui import QAction

    listed = {k for keys, _c, _w in rows for k in keys.split(", ")}
    for act in window.findChildren(QAction):
        if not act.shortcut().isEmpty() and act.menu() is None:
            assert act.shortcut().toString() in listed, act.text()
    dialog = show_shortcuts(window)
    assert dialog.isVisible() and dialog.table.rowCount() == len(rows)
    dialog.filter.setText("ctrl+z")
    shown = [r for r in range(dialog.table.rowCount()) if not dialog.table.isRowHidden(r)]
    assert shown and all("Ctrl+Z" in dialog.table.item(r, 0).text() for r in shown)
    dialog.close()


def test_about_names_the_versions(window):
    import numpy
    import onnx
    import onnxruntime
    import tvm

    from app.help_dialogs import AboutDialog, show_about

    entry = next(a for a in window.help_menu.actions() if a.text() == "&About MLC Workbench")
    assert entry is window.help_menu.actions()[-1]
    entry.trigger()
    dialog = next(w for w in window.findChildren(AboutDialog) if w.isVisible())
    text = dialog.label.text()
    for version in (tvm.__version__, onnx.__version__, onnxruntime.__version__, numpy.__version__, "0.1.0"):
        assert version in text
    assert f"TVM {tvm.__version__}" in dialog.plain_text()
    assert show_about(window) is dialog  # asked again: the same window, brought forward
    dialog.close()


def test_the_tour_opens_the_sample_lowers_it_and_shows_a_level(window, qtbot):
    from app.help_dialogs import TOUR, show_tour

    tour = show_tour(window)
    text = tour.text.toPlainText()
    for level, _sentence, _panels, _stage in TOUR:
        assert level in text
    assert not tour.show_level(1) and "Open a model first" in tour.note.text()
    tour.open_sample.click()
    qtbot.waitUntil(lambda: window.document.graph is not None, timeout=20000)
    lowering = window.panels["lowering"].widget()
    qtbot.waitUntil(lambda: len(lowering.stages) > 5 and not lowering.running, timeout=120000)
    assert window.document.path.name == "mlp.onnx"
    assert tour.show_level(5)  # scheduled TIR
    assert lowering.stages[lowering.stage_tree.currentItem().data(0, Qt.UserRole)].name == "ScheduleTIR"
    assert tour.show_level(len(TOUR) - 1)
    assert lowering.stages[lowering.stage_tree.currentItem().data(0, Qt.UserRole)].level == "target code"
    tour.close()
