"""A model's view from its protobuf (core.views.proto_view) is the view `from_graph` gives the
loaded model, field by field: the workbench draws the one and adopts it as the other."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core import load_model
from core.model.samples import scoped_bert
from core.views.proto_view import proto_view
from core.views.viewgraph import from_graph
from tests.core.compiler.qdq_models import qdq_cnn
from tests.helpers import external_weights_cnn

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _both(path: Path):
    made = {}
    graph = load_model(path, checked=lambda proto, types: made.update(pv=proto_view(proto, types, path.name, path.parent)))
    return from_graph(graph), made["pv"], graph


def _assert_same(path: Path):
    loaded, made, graph = _both(path)
    view = made.view
    assert [asdict(n) for n in view.nodes] == [asdict(n) for n in loaded.nodes]
    assert [asdict(e) for e in view.edges] == [asdict(e) for e in loaded.edges]
    assert (view.title, view.data) == (loaded.title, loaded.data)
    for name, size in made.sizes.items():
        assert size == (graph.value(name).size or 0), name
    return view


def _odd_model() -> onnx.ModelProto:
    """What the view has rules for: a symbolic batch, declared partial value_info, an initializer
    that is also an input, a scalar weight's value, Conv strides/groups, Reduce axes from an
    input, Cast, an If with its branches, an unnamed optional output, a custom-domain op."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    bias_in = numpy_helper.from_array(np.zeros(4, np.float32), "bias")
    then_g = helper.make_graph([helper.make_node("Identity", ["m"], ["t_out"])], "then", [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["N", 4, 4, 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["m"], ["e_out"])], "else", [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["N", 4, 4, 4])])
    nodes = [
        helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", strides=[2, 2], group=2, pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "half"], ["m"], name="scale"),
        helper.make_node("Dropout", ["m"], ["d", ""], name="drop"),
        helper.make_node("ReduceSum", ["d", "axes"], ["r"], name="sum", keepdims=0),
        helper.make_node("Cast", ["r"], ["r64"], name="cast", to=TensorProto.DOUBLE),
        helper.make_node("ReduceMax", ["m"], ["cond_f"], name="max", keepdims=0),
        helper.make_node("Cast", ["cond_f"], ["cond"], to=TensorProto.BOOL),
        helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Gelu", ["branch"], ["g"], name="gelu", domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes, "odd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8]), helper.make_tensor_value_info("bias", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("r64", TensorProto.DOUBLE, ["N", 4]), helper.make_tensor_value_info("g", TensorProto.FLOAT, ["N", None, 4, 4])],
        [w, half, axes, bias_in],
        value_info=[helper.make_tensor_value_info("c", TensorProto.FLOAT, ["N", 4, None, None])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=8)


@pytest.mark.parametrize("name", ["light_resnet50.onnx", "light_inception_v2.onnx", "light_shufflenet.onnx"])
def test_the_light_models(name):
    _assert_same(LIGHT / name)


def test_a_model_with_every_rule(tmp_path):
    path = tmp_path / "odd.onnx"
    onnx.save(_odd_model(), path)
    view = _assert_same(path)
    by_name = {n.data.get("name"): n for n in view.nodes}
    assert "B = 0.5" in by_name["scale"].badges and by_name["sum"].detail.startswith("axes 2,3")
    assert sorted(by_name["if"].data["subgraphs"]) == ["else_branch", "then_branch"] and by_name["gelu"].label == "com.microsoft.Gelu"


def test_named_scopes_and_a_quantized_model(tmp_path):
    onnx.save(scoped_bert(layers=2, dim=8, heads=2, ffn=16, vocab=32), tmp_path / "bert.onnx")
    onnx.save(qdq_cnn(), tmp_path / "qdq.onnx")
    _assert_same(tmp_path / "bert.onnx")
    _assert_same(tmp_path / "qdq.onnx")


def test_weights_in_an_external_file(tmp_path):
    _assert_same(external_weights_cnn(tmp_path))

