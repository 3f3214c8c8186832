"""Compile & Run panel: compile off the UI thread, results beside onnxruntime, kernel chart,
heat overlay through lineage, cancel, export, and a refused compile explained in one sentence."""
from __future__ import annotations

import json

from tests.conftest import sample


def _panel(window):
    return window.panels["compile"].widget()


def test_compile_and_run_fills_table_chart_and_heat(window, qtbot, tmp_path):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    panel = _panel(window)
    panel.runs.setValue(2)
    panel.start()
    assert not panel.compile_btn.isEnabled() and panel.cancel_btn.isEnabled()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
    labels = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
    assert "Latency median" in labels and "Activations, planned" in labels and "Ratio ours / onnxruntime" in labels
    row = labels.index("Latency median")
    assert panel.table.item(row, 1).text().endswith("ms") and panel.table.item(row, 2).text().endswith("ms")
    assert "match onnxruntime" in panel.status.text()
    assert panel.chart.kernels and panel.chart.kernels[0]["ms"] >= panel.chart.kernels[-1]["ms"]
    heat = panel.heat_values()
    conv_ids = {n.id for n in window.document.graph.nodes if n.op_type == "Conv"}
    assert conv_ids <= set(heat)
    assert window.canvas._overlay is not None and set(window.canvas._overlay[0]) == set(heat)
    # clicking the top bar selects the ONNX nodes its kernel came from
    panel._select_kernel(panel.chart.kernels[0])
    assert set(window.document.selection) == set(panel._node_ids(panel.chart.kernels[0]["onnx_nodes"]))
    panel.heat.setChecked(False)
    assert window.canvas._overlay is None
    # export on the worker, with the measured figures in the manifest
    panel.export_to(str(tmp_path / "out"))
    qtbot.waitUntil(lambda: (tmp_path / "out" / "manifest.json").exists() and panel.compile_btn.isEnabled(), timeout=60_000)
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["measured"]["latency_ms"]["runs"] == 2 and (tmp_path / "out" / "run.py").exists()


def test_cancel_stops_the_compile(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    panel.start()
    panel.cancel()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert panel.result is None and panel.progress.format() == "cancelled"


def test_unsupported_op_is_explained(window, qtbot, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    m = helper.make_model(helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], name="norm", axis=1, p=2)], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "lp.onnx")
    assert window.open_model(str(tmp_path / "lp.onnx"), wait=True)
    panel = _panel(window)
    panel.start()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert "LpNormalization" in panel.status.text() and panel.result is None
    norm = window.document.graph.find_node("norm")
    assert list(window.document.selection) == [norm.id]


def test_cuda_compile_without_gpu_offers_export(window, qtbot):
    from core.compile import _gpu_present

    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    panel.target.setCurrentIndex(panel.target.findData("cuda"))
    panel.start()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=120_000)
    assert panel.artifact is not None and panel.artifact.target == "cuda" and panel.export_btn.isEnabled()
    if not _gpu_present():
        assert panel.result is None and "No GPU here" in panel.status.text()
        labels = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
        assert "Parameters" in labels and "Latency median" not in labels


def test_compile_uses_the_lowering_panels_pipeline(window):
    from core.pipeline import PassSpec

    lowering = window.panels.get("lowering")
    if lowering is None:
        return
    lp = lowering.widget()
    lp.target_box.setCurrentText("cpu")
    specs = [PassSpec(s.name, enabled=(s.name != "FuseOps" and s.enabled)) for s in lp.specs()]
    lp.set_specs(specs)
    assert _panel(window)._lowering_pipeline("cpu") == specs
    assert _panel(window)._lowering_pipeline("cuda") is None
