"""The heat map on a model with a symbolic batch (issue 41 item 8, `mlp_dyn`): every node is
coloured, the last Add too (its kernel is fused_matmul1_add…: main's result kept the generic name
`gv`, and lineage dropped it, core/compiler/pipeline/lineage.py), and the legend covers no node."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_dyn() -> onnx.ModelProto:
    """x[N, 16] -> MatMul + Add -> Relu -> MatMul + Add -> y[N, 8]: unnamed nodes, batch 'N'."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 8)), ("b2", (8,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    g = helper.make_graph(nodes, "mlp_dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_every_node_of_mlp_dyn_is_coloured_and_the_legend_covers_none(window, qtbot, tmp_path):
    path = tmp_path / "mlp_dyn.onnx"
    onnx.save(mlp_dyn(), str(path))
    assert window.open_model(str(path), wait=True)
    panel = window.panels["compile"].widget()
    assert panel.dims.isVisible() and panel.dims.text() == "N=1"
    panel.dims.setText("N=3")
    panel.runs.setValue(1)
    panel.vs_ort.setChecked(False)
    panel.start()
    qtbot.waitUntil(lambda: panel.result is not None and not panel._busy_now, timeout=120_000)
    graph = window.document.graph
    last = graph.nodes[-1]
    assert last.op_type == "Add"
    heat = panel.heat_values()
    assert set(heat) == {n.id for n in graph.nodes}, [n.label for n in graph.nodes if n.id not in heat]
    kernel = next(k for k in panel.heat_kernels if last.label in k.onnx_nodes)
    assert kernel.name.startswith("fused_matmul1_add"), kernel.name
    # the legend lies over no node as drawn: fitted, and scrolled so that the input node sits
    # in the top left corner (where the legend once was, over it)
    canvas = window.canvas
    canvas.fit()
    qtbot.wait(50)
    assert canvas.legend.isVisible()
    _assert_legend_covers_no_node(canvas)
    canvas.zoom_100()
    first = canvas.layout_result.boxes[next(k for k in canvas.layout_result.boxes if not isinstance(k, int))]
    vp = canvas.viewport().rect()
    canvas.centerOn(first.x + vp.width() / 2 - 60, first.y + vp.height() / 2 - 25)
    qtbot.wait(50)
    _assert_legend_covers_no_node(canvas)


def _assert_legend_covers_no_node(canvas) -> None:
    from PySide6.QtCore import QRectF

    legend = canvas.legend.geometry()
    vp = canvas.viewport().geometry()
    for key, b in canvas.layout_result.boxes.items():
        box = canvas.mapFromScene(QRectF(b.x - b.w / 2, b.y - b.h / 2, b.w, b.h)).boundingRect().translated(vp.topLeft())
        assert not legend.intersects(box), (key, legend, box)
