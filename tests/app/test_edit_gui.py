"""Editing in the GUI: Delete + undo by keys, attribute editing in the inspector, connect by
dragging from an output port, the Add Node dialog, Problems/History panels and the save guard."""
from __future__ import annotations

import onnx
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QLineEdit

from core import load_model
from tests.conftest import sample


def open_model(window, qtbot, name="small_cnn"):
    assert window.open_model(str(sample(name)), wait=True)
    window.canvas.setFocus()
    return window.document.graph


def wait_drawn(window, qtbot):
    """Until the canvas shows the document's current revision."""
    g = window.document.graph
    qtbot.waitUntil(lambda: not window.canvas.busy and window.canvas.view is not None
                    and window.canvas.view.data.get("revision") == g.revision, timeout=10000)


def port_and_body(window, node_id):
    """Viewport points on a node's output port (just above its lower edge) and on its body."""
    canvas = window.canvas
    item = canvas.node_items[node_id]
    bottom = item.mapToScene(item.rect.center().x(), item.rect.bottom() - 3 / canvas.zoom())
    return canvas.mapFromScene(bottom), canvas.mapFromScene(item.sceneBoundingRect().center())


def test_edit_delete_key_and_undo_restore_model_and_selection(window, qtbot):
    g = open_model(window, qtbot)
    original = g.to_bytes()
    relu = g.find_node("block1.a.relu").id
    window.canvas.select([relu])
    qtbot.keyClick(window.canvas, Qt.Key_Delete)
    assert g.find_node("block1.a.relu") is None
    assert window.undo_action.text().replace("&", "") == "Undo Delete Relu 'block1.a.relu'"
    wait_drawn(window, qtbot)
    assert relu not in window.canvas.node_items
    assert window.isWindowModified()
    qtbot.keyClick(window, Qt.Key_Z, Qt.ControlModifier)
    assert g.to_bytes() == original and g.has_node(relu)
    assert window.redo_action.text().replace("&", "") == "Redo Delete Relu 'block1.a.relu'"
    wait_drawn(window, qtbot)
    assert relu in window.canvas.node_items
    assert not window.isWindowModified()
    qtbot.keyClick(window, Qt.Key_Y, Qt.ControlModifier)  # Ctrl+Y redoes too
    assert not g.has_node(relu)
    history = window.panels["history"].view
    assert history.stack() is window.document.undo_stack and history.model().rowCount() == 2


def test_edit_delete_without_reconnect_is_flagged_in_problems(window, qtbot):
    g = open_model(window, qtbot)
    relu = g.find_node("stem.relu").id
    pool = g.find_node("pool1").id
    window.canvas.select([relu])
    window.edit_actions.delete_action.trigger()
    problems = window.panels["problems"].widget()
    qtbot.waitUntil(lambda: problems.topLevelItemCount() == 1, timeout=3000)
    assert problems.topLevelItem(0).text(0) == "MaxPool 'pool1'" and "required input X" in problems.topLevelItem(0).text(1)
    assert window.panels["problems"].windowTitle() == "Problems (1)"
    wait_drawn(window, qtbot)
    assert "problem" in window.canvas.node_items[pool].highlights
    window.undo_action.trigger()
    qtbot.waitUntil(lambda: problems.topLevelItemCount() == 0, timeout=3000)


def test_edit_attribute_in_inspector(window, qtbot):
    g = open_model(window, qtbot)
    pool = g.find_node("pool1").id
    window.canvas.select([pool])
    tree = window.panels["inspector"].widget()
    top = next(tree.topLevelItem(i) for i in range(tree.topLevelItemCount()) if tree.topLevelItem(i).text(0) == "Attributes")
    row = next(top.child(j) for j in range(top.childCount()) if top.child(j).text(0) == "strides")
    rect = tree.visualItemRect(row)
    where = QPoint(tree.columnWidth(0) + 20, rect.center().y())
    qtbot.mouseClick(tree.viewport(), Qt.LeftButton, pos=where)  # item views need a press before a double-click
    qtbot.mouseDClick(tree.viewport(), Qt.LeftButton, pos=where)
    editor = tree.viewport().findChild(QLineEdit)
    assert editor is not None and editor.text() == "2, 2"
    editor.selectAll()
    qtbot.keyClicks(editor, "1, 1")
    qtbot.keyClick(editor, Qt.Key_Return)
    qtbot.waitUntil(lambda: g.node(pool).attributes["strides"] == [1, 1], timeout=3000)
    assert window.undo_action.text().replace("&", "") == "Undo Set strides = [1, 1] on MaxPool 'pool1'"
    qtbot.waitUntil(lambda: ("Attributes", "strides", "[1, 1]") in tree.rows(), timeout=3000)
    # a value of the wrong type is refused with a sentence and the model is untouched
    before = g.to_bytes()
    messages = []
    window.edit_actions._error = lambda e: messages.append(str(e))
    assert not window.edit_actions.apply_inspector_edit(pool, "Attributes", "strides", 0, "two")
    assert g.to_bytes() == before and "'two' is not a valid ints" in messages[0]


def test_edit_connect_by_drag_from_output_port(window, qtbot):
    g = open_model(window, qtbot)
    add = g.find_node("block1.add").id
    pool = g.find_node("pool1").id
    chosen = []
    window.edit_actions.slot_chooser = lambda node_id, options: chosen.append(options) or 1
    window.canvas.fit()
    vp = window.canvas.viewport()
    port, _ = port_and_body(window, pool)
    _, target = port_and_body(window, add)
    assert vp.rect().contains(port) and vp.rect().contains(target)
    qtbot.mouseRelease(vp, Qt.LeftButton, pos=QPoint(2, 2))  # QTest keeps a double-click's button state across tests
    qtbot.mouseMove(vp, pos=port)
    assert window.edit_actions._port_dot is not None  # hovering the port shows it
    qtbot.mousePress(vp, Qt.LeftButton, pos=port)
    assert window.edit_actions._drag is None and window.document.selection == [pool]  # still a click
    qtbot.mouseMove(vp, pos=target)
    assert window.edit_actions._drag is not None
    assert "connect-target" in window.canvas.node_items[add].highlights
    qtbot.mouseRelease(vp, Qt.LeftButton, pos=target)
    qtbot.waitUntil(lambda: g.node(add).inputs[1] == "pool1_out", timeout=3000)
    assert [k for k, _ in chosen[0]] == [0, 1]
    assert window.undo_action.text().replace("&", "") == "Undo Connect 'pool1_out' to B of Add 'block1.add'"
    window.undo_action.trigger()
    assert g.node(add).inputs[1] == "block1.b.bn_out"


def test_edit_add_node_dialog_inserts_after_selection(window, qtbot):
    g = open_model(window, qtbot)
    gap = g.find_node("gap").id
    window.canvas.select([gap])
    dialog = window.edit_actions.add_node(inputs=["gap_out"], insert_on="gap_out", exec_dialog=False)
    qtbot.addWidget(dialog)
    assert dialog.op_list.count() > 150  # every op of opset 17
    dialog.search.setText("leaky")
    assert dialog.op_list.item(0).text() == "LeakyRelu"
    dialog.set_attribute_text("alpha", "0.2")
    assert dialog.apply()
    node = g.node(dialog.edit.node_id)
    assert node.op_type == "LeakyRelu" and abs(node.attributes["alpha"] - 0.2) < 1e-6
    assert g.find_node("flatten").inputs == [node.outputs[0]]
    # refused: Cast needs 'to'; the dialog stays open and says why
    again = window.edit_actions.add_node(inputs=["gap_out"], exec_dialog=False)
    qtbot.addWidget(again)
    again.select_op("Cast")
    assert not again.apply() and "attribute 'to'" in again.status.text()


def test_edit_save_guard_asks_before_overwriting_and_saving_invalid(window, qtbot, tmp_path):
    src = tmp_path / "model.onnx"
    src.write_bytes(sample("mlp").read_bytes())
    assert window.open_model(str(src), wait=True)
    g = window.document.graph
    asked = []
    answers = iter(["Cancel", "Overwrite"])
    window.edit_actions.ask = lambda title, text, buttons: asked.append(title) or next(answers)
    relu = g.find_node("relu0").id
    window.canvas.select([relu])
    window.edit_actions.delete_bridge_action.trigger()
    assert not window.save() and src.read_bytes() == sample("mlp").read_bytes()  # cancelled
    assert window.save() and asked == ["Overwrite the original model?"] * 2
    onnx.checker.check_model(onnx.load(src), full_check=True)
    assert load_model(src).find_node("relu0") is None
    assert window.save() and len(asked) == 2  # asked once per opened model
    # an invalid model: asked first, nothing written when declined
    window.canvas.select([g.find_node("relu1").id])
    window.edit_actions.delete_action.trigger()
    window.edit_actions.ask = lambda title, text, buttons: asked.append((title, text)) or "Cancel"
    before = src.read_bytes()
    assert not window.save() and src.read_bytes() == before
    assert asked[-1][0] == "Save an invalid model?" and "MatMul 'linear2.matmul' has nothing connected" in asked[-1][1]


def test_edit_unsaved_changes_are_asked_about_on_close(window, qtbot, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    g = open_model(window, qtbot, "mlp")
    window.canvas.select([g.find_node("relu0").id])
    window.edit_actions.delete_bridge_action.trigger()
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or QMessageBox.Cancel)
    assert not window.close() and window.isVisible()  # Cancel keeps the window and the edit
    assert asked == ["Save the changes to mlp.onnx first?"] and g.find_node("relu0") is None
    window.undo_action.trigger()  # back to the saved state: closing asks nothing
    assert window.close() and len(asked) == 1


def test_edit_add_node_dialog_variable_outputs(window, qtbot):
    g = open_model(window, qtbot, "tiny_transformer")
    dialog = window.edit_actions.add_node(inputs=["ln1.shift_out"], exec_dialog=False)
    qtbot.addWidget(dialog)
    dialog.select_op("Split")
    assert dialog.outputs_spin.isVisibleTo(dialog)
    dialog.outputs_spin.setValue(2)
    dialog.set_attribute_text("axis", "-1")
    assert dialog.apply(), dialog.status.text()
    split = g.node(dialog.edit.node_id)
    assert split.outputs == ["Split_1_out0", "Split_1_out1"]
    assert [v.shape for v in split.output_values] == [("batch", 16, 16), ("batch", 16, 16)]


def test_edit_context_menu_acts_on_the_clicked_node(window, qtbot):
    from PySide6.QtGui import QContextMenuEvent
    from PySide6.QtWidgets import QApplication

    g = open_model(window, qtbot, "mlp")
    relu = g.find_node("relu1").id
    window.canvas.fit()
    shown = []
    window.edit_actions.show_menu = lambda menu, pos: shown.append(menu)  # record instead of blocking in exec()
    _, body = port_and_body(window, relu)
    event = QContextMenuEvent(QContextMenuEvent.Reason.Mouse, body, window.canvas.viewport().mapToGlobal(body))
    QApplication.sendEvent(window.canvas.viewport(), event)
    assert window.document.selection == [relu]  # right-click selects what it points at
    actions = {a.text().replace("&", ""): a for a in shown[0].actions()}
    assert {"Delete", "Delete and Reconnect", "Insert Node After…", "Add Node…"} <= set(actions)
    actions["Make 'relu1_out' a Graph Output"].trigger()
    assert [v.name for v in g.outputs] == ["logits", "relu1_out"]
    assert window.undo_action.text().replace("&", "") == "Undo Add graph output 'relu1_out'"


def test_edit_problems_checked_on_a_worker_for_big_models(window, qtbot, monkeypatch):
    import app.panels.problems as problems_module

    monkeypatch.setattr(problems_module, "ASYNC_NODES", 0)  # treat the sample as big
    g = open_model(window, qtbot)
    panel = window.panels["problems"].widget()
    window.canvas.select([g.find_node("stem.relu").id])
    window.edit_actions.delete_action.trigger()
    window.undo_action.trigger()  # a burst: only the final state may be shown
    window.redo_action.trigger()
    qtbot.waitUntil(lambda: panel.topLevelItemCount() == 1 and panel._job is None, timeout=5000)
    assert panel.problems[0].node_id == g.find_node("pool1").id
    window.undo_action.trigger()
    qtbot.waitUntil(lambda: panel.topLevelItemCount() == 0 and panel._job is None, timeout=5000)


def test_big_models_are_checked_off_the_ui_thread_and_mid_edit_results_dropped(window, qtbot, monkeypatch):
    """On big models the whole check (the Graph-reading half too) runs on a worker; a result
    for a revision the model has left is dropped and the newer check's result shown."""
    import threading

    import app.panels.problems as problems_module

    monkeypatch.setattr(problems_module, "ASYNC_NODES", 0)
    threads = []
    real = problems_module.prepare
    monkeypatch.setattr(problems_module, "prepare", lambda g: threads.append(threading.current_thread()) or real(g))
    g = open_model(window, qtbot)
    panel = window.panels["problems"].widget()
    qtbot.waitUntil(lambda: bool(threads) and panel._job is None, timeout=5000)
    assert all(t is not threading.main_thread() for t in threads)
    stale = problems_module.Problem("Relu 'x'", "is stale")
    panel._job = job = object()
    panel._job_done(job, g, g.revision - 1, [stale])  # read before an edit: not shown
    assert stale not in panel.problems and panel._job is job
    panel._job_done(job, g, g.revision, [stale])
    assert panel.problems == [stale]
