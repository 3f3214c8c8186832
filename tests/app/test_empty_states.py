"""Empty and failed states say what happened and what to do: the canvas after a failed open, the
Compile & Run button with no model, the Matches column when a count cannot finish."""
from __future__ import annotations

from tests.conftest import sample


def test_failed_open_leaves_a_hint_on_the_canvas(window, messages, tmp_path):
    canvas = window.canvas
    assert window.document.graph is None and "No model open" in canvas.empty_message
    rules = window.panels["rewrites"].widget().rule_list
    assert {rules.topLevelItem(i).text(1) for i in range(rules.topLevelItemCount())} == {"–"}  # no "…" with nothing to count
    good = sample("small_cnn").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(good[: len(good) // 2])
    assert not window.open_model(str(tmp_path / "cut.onnx"), wait=True)
    assert messages and "is cut short" in messages[-1]
    assert "Could not open cut.onnx" in canvas.empty_message and "cut short" in canvas.empty_message
    img = canvas.viewport().grab().toImage()  # the message is painted, not only stored
    colours = {img.pixel(x, y) for x in range(0, img.width(), 2) for y in range(0, img.height(), 2)}
    assert len(colours) > 2
    assert window.open_model(str(sample("mlp")), wait=True)
    assert "No model open" in canvas.empty_message  # back to the default for the next empty canvas


def test_compile_and_run_is_off_with_a_reason_without_a_model(window):
    panel = window.panels["compile"].widget()
    assert not panel.compile_btn.isEnabled() and "Open a model first" in panel.compile_btn.toolTip()
    assert window.open_model(str(sample("mlp")), wait=True)
    assert panel.compile_btn.isEnabled() and "F5" in panel.compile_btn.toolTip()


def test_matches_never_stay_at_the_ellipsis(window, monkeypatch):
    import app.panels.rewrites as rewrites_panel

    def broken(*_a, **_k):
        raise RuntimeError("matcher broke")

    monkeypatch.setattr(rewrites_panel, "find_matches", broken)
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = window.panels["rewrites"].widget()
    assert panel.wait_idle(30)
    counts = {panel.rule_list.topLevelItem(i).text(1) for i in range(panel.rule_list.topLevelItemCount())}
    assert counts == {"–"} and "failed" in panel.last_result
