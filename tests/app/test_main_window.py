"""The GUI opens a model and shows a message (keeping the window) for a bad one."""
from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from app.main_window import MainWindow
from tests.conftest import sample


def test_open_sample_model(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    assert w.open_model(str(sample("small_cnn")))
    assert "small_cnn.onnx" in w.windowTitle()


def test_bad_model_shows_a_message(qtbot, tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: shown.append(a[2]))
    w = MainWindow()
    qtbot.addWidget(w)
    assert w.open_model(str(sample("mlp")))
    bad = tmp_path / "bad.onnx"
    bad.write_text("nope")
    assert not w.open_model(str(bad))
    assert shown and str(bad) in shown[0]
    assert w.graph is not None and w.graph.path.name == "mlp.onnx"
