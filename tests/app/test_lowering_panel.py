"""The Lowering panel: off-thread lowering with cancel, stage display, lineage, expansion, pipeline edits."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper
from PySide6.QtCore import Qt

from tests.conftest import sample

LONG = 120_000


def _panel(window, qtbot, model=None):
    assert window.open_model(str(model or sample("mlp")), wait=True)
    panel = window.lowering_panel
    return panel


def _lower(panel, qtbot):
    panel.start()
    assert panel.running
    qtbot.waitUntil(lambda: not panel.running, timeout=LONG)


def _wait_view(panel, qtbot, title_prefix):
    canvas = panel.window.canvas
    qtbot.waitUntil(lambda: canvas.view is not None and canvas.view.title.startswith(title_prefix), timeout=LONG)


def test_stages_lineage_expand_and_keys(window, qtbot):
    panel = _panel(window, qtbot)
    _lower(panel, qtbot)
    names = [s.name for s in panel.stages]
    assert panel.stage_tree.topLevelItemCount() == len(names) and names[-1] == "LLVM IR"
    assert "stages" in panel.status.text()

    # the ONNX stage: the model itself; clicking a node shows its line of the listing
    panel.select_stage(0)
    assert window.canvas.mode == "model"
    node = window.document.graph.find_node("linear1.matmul")
    window.canvas.select([node.id])
    qtbot.waitUntil(lambda: panel.ir.marked is not None)
    assert "linear1.matmul" in panel.ir.marked_text()

    fuse = names.index("FuseTIR")
    panel.select_stage(fuse)
    _wait_view(panel, qtbot, f"{fuse}.")
    stage = panel.stages[fuse]
    assert panel.ir.text == stage.text and "FuseTIR" in panel.header.text()
    assert panel.ir.changed  # lines changed since FuseOps are marked

    # click a kernel call: its IR line, its ONNX origin, the lineage outline
    canvas = window.canvas
    call = next(n for n in canvas.view.nodes if n.data.get("callee") == "fused_matmul_add_relu")
    canvas.select([call.id])
    qtbot.waitUntil(lambda: panel.ir.marked is not None)
    assert "fused_matmul_add_relu" in panel.ir.marked_text()
    graph = window.document.graph
    expected = {graph.find_node(n).id for n in ("linear0.matmul", "linear0.add", "relu0")}
    assert set(panel.origin) == expected
    assert call.id in canvas._highlights["lineage"][0]
    assert "linear0.matmul" in panel.origin_label.text()
    assert set(window.document.selection) == expected

    # expand the call into its TIR kernel and come back
    panel._canvas_activated(call.id)
    assert panel.expanded == "fused_matmul_add_relu"
    _wait_view(panel, qtbot, "fused_matmul_add_relu")
    assert canvas.view.data["source"] == "tir" and any(n.data.get("kind") == "block" for n in canvas.view.nodes)
    assert not panel.back_button.isHidden()
    panel.collapse()
    _wait_view(panel, qtbot, f"{fuse}.")

    # the origin in the model
    canvas.select([call.id])
    panel.show_origin_in_model()
    assert canvas.mode == "model"
    assert canvas._highlights["lineage"][0] == expected

    # keys step through the visible stages; hiding unchanged stages skips them
    panel.select_stage(fuse)
    qtbot.keyClick(window, Qt.Key_Down, modifier=Qt.AltModifier)
    assert panel.current.index == fuse + 1
    panel.hide_unchanged.setChecked(True)
    hidden = [s.index for s in panel.stages if not s.changed]
    assert hidden and all(panel.stage_tree.topLevelItem(i).isHidden() for i in hidden)
    panel.select_stage(0)
    seen = []
    for _ in range(len(panel.stages)):
        panel.step(1)
        seen.append(panel.current.index)
    assert not set(seen) & set(hidden)

    # edit the pipeline: disable FuseOps, re-run; the prefix comes from the cache
    item = next(panel.pass_list.item(i) for i in range(panel.pass_list.count()) if panel.pass_list.item(i).data(Qt.UserRole) == "FuseOps")
    item.setCheckState(Qt.Unchecked)
    assert panel.rerun_button.isEnabled()
    panel.rerun_button.click()
    qtbot.waitUntil(lambda: not panel.running, timeout=LONG)
    assert "FuseOps" not in [s.name for s in panel.stages]
    assert any(s.cached for s in panel.stages) and "from the cache" in panel.status.text()
    # a required pass cannot be switched off
    legal = next(panel.pass_list.item(i) for i in range(panel.pass_list.count()) if panel.pass_list.item(i).data(Qt.UserRole) == "LegalizeOps")
    legal.setCheckState(Qt.Unchecked)
    assert not panel.rerun_button.isEnabled() and "required" in panel.pass_status.text()
    qtbot.waitUntil(lambda: panel.view_job is None or panel.view_job.isFinished(), timeout=LONG)


def test_cancel_and_unsupported_op(window, qtbot, tmp_path):
    panel = _panel(window, qtbot)
    panel.start()
    panel.cancel()
    qtbot.waitUntil(lambda: not panel.running, timeout=LONG)
    assert "Cancelled" in panel.status.text()

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r0"), helper.make_node("Celu", ["r"], ["y"], name="odd_celu")]
    g = helper.make_graph(nodes, "celu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "celu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    panel = _panel(window, qtbot, path)
    _lower(panel, qtbot)
    assert "odd_celu" in panel.status.text() and "Celu" in panel.status.text()
    assert [s.name for s in panel.stages] == ["ONNX graph"]  # what came before stays viewable
    assert panel.current is not None and panel.current.index == 0
    assert "Celu" in panel.ir.text
