"""If / Loop / Scan bodies open on the canvas: double-click the node, switch branches, go back;
values a body reads from outside are drawn as inputs marked so."""
from __future__ import annotations

import onnx
from onnx import TensorProto as T
from onnx import helper

from core.views.subgraph import OUTER_NOTE, body_view, subgraph_attrs


def control_flow_model(path):
    """An If (then: Relu + Add on the outer x; else: Neg) feeding a Loop whose body holds an If."""
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 3])
    c = helper.make_tensor_value_info("cond", T.BOOL, [])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 3])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t1"], name="then_relu"), helper.make_node("Add", ["t1", "x"], ["t_out"], name="then_add")],
                               "then_branch", [], [helper.make_tensor_value_info("t_out", T.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"], name="else_neg")], "else_branch", [], [helper.make_tensor_value_info("e_out", T.FLOAT, [2, 3])])
    inner_then = helper.make_graph([helper.make_node("Add", ["acc", "acc"], ["d"], name="inner_double")], "inner_then", [], [helper.make_tensor_value_info("d", T.FLOAT, [2, 3])])
    inner_else = helper.make_graph([helper.make_node("Identity", ["acc"], ["k"], name="inner_keep")], "inner_else", [], [helper.make_tensor_value_info("k", T.FLOAT, [2, 3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"], name="keep_going"),
         helper.make_node("If", ["c_in"], ["acc_out"], name="inner_if", then_branch=inner_then, else_branch=inner_else)],
        "loop_body",
        [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("c_in", T.BOOL, []), helper.make_tensor_value_info("acc", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("c_out", T.BOOL, []), helper.make_tensor_value_info("acc_out", T.FLOAT, [2, 3])])
    nodes = [
        helper.make_node("If", ["cond"], ["branch"], name="choose", then_branch=then_g, else_branch=else_g),
        helper.make_node("Constant", [], ["n"], name="trip", value=helper.make_tensor("nv", T.INT64, [], [3])),
        helper.make_node("Loop", ["n", "", "branch"], ["y"], name="repeat", body=body),
    ]
    m = helper.make_model(helper.make_graph(nodes, "control", [x, c], [y]), opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return path


def test_body_view_of_an_if_branch(tmp_path):
    from core.model.onnx_io import load_model

    g = load_model(control_flow_model(tmp_path / "cf.onnx"))
    choose = g.find_node("choose").id
    assert subgraph_attrs(g, choose) == ["then_branch", "else_branch"]
    view, body = body_view(g, choose, "then_branch")
    assert [n.label for n in view.nodes if isinstance(n.id, int)] == ["Relu", "Add"]
    outer = [n for n in view.nodes if n.id == "input:x"]
    assert outer and OUTER_NOTE in outer[0].detail and "2×3" in outer[0].detail
    assert g.find_node("choose").ir.attributes["then_branch"].value is not None  # the model is untouched


def test_double_click_opens_bodies_switch_nest_and_back(window, qtbot, tmp_path):
    assert window.open_model(str(control_flow_model(tmp_path / "cf.onnx")), wait=True)
    canvas, nav = window.canvas, window.subgraphs
    g = window.document.graph
    choose = g.find_node("choose").id
    assert "then_branch" in canvas.view.node(choose).tooltip  # the box says it can be opened
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        canvas.nodeActivated.emit(choose)
    assert canvas.mode == "view" and canvas.view.title == "choose (If) ▸ then_branch"
    assert nav.bar.isVisible() and "then_branch" in nav.path.text()
    # the sibling branch, one click away
    (other,) = [nav.siblings.itemAt(i).widget() for i in range(nav.siblings.count())]
    assert other.text() == "else_branch"
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        other.click()
    assert canvas.view.title == "choose (If) ▸ else_branch" and len(nav.stack) == 1
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        nav.back()
    assert canvas.mode == "model" and not nav.bar.isVisible()
    # nested: the Loop's body, then the If inside it
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        canvas.nodeActivated.emit(g.find_node("repeat").id)
    inner = next(n.id for n in canvas.view.nodes if n.label == "If")
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        canvas.nodeActivated.emit(inner)
    assert len(nav.stack) == 2 and canvas.view.title == "inner_if (If) ▸ then_branch"
    assert "repeat (Loop)" in nav.path.text() and "inner_if (If)" in nav.path.text()
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        nav.back()
    assert canvas.view.title == "repeat (Loop) ▸ body"
    # showing the model by other means ends the trail
    with qtbot.waitSignal(canvas.viewShown, timeout=10000):
        canvas.show_model()
    assert not nav.stack and not nav.bar.isVisible()
