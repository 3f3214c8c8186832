"""Open Compiled Artifact in the Compile & Run panel: a bad folder is refused in one sentence,
the confirmation defaults to Cancel and nothing is loaded unless "Load and Run" is pressed, and
a loaded artifact's latency lands in the results table."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from tests.conftest import sample


@pytest.fixture(scope="module")
def artifact_folder(tmp_path_factory):
    from core.compiler.compile import compile_model

    folder = tmp_path_factory.mktemp("artifact") / "mlp"
    compile_model(str(sample("mlp")), "cpu").export(folder)
    return folder


def _answer(button_text: str, seen: list):
    """Press `button_text` on the modal confirmation once it is up (the real dialog, run modally)."""

    def press():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, press)
            return
        seen.append((box.text() + "\n" + box.informativeText(), box.defaultButton().text()))
        next(b for b in box.buttons() if b.text() == button_text).click()

    QTimer.singleShot(20, press)


def _record_loads(monkeypatch):
    import core.compiler.runtime.artifact

    calls: list = []
    real = core.compiler.runtime.artifact.load_artifact
    monkeypatch.setattr(core.compiler.runtime.artifact, "load_artifact", lambda folder: calls.append(folder) or real(folder))
    return calls


def test_cancel_loads_nothing(window, qtbot, monkeypatch, artifact_folder):
    panel = window.panels["compile"].widget()
    calls = _record_loads(monkeypatch)
    seen: list = []
    _answer("Cancel", seen)
    panel.open_artifact(str(artifact_folder))
    text, default = seen[0]
    assert str(artifact_folder) in text and "model.so" in text and "executes" in text and "trust" in text
    assert default == "Cancel"
    assert calls == [] and panel.job is None and panel.table.rowCount() == 0


def test_load_and_run_shows_latency(window, qtbot, monkeypatch, artifact_folder):
    panel = window.panels["compile"].widget()
    panel.runs.setValue(3)
    calls = _record_loads(monkeypatch)
    seen: list = []
    _answer("Load and Run", seen)
    panel.open_artifact(str(artifact_folder))
    assert calls == [str(artifact_folder)]
    qtbot.waitUntil(lambda: panel.table.rowCount() > 0 and panel.open_artifact_btn.isEnabled(), timeout=30_000)  # no model open: Compile & Run stays off
    labels = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
    for label in ("Latency median", "Latency p10 – p90"):
        cell = panel.table.item(labels.index(label), 1).text().removeprefix("⚠ ")
        assert cell.endswith(" ms") and float(cell.split()[0]) > 0
    assert panel.table.item(labels.index("Runs"), 1).text() == "3"
    assert panel.table.item(labels.index("Threads"), 1).text() in ("1 (workbench pool)", "2 (workbench pool)")
    assert str(artifact_folder) in panel.status.text() and "match onnxruntime" in panel.status.text()


def test_folder_without_manifest_is_refused(window, qtbot, monkeypatch, messages, tmp_path):
    panel = window.panels["compile"].widget()
    calls = _record_loads(monkeypatch)
    monkeypatch.setattr(type(panel), "confirm_load", lambda self, folder: pytest.fail("asked about a bad folder"))
    panel.open_artifact(str(tmp_path))
    assert messages == [f"{tmp_path} has no manifest.json; it is not an exported artifact."]
    assert calls == [] and panel.job is None


def test_library_outside_the_folder_is_refused(window, messages, tmp_path):
    panel = window.panels["compile"].widget()
    (tmp_path / "manifest.json").write_text('{"library": "../evil.so"}')
    panel.open_artifact(str(tmp_path))
    assert len(messages) == 1 and "outside the artifact folder" in messages[0] and panel.job is None


def _open_through_the_file_menu(window, monkeypatch, folder) -> None:
    from PySide6.QtWidgets import QFileDialog

    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    next(a for a in window.file_menu.actions() if a.text() == "Open Compiled &Artifact…").trigger()


def test_a_damaged_artifact_is_refused_with_its_sentence_before_anything_is_asked(window, monkeypatch, messages, artifact_folder, tmp_path):
    """A model.so cut short (an interrupted copy) died of a bus error when loaded: the size and
    hash the manifest records are checked first, and the message names the file."""
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(artifact_folder, damaged)
    lib = damaged / "model.so"
    lib.write_bytes(lib.read_bytes()[:1000])
    panel = window.panels["compile"].widget()
    calls = _record_loads(monkeypatch)
    monkeypatch.setattr(type(panel), "confirm_load", lambda self, folder: pytest.fail("asked about a damaged folder"))
    _open_through_the_file_menu(window, monkeypatch, damaged)
    assert len(messages) == 1 and messages[0].startswith(f"{lib} is not the file this artifact was built with: 1,000 bytes where the manifest says ")
    assert messages[0].endswith("(a copy cut short?).") and calls == [] and panel.job is None


def test_a_manifest_that_does_not_match_its_library_fails_the_run_in_one_sentence(window, qtbot, monkeypatch, artifact_folder, tmp_path):
    import json
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(artifact_folder, edited)
    man = json.loads((edited / "manifest.json").read_text())
    man["inputs"][0]["shape"] = ["batch", 100]
    (edited / "manifest.json").write_text(json.dumps(man))
    panel = window.panels["compile"].widget()
    panel.runs.setValue(1)
    _answer("Load and Run", [])
    _open_through_the_file_menu(window, monkeypatch, edited)
    qtbot.waitUntil(lambda: panel.progress.format() == "failed", timeout=30_000)
    assert panel.status.text().startswith(f"{edited / 'manifest.json'} does not match the compiled library model.so: ")
    assert "\n" not in panel.status.text()


def test_file_menu_opens_the_panels_dialog(window, monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    picked: list = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: picked.append(a[1]) or "")
    action = next(a for a in window.file_menu.actions() if a.text() == "Open Compiled &Artifact…")
    action.trigger()
    assert picked and "manifest.json" in picked[0] and window.panels["compile"].isVisible()


def test_artifact_heat_colours_the_model_it_was_compiled_from(window, qtbot, artifact_folder):
    panel = window.panels["compile"].widget()
    panel.runs.setValue(2)
    assert window.open_model(str(sample("mlp")), wait=True)
    _answer("Load and Run", [])
    panel.open_artifact(str(artifact_folder))
    qtbot.waitUntil(lambda: panel.table.rowCount() > 0 and panel.open_artifact_btn.isEnabled(), timeout=30_000)
    assert window.canvas._overlay is not None and panel.heat_values()
    # another model open: the artifact's kernels name none of its nodes, so no heat, and it says so
    assert window.open_model(str(sample("small_cnn")), wait=True)
    _answer("Load and Run", [])
    panel.open_artifact(str(artifact_folder))
    qtbot.waitUntil(lambda: panel.table.rowCount() > 0 and panel.open_artifact_btn.isEnabled(), timeout=30_000)
    assert window.canvas._overlay is None and "heat map is off" in panel.status.text()
