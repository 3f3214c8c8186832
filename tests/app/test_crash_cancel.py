"""Cancel leaves the app consistent, for the long operations the other GUI tests do not cancel:
a relayout after an edit (canvas) and the measuring half of Compile & Run (benchmark). Opening
(load + layout), lowering and compiling have their cancel tests beside their panels."""
from __future__ import annotations

import pytest

from core.model.edits import RenameNode
from tests.conftest import light, sample


def test_cancel_relayout_keeps_the_drawn_view_and_the_edit(window, qtbot):
    assert window.open_model(str(light("densenet121")), wait=True)
    g = window.document.graph
    drawn = window.canvas.view
    node = g.nodes[5]
    assert window.document.push(RenameNode(g, node.id, "renamed_during_layout"))  # starts a relayout
    qtbot.waitUntil(lambda: window.canvas.busy, timeout=5000)
    window.cancel_work()  # the status bar's Cancel
    qtbot.waitUntil(lambda: not window.canvas.busy, timeout=30000)
    assert window.canvas.view is drawn  # the scene it had, not half a new one
    assert g.node(node.id).name == "renamed_during_layout" and window.document.is_dirty  # the edit stays
    assert not window.cancel_button.isVisible()
    # and the next change lays out normally
    window.undo_action.trigger()
    qtbot.waitUntil(lambda: not window.canvas.busy and window.canvas.view is not drawn, timeout=60000)
    assert window.canvas.view.data.get("revision") == g.revision


@pytest.mark.slow
def test_cancel_while_measuring_stops_the_benchmark(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = window.panels["compile"].widget()
    panel.runs.setValue(panel.runs.maximum())
    texts = []
    panel.job = None
    panel.start()
    panel.job.progressed.connect(lambda p: texts.append(p.message))
    qtbot.waitUntil(lambda: any(t.startswith("measure:") for t in texts) or panel.compile_btn.isEnabled(), timeout=120_000)
    assert any(t.startswith("measure:") for t in texts), texts[-3:]
    panel.cancel()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert panel.result is None and panel.progress.format() == "cancelled"
    assert not panel.cancel_btn.isEnabled() and window.document.graph is not None
