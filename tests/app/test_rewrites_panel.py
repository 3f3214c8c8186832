"""The Rewrites panel: counts matches off the UI thread, highlights them, previews with ghosts and
verification, applies as one undoable edit, and answers "why not?" for the selected node."""
from __future__ import annotations

from core.rewrite import find_matches
from rewrites import get_rule
from tests.conftest import sample


def _panel(window):
    return window.panels["rewrites"].widget()


def _find_rule_item(panel, rule_id):
    for i in range(panel.rule_list.topLevelItemCount()):  # rules sit under their family's row
        family = panel.rule_list.topLevelItem(i)
        for j in range(family.childCount()):
            if family.child(j).text(0) == rule_id:
                return family.child(j)
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
    highlighted = window.canvas.highlights.get("rewrite-match")
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
    # every rule answers, whichever is selected; the selected one leads the rules that do not apply
    lines = panel.last_result.splitlines()
    assert len(lines) == len(panel.rules) + 1 and "0 of" in lines[0]
    assert lines[1].startswith("✘ fuse-matmul-add:")
    panel.rule_list.setCurrentItem(None)
    panel.why_not()
    assert panel.last_result.count("\n") == len(panel.rules)
    # opening another model clears the answer about this one
    assert window.open_model(str(sample("mlp")), wait=True)
    assert panel.last_result == "" and panel.result.toPlainText() == ""


def test_why_not_on_an_existing_layernorm_says_it_is_the_result(window, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    inits = [helper.make_tensor("g", TensorProto.FLOAT, [8], [1.0] * 8), helper.make_tensor("b", TensorProto.FLOAT, [8], [0.0] * 8)]
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1)
    onnx.save(helper.make_model(helper.make_graph([node], "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "ln.onnx")
    assert window.open_model(str(tmp_path / "ln.onnx"), wait=True)
    panel = _panel(window)
    assert panel.wait_idle(30)
    window.document.set_selection([window.document.graph.find_node("ln").id])
    panel.why_not()
    line = next(l for l in panel.last_result.splitlines() if "fuse-layernorm" in l)
    assert "already a LayerNormalization" in line and "not part of this rule's pattern" not in line


def test_apply_selects_the_new_node_and_undo_clears_applied(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    assert panel.wait_idle(30)
    canvas = window.canvas
    canvas.zoom_100()
    panel.select_rule("fuse-matmul-add")
    panel.match_list.setCurrentRow(2)  # the last MatMul+Add, far down the graph
    panel.start_preview()
    assert panel.wait_idle(60)
    qtbot.waitUntil(lambda: canvas.mode == "view" and not canvas.busy, timeout=20000)
    zoom = canvas.zoom()  # the preview's
    with qtbot.waitSignal(canvas.viewShown, timeout=20000):
        panel.apply_selected()
    assert panel.wait_idle(30)
    qtbot.waitUntil(lambda: bool(window.document.selection), timeout=20000)
    g = window.document.graph
    (new,) = window.document.selection
    assert g.node(new).op_type == "Gemm" and canvas.selected_ids() == [new]
    assert canvas._visible(new) and abs(canvas.zoom() - zoom) < 1e-6  # in view, at the zoom the preview had
    assert "Applied" in panel.last_result
    window.document.undo_stack.undo()
    assert panel.last_result == ""


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
