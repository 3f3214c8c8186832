"""ONNX -> Relax import: lineage recorded per node, converter hook, unsupported ops named."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core import load_model
from core.errors import UnsupportedOpError
from core.graph import Graph
from tests.conftest import sample


def _graph_of(model: onnx.ModelProto) -> Graph:
    import onnx_ir as ir

    g = Graph(ir.from_proto(model))
    g.infer_shapes()
    return g


def _celu_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first_relu"),
        helper.make_node("Celu", ["r"], ["y"], name="my_celu", alpha=1.5),
    ]
    g = helper.make_graph(nodes, "celu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_import_records_lineage_for_every_compute_node():
    from core.tvm_import import import_graph

    g = load_model(sample("small_cnn"))
    result = import_graph(g)
    compute = {n.id for n in g.nodes if not n.is_constant}
    assert set(result.bindings_of_node) == compute
    text = result.mod.script(show_meta=False)
    # bindings carry the ONNX output names, so the Relax text reads in the model's own words
    assert "stem_conv_out" in text and "block1_add_out" in text
    conv = g.find_node("stem.conv")
    assert result.lineage["stem_conv_out"] == [conv.id]
    bn = g.find_node("stem.bn")
    # batch_norm's helper bindings (tuple accesses) belong to the batch-norm node
    assert len(result.bindings_of_node[bn.id]) >= 2
    assert all(result.lineage[name] == [bn.id] for name in result.bindings_of_node[bn.id])


def test_unsupported_op_names_op_and_node():
    from core.tvm_import import import_graph

    with pytest.raises(UnsupportedOpError) as info:
        import_graph(_graph_of(_celu_model()))
    assert info.value.op_type == "Celu"
    assert info.value.node_name == "my_celu"
    assert "Celu" in str(info.value) and "my_celu" in str(info.value)


def test_registered_converter_takes_over_and_is_removable():
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

    from core.tvm_import import import_graph, register_converter, registered_converters, unregister_converter

    class Celu(OnnxOpConverter):
        @classmethod
        def _impl_v12(cls, bb, inputs, attr, params):
            x = inputs[0]
            alpha = relax.const(float(attr.get("alpha", 1.0)), "float32")
            neg = relax.op.multiply(alpha, relax.op.subtract(relax.op.exp(relax.op.divide(x, alpha)), relax.const(1.0, "float32")))
            return relax.op.add(relax.op.nn.relu(x), relax.op.minimum(neg, relax.const(0.0, "float32")))

    register_converter("Celu", Celu)
    try:
        assert registered_converters()["Celu"] is Celu
        g = _graph_of(_celu_model())
        result = import_graph(g)
        celu = g.find_node("my_celu")
        assert celu.id in result.bindings_of_node
        ex = tvm.compile(result.mod, tvm.target.Target({"kind": "llvm"}))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
        got = vm["main"](tvm.runtime.tensor(x)).numpy()
        r = np.maximum(x, 0)
        want = np.maximum(r, 0) + np.minimum(0, 1.5 * (np.exp(r / 1.5) - 1))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    finally:
        unregister_converter("Celu")
    with pytest.raises(UnsupportedOpError):
        import_graph(_graph_of(_celu_model()))
