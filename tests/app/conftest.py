"""Fixtures for GUI tests: a main window with throwaway settings, and no modal dialogs."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QMessageBox


@pytest.fixture
def messages(monkeypatch):
    """Collects the text of every QMessageBox.warning/question instead of showing it."""
    shown: list[str] = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: shown.append(a[2]) or QMessageBox.Ok)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: shown.append(a[2]) or QMessageBox.Discard)
    return shown


@pytest.fixture
def window(qtbot, tmp_path, messages):
    from app.main_window import MainWindow

    w = MainWindow(settings=QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    w.resize(1200, 800)
    qtbot.addWidget(w)
    w.show()
    yield w
    # Stop background jobs and delete the window now: a closed window's timers must not start a
    # job that the next test's event loop then destroys while it runs (Qt aborts on that).
    from shiboken6 import Shiboken

    from app.workers import Job, cancel_all

    w.close()
    for job in w.findChildren(Job):
        job.cancel()
        job.wait(10000)
    cancel_all()  # jobs have no Qt parent (see app.workers): wait for every one still running
    Shiboken.delete(w)
