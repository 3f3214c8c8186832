"""A plain Delete in the middle of a graph (issue 41 item 1), through the Delete action: the nodes
cut off below stay on the canvas, ringed as problems and saying which input waits; the inspector's
parameter count stays; fold-constants offers nothing; a Problems row's double-click selects and
shows its node. Before the fix the 8 nodes below vanished ("11 nodes shown"), the count fell from
764 to 448, fold-constants offered one match and the Conv's row led nowhere."""
from __future__ import annotations

import onnx
from PySide6.QtCore import Qt

from tests.core.views.test_diff_matching import cnn

RELU_AFTER_ADD, CONV, ADD = 10, 11, 16


def _tree_value(tree, section: str, key: str) -> str | None:
    for i in range(tree.topLevelItemCount()):
        top = tree.topLevelItem(i)
        if top.text(0) == section:
            for j in range(top.childCount()):
                if top.child(j).text(0) == key:
                    return top.child(j).text(1)
    return None


def test_delete_keeps_the_cut_off_nodes_drawn_and_reachable(window, qtbot, tmp_path):
    path = tmp_path / "cnn_bn.onnx"
    onnx.save(cnn(), path)
    assert window.open_model(str(path), wait=True)
    window.canvas.setFocus()
    g = window.document.graph
    inspector = window.panels["inspector"].widget()
    assert _tree_value(inspector, "Model", "parameters") == "764 in 25 tensors"

    window.canvas.select([RELU_AFTER_ADD])
    window.edit_actions.delete_action.trigger()
    assert not g.has_node(RELU_AFTER_ADD)
    problems = window.panels["problems"].widget()
    qtbot.waitUntil(lambda: problems.topLevelItemCount() == 2, timeout=5000)
    qtbot.waitUntil(lambda: not window.canvas.busy and window.canvas.view is not None
                    and window.canvas.view.data.get("revision") == g.revision, timeout=10000)

    # (a) every node is drawn, the cut-off ones ringed and saying which input waits
    items = window.canvas.node_items
    assert {n.id for n in g.nodes} <= set(items)
    assert "19 nodes shown" in window.info_label.text()
    for nid, formal in ((CONV, "X"), (ADD, "B")):
        assert "problem" in items[nid].highlights
        assert items[nid].node.detail == f"{formal} not connected"
        assert f"Input {formal} is not connected" in items[nid].toolTip()
    # (b) weights are still weights
    qtbot.waitUntil(lambda: _tree_value(inspector, "Model", "parameters") is not None, timeout=3000)
    assert _tree_value(inspector, "Model", "parameters") == "764 in 25 tensors"
    # (c) fold-constants has nothing to offer
    rewrites = window.panels["rewrites"].widget()
    qtbot.waitUntil(rewrites._counts_current, timeout=10000)
    assert rewrites.matches.get("fold-constants", []) == []

    # (d) double-clicking the Conv's row selects it and brings it into view
    row = next(problems.topLevelItem(i) for i in range(problems.topLevelItemCount())
               if problems.topLevelItem(i).text(0) == f"Conv #{CONV}")
    assert "required input X" in row.text(1)
    window.canvas.centerOn(items[RELU_AFTER_ADD - 1].sceneBoundingRect().center())  # look elsewhere first
    window.panels["problems"].raise_()
    problems.scrollToItem(row)
    rect = problems.visualItemRect(row)
    assert problems.isVisible() and rect.isValid(), rect
    qtbot.mouseClick(problems.viewport(), Qt.LeftButton, pos=rect.center())  # item views need a press first
    qtbot.mouseDClick(problems.viewport(), Qt.LeftButton, pos=rect.center())
    assert window.document.selection == [CONV]
    seen = window.canvas.mapToScene(window.canvas.viewport().rect()).boundingRect()
    assert seen.contains(items[CONV].sceneBoundingRect().center())

    # undo brings the Relu back and the problems go
    window.undo_action.trigger()
    qtbot.waitUntil(lambda: problems.topLevelItemCount() == 0, timeout=5000)
