"""Compile & Run on a model with a symbolic dim (a batch 'N'): the panel's dims field sets its
value for the check against onnxruntime and the measurement, as compile / bench --dim do; a bad
value is refused in one sentence naming the dim, and the result line says the value used."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import sample


def batched(path) -> str:
    """x [N, 32] -> MatMul -> Add -> Relu -> y [N, 16]."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((16,)).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"), helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "batched", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.isa
def test_the_dims_field_sets_the_symbolic_dim_and_refuses_a_bad_value(window, qtbot, monkeypatch, tmp_path):
    import core.compiler.compile as core_compile

    assert window.open_model(batched(tmp_path / "batched.onnx"), wait=True)
    panel = window.panels["compile"].widget()
    assert panel.dims.isVisibleTo(panel) and panel.dims.text() == "N=1" and "N" in panel.dims.toolTip()
    for text, message in [("N=0", "The symbolic dim 'N' needs a whole number of 1 or more, not '0'."),
                          ("M=2", "The model has no symbolic dim 'M' (its symbolic dims are N).")]:
        panel.dims.setText(text)
        panel.start()
        assert panel.status.text() == message and "d62728" in panel.status.styleSheet()
        assert panel.job is None and panel.compile_btn.isEnabled()  # nothing started
    panel.dims.setText("N=3")
    seen = {}
    real = core_compile.compile_model
    monkeypatch.setattr(core_compile, "compile_model", lambda *args, **kwargs: seen.update(kwargs) or real(*args, **kwargs))
    panel.runs.setValue(2)
    panel.start()
    assert not panel.dims.isEnabled()  # read when the compile started
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
    assert panel.dims.isEnabled()
    assert seen["verify_dims"] == {"N": 3} and panel.result.dims == {"N": 3}
    assert panel.status.text().startswith("Compiled for CPU (") and ") with N=3 in " in panel.status.text()
    assert "outputs match onnxruntime" in panel.status.text()
    # another model: no symbolic dims, no field; back to this one: its default again
    assert window.open_model(str(sample("small_cnn")), wait=True)
    assert not panel.dims.isVisibleTo(panel) and panel.dim_values() == {}
    assert window.open_model(str(tmp_path / "batched.onnx"), wait=True)
    assert panel.dims.text() == "N=1" and panel.dim_values() == {"N": 1}
