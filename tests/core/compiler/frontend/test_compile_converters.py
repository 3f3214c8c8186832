"""The converter fixes of core.compiler.frontend.converters: each op TVM's frontend got wrong now matches onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.compile import compile_model
from core.compiler.frontend.converters import FIXES, fixes_applied
from core.errors import UnsupportedOpError
from tests.helpers import ort_run


def _save(tmp_path, name, nodes, inputs, outputs, inits, opset=18):
    m = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits), opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    p = tmp_path / f"{name}.onnx"
    onnx.save(m, p)
    return p, m


def test_pow_with_integer_exponent(tmp_path):
    p, m = _save(
        tmp_path, "pow",
        [helper.make_node("Pow", ["x", "e"], ["y"], name="cube")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])],
        [numpy_helper.from_array(np.array(3, np.int64), "e")],
    )
    assert fixes_applied(m) == ["Pow"]
    art = compile_model(p, "cpu")
    x = np.linspace(-2, 2, 16).astype(np.float32)
    np.testing.assert_allclose(art.run({"x": x})[0], ort_run(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert art.manifest.converter_fixes == ["Pow"]


def test_resize_with_sizes_and_empty_scales(tmp_path):
    p, m = _save(
        tmp_path, "resize",
        [helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], name="up", mode="linear", coordinate_transformation_mode="align_corners")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 7, 7])],
        [
            numpy_helper.from_array(np.array([], np.float32), "roi"),
            numpy_helper.from_array(np.array([], np.float32), "scales"),
            numpy_helper.from_array(np.array([1, 1, 7, 7], np.int64), "sizes"),
        ],
    )
    art = compile_model(p, "cpu")
    x = np.random.default_rng(0).standard_normal((1, 1, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(art.run({"x": x})[0], ort_run(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_reduce_max_and_min_of_a_fully_masked_row_are_the_infinities(tmp_path):
    """TVM starts max/min at the lowest/highest finite float and returned it for a row of -inf
    (+inf); opset-23 Attention's expansion tests exactly that to zero a fully masked row."""
    p, m = _save(
        tmp_path, "reduce_inf",
        [helper.make_node("ReduceMax", ["x", "axes"], ["hi"], name="row_max", keepdims=0),
         helper.make_node("ReduceMin", ["x", "axes"], ["lo"], name="row_min", keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("hi", TensorProto.FLOAT, [4]), helper.make_tensor_value_info("lo", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    art = compile_model(p, "cpu")
    lowest = np.finfo(np.float32).min
    x = np.array([[-np.inf] * 3, [np.inf] * 3, [lowest, -np.inf, -np.inf], [1.0, -2.0, np.nan]], np.float32)
    hi, lo = art.run({"x": x})
    ref_hi, ref_lo = ort_run(m, {"x": x})
    np.testing.assert_array_equal(hi[:3], [-np.inf, np.inf, lowest])
    np.testing.assert_array_equal(hi[:3], ref_hi[:3])
    np.testing.assert_array_equal(lo[:3], ref_lo[:3])


def _nms(tmp_path, as_inputs: bool):
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [0, 10.1, 1, 11.1], [0, 100, 1, 101]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)
    limits = [np.array([3], np.int64), np.array([0.5], np.float32), np.array([0.0], np.float32)]
    names = ["max_boxes", "iou", "score"]
    specs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]), helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 6])]
    inits = [] if as_inputs else [numpy_helper.from_array(v, n) for v, n in zip(limits, names)]
    if as_inputs:
        specs += [helper.make_tensor_value_info(n, TensorProto.INT64 if n == "max_boxes" else TensorProto.FLOAT, [1]) for n in names]
    p, m = _save(tmp_path, "nms", [helper.make_node("NonMaxSuppression", ["boxes", "scores"] + names, ["selected"], name="nms")],
                 specs, [helper.make_tensor_value_info("selected", TensorProto.INT64, ["n", 3])], inits, opset=11)
    return p, m, {"boxes": boxes, "scores": scores}


def test_non_max_suppression_with_constant_limits_matches(tmp_path):
    p, m, feeds = _nms(tmp_path, as_inputs=False)
    ours = compile_model(p, "cpu").run(feeds)[0]
    np.testing.assert_array_equal(ours, ort_run(m, feeds)[0])
    assert ours.tolist() == [[0, 0, 3], [0, 0, 0], [0, 0, 5]]


def test_non_max_suppression_with_run_time_limits_is_refused_naming_the_node(tmp_path):
    p, _m, _feeds = _nms(tmp_path, as_inputs=True)
    with pytest.raises(UnsupportedOpError) as e:
        compile_model(p, "cpu")
    assert "'nms'" in str(e.value) and "max_output_boxes_per_class is a run-time input" in str(e.value)


def test_fixes_are_registered_with_the_import_hook():
    from core.compiler.frontend import onnx_import as tvm_import

    registered = tvm_import.registered_converters()
    for op, cls in FIXES.items():
        # a later converter module (modern_ops: Reduce*, Resize) may extend a fix, never drop it
        assert registered.get(op) is cls or issubclass(registered.get(op), cls)


@pytest.mark.parametrize("start,delta", [(2, 3), (5, 1)])
def test_range_from_a_start_to_a_symbolic_size(tmp_path, start, delta):
    """Range(start, Shape(x)[1], delta) over a symbolic dim: the length is computed on the size
    (max(0, ceil((n - start) / delta))), empty when the size is below the start."""
    def const(name, v):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(v, np.int64)))

    p, _m = _save(
        tmp_path, "range",
        [const("one", 1), const("start", start), const("delta", delta), helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["n"], axis=0), helper.make_node("Range", ["start", "n", "delta"], ["r"], name="positions")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])],
        [helper.make_tensor_value_info("r", TensorProto.INT64, ["count"])], [],
    )
    art = compile_model(p, "cpu", verify_dims={"batch": 1, "sequence": 9})
    for n in (11, 3):
        x = np.zeros((2, n), np.float32)
        np.testing.assert_array_equal(art.run({"x": x})[0], np.arange(start, n, delta))
