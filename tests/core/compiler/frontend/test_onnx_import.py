"""ONNX -> Relax import: lineage recorded per node, converter hook, unsupported ops named."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core import load_model
from core.errors import UnsupportedOpError
from core.model.graph import Graph
from tests.conftest import sample
from tests.helpers import exporter_names_model


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
    from core.compiler.frontend.onnx_import import import_graph

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
    from core.compiler.frontend.onnx_import import import_graph

    with pytest.raises(UnsupportedOpError) as info:
        import_graph(_graph_of(_celu_model()))
    assert info.value.op_type == "Celu"
    assert info.value.node_name == "my_celu"
    assert "Celu" in str(info.value) and "my_celu" in str(info.value)


def test_registered_converter_takes_over_and_is_removable():
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

    from core.compiler.frontend.onnx_import import import_graph, register_converter, registered_converters, unregister_converter

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


@pytest.mark.slow
def test_local_functions_from_rewrites_are_inlined_with_lineage_to_the_call_node():
    """fuse-linear-relu's mlc.workbench.LinearRelu and fuse-gelu's local Gelu (opset < 20, with
    value_float Constants in its body) import, lower and compile; the fused kernel's lineage names
    the call node in the user's graph."""
    from core.compiler.compile import compile_model
    from core.compiler.lowering import lower
    from core.rewrite.engine import run_rules
    from core.compiler.frontend.onnx_import import import_graph
    from rewrites import get_rules

    g = load_model(sample("mlp"))
    run_rules(g, get_rules("fuse-linear-relu"))
    fused = [n for n in g.nodes if n.op_type == "LinearRelu"]
    assert len(fused) == 2
    result = import_graph(g)
    assert set(result.bindings_of_node) >= {n.id for n in fused}
    assert all(result.lineage[name] == [fused[0].id] for name in result.bindings_of_node[fused[0].id])
    stages = lower(g, "cpu")
    fuse_tir = next(s for s in stages if s.name == "FuseTIR")
    kernels = {name: ids for name, ids in fuse_tir.lineage.as_dict().items() if name.startswith("@fused") and "relu" in name}
    assert sorted(ids for ids in kernels.values()) == sorted([[n.id] for n in fused])
    art = compile_model(g, "cpu")
    assert art.manifest.verification.checked
    assert sorted(v for k, v in art.kernel_lineage.items() if "relu" in k) == sorted([[n.label] for n in fused])

    t = load_model(sample("tiny_transformer"))
    run_rules(t, get_rules("fuse-gelu"))
    gelu = next(n for n in t.nodes if n.op_type == "Gelu")
    assert gelu.domain == "mlc.workbench"
    art = compile_model(t, "cpu")
    assert art.manifest.verification.checked
    assert any(gelu.label in names and "erf" in kernel for kernel, names in art.kernel_lineage.items())


def test_unsupported_op_inside_a_local_function_names_the_call_node():
    from core.compiler.frontend.onnx_import import import_graph

    fn = onnx.parser.parse_function('<domain: "my.fns", opset_import: ["": 17]>\nTwice (x) => (y) {\n  r = Relu(x)\n  y = Celu(r)\n}')
    node = helper.make_node("Twice", ["x"], ["y"], name="call_site", domain="my.fns")
    graph = helper.make_graph([node], "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.fns", 1)],
                              functions=[fn])
    with pytest.raises(UnsupportedOpError) as info:
        import_graph(_graph_of(model))
    assert info.value.op_type == "Celu" and info.value.node_name == "call_site"
    assert "call_site" in str(info.value) and "Twice" in str(info.value)


@pytest.mark.parametrize("keep_params", [False, True])
def test_names_reaching_generated_code_are_unique_c_identifiers(keep_params):
    import re

    from tvm import relax

    from core.compiler.frontend.onnx_import import import_graph

    result = import_graph(_graph_of(exporter_names_model()), keep_params_in_input=keep_params)
    main = result.mod["main"]
    params = [p.name for p in main.params]
    dims = [v.name for v in relax.analysis.defined_symbolic_vars(main)]
    names = params + dims + [b.var.name for blk in main.body.blocks for b in blk.bindings]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) for n in names), names
    assert len(set(params)) == len(params) and dims == ["batch_0"]
    # the name that was an identifier already keeps it; the mapping tells the others' new names
    assert params[2] == "a_b" and "a_b" not in result.code_names
    assert result.code_names["a.b"] == params[0] and result.code_names["a/b"] == params[1]
    assert result.code_names["input-1"] == params[3] and result.code_names["batch:0"] == "batch_0"
    assert len(params) == (6 if keep_params else 5)
