"""QDQ models drawn as their ops (core.views.quantized): each op with its input DequantizeLinear
and output QuantizeLinear in one box, the edges between ops carrying the quantized tensors; the
Inspector's rows give each quantized tensor's type, scale and zero point."""
from __future__ import annotations

import onnx

from core.model.onnx_io import load_model_bytes
from core.views.quantized import fold_quantized, is_quantized_view
from core.views.viewgraph import from_graph, node_facts
from tests.core.compiler.qdq_models import fp32_cnn, qdq_cnn


def _graph(model: onnx.ModelProto):
    return load_model_bytes(model.SerializeToString(), "model.onnx")


def test_each_quantized_op_is_one_box():
    graph = _graph(qdq_cnn())
    raw = from_graph(graph)
    folded = fold_quantized(raw)
    ops = [n.label for n in folded.nodes if n.data.get("kind") == "node"]
    # the input's quantizer and the output's dequantizer are next to no op: boxes of their own
    assert ops == ["QuantizeLinear", "Conv", "Conv", "GlobalAveragePool", "DequantizeLinear"]
    assert sum(n.label in ("QuantizeLinear", "DequantizeLinear") for n in raw.nodes) == 8
    conv = next(n for n in folded.nodes if n.label == "Conv")
    assert conv.detail == "quantized uint8 → uint8"
    qdq = conv.data["qdq"]
    hidden = qdq["dequantize"] + [qdq["quantize"]]
    assert [graph.node(i).op_type for i in hidden] == ["DequantizeLinear", "QuantizeLinear"]
    assert set(hidden) <= set(conv.origin) and conv.id in conv.origin
    # ops connect to ops, over the quantized tensors; nothing points at a hidden node
    drawn = {n.id for n in folded.nodes}
    assert all(e.src in drawn and e.dst in drawn for e in folded.edges)
    convs = [n.id for n in folded.nodes if n.label == "Conv"]
    between = [e for e in folded.edges if (e.src, e.dst) == (convs[0], convs[1])]
    assert len(between) == 1 and between[0].detail.endswith("uint8")
    assert len(folded.edges) == len(folded.nodes) - 1  # still one chain


def test_a_float_model_is_drawn_as_it_is():
    view = from_graph(_graph(fp32_cnn()))
    assert not is_quantized_view(view) and fold_quantized(view) is view


def test_the_inspector_rows_give_scales_and_zero_points():
    graph = _graph(qdq_cnn())
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    rows = {k: v for section, k, v in node_facts(graph, conv.id) if section == "Quantization"}
    assert rows["input 0"].startswith("input_QuantizeLinear_Output: uint8, scale ") and "zero point" in rows["input 0"]
    assert "int8, 8 scales along axis 0" in rows["input 1"]  # per-channel weights
    assert rows["output"].startswith("r1_QuantizeLinear_Output: uint8, scale ")
    plain = _graph(fp32_cnn())
    assert not [r for r in node_facts(plain, plain.nodes[0].id) if r[0] == "Quantization"]


def test_a_dequantize_read_by_two_ops_stays_a_box_of_its_own():
    from onnx import TensorProto, helper

    s = helper.make_tensor("s", TensorProto.FLOAT, [], [0.05])
    z = helper.make_tensor("z", TensorProto.UINT8, [], [128])
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("Relu", ["xd"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]), helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"]),
        helper.make_node("Add", ["xd", "rd"], ["a"]),  # the residual reads xd too
        helper.make_node("QuantizeLinear", ["a", "s", "z"], ["aq"]), helper.make_node("DequantizeLinear", ["aq", "s", "z"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph(nodes, "residual", [x], [y], [s, z]), opset_imports=[helper.make_opsetid("", 19)])
    folded = fold_quantized(from_graph(_graph(model)))
    boxes = {n.label: n for n in folded.nodes if n.data.get("kind") == "node"}
    assert [n.label for n in folded.nodes if n.data.get("kind") == "node"] == ["QuantizeLinear", "DequantizeLinear", "Relu", "Add", "DequantizeLinear"]
    assert boxes["Relu"].detail == "quantized uint8 → uint8" and boxes["Relu"].data["qdq"]["dequantize"] == []
    assert len(boxes["Add"].data["qdq"]["dequantize"]) == 1
