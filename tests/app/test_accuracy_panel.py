"""Accuracy panel (issue 42): open, Debug, the first divergence ringed and centred, the tensor pair
opened; the compiled program listed kernel by kernel; an edit marks the result stale."""
from __future__ import annotations

import numpy as np
import onnx

from app.panels.accuracy import AGAINST, COMPILED, DIVERGENCE_ROLE
from tests.core.accuracy.test_debug import mlp_tanh, scaled_weight
from tests.core.views.test_diff_matching import cnn


def _panel(window):
    return window.panels["accuracy"].widget()


def test_against_a_changed_model_rings_the_changed_conv_and_opens_the_pair(window, qtbot, tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(cnn(), a)
    onnx.save(scaled_weight(cnn(), "b0b_w", 1.02), b)
    assert window.open_model(str(a), wait=True)
    panel = _panel(window)
    job = panel.start(AGAINST, str(b))
    assert job is not None
    qtbot.waitUntil(lambda: panel.report is not None, timeout=60_000)
    first = panel.report.first
    conv = next(n for n in window.document.graph.nodes if n.op_type == "Conv" and "b0b_w" in n.inputs)
    assert first is not None and first.node_id == conv.id
    # ringed on the canvas, selected and centred; its row is selected and marked
    canvas = window.canvas
    assert canvas.highlights[DIVERGENCE_ROLE][0] == {conv.id} and DIVERGENCE_ROLE in canvas.ring_roles
    assert window.document.selection == [conv.id]
    row = panel.table.selectedItems()[0].row()
    assert panel.table.item(row, 0).text().startswith("▶ ")
    # the accuracy overlay colours nodes by their error; nodes before the divergence are at 0
    values = canvas._overlay[0]
    assert values[conv.id] > 1 and max(values[n.id] for n in window.document.graph.nodes[:3]) == 0
    # both values side by side with their difference
    dialog = panel.view_values()
    assert dialog is not None and len(dialog.tables) == 3
    ours, ref = panel.report.pair(first.output)
    np.testing.assert_allclose(dialog.difference, ours.astype(np.float64) - ref)
    assert abs(float(np.abs(dialog.difference).max()) - first.max_abs) < 1e-6
    dialog.close()
    # an edit makes the result stale: the overlay and the ring go
    from core.model.edits import RenameNode

    assert window.document.push(RenameNode(window.document.graph, conv.id, "renamed"))
    assert panel.stale and "Debug again" in panel.status.text()
    assert canvas._overlay is None and not canvas.highlights.get(DIVERGENCE_ROLE, (set(),))[0]


def test_the_compiled_program_is_listed_kernel_by_kernel(window, qtbot, tmp_path):
    m = tmp_path / "mlp.onnx"
    onnx.save(mlp_tanh(), m)
    assert window.open_model(str(m), wait=True)
    panel = _panel(window)
    panel.start(COMPILED)
    qtbot.waitUntil(lambda: panel.report is not None, timeout=120_000)
    assert panel.report.first is None and "all agree" in panel.status.text()
    kernels = [panel.table.item(r, 7).text() for r in range(panel.table.rowCount())]
    assert kernels and all(kernels)
    panel.table.selectRow(0)
    assert panel.kernel_btn.isEnabled()


def test_a_failure_is_one_message_and_keeps_the_model(window, qtbot, tmp_path):
    a = tmp_path / "a.onnx"
    onnx.save(cnn(), a)
    other = tmp_path / "other.onnx"
    m = cnn()
    m.graph.input[0].name = "image"
    m.graph.node[0].input[0] = "image"
    onnx.save(m, other)
    assert window.open_model(str(a), wait=True)
    panel = _panel(window)
    panel.start(AGAINST, str(other))
    qtbot.waitUntil(lambda: panel.job is not None and not panel.job.isRunning(), timeout=60_000)
    qtbot.waitUntil(lambda: "image" in panel.status.text(), timeout=5_000)
    assert panel.report is None and window.document.graph is not None


def test_show_kernel_lowers_the_model_and_opens_the_kernel(window, qtbot, tmp_path):
    m = tmp_path / "mlp.onnx"
    onnx.save(mlp_tanh(), m)
    assert window.open_model(str(m), wait=True)
    panel = _panel(window)
    panel.start(COMPILED)
    qtbot.waitUntil(lambda: panel.report is not None, timeout=120_000)
    panel.table.selectRow(0)
    kernel = panel.selected().kernel
    lowering = window.panels["lowering"].widget()
    panel.show_kernel()
    qtbot.waitUntil(lambda: lowering.expanded == kernel, timeout=120_000)


def test_values_not_kept_are_computed_again_off_the_ui_thread(window, qtbot, tmp_path):
    from app.dialogs.tensor_pair import TensorPairViewer

    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(cnn(), a)
    onnx.save(scaled_weight(cnn(), "b0b_w", 1.02), b)
    assert window.open_model(str(a), wait=True)
    panel = _panel(window)
    panel.start(AGAINST, str(b))
    qtbot.waitUntil(lambda: panel.report is not None, timeout=60_000)
    first = panel.report.first
    kept = panel.report.kept.pop(first.output)  # as if too big to keep
    assert panel.view_values() is None  # computing: the worker hands the values over
    qtbot.waitUntil(lambda: any(d.isVisible() for d in window.findChildren(TensorPairViewer)), timeout=60_000)
    dialog = next(d for d in window.findChildren(TensorPairViewer) if d.isVisible())
    # onnxruntime sums in another order when only this tensor is an output: the same values to rounding
    np.testing.assert_allclose(dialog.ours, kept[0], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dialog.reference, kept[1], rtol=1e-5, atol=1e-4)
    dialog.close()
