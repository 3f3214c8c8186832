"""The tensor viewer: every value of a weight or constant, its histogram, copy and save as .npy.

Opened from the Inspector ("View all values…" on a constant tensor). The table is a model over
the array itself (nothing is copied into widgets), so a 25-million-value weight opens at once:
the last axis runs across, every other index down the rows ("[3, 1, :]"). The histogram counts
the finite values in 60 bins; NaN and infinities are counted apart in the summary line.
"""
from __future__ import annotations

import logging

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

__all__ = ["TensorViewer", "ArrayModel", "Histogram", "COPY_LIMIT"]

logger = logging.getLogger(__name__)

COPY_LIMIT = 2_000_000  # values put on the clipboard at most (a text of ~20 MB)


def _fmt(x) -> str:
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.6g}"
    return str(x)


class ArrayModel(QAbstractTableModel):
    """An n-d array as a table: the last axis across, the other indices down."""

    def __init__(self, array: np.ndarray):
        super().__init__()
        a = np.asarray(array)
        self.shape = a.shape
        self.table = a.reshape(1, 1) if a.ndim == 0 else (a.reshape(-1, 1) if a.ndim == 1 else a.reshape(-1, a.shape[-1]))

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else self.table.shape[0]

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else self.table.shape[1]

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        if role == Qt.DisplayRole:
            return _fmt(self.table[index.row(), index.column()])
        if role == Qt.TextAlignmentRole:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None

    def row_label(self, row: int) -> str:
        lead = self.shape[:-1]
        if len(self.shape) <= 1:
            return str(row)
        return "[" + ", ".join(str(i) for i in np.unravel_index(row, lead)) + ", :]"

    def headerData(self, section, orientation, role=Qt.DisplayRole):
        if role != Qt.DisplayRole:
            return None
        if orientation == Qt.Horizontal:
            return "value" if len(self.shape) <= 1 else str(section)
        return self.row_label(section)


class Histogram(QWidget):
    """Bars of value counts, min and max under the axis, the tallest count beside it."""

    BINS = 60

    def __init__(self, array: np.ndarray, parent=None):
        super().__init__(parent)
        a = np.asarray(array)
        values = a.astype(np.float64, copy=False).reshape(-1) if a.dtype.kind in "fiub" else np.zeros(0)
        finite = values[np.isfinite(values)]
        if finite.size:
            self.counts, self.edges = np.histogram(finite, bins=self.BINS)
        else:
            self.counts, self.edges = np.zeros(0, dtype=np.int64), np.zeros(0)
        self.setMinimumHeight(120)

    def sizeHint(self) -> QSize:
        return QSize(520, 140)

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), QColor("#ffffff"))
        fm = QFontMetrics(self.font())
        if not self.counts.size:
            p.setPen(QColor("#6b7680"))
            p.drawText(self.rect(), Qt.AlignCenter, "No finite numeric values to count.")
            return
        left, right, top, bottom = 8, 8, 6, fm.height() + 6
        w, h = self.width() - left - right, self.height() - top - bottom
        peak = max(int(self.counts.max()), 1)
        bar = w / len(self.counts)
        for i, c in enumerate(self.counts):
            bh = h * c / peak
            p.fillRect(QRectF(left + i * bar, top + h - bh, max(bar - 1, 1), bh), QColor("#3f73b0"))
        p.setPen(QColor("#2d3a45"))
        p.drawLine(left, top + h, left + w, top + h)
        p.drawText(left, self.height() - 4, _fmt(self.edges[0]))
        hi = _fmt(self.edges[-1])
        p.drawText(left + w - fm.horizontalAdvance(hi), self.height() - 4, hi)
        tall = f"tallest bar: {peak:,}"
        p.drawText(left + w - fm.horizontalAdvance(tall), top + fm.ascent(), tall)
        p.end()


class TensorViewer(QDialog):
    """All values of one tensor, with its histogram; Copy and Save as .npy."""

    def __init__(self, name: str, array: np.ndarray, parent=None, window=None):
        super().__init__(parent)
        self.setObjectName("tensor-viewer")
        self.setAttribute(Qt.WA_DeleteOnClose)
        self.setWindowTitle(f"Tensor {name}")
        self.name = name
        self.array = np.asarray(array)
        self.window_ = window
        layout = QVBoxLayout(self)
        self.summary = QLabel(self.summary_text())
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        layout.addWidget(self.summary)
        self.histogram = Histogram(self.array, self)
        layout.addWidget(self.histogram)
        self.model = ArrayModel(self.array)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().setDefaultSectionSize(QFontMetrics(self.font()).height() + 4)
        # wide enough for the longest "%.6g" text ("-0.000123456", "-1.23457e+06") uncut
        self.table.horizontalHeader().setDefaultSectionSize(QFontMetrics(self.table.font()).horizontalAdvance("-0.000123456") + 16)
        layout.addWidget(self.table, 1)
        row = QHBoxLayout()
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the selected cells, or every value when none is selected, as tab-separated text")
        self.copy_button.clicked.connect(self.copy)
        self.save_button = QPushButton("Save as .npy…")
        self.save_button.clicked.connect(self.save_dialog)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        row.addWidget(self.copy_button)
        row.addWidget(self.save_button)
        row.addStretch(1)
        row.addWidget(close)
        layout.addLayout(row)
        self.resize(760, 620)

    def summary_text(self) -> str:
        a = self.array
        shape = "×".join(str(d) for d in a.shape) or "scalar"
        parts = [f"<b>{self.name}</b>: {a.dtype} [{shape}], {a.size:,} values"]
        if a.size and a.dtype.kind in "fiub":
            f = a.astype(np.float64, copy=False)
            finite = np.isfinite(f)
            ok = f[finite]
            if ok.size:
                parts.append(f"min {_fmt(ok.min())}, max {_fmt(ok.max())}, mean {_fmt(ok.mean())}, std {_fmt(ok.std())}")
            parts.append(f"{int((f == 0).sum()):,} zeros")
            bad = int(f.size - finite.sum())
            if bad:
                parts.append(f"{bad:,} NaN or infinite")
        return "; ".join(parts) + "."

    def text(self, selected_only: bool = True) -> str:
        """Tab-separated values: the selected cells (as a block per row), else all (COPY_LIMIT at most)."""
        sel = self.table.selectionModel().selectedIndexes() if selected_only else []
        if sel:
            rows: dict[int, dict[int, str]] = {}
            for ix in sel:
                rows.setdefault(ix.row(), {})[ix.column()] = self.model.data(ix)
            return "\n".join("\t".join(cells[c] for c in sorted(cells)) for _r, cells in sorted(rows.items()))
        t = self.model.table
        n_rows = max(1, min(t.shape[0], COPY_LIMIT // max(t.shape[1], 1)))
        return "\n".join("\t".join(_fmt(x) for x in t[r]) for r in range(n_rows))

    def copy(self) -> None:
        t = self.model.table
        selected = bool(self.table.selectionModel().selectedIndexes())
        QApplication.clipboard().setText(self.text())
        if not selected and t.size > COPY_LIMIT:
            QMessageBox.information(self, "Copy", f"Copied the first {COPY_LIMIT:,} of {t.size:,} values; Save as .npy keeps them all.")

    def save(self, path: str) -> None:
        np.save(path, self.array, allow_pickle=False)

    def save_dialog(self) -> None:
        from app.dialogs.files import save_file

        safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in self.name) or "tensor"
        if self.window_ is None:
            return
        path = save_file(self.window_, self, "npy", "Save tensor as .npy", "NumPy arrays (*.npy)", suggested=f"{safe}.npy")
        if not path:
            return
        if not path.endswith(".npy"):
            path += ".npy"
        try:
            self.save(path)
        except OSError as e:
            QMessageBox.warning(self, "Save tensor", f"Could not write {path}: {e.strerror or e}.")
            return
        self.summary.setText(self.summary_text() + f"<br>Saved to {path}.")
