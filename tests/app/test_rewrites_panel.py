"""The Rewrites panel: counts matches off the UI thread, highlights them, previews with ghosts and
verification, applies as one undoable edit, and answers "why not?" for the selected node."""
from __future__ import annotations

from core.rewrite import find_matches
from rewrites import get_rule
from tests.conftest import sample


def _panel(window):
    return window.panels["rewrites"].widget()


def _find_rule_item(panel, rule_id):
    for i in range(panel.rule_list.topLevelItemCount()):
        item = panel.rule_list.topLevelItem(i)
        if item.text(0) == rule_id:
            return item
    raise AssertionError(rule_id)


def test_counts_highlight_preview_apply_undo(window, qtbot):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    panel = _panel(window)
    assert panel.wait_idle(30)
    g = window.document.graph
    expected = len(find_matches(g, get_rule("fold-conv-bn")))
    assert expected == 4
    assert _find_rule_item(panel, "fold-conv-bn").text(1) == "4"
    assert _find_rule_item(panel, "fuse-gelu").text(1) == "0"

    panel.select_rule("fold-conv-bn")
    assert panel.match_list.count() == 4
    highlighted = window.canvas._highlights.get("rewrite-match")
    assert highlighted is not None
    bns = {n.id for n in g.nodes if n.op_type == "BatchNormalization"}
    assert bns <= set(highlighted[0])

    before = g.to_bytes()
    ids_before = [n.id for n in g.nodes]
    panel.start_preview()
    assert panel.wait_idle(60)
    pv = panel.preview
    assert pv is not None and len(pv.applied) == 4
    assert pv.verification is not None and pv.verification.ok
    assert "Verified" in panel.last_result
    assert window.canvas.mode == "view"
    qtbot.waitUntil(lambda: window.canvas._ghosts[0] == bns, timeout=20000)
    assert window.document.graph.to_bytes() == before  # a preview never touches the model

    panel.apply_selected()
    assert panel.wait_idle(30)
    g = window.document.graph
    assert not any(n.op_type == "BatchNormalization" for n in g.nodes)
    assert window.document.undo_stack.count() == 1
    assert window.canvas.mode == "model"
    qtbot.waitUntil(lambda: _find_rule_item(panel, "fold-conv-bn").text(1) == "0", timeout=20000)

    window.document.undo_stack.undo()
    assert window.document.graph.to_bytes() == before
    assert [n.id for n in window.document.graph.nodes] == ids_before


def test_why_not_names_the_failed_condition(window):
    assert window.open_model(str(sample("tiny_transformer")), wait=True)
    panel = _panel(window)
    assert panel.wait_idle(30)
    g = window.document.graph
    add = g.find_node("attn.q.add")
    window.document.set_selection([add.id])
    panel.select_rule("fuse-matmul-add")
    panel.why_not()
    assert "rank 3" in panel.last_result and "Gemm needs 2-D" in panel.last_result
    # with no rule selected, every rule answers
    panel.rule_list.setCurrentItem(None)
    panel.why_not()
    assert panel.last_result.count("\n") == len(panel.rules)


def test_apply_all_through_the_panel(window):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    assert panel.wait_idle(30)
    panel.select_rule("fuse-matmul-add")
    panel.start_preview(apply=True, all_matches=True)
    assert panel.wait_idle(60)
    ops = [n.op_type for n in window.document.graph.nodes]
    assert ops.count("Gemm") == 3 and "MatMul" not in ops
    assert "Applied" in panel.last_result
