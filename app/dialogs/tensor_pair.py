"""Two values of one tensor side by side: the checked side, the reference, and their difference.

Opened from the Accuracy panel (core.accuracy): the compiled program's value (or model B's) beside
the reference's, the difference (checked − reference) in a third table, and the histogram of the
difference. The three tables scroll together, and selecting a cell selects the same cell in all.
"""
from __future__ import annotations

import logging

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QTableView, QVBoxLayout, QWidget

from app.dialogs.tensor_viewer import ArrayModel, Histogram

__all__ = ["TensorPairViewer"]

logger = logging.getLogger(__name__)


class TensorPairViewer(QDialog):
    """`ours` and `reference` of tensor `name` (same shape), with their difference."""

    def __init__(self, name: str, ours: np.ndarray, reference: np.ndarray, *, ours_title: str = "Checked",
                 reference_title: str = "Reference", figures: str = "", parent=None):
        super().__init__(parent)
        self.setObjectName("tensor-pair-viewer")
        self.setAttribute(Qt.WA_DeleteOnClose)
        self.setWindowTitle(f"Tensor {name}: {ours_title} against {reference_title}")
        self.ours, self.reference = np.asarray(ours), np.asarray(reference)
        same = self.ours.shape == self.reference.shape and self.ours.dtype.kind in "fiub" and self.reference.dtype.kind in "fiub"
        with np.errstate(invalid="ignore", over="ignore"):
            self.difference = (self.ours.astype(np.float64) - self.reference.astype(np.float64)) if same else None
        layout = QVBoxLayout(self)
        head = f"<b>{name}</b>: {figures}" if figures else f"<b>{name}</b>"
        if self.difference is None:
            head += f"<br>The two values cannot be subtracted: {list(self.ours.shape)} {self.ours.dtype} against {list(self.reference.shape)} {self.reference.dtype}."
        self.summary = QLabel(head)
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout.addWidget(self.summary)
        if self.difference is not None:
            caption = QLabel(f"Histogram of the difference ({ours_title} − {reference_title})")
            layout.addWidget(caption)
            self.histogram = Histogram(self.difference, self)
            layout.addWidget(self.histogram)
        tables = QHBoxLayout()
        self.tables: list[QTableView] = []
        columns = [(ours_title, self.ours), (reference_title, self.reference)]
        if self.difference is not None:
            columns.append(("Difference", self.difference))
        for title, array in columns:
            box = QWidget()
            col = QVBoxLayout(box)
            col.setContentsMargins(0, 0, 0, 0)
            col.addWidget(QLabel(f"<b>{title}</b>"))
            table = QTableView()
            table.setObjectName(f"pair-{title.lower()}")
            table.setModel(ArrayModel(array))
            table.verticalHeader().setDefaultSectionSize(QFontMetrics(self.font()).height() + 4)
            table.horizontalHeader().setDefaultSectionSize(QFontMetrics(table.font()).horizontalAdvance("-0.000123456") + 16)
            col.addWidget(table, 1)
            tables.addWidget(box, 1)
            self.tables.append(table)
        layout.addLayout(tables, 1)
        self._link_tables()
        row = QHBoxLayout()
        row.addStretch(1)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        row.addWidget(close)
        layout.addLayout(row)
        self.resize(1100, 640)

    def _link_tables(self) -> None:
        """Scroll and select together (tables of the same shape)."""
        first = self.tables[0]
        for other in self.tables[1:]:
            if other.model().table.shape != first.model().table.shape:
                continue
            for a, b in ((first, other), (other, first)):
                a.verticalScrollBar().valueChanged.connect(b.verticalScrollBar().setValue)
                a.horizontalScrollBar().valueChanged.connect(b.horizontalScrollBar().setValue)
            first.selectionModel().currentChanged.connect(lambda cur, _prev, t=other: t.setCurrentIndex(t.model().index(cur.row(), cur.column())))
