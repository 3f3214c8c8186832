"""Compile & Run on a QDQ model: the status line says which path its quantized ops took (int8
kernels on a CPU with AVX-512 VNNI, else float between the Q/DQ nodes), and the kernel chart and
heat name the int8 kernels by their Conv."""
from __future__ import annotations

import onnx

from core.compiler.passes.integer_conv import has_vnni
from core.compiler.target import make_target
from tests.core.compiler.qdq_models import fp32_wide_cnn, quantize_qdq


def test_compile_says_which_path_the_quantized_ops_took(window, qtbot, tmp_path):
    path = tmp_path / "wide_qdq.onnx"
    onnx.save(quantize_qdq(fp32_wide_cnn()), path)
    assert window.open_model(str(path), wait=True)
    panel = window.panels["compile"].widget()
    panel.runs.setValue(2)
    panel.start()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
    text = panel.status.text()
    if not has_vnni(make_target("cpu")):  # the target is this host's CPU
        assert "quantized ops in float between their Q/DQ nodes" in text, text
        return
    assert "3 quantized convs on int8 kernels (AVX-512 VNNI)" in text and "match onnxruntime" in text, text
    names = [k.name for k in panel.chart.kernels]
    assert sum(n.startswith("integer_conv_") for n in names) == 3
    heat = panel.heat_values()
    convs = {n.id for n in window.document.graph.nodes if n.op_type == "Conv"}
    assert convs <= set(heat)  # each Conv is lit by its int8 kernel's time
