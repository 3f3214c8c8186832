"""core.compiler.frontend.shape_folding: sizes computed from static shapes become constants before import,
so Reshape targets, Reduce axes and Resize sizes written as computations compile; symbolic dims
and true run-time inputs are left alone (and refused where TVM needs a constant)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.compile import compile_model
from core.compiler.frontend.shape_folding import fold_static_shapes
from core.errors import UnsupportedOpError
from core.model.onnx_io import load_model_bytes
from tests.helpers import ort_run

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opset=18) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, list(inits)), opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _const(name: str, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(np.asarray(value, dtype=dtype)))


def _view_heads(dims) -> onnx.ModelProto:
    """x.view(b, t, 2, c // 2) as torch.onnx writes it: Shape -> Gather -> Unsqueeze, a Div, Concat."""
    nodes = [_const("zero", 0), _const("one", 1), _const("two", 2), _const("axis0", [0]), _const("heads", [2])]
    parts = []
    for k, idx in enumerate(["zero", "one", "two"]):
        nodes += [helper.make_node("Shape", ["x"], [f"s{k}"], name=f"shape{k}"),
                  helper.make_node("Gather", [f"s{k}", idx], [f"g{k}"], name=f"gather{k}", axis=0),
                  helper.make_node("Unsqueeze", [f"g{k}", "axis0"], [f"u{k}"], name=f"unsqueeze{k}")]
        parts.append(f"u{k}")
    nodes += [helper.make_node("Div", [parts[2], "heads"], ["head"], name="div"),
              helper.make_node("Concat", [parts[0], parts[1], "heads", "head"], ["target"], name="concat", axis=0),
              helper.make_node("Reshape", ["x", "target"], ["y"], name="view")]
    return _model(nodes, [helper.make_tensor_value_info("x", F32, dims)], [helper.make_tensor_value_info("y", F32, dims[:2] + [2, 4])])


def test_a_view_target_computed_from_a_static_shape_becomes_one_constant_in_place():
    m = _view_heads([2, 3, 8])
    count = len(m.graph.node)
    folded = fold_static_shapes(m)
    assert "target" in folded and len(m.graph.node) == count  # in place: the import's lineage still holds
    by_output = {n.output[0]: n for n in m.graph.node}
    assert by_output["target"].op_type == "Constant" and by_output["target"].name == "concat"
    assert numpy_helper.to_array(by_output["target"].attribute[0].t).tolist() == [2, 3, 2, 4]
    assert by_output["y"].op_type == "Reshape"  # the data path is not touched


def test_symbolic_dims_are_not_folded_only_the_static_ones():
    m = _view_heads(["batch", "sequence", 8])
    folded = set(fold_static_shapes(m))
    assert "g2" in folded and "head" in folded  # the hidden size is static: 8 // 2
    assert not folded & {"s0", "g0", "g1", "target"}


def test_a_symbolic_size_used_as_a_slice_bound_or_index_is_not_folded():
    """Slice(buffer, Shape(x)[1], 16) with x [batch, sequence]: the bound is symbolic, so the slice
    is no constant (the placeholder standing for `sequence` must never decide a result)."""
    nodes = [_const("one", 1), _const("sixteen", [16]), _const("axis0", [0]),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["n"], name="seq", axis=0),
             helper.make_node("Unsqueeze", ["n", "axis0"], ["end"], name="end"),
             helper.make_node("Slice", ["buffer", "end", "sixteen"], ["pos"], name="positions"),
             helper.make_node("Gather", ["buffer", "n"], ["last"], name="pick")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F32, ["batch", "sequence"])],
               [helper.make_tensor_value_info("pos", I64, ["rest"]), helper.make_tensor_value_info("last", I64, [])],
               [numpy_helper.from_array(np.arange(16, dtype=np.int64), "buffer")])
    assert fold_static_shapes(m) == []
    assert [n.op_type for n in m.graph.node if n.name in ("positions", "pick")] == ["Slice", "Gather"]


def test_shape_dict_overrides_the_declared_dims():
    m = _view_heads(["batch", "sequence", 8])
    fold_static_shapes(m, {"x": [1, 5, 8]})
    assert numpy_helper.to_array(next(n for n in m.graph.node if n.output[0] == "target").attribute[0].t).tolist() == [1, 5, 2, 4]


def test_static_view_compiles_and_matches():
    m = _view_heads([2, 3, 8])
    art = compile_model(load_model_bytes(m.SerializeToString(), "view.onnx"), "cpu")
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    np.testing.assert_array_equal(art.run({"x": x})[0], ort_run(m, {"x": x})[0])


def test_reduce_axes_and_resize_sizes_computed_from_constants_compile_and_match():
    """ReduceSum's axes from Unsqueeze(Constant) and Resize's sizes as Concat(Shape(x)[:2], Constant)
    (F.interpolate(size=...) as exported): constants after folding, which TVM takes."""
    nodes = [
        _const("ax", 3), _const("zero", [0]), _const("hw", [6, 10]), _const("start", [0]), _const("end", [2]),
        helper.make_node("Unsqueeze", ["ax", "zero"], ["axes"], name="axes_of"),
        helper.make_node("ReduceSum", ["x", "axes"], ["summed"], name="sum", keepdims=1),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Slice", ["shape", "start", "end"], ["nc"], name="nc"),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], name="sizes", axis=0),
        helper.make_node("Resize", ["summed", "", "", "sizes"], ["y"], name="resize", mode="nearest"),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", F32, [1, 2, 3, 5])], [helper.make_tensor_value_info("y", F32, [1, 2, 6, 10])])
    art = compile_model(load_model_bytes(m.SerializeToString(), "reduce_resize.onnx"), "cpu")
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 5)).astype(np.float32)
    ours, ref = art.run({"x": x})[0], ort_run(m, {"x": x})[0]
    assert ours.shape == (1, 2, 6, 10)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_reduce_axes_as_a_graph_input_are_read_at_run_time():
    """Axes given as a graph input (once refused) are read when the model runs
    (core.compiler.frontend.modern_reduce): each value of the axes gives onnxruntime's result."""
    m = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum_by_input")],
               [helper.make_tensor_value_info("x", F32, [2, 3]), helper.make_tensor_value_info("axes", I64, [1])],
               [helper.make_tensor_value_info("y", F32, [None, None])])
    art = compile_model(load_model_bytes(m.SerializeToString(), "axes_input.onnx"), "cpu")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for axes in ([0], [1], [-1]):
        feeds = {"x": x, "axes": np.array(axes, dtype=np.int64)}
        np.testing.assert_array_equal(art.run(feeds)[0], ort_run(m, feeds)[0])


def test_a_weight_written_as_constant_of_shape_is_not_materialised():
    """onnx's light models write each weight as ConstantOfShape(its shape): folding is for sizes,
    so an output over MAX_ELEMENTS is neither evaluated nor made a constant."""
    from core.compiler.frontend.shape_folding import MAX_ELEMENTS

    big, small = [64, MAX_ELEMENTS], [4]
    nodes = [_const("big_shape", big), _const("small_shape", small),
             helper.make_node("ConstantOfShape", ["big_shape"], ["w"], name="weight", value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("ConstantOfShape", ["small_shape"], ["b"], name="bias", value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"), helper.make_node("ReduceSum", ["xw"], ["s"], name="sum", keepdims=0),
             helper.make_node("Add", ["s", "b"], ["y"], name="add")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F32, [1, 64])], [helper.make_tensor_value_info("y", F32, [4])])
    assert fold_static_shapes(m) == ["b"]
    assert [n.op_type for n in m.graph.node if n.name == "weight"] == ["ConstantOfShape"]


@pytest.mark.parametrize("value", [None, np.array([0.5], np.float32), np.array([7], np.int64), np.array([True])])
@pytest.mark.parametrize("dims", [[3, 4], [5], []])
def test_constant_of_shape_folds_to_what_the_reference_computes(value, dims):
    """ConstantOfShape is folded without onnx's reference evaluator (one per node was most of the
    fold's time on light models): same values, dtype and shape as the reference."""
    from onnx.reference import ReferenceEvaluator

    from core.compiler.frontend.shape_folding import _constant_of_shape

    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], **attrs)
    shape = np.array(dims, np.int64)
    expected = ReferenceEvaluator(node).run(None, {"s": shape})[0]
    got = _constant_of_shape(node, shape)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_model_with_nothing_to_fold_is_returned_unchanged_without_shape_inference(monkeypatch):
    """No Shape/Size and no node whose inputs are all constants (an exporter's MLP: the constants
    feed nodes that also read the activations): nothing is evaluated, not even shape inference."""
    nodes = [_const("target", [2, -1]), helper.make_node("Reshape", ["x", "target"], ["r"], name="flatten"),
             helper.make_node("MatMul", ["r", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"], name="bias")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F32, [2, 2, 4])], [helper.make_tensor_value_info("y", F32, [2, 3])],
               [numpy_helper.from_array(np.ones((8, 3), np.float32), "w"), numpy_helper.from_array(np.ones(3, np.float32), "b")])
    before = m.SerializeToString()
    inferred = []
    infer = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda *a, **k: inferred.append(1) or infer(*a, **k))
    assert fold_static_shapes(m) == []
    assert m.SerializeToString() == before and not inferred


def test_nodes_alike_share_an_evaluator_but_each_reads_its_own_inputs():
    """Squeeze(zero, zero) then Squeeze(three, zero): one reference evaluator serves both (same op,
    same attributes), fed by position, so a node reading one value twice and the next node's
    own inputs are kept apart."""
    nodes = [_const("zero", [0]), _const("three", [3]),
             helper.make_node("Squeeze", ["zero", "zero"], ["a"], name="first"),
             helper.make_node("Squeeze", ["three", "zero"], ["b"], name="second"),
             helper.make_node("Add", ["a", "b"], ["c"], name="sum"),
             helper.make_node("Unsqueeze", ["c", "zero"], ["d"], name="back"),
             helper.make_node("Reshape", ["x", "d"], ["y"], name="view")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F32, [3])], [helper.make_tensor_value_info("y", F32, [3])])
    assert fold_static_shapes(m) == ["a", "b", "c", "d"]
    values = {n.output[0]: numpy_helper.to_array(n.attribute[0].t).tolist() for n in m.graph.node if n.op_type == "Constant"}
    assert values["a"] == 0 and values["b"] == 3 and values["c"] == 3 and values["d"] == [3]


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_folds_as_the_reference_evaluator_computes_it(opset):
    """Unsqueeze is computed with numpy: the same result as onnx's evaluator for a lone node, which
    runs the latest opset's kernel, so opset 11's axes attribute is refused there and not folded."""
    axes = [0, 2]
    if opset >= 13:
        nodes = [_const("v", [[1, 2], [3, 4]]), _const("axes", axes), helper.make_node("Unsqueeze", ["v", "axes"], ["u"], name="u")]
    else:
        nodes = [_const("v", [[1, 2], [3, 4]]), helper.make_node("Unsqueeze", ["v"], ["u"], name="u", axes=axes)]
    nodes.append(helper.make_node("Add", ["x", "u"], ["y"], name="add"))
    m = _model(nodes, [helper.make_tensor_value_info("x", I64, [1, 2, 1, 2])], [helper.make_tensor_value_info("y", I64, [1, 2, 1, 2])], opset=opset)
    folded = fold_static_shapes(m)
    if opset >= 13:
        assert folded == ["u"]
        u = numpy_helper.to_array(next(n for n in m.graph.node if n.output[0] == "u").attribute[0].t)
        assert u.shape == (1, 2, 1, 2) and u.reshape(-1).tolist() == [1, 2, 3, 4]
    else:
        assert folded == []
