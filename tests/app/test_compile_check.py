"""Compile & Run's check settings (app.dialogs.check): the GUI's --verify-inputs / --rtol / --atol,
one sentence for a bad .npz or number, per model, and a refusal's suggested atol offered to the user."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt

from app.dialogs.check import CheckChoice
from core.compiler.check.reference import ATOL, RTOL
from core.model.edits import RenameNode
from tests.conftest import sample
from tests.core.compiler.check.test_verification_verdict import (  # noqa: F401 - a fixture
    _large_values_model,
    shifted_relu,
)


def _panel(window):
    return window.panels["compile"].widget()


def _one_sentence(text: str) -> bool:
    return bool(text) and "\n" not in text and text.endswith(".") and text.count(". ") == 0


def test_the_dialog_refuses_a_bad_npz_in_one_sentence_and_the_choice_is_per_model(window, qtbot, tmp_path):
    assert window.open_model(str(sample("mlp")), wait=True)  # input 'input': float32 [batch, 784]
    panel = _panel(window)
    assert panel.check_label.text() == "check: random, default tolerances"
    dialog = panel.check_dialog()
    assert dialog.random.isChecked() and dialog.rtol.text() == f"{RTOL:g}" and dialog.atol.text() == f"{ATOL:g}"
    dialog.rtol.setText("2e-3")
    bad = {
        "name.npz": ({"x": np.zeros((1, 784), np.float32)}, "name.npz has an array 'x', which is not an input of the model (its inputs: input)."),
        "shape.npz": ({"input": np.zeros((2, 100), np.float32)}, "shape.npz: input 'input' has shape [2, 100], the model takes [batch, 784]."),
        "dtype.npz": ({"input": np.zeros((2, 784))}, "dtype.npz: input 'input' is float64, the model takes float32."),
        "none.npz": ({}, "none.npz lacks the model input 'input' (give all of input)."),
    }
    for name, (arrays, sentence) in bad.items():
        np.savez(tmp_path / name, **arrays)
        assert not dialog.set_file(str(tmp_path / name))
        assert dialog.error.text() == sentence and _one_sentence(sentence)
    np.save(tmp_path / "one.npy", np.zeros((1, 784), np.float32))
    (tmp_path / "junk.npz").write_text("not an archive")
    for name in ("one.npy", "junk.npz"):
        assert not dialog.set_file(str(tmp_path / name))
        assert dialog.error.text().startswith(name) and "\n" not in dialog.error.text()
    # nothing the user set is lost: still random inputs, the rtol as typed, the dialog open
    assert dialog.random.isChecked() and dialog.rtol.text() == "2e-3" and dialog.isVisible()
    good = tmp_path / "good.npz"
    np.savez(good, input=np.ones((3, 784), np.float32))  # the named dim takes any size
    assert dialog.set_file(str(good)) and dialog.from_file.isChecked() and dialog.error.text() == ""
    dialog.atol.setText("lots")
    dialog.ok_button.click()
    assert dialog.error.text() == "atol must be a number of at least 0, not 'lots'." and dialog.isVisible()
    dialog.atol.setText("0.01")
    dialog.ok_button.click()
    assert not dialog.isVisible()
    assert panel.check.inputs_path == str(good) and panel.check.rtol == 2e-3 and panel.check.atol == 0.01
    assert panel.check_label.text() == "check: good.npz, rtol 0.002, atol 0.01"
    assert str(good) in panel.check_label.toolTip()
    options = panel.check.compile_options()
    assert set(options) == {"verify_inputs", "rtol", "atol"} and options["verify_inputs"]["input"].shape == (3, 784)
    # reopened, the dialog shows the choice; Cancel keeps it
    again = panel.check_dialog()
    assert again.from_file.isChecked() and again.atol.text() == "0.01"
    again.reject()
    assert panel.check.atol == 0.01
    # another model: the check starts from the defaults again, and a dialog left open for the old one sets nothing
    stale = panel.check_dialog()
    assert window.open_model(str(sample("small_cnn")), wait=True)
    assert panel.check == CheckChoice() and panel.check.inputs is None
    assert panel.check_label.text() == "check: random, default tolerances"
    stale.ok_button.click()
    assert panel.check == CheckChoice()


def _wait_done(panel, qtbot) -> None:
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=120_000)


def test_the_check_reaches_compile_and_the_refusals_atol_is_offered(window, qtbot, tmp_path, shifted_relu):  # noqa: F811
    path = tmp_path / "large.onnx"
    _large_values_model(path)
    assert window.open_model(str(path), wait=True)
    panel = _panel(window)
    panel.runs.setValue(1)
    panel.vs_ort.setChecked(False)
    g = window.document.graph
    window.document.push(RenameNode(g, g.find_node("scale").id, "scale_edited"))
    panel.start()
    _wait_done(panel, qtbot)
    text = panel.status.text()
    assert panel.result is None and "Relu node 'scores'" in text and "TVM's conversion" not in text
    # the refusal's advice, in this panel's words: no CLI flag the GUI user cannot type
    assert "--" not in text and "Check…: inputs from an .npz file" in text
    atol = float(text.split(" with atol ")[1].split()[0])
    assert text.endswith(f"with atol {atol:g} (Check… or Accept).")
    assert panel.suggested_atol == atol and atol > ATOL
    assert panel.accept_btn.isVisible() and panel.accept_btn.text() == f"Accept atol {atol:g} and compile"
    # nothing loosened by itself, and the unsaved edit is still there
    assert panel.check == CheckChoice() and panel.check_label.text() == "check: random, default tolerances"
    assert window.document.is_dirty and window.document.graph.find_node("scale_edited") is not None
    # the user accepts: this model's check takes that atol, and the same model compiles
    qtbot.mouseClick(panel.accept_btn, Qt.LeftButton)
    assert not panel.accept_btn.isVisible()
    _wait_done(panel, qtbot)
    assert panel.progress.format() == "done", panel.status.text()
    v = panel.artifact.manifest.verification
    assert v.atol == atol and v.rtol == RTOL and v.inputs == "seeded random"
    assert panel.check_label.text() == f"check: random, atol {atol:g}"
    # the user's inputs with the default tolerances: refused on those inputs, the dialog pre-fills the new atol
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16))
    dialog = panel.check_dialog()
    dialog.restore_defaults()
    assert dialog.set_file(str(inputs))
    dialog.ok_button.click()
    assert panel.check_label.text() == "check: in.npz, default tolerances"
    panel.start()
    _wait_done(panel, qtbot)
    text = panel.status.text()
    assert panel.progress.format() == "failed" and "the given check inputs" in text and "--" not in text, text
    suggested = panel.suggested_atol
    assert suggested is not None and suggested != atol and f"with atol {suggested:g} (Check… or Accept) if " in text
    dialog = panel.check_dialog()
    assert dialog.atol.text() == f"{suggested:g}" and dialog.note.isVisibleTo(dialog) and dialog.from_file.isChecked()
    dialog.ok_button.click()
    panel.start()
    _wait_done(panel, qtbot)
    assert panel.progress.format() == "done", panel.status.text()
    v = panel.artifact.manifest.verification
    assert v.inputs == "user-supplied" and v.atol == suggested


def test_the_panel_fits_a_1280_px_window(window):
    """Its two rows of controls, the check's included, fit beside nothing else at 1280 px."""
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    assert window.minimumSizeHint().width() <= 1280, panel.minimumSizeHint().width()
    long_name = "x" * 60 + ".npz"
    panel.set_check(CheckChoice(long_name, {}, rtol=0.0025, atol=0.00125))
    assert panel.check_label.text() != panel.check.summary() and "…" in panel.check_label.text()  # elided, whole in the tooltip
    assert long_name in panel.check_label.toolTip()
    assert window.minimumSizeHint().width() <= 1280, panel.minimumSizeHint().width()
