"""The main window."""
from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication, QMainWindow, QMessageBox, QPlainTextEdit

from core import WorkbenchError, load_model
from core.summary import format_summary, summarize


class MainWindow(QMainWindow):
    def __init__(self) -> None:
        super().__init__()
        self.graph = None
        self.text = QPlainTextEdit(readOnly=True)
        self.setCentralWidget(self.text)
        self.resize(1200, 800)
        self.setWindowTitle("MLC Workbench")

    def open_model(self, path: str) -> bool:
        try:
            self.graph = load_model(path)
        except WorkbenchError as e:
            QMessageBox.warning(self, "Cannot open model", str(e))
            return False
        self.text.setPlainText(format_summary(summarize(self.graph)))
        self.setWindowTitle(f"{self.graph.path.name} — MLC Workbench")
        return True


def run(model_path: str | None) -> int:
    app = QApplication.instance() or QApplication(sys.argv)
    w = MainWindow()
    w.show()
    if model_path:
        w.open_model(model_path)
    return app.exec()
