"""The Compile & Run panel's bar chart of where the time goes: one bar per kernel (the Relax VM's
per-kernel timing), largest first; a click selects the ONNX nodes a kernel came from, a
double-click opens it in the Schedule panel."""
from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import QWidget

__all__ = ["KernelChart"]


EMPTY_TEXT = "Per-kernel time appears here after Compile & Run."


class KernelChart(QWidget):
    """Horizontal bars: per-kernel time (core.compiler.measure.bench.KernelTime rows), largest
    first. Clicking a bar emits its row."""

    kernelClicked = Signal(object)
    kernelActivated = Signal(object)  # double-click: schedule this kernel by hand

    BAR_H = 18
    GAP = 4

    def __init__(self, parent=None):
        super().__init__(parent)
        self.kernels: list = []  # KernelTime
        self.selected = -1
        self.empty_text = EMPTY_TEXT  # what the chart says before it has times
        self.setMinimumHeight(120)
        self.setMouseTracking(True)

    def set_kernels(self, kernels: list, top: int = 16, empty_text: str = EMPTY_TEXT) -> None:
        self.kernels = list(kernels[:top])
        self.empty_text = empty_text
        self.selected = -1
        self.setMinimumHeight(max(60, 24 + len(self.kernels) * (self.BAR_H + self.GAP)))
        self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(480, 24 + max(4, len(self.kernels)) * (self.BAR_H + self.GAP))

    def _label_width(self) -> int:
        fm = QFontMetrics(self.font())
        return min(max((fm.horizontalAdvance(self._label(k)) for k in self.kernels), default=80) + 12, int(self.width() * 0.5))

    @staticmethod
    def _label(k) -> str:
        nodes = k.onnx_nodes
        where = f"  ({nodes[0]}{' …' if len(nodes) > 1 else ''})" if nodes else ""
        return f"{k.name}{where}"

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        pal = self.palette()
        p.fillRect(self.rect(), pal.base())
        if not self.kernels:
            p.setPen(pal.placeholderText().color())
            p.drawText(self.rect(), Qt.AlignCenter, self.empty_text)
            return
        fm = QFontMetrics(self.font())
        lw = self._label_width()
        vw = fm.horizontalAdvance("0000.000 ms  100.0%") + 8
        bar_w = max(40, self.width() - lw - vw - 16)
        top_ms = max(k.ms for k in self.kernels) or 1.0
        p.setPen(pal.text().color())
        p.drawText(QRectF(4, 2, self.width() - 8, 18), Qt.AlignLeft | Qt.AlignVCenter, "Where the time goes (ms per run, by kernel)")
        for i, k in enumerate(self.kernels):
            y = 22 + i * (self.BAR_H + self.GAP)
            label = fm.elidedText(self._label(k), Qt.ElideMiddle, lw - 8)
            p.setPen(pal.text().color())
            p.drawText(QRectF(4, y, lw - 8, self.BAR_H), Qt.AlignRight | Qt.AlignVCenter, label)
            w = max(1.0, bar_w * k.ms / top_ms)
            color = QColor("#d62728") if i == self.selected else QColor.fromHsvF(0.08 * (1 - k.ms / top_ms), 0.75, 0.95)
            p.fillRect(QRectF(lw, y + 2, w, self.BAR_H - 4), color)
            p.setPen(pal.text().color())
            p.drawText(QRectF(lw + w + 6, y, vw, self.BAR_H), Qt.AlignLeft | Qt.AlignVCenter, f"{k.ms:.3f} ms  {k.share * 100:.1f}%")

    def index_at(self, y: float) -> int:
        i = int((y - 22) // (self.BAR_H + self.GAP))
        return i if 0 <= i < len(self.kernels) and y >= 22 else -1

    def mousePressEvent(self, event) -> None:
        i = self.index_at(event.position().y())
        if i >= 0:
            self.selected = i
            self.update()
            self.kernelClicked.emit(self.kernels[i])

    def mouseDoubleClickEvent(self, event) -> None:
        i = self.index_at(event.position().y())
        if i >= 0:
            self.kernelActivated.emit(self.kernels[i])

    def mouseMoveEvent(self, event) -> None:
        i = self.index_at(event.position().y())
        if i >= 0:
            k = self.kernels[i]
            nodes = ", ".join(k.onnx_nodes) or "(no ONNX lineage)"
            self.setToolTip(f"{k.name}\n{k.ms:.3f} ms per run, {k.share * 100:.1f}%, {k.calls} call(s)\nONNX nodes: {nodes}")
        else:
            self.setToolTip("")
