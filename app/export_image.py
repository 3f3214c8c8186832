"""File ▸ Export Image…: the canvas (the whole graph, or the selection) as a PNG or an SVG file.

The scene is rendered, not the viewport: the export holds the whole graph (or the bounding box of
the selected nodes, with whatever lies inside it) at a readable scale whatever the zoom on screen.
The file's extension picks the format: `.svg` (vector; op names stay text that can be searched
and copied, via QSvgGenerator) or `.png` (raster, EXPORT_SCALE pixels per scene unit, scaled down
so its longest side stays within MAX_SIDE_PX). A lowering stage shown on the canvas exports the
same way; the Compare window exports both of its sides next to each other, each under its title.
"""
from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPainter

from core.errors import WorkbenchError

__all__ = ["ExportPart", "export_canvas", "export_parts", "scene_part", "image_size", "FILTERS",
           "EXPORT_SCALE", "MAX_SIDE_PX", "MAX_PIXELS", "install_actions"]

logger = logging.getLogger(__name__)

EXPORT_SCALE = 2.0  # PNG pixels per scene unit: sharp on high-density screens and in slides
MAX_SIDE_PX = 16384  # a PNG side beyond this is refused by many viewers
MAX_PIXELS = 120_000_000  # ~480 MB of ARGB while painting
MARGIN = 24.0  # scene units of background around the graph
TITLE_HEIGHT = 36.0  # above each part that has a title (the Compare window's A / B)
FILTERS = "PNG image (*.png);;SVG image (*.svg)"
BACKGROUND = QColor("#ffffff")


class ExportPart:
    """One scene region to draw: `source` in scene coordinates, with an optional title above."""

    def __init__(self, scene, source: QRectF, title: str = "", layer=None):
        self.scene = scene
        self.source = QRectF(source)
        self.title = title
        self.layer = layer  # a huge graph's item switch (app.canvas.overview.ItemLayer): on while drawing

    def size(self) -> tuple[float, float]:
        return self.source.width() + 2 * MARGIN, self.source.height() + 2 * MARGIN + (TITLE_HEIGHT if self.title else 0.0)


def scene_part(canvas, selection_only: bool = False, title: str = "") -> ExportPart:
    """The region of `canvas`'s scene to export: every item, or the selected ones' bounding box.
    Raises WorkbenchError (one sentence) when there is nothing to export."""
    scene = canvas.scene()
    if canvas.view is None or scene is None:
        raise WorkbenchError("There is no graph on the canvas to export: open a model first.")
    if selection_only:
        items = scene.selectedItems()
        if not items:
            raise WorkbenchError("Nothing is selected: select nodes on the canvas to export them, or export the whole graph.")
        rect = QRectF()
        for item in items:
            rect = rect.united(item.sceneBoundingRect())
    else:
        rect = _whole_rect(canvas)
    canvas.make_items_in(rect)  # a huge graph draws only where the user looked: the rest too, so the export is not blank
    return ExportPart(scene, rect, title, canvas.item_layer if canvas.overview is not None else None)


def _whole_rect(canvas) -> QRectF:
    layout = canvas.layout_result
    rect = canvas.scene().itemsBoundingRect()
    if layout is not None and layout.boxes:  # a huge graph's items exist only where the user looked
        xs0 = min(b.x - b.w / 2 for b in layout.boxes.values())
        ys0 = min(b.y - b.h / 2 for b in layout.boxes.values())
        xs1 = max(b.x + b.w / 2 for b in layout.boxes.values())
        ys1 = max(b.y + b.h / 2 for b in layout.boxes.values())
        rect = rect.united(QRectF(xs0, ys0, xs1 - xs0, ys1 - ys0))
    return rect


def image_size(parts: list[ExportPart], scale: float = EXPORT_SCALE) -> tuple[int, int, float]:
    """(width px, height px, scale) of a PNG of `parts` side by side: `scale`, less where the
    image would pass MAX_SIDE_PX or MAX_PIXELS."""
    w = sum(p.size()[0] for p in parts)
    h = max(p.size()[1] for p in parts)
    scale = min(scale, MAX_SIDE_PX / max(w, 1.0), MAX_SIDE_PX / max(h, 1.0), (MAX_PIXELS / max(w * h, 1.0)) ** 0.5)
    return max(1, int(round(w * scale))), max(1, int(round(h * scale))), scale


def _paint(painter: QPainter, parts: list[ExportPart], scale: float) -> None:
    painter.setRenderHint(QPainter.Antialiasing, True)
    painter.setRenderHint(QPainter.TextAntialiasing, True)
    painter.setRenderHint(QPainter.SmoothPixmapTransform, True)
    painter.scale(scale, scale)
    w = sum(p.size()[0] for p in parts)
    h = max(p.size()[1] for p in parts)
    painter.fillRect(QRectF(0, 0, w, h), BACKGROUND)
    x = 0.0
    for part in parts:
        pw, _ph = part.size()
        top = 0.0
        if part.title:
            painter.save()
            font = QFont(painter.font())
            font.setPixelSize(18)
            font.setBold(True)
            painter.setFont(font)
            painter.setPen(QColor("#222222"))
            painter.drawText(QRectF(x + MARGIN, 0, pw - 2 * MARGIN, TITLE_HEIGHT), Qt.AlignLeft | Qt.AlignBottom, part.title)
            painter.restore()
            top = TITLE_HEIGHT
        target = QRectF(x + MARGIN, top + MARGIN, part.source.width(), part.source.height())
        hidden = part.layer is not None and not part.layer.visible  # zoomed out: the overview image stands in
        if hidden:
            part.layer.setVisible(True)
        try:
            part.scene.render(painter, target, part.source, Qt.KeepAspectRatio)
        finally:
            if hidden:
                part.layer.setVisible(False)
        x += pw


def export_parts(parts: list[ExportPart], path: str | Path, title: str = "") -> Path:
    """Write `parts` side by side to `path`: SVG for a .svg name, else PNG (.png added when the
    name has no image extension). Returns the path written; WorkbenchError when it cannot be."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        path = path.with_name(path.name + ".png")
    if not path.parent.is_dir():
        raise WorkbenchError(f"{path}: the folder {path.parent} does not exist.")
    if path.suffix.lower() == ".svg":
        from PySide6.QtSvg import QSvgGenerator

        w = int(round(sum(p.size()[0] for p in parts)))
        h = int(round(max(p.size()[1] for p in parts)))
        gen = QSvgGenerator()
        gen.setFileName(str(path))
        gen.setSize(QSize(w, h))
        gen.setViewBox(QRectF(0, 0, w, h))
        gen.setTitle(title or path.stem)
        gen.setDescription("Exported from MLC Workbench")
        painter = QPainter()
        if not painter.begin(gen):
            raise WorkbenchError(f"{path} cannot be written.")
        try:
            _paint(painter, parts, 1.0)
        finally:
            painter.end()
        if not path.is_file():
            raise WorkbenchError(f"{path} cannot be written.")
        return path
    width, height, scale = image_size(parts)
    image = QImage(width, height, QImage.Format_ARGB32_Premultiplied)
    if image.isNull():
        raise WorkbenchError(f"The image for {path.name} ({width}×{height} pixels) is too large to make.")
    image.fill(BACKGROUND)
    painter = QPainter(image)
    try:
        _paint(painter, parts, scale)
    finally:
        painter.end()
    if not image.save(str(path), "PNG"):
        raise WorkbenchError(f"{path} cannot be written.")
    return path


def export_canvas(canvas, path: str | Path, selection_only: bool = False) -> Path:
    """The canvas's graph (or its selection) to a PNG or SVG file."""
    return export_parts([scene_part(canvas, selection_only)], path)


def _suggested_name(window, suffix: str = "") -> str:
    path = getattr(window.document, "path", None)
    stem = Path(path).stem if path else "graph"
    canvas = window.canvas
    if canvas.mode != "model" and canvas.view is not None and getattr(canvas.view, "title", ""):
        stem += "-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in canvas.view.title)[:60]
    return stem + suffix + ".png"


def ask_and_export(window, parent, parts_of, suggested: str) -> Path | None:
    """Ask for a file (PNG or SVG), then write `parts_of()` there; errors are one sentence in a
    message box. `parts_of` is called before the dialog opens, so "nothing to export" is said at
    once. `window`: the main window whose remembered folders the dialog uses (None: none)."""
    from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox

    from app.dialogs.files import save_file

    try:
        parts = parts_of()
    except WorkbenchError as e:
        QMessageBox.warning(parent, "Export Image", str(e))
        return None
    title = "Export image (PNG or SVG, by the extension)"
    if window is not None and hasattr(window, "settings"):
        chosen = save_file(window, parent, "image", title, FILTERS, suggested=suggested)
    else:
        chosen, _ = QFileDialog.getSaveFileName(parent, title, suggested, FILTERS)
    if not chosen:
        return None
    try:
        written = export_parts(parts, chosen)
    except WorkbenchError as e:
        QMessageBox.warning(parent, "Export Image", str(e))
        return None
    for shown in (parent, window):
        if isinstance(shown, QMainWindow):
            shown.statusBar().showMessage(f"Exported {written}", 8000)
    return written


def install_actions(window, menu, before=None) -> None:
    """File ▸ Export Image… and Export Selection as Image… on `window` (a MainWindow)."""
    from PySide6.QtGui import QAction, QKeySequence

    whole = QAction("&Export Image…", window)
    whole.setShortcut(QKeySequence("Ctrl+Shift+E"))
    whole.setStatusTip("The graph on the canvas (the model, or the lowering stage shown) as a PNG or SVG file")
    whole.triggered.connect(lambda: ask_and_export(window, window, lambda: [scene_part(window.canvas)], _suggested_name(window)))
    selected = QAction("Export Se&lection as Image…", window)
    selected.setStatusTip("The selected nodes (and what lies between them) as a PNG or SVG file")
    selected.triggered.connect(lambda: ask_and_export(window, window, lambda: [scene_part(window.canvas, True)],
                                                      _suggested_name(window, "-selection")))
    for act in (whole, selected):
        menu.insertAction(before, act) if before is not None else menu.addAction(act)
    window.export_image_action = whole
    window.export_selection_action = selected
