"""Model-level differences (issue 44 item 5): two models with the same nodes that differ in opset,
IR version, producer, metadata or graph inputs/outputs are not "identical", and each difference is
named once. Checked against the diff before them, which called all of these "(identical)"."""
from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from core.model.graph import Graph
from core.views.diff import diff_graphs
from core.views.model_diff import ModelChange, model_changes


def _model(dtype=TensorProto.FLOAT, batch="N", opset=17, ir_version=8, extra_input=False) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("x", dtype, [batch, 4])]
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    if extra_input:
        ins.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [2]))
        nodes.append(helper.make_node("Neg", ["z"], ["w"], name="neg"))
    outs = [helper.make_tensor_value_info("y", dtype, [batch, 4])]
    if extra_input:
        outs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]))
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="pytorch", producer_version="2.5")
    m.ir_version = ir_version
    return m


def _graph(m: onnx.ModelProto) -> Graph:
    g = Graph(ir.from_proto(m))
    g.infer_shapes()
    return g


def _changes(a: onnx.ModelProto, b: onnx.ModelProto) -> list[tuple]:
    d = diff_graphs(_graph(a), _graph(b))
    assert not d.identical and not d.added and not d.removed
    return [(c.field, c.key, c.a, c.b) for c in d.model]


def test_the_same_model_has_no_model_level_differences():
    d = diff_graphs(_graph(_model()), _graph(_model()))
    assert d.identical and d.model == [] and d.to_json()["model"] == [] and d.to_json()["identical"] is True


@pytest.mark.parametrize("opset", [13, 1, 99])
def test_opset(opset):
    assert _changes(_model(), _model(opset=opset)) == [("opset", "ai.onnx", 17, opset)]


def test_opset_domains_ir_version_and_producer():
    b = _model(ir_version=7)
    b.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    b.producer_name, b.producer_version = "tf2onnx", "1.16"
    assert _changes(_model(), b) == [
        ("ir_version", "", 8, 7), ("opset", "com.microsoft", None, 1),
        ("producer_name", "", "pytorch", "tf2onnx"), ("producer_version", "", "2.5", "1.16")]
    b.producer_version = ""
    assert model_changes(_graph(_model()), _graph(b))[-1].text == 'producer version 2.5 → ""'
    # '' and 'ai.onnx' name one domain
    c = _model()
    c.opset_import[0].domain = "ai.onnx"
    assert diff_graphs(_graph(_model()), _graph(c)).identical


def test_model_and_graph_metadata():
    a, b = _model(), _model()
    helper.set_model_props(a, {"author": "x", "license": "MIT"})
    helper.set_model_props(b, {"author": "y", "source": "hub"})
    b.graph.metadata_props.add(key="stage", value="fused")
    assert _changes(a, b) == [("metadata", "author", "x", "y"), ("metadata", "license", "MIT", None),
                              ("metadata", "source", None, "hub"), ("graph_metadata", "stage", None, "fused")]


def test_input_dtype_and_symbolic_shape():
    d = diff_graphs(_graph(_model()), _graph(_model(dtype=TensorProto.DOUBLE, batch="batch")))
    model = {(c.field, c.key): c for c in d.model}
    assert set(model) == {("input", "x"), ("output", "y")}
    assert model[("input", "x")].text == "input 'x' float32 [N, 4] → float64 [batch, 4]"
    # a fixed batch against a symbolic one
    assert _changes(_model(), _model(batch=1))[0] == ("input", "x", "float32 [N, 4]", "float32 [1, 4]")


def test_inputs_and_outputs_present_on_one_side_and_reordered():
    changes = model_changes(_graph(_model()), _graph(_model(extra_input=True)))
    assert [(c.field, c.key, c.a, c.b) for c in changes] == [
        ("input", "z", None, "float32 [2]"), ("output", "w", None, "float32 [2]")]
    assert changes[0].text == "input 'z' float32 [2] only in B"
    swapped = _model(extra_input=True)
    swapped.graph.input.reverse()
    assert model_changes(_graph(_model(extra_input=True)), _graph(swapped)) == [ModelChange("input_order", "", "x, z", "z, x")]
