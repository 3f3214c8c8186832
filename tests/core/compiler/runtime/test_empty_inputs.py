"""An empty input array may have strides of 0 (onnx's conformance data has them); the runtime wants
compact strides, so Artifact.run stages a fresh array for it instead of reading it in place."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from core.compiler.compile import compile_model


def test_an_empty_axes_input_with_zero_strides_runs(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)
    model = helper.make_model(helper.make_graph([node], "reduce", [x, axes], [y]), opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path / "reduce.onnx"
    onnx.save(model, path)
    art = compile_model(str(path), "cpu", verify_inputs={"x": np.ones((2, 3), np.float32), "axes": np.array([1], np.int64)})
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    empty = np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), shape=(0,), strides=(0,))
    assert empty.strides == (0,) and empty.flags.c_contiguous
    (out,) = art.run({"x": data, "axes": empty})  # no axes: every axis reduced
    assert out.shape == (1, 1) and out[0, 0] == data.sum()
