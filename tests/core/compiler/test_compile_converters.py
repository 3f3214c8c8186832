"""The converter fixes of core.compiler.converters: each op TVM's frontend got wrong now matches onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from core.compiler.compile import compile_model
from core.compiler.converters import FIXES, fixes_applied
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
    assert art.manifest["converter_fixes"] == ["Pow"]


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


def test_fixes_are_registered_with_the_import_hook():
    from core.compiler import tvm_import

    registered = tvm_import.registered_converters()
    for op, cls in FIXES.items():
        assert registered.get(op) is cls
