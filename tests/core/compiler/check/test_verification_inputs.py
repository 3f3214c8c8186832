"""The compile check: inputs valid for each op, the user's own inputs, and a reference where onnxruntime has none."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.runtime.artifact import specs_from_proto
from core.compiler.compile import compile_model
from core.compiler.check.reference import ONNX_REFERENCE, random_feeds
from core.errors import WorkbenchError
from core.model.onnx_io import load_model_bytes
from tests.helpers import run_cli

WHEEL_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _gather_model() -> onnx.ModelProto:
    """Gather along axis 1 of a [2, 3] input: random indices 0..3 would be out of range."""
    node = helper.make_node("Gather", ["data", "idx"], ["y"], axis=1, name="pick")
    graph = helper.make_graph([node], "gather", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3]),
                                                 helper.make_tensor_value_info("idx", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_random_check_inputs_respect_the_consuming_op():
    m = _gather_model()
    specs, _ = specs_from_proto(m)
    for seed in range(5):
        assert random_feeds(specs, seed=seed, model=m)["idx"].max() < 3
    assert random_feeds(specs, seed=1)["idx"].max() == 3  # without the model: plain small integers


def test_an_integer_input_cast_to_float_is_a_0_1_mask():
    """BERT's (1 - float(mask)) * -10000 term: an int64 input, reshaped and cast to float."""
    nodes = [helper.make_node("Unsqueeze", ["mask", "ax"], ["m1"]),
             helper.make_node("Cast", ["m1"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "mf"], ["y"]),
             helper.make_node("Cast", ["count"], ["cf"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "mask", [helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 64]),
                                              helper.make_tensor_value_info("count", TensorProto.FLOAT, [1]),
                                              helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64]),
                               helper.make_tensor_value_info("cf", TensorProto.FLOAT, [1])],
                              initializer=[numpy_helper.from_array(np.array([1], np.int64), "ax")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    specs, _ = specs_from_proto(m)
    feeds = random_feeds(specs, seed=0, model=m)
    assert set(np.unique(feeds["mask"])) == {0, 1}
    assert feeds["count"].dtype == np.float32 and not set(np.unique(feeds["count"])) <= {0.0, 1.0}  # a float input stays normal
    assert random_feeds(specs, seed=0)["mask"].max() > 1  # without the model: plain small integers


def test_compile_checks_on_the_users_inputs_and_says_so(tmp_path):
    m = _gather_model()
    g = load_model_bytes(m.SerializeToString(), "gather.onnx")
    feeds = {"data": np.arange(6, dtype=np.float32).reshape(2, 3), "idx": np.array([2, 0, 1, 2], np.int64)}
    art = compile_model(g, "cpu", verify_inputs=feeds)
    assert art.manifest.verification.inputs == "user-supplied"
    with pytest.raises(WorkbenchError, match="'idy', which is not an input of the model"):
        compile_model(g, "cpu", verify_inputs={**feeds, "idy": feeds["idx"]})


def test_cli_verify_inputs(tmp_path):
    model = tmp_path / "gather.onnx"
    onnx.save(_gather_model(), model)
    good = tmp_path / "in.npz"
    np.savez(good, data=np.ones((2, 3), np.float32), idx=np.array([0, 1, 2, 2], np.int64))
    r = run_cli("compile", model, "-o", tmp_path / "art", "--verify-inputs", good)
    assert r.returncode == 0, r.stderr
    assert "on user-supplied inputs" in r.stdout
    bad = tmp_path / "bad.npz"
    bad.write_text("not an npz")
    r = run_cli("compile", model, "-o", tmp_path / "art2", "--verify-inputs", bad)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "cannot be read as a NumPy .npz file" in r.stderr
    one = tmp_path / "one.npy"  # np.load gives a bare array: it was an AttributeError (traceback)
    np.save(one, np.ones((2, 3), np.float32))
    r = run_cli("compile", model, "-o", tmp_path / "art3", "--verify-inputs", one)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "holds one unnamed array" in r.stderr


def test_opset_6_model_is_checked_against_onnx_reference_evaluator():
    """onnxruntime has no opset-6 kernels; onnx's reference evaluator checks the compile instead
    (the wheel's PReLU with a per-channel slope, legacy broadcast, which also used to assert)."""
    case = WHEEL_DATA / "pytorch-converted" / "test_PReLU_2d_multiparam"
    m = onnx.load(case / "model.onnx")
    assert m.opset_import[0].version < 7
    art = compile_model(load_model_bytes(m.SerializeToString(), "prelu.onnx"), "cpu")
    assert art.manifest.verification.reference == ONNX_REFERENCE
    x = numpy_helper.to_array(onnx.load_tensor(case / "test_data_set_0" / "input_0.pb"))
    expected = numpy_helper.to_array(onnx.load_tensor(case / "test_data_set_0" / "output_0.pb"))
    np.testing.assert_allclose(art.run({art.inputs[0].name: x})[0], expected, rtol=1e-3, atol=1e-4)
