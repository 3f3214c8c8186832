"""A big model's first picture while it loads (app.open_preview): drawn before the model is built,
not worked on, replaced by the loaded view; a load that fails or is cancelled after it brings back
what was on screen."""
from __future__ import annotations

import threading
from pathlib import Path

import onnx
import onnx_ir
import pytest
from PySide6.QtCore import QPoint, Qt

from core.model.samples import scoped_bert

SAMPLES = Path(__file__).resolve().parents[2] / "resources" / "models"


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    """~2,100 nodes with torch.onnx names: opens with its layers collapsed, and gets a preview."""
    path = tmp_path_factory.mktemp("preview") / "big_bert.onnx"
    onnx.save(scoped_bert(layers=64, dim=8, heads=2, ffn=16, vocab=32), path)
    return path


@pytest.fixture
def held_load(monkeypatch):
    """Holds every load between its checks (the preview) and building the model, until released;
    `fail=True` makes the build fail instead."""
    gate = threading.Event()
    state = {"fail": False}
    build = onnx_ir.serde.deserialize_model

    def held(proto, *a, **k):
        assert gate.wait(20), "the test never released the load"
        if state["fail"]:
            raise ValueError("damaged in a way only the model build notices")
        return build(proto, *a, **k)

    monkeypatch.setattr(onnx_ir.serde, "deserialize_model", held)
    yield gate, state
    gate.set()


def _box_center(canvas) -> QPoint:
    item = next(it for nid, it in canvas.node_items.items() if str(nid).startswith("scope:"))
    return canvas.mapFromScene(item.sceneBoundingRect().center())


def test_the_groups_show_before_the_model_is_built(window, qtbot, big_model, held_load):
    gate, _ = held_load
    canvas = window.canvas
    activated: list = []
    canvas.nodeActivated.connect(activated.append)
    assert window.open_model(big_model)
    qtbot.waitUntil(lambda: canvas.mode == "preview", timeout=20_000)
    preview_ids = [n.id for n in canvas.view.nodes]
    assert window.document.graph is None and any(str(i).startswith("scope:") for i in preview_ids)
    assert not canvas.isInteractive()
    assert "being built" in window.panels["inspector"].widget().empty_hint.text()  # not "Open a model"
    # a picture, not a model: double-click and Enter open nothing
    qtbot.mouseDClick(canvas.viewport(), Qt.LeftButton, pos=_box_center(canvas))
    qtbot.keyClick(canvas, Qt.Key_Return)
    assert activated == [] and canvas.mode == "preview"

    gate.set()
    qtbot.waitUntil(lambda: window.document.graph is not None and canvas.mode == "model" and not window.loading, timeout=30_000)
    assert [n.id for n in canvas.view.nodes] == preview_ids  # the same boxes, now the model's
    assert canvas.isInteractive()
    assert window.open_preview.last_seconds is not None and window.open_preview.last_seconds < window.last_open_seconds


def test_a_load_failing_after_the_preview_brings_back_the_open_model(window, qtbot, big_model, held_load, messages):
    gate, state = held_load
    gate.set()
    assert window.open_model(SAMPLES / "mlp.onnx", wait=True)
    before_graph, before_ids = window.document.graph, [n.id for n in window.canvas.view.nodes]
    gate.clear()
    state["fail"] = True
    assert window.open_model(big_model)
    qtbot.waitUntil(lambda: window.canvas.mode == "preview", timeout=20_000)
    gate.set()
    qtbot.waitUntil(lambda: not window.loading, timeout=30_000)
    assert messages and "big_bert.onnx" in messages[-1]
    assert window.document.graph is before_graph
    assert window.canvas.mode == "model" and [n.id for n in window.canvas.view.nodes] == before_ids
    assert window.canvas.isInteractive()


def test_cancel_after_the_preview_leaves_no_picture(window, qtbot, big_model, held_load):
    gate, _ = held_load
    assert window.open_model(big_model)
    qtbot.waitUntil(lambda: window.canvas.mode == "preview", timeout=20_000)
    window.cancel_work()
    gate.set()
    qtbot.waitUntil(lambda: not window.loading, timeout=30_000)
    assert window.document.graph is None
    assert window.canvas.mode == "model" and window.canvas.view is None
    assert window.start_page.isVisible()


def test_a_picture_that_cannot_be_made_does_not_stop_the_open(window, big_model, monkeypatch, messages):
    import app.open_preview

    def broken(*_a, **_k):
        raise ValueError("a bug in the preview")

    monkeypatch.setattr(app.open_preview, "open_view", broken)
    assert window.open_model(big_model, wait=True)
    assert window.document.graph is not None and window.canvas.mode == "model" and not messages
    assert any(str(n.id).startswith("scope:") for n in window.canvas.view.nodes)  # made from the Graph instead


def test_the_loaded_model_adopts_the_view_drawn_early(window, big_model, monkeypatch):
    """Nothing is made twice: no view of every node from the Graph, no second layout; the
    groups' parameter counts are the Graph's."""
    import app.scopes
    from core.views.scopes import scope_tree, scoped_view
    from core.views.viewgraph import from_graph

    calls = []
    monkeypatch.setattr(app.scopes, "from_graph", lambda g: calls.append(g) or from_graph(g))
    assert window.open_model(big_model, wait=True)
    assert calls == [] and window.open_preview.last_seconds is not None
    graph, canvas = window.document.graph, window.canvas
    full = from_graph(graph)
    tree = scope_tree(full, graph)
    expected = scoped_view(full, tree, canvas.scopes.expanded)
    assert [(n.id, n.label, n.detail, n.badges) for n in canvas.view.nodes] == [(n.id, n.label, n.detail, n.badges) for n in expected.nodes]
    # the adopted groups open in place
    drawn = len(canvas.view.nodes)
    canvas.scopes.expand(next(n.id for n in canvas.view.nodes if str(n.id).startswith("scope:"))[len("scope:"):])
    assert canvas.mode == "model" and len(canvas.view.nodes) > drawn
