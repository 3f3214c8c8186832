"""File ▸ Export Image: the canvas (or its selection) as PNG and SVG, the Compare window's two sides
in one image, and the actions' wiring (file dialog, status line, one-sentence errors)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from PySide6.QtGui import QImage

from app.export_image import MAX_SIDE_PX, export_canvas, export_parts, scene_part
from tests.conftest import sample

SVG = "{http://www.w3.org/2000/svg}"


def _svg_text(path) -> str:
    root = ET.parse(path).getroot()  # parses as XML
    assert root.tag == f"{SVG}svg"
    return " ".join(t for el in root.iter() if el.tag == f"{SVG}text" for t in el.itertext())


def test_the_whole_graph_as_png_and_svg(window, tmp_path):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    png = export_canvas(window.canvas, tmp_path / "cnn.png")
    img = QImage(str(png))
    rect = window.canvas.scene().itemsBoundingRect()
    assert not img.isNull()
    # readable: two pixels per scene unit (the graph at 100 % is readable), within the cap
    assert img.width() >= rect.width() * 1.5 and img.height() >= rect.height() * 1.5
    assert max(img.width(), img.height()) <= MAX_SIDE_PX
    colours = {img.pixel(x, y) for x in range(0, img.width(), 7) for y in range(0, img.height(), 7)}
    assert len(colours) > 10  # drawn, not a blank page
    text = _svg_text(export_canvas(window.canvas, tmp_path / "cnn.svg"))
    for op in ("Conv", "BatchNormalization", "Relu", "Add", "GlobalAveragePool", "Gemm"):
        assert op in text, op


def test_the_selection_is_smaller_than_the_whole(window, tmp_path):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    whole = QImage(str(export_canvas(window.canvas, tmp_path / "whole.png")))
    ids = [n.id for n in window.canvas.view.nodes if n.label == "Gemm"]
    window.canvas.select(ids)
    part = QImage(str(export_canvas(window.canvas, tmp_path / "part.png", selection_only=True)))
    assert 0 < part.width() * part.height() < whole.width() * whole.height() / 4
    text = _svg_text(export_canvas(window.canvas, tmp_path / "part.svg", selection_only=True))
    assert "Gemm" in text and "Conv" not in text


def test_no_extension_gives_png_and_nothing_to_export_is_one_sentence(window, tmp_path):
    import pytest

    from core.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match="open a model first"):
        scene_part(window.canvas)
    assert window.open_model(str(sample("mlp")), wait=True)
    with pytest.raises(WorkbenchError, match="Nothing is selected"):
        scene_part(window.canvas, selection_only=True)
    assert export_canvas(window.canvas, tmp_path / "mlp").name == "mlp.png"
    with pytest.raises(WorkbenchError, match="does not exist"):
        export_canvas(window.canvas, tmp_path / "no" / "such.png")


def test_file_menu_export_writes_the_chosen_file(window, tmp_path, monkeypatch, messages):
    import app.dialogs.files as files

    chosen = tmp_path / "from-menu.svg"
    monkeypatch.setattr(files, "save_file", lambda *a, **k: str(chosen))
    window.export_image_action.trigger()  # no model: said, no dialog
    assert messages and "open a model first" in messages[-1] and not chosen.exists()
    assert window.open_model(str(sample("mlp")), wait=True)
    assert window.export_image_action in window.file_menu.actions()
    window.export_image_action.trigger()
    assert "MatMul" in _svg_text(chosen)
    assert str(chosen) in window.statusBar().currentMessage()


def test_compare_window_exports_both_sides(window, tmp_path, qtbot, monkeypatch):
    from app.compare import open_compare
    from core import load_model

    a, b = load_model(sample("mlp")), load_model(sample("small_cnn"))
    cw = open_compare(window, a, b, "mlp", "small_cnn")
    qtbot.waitUntil(lambda: all(s.canvas.view is not None and not s.canvas.busy for s in cw.sides), timeout=20000)
    out = export_parts(cw.export_parts(), tmp_path / "both.svg")
    text = _svg_text(out)
    assert "MatMul" in text and "Conv" in text and "A  mlp" in text and "B  small_cnn" in text
    import app.dialogs.files as files

    monkeypatch.setattr(files, "save_file", lambda *a, **k: str(tmp_path / "both.png"))
    cw.export_action.trigger()
    img = QImage(str(tmp_path / "both.png"))
    assert not img.isNull() and img.width() > img.height() / 4
    cw.close()
