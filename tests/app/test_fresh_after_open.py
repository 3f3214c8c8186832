"""Opening another model leaves nothing of the last one's state in the panels (issue 41 item 7):
the Compile & Run bar's "exported", the rule selected in Rewrites with its outlines (drawn over the
heat map), and a dims refusal in red that stayed after the field was put right."""
from __future__ import annotations

from tests.conftest import sample


def test_dims_refusal_goes_when_the_field_is_put_right(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = window.panels["compile"].widget()
    before = panel.status.text()
    panel.dims.setText("batch=x")
    panel.start()
    assert "batch" in panel.status.text() and "d62728" in panel.status.styleSheet() and panel.job is None
    panel.dims.setText("batch=")  # still wrong: the refusal stays
    assert "d62728" in panel.status.styleSheet()
    panel.dims.setText("batch=2")
    assert panel.status.text() == before and "d62728" not in panel.status.styleSheet()


def test_another_model_starts_fresh_in_compile_rewrites_and_lowering(window, qtbot, tmp_path):
    assert window.open_model(str(sample("mlp")), wait=True)
    compile_panel = window.panels["compile"].widget()
    rewrites = window.panels["rewrites"].widget()
    lowering = window.lowering_panel
    assert not compile_panel.progress.isVisible()  # idle: no empty bar that reads as a text field
    assert rewrites.wait_idle(60)
    rewrites.select_rule("fuse-matmul-add")
    assert "rewrite-match" in window.canvas.highlights and rewrites.match_list.count() == 3
    compile_panel.dims.setText("batch=x")
    compile_panel.start()  # refused in red
    compile_panel.dims.setText("batch=2")
    compile_panel.runs.setValue(1)
    compile_panel.vs_ort.setChecked(False)
    compile_panel.start()
    assert compile_panel.progress.isVisible()
    qtbot.waitUntil(lambda: compile_panel.result is not None and not compile_panel._busy_now, timeout=120_000)
    assert window.canvas.has_overlay
    compile_panel.export_to(str(tmp_path / "art"))
    qtbot.waitUntil(lambda: compile_panel.progress.format() == "exported" and not compile_panel._busy_now, timeout=60_000)
    lowering.start()
    qtbot.waitUntil(lambda: not lowering.running, timeout=120_000)
    assert lowering.stages

    assert window.open_model(str(sample("small_cnn")), wait=True)
    assert rewrites.wait_idle(60)
    qtbot.wait(50)
    # Compile & Run: no bar, default line in black, no results, no heat
    assert not compile_panel.progress.isVisible() and compile_panel.progress.format() == "" and compile_panel.progress.value() == 0
    assert compile_panel.status.text().startswith("Compile the open model") and "d62728" not in compile_panel.status.styleSheet()
    assert compile_panel.table.rowCount() == 0 and not window.canvas.has_overlay and not compile_panel.export_btn.isEnabled()
    # Rewrites: no rule selected, no outlines, no matches listed, no explanation of the old model
    assert rewrites.current_rule() is None and not rewrites.rule_list.selectedItems()
    assert "rewrite-match" not in window.canvas.highlights and rewrites.match_list.count() == 0
    assert rewrites.result.toPlainText() == ""
    # Lowering: no stages, no bar, the first line again
    assert lowering.stage_tree.topLevelItemCount() == 0 and not lowering.progress.isVisible()
    assert lowering.status.text().startswith("Press Lower")
    # the status bar's own bar is shown only while a model opens
    assert not window.progress.isVisible()
