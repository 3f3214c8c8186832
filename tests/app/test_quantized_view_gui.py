"""View ▸ Quantized Ops as One Box: a QDQ model's ops drawn with their Q/DQ nodes inside (on by
default, remembered), every Q/DQ node as its own box when off; the Inspector gives the selected
op's quantization."""
from __future__ import annotations

import onnx

from tests.core.compiler.qdq_models import qdq_cnn


def _ops(window) -> list[str]:
    return [n.label for n in window.canvas.view.nodes if n.data.get("kind") == "node"]


def test_toggle_quantized_ops_and_inspect_one(window, qtbot, tmp_path):
    path = tmp_path / "qdq_cnn.onnx"
    onnx.save(qdq_cnn(), path)
    assert window.open_model(str(path), wait=True)
    action = window.scopes.quantized_action
    assert action.isChecked()
    assert _ops(window) == ["QuantizeLinear", "Conv", "Conv", "GlobalAveragePool", "DequantizeLinear"]

    conv = next(n for n in window.canvas.view.nodes if n.label == "Conv")
    window.canvas.select([conv.id])
    qtbot.waitUntil(lambda: any(s == "Quantization" for s, _k, _v in window.panels["inspector"].widget().rows()), timeout=5000)
    rows = {(s, k): v for s, k, v in window.panels["inspector"].widget().rows()}
    assert rows[("Quantization", "output")].startswith("r1_QuantizeLinear_Output: uint8, scale")
    assert window.document.selection == [conv.id]  # the op itself is selected: edits act on the model

    action.setChecked(False)
    qtbot.waitUntil(lambda: not window.canvas.busy and _ops(window).count("DequantizeLinear") == 4, timeout=10_000)
    assert _ops(window).count("QuantizeLinear") == 4
    assert window.settings.value("view/foldQuantized") in (False, "false")
    action.setChecked(True)
    qtbot.waitUntil(lambda: not window.canvas.busy and len(_ops(window)) == 5, timeout=10_000)
