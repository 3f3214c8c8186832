"""core.verify: seeded inputs that respect dtypes and symbolic dims; comparisons that can fail."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from core import load_model
from core.verify import VerificationError, compare, random_inputs, run_model, verify, with_random_weights
from tests.conftest import sample
from tests.rewrites.util import graph_from_text


def test_random_inputs_respect_dtypes_dims_and_seed():
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[batch, 3] x, int64[batch] ids, bool[2] flag, float16[seq, 4] h) => (float[batch, 3] y) {
          y = Relu(x)
        }"""
    )
    feeds = random_inputs(g, seed=3, dims={"batch": 5})
    assert feeds["x"].shape == (5, 3) and feeds["x"].dtype == np.float32
    assert feeds["ids"].shape == (5,) and feeds["ids"].dtype == np.int64 and feeds["ids"].min() >= 0 and feeds["ids"].max() < 4
    assert feeds["flag"].dtype == np.bool_
    assert feeds["h"].shape == (2, 4) and feeds["h"].dtype == np.float16  # unnamed size: default 2
    again = random_inputs(g.to_proto(), seed=3, dims={"batch": 5})  # a proto gives the same feeds
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)
    other = random_inputs(g, seed=4, dims={"batch": 5})
    assert not np.array_equal(feeds["x"], other["x"])


def test_compare_reports_max_errors_and_fails_beyond_tolerance():
    a = {"y": np.array([1.0, 2.0, 3.0], np.float32)}
    ok = compare(a, {"y": np.array([1.0, 2.00001, 3.0], np.float32)})
    assert ok.ok and 0 < ok.max_abs < 1e-4
    bad = compare(a, {"y": np.array([1.0, 2.5, 3.0], np.float32)})
    assert not bad.ok and math.isclose(bad.max_abs, 0.5, rel_tol=1e-6)
    assert "'y' differs beyond tolerance" in bad.explain()
    shape = compare(a, {"y": np.zeros(2, np.float32)})
    assert not shape.ok and "shape" in shape.explain()
    nan = compare({"y": np.array([np.nan, 1.0])}, {"y": np.array([np.nan, 1.0])})
    assert nan.ok
    missing = compare(a, {})
    assert not missing.ok


def test_verify_same_model_is_exact_and_a_broken_one_is_caught():
    g = load_model(sample("mlp"))
    c = verify(g, g, dims={"batch": 3})
    assert c.ok and c.max_abs == 0.0 and c.input_shapes == {"input": (3, 784)}
    proto = g.to_proto()
    init = next(t for t in proto.graph.initializer if t.name == "linear2.bias")
    arr = onnx.numpy_helper.to_array(init).copy()
    arr += 1.0
    init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    c = verify(g, proto)
    assert not c.ok and c.max_abs == pytest.approx(1.0, rel=1e-5)


def test_run_model_names_the_model_that_cannot_run():
    g = load_model(sample("mlp"))
    with pytest.raises(VerificationError, match="cannot run the model"):
        run_model(g, {"wrong": np.zeros((1, 784), np.float32)})


def test_with_random_weights_makes_light_model_outputs_input_dependent():
    from tests.conftest import light

    g = load_model(light("squeezenet"))
    r = with_random_weights(g, seed=0)
    assert not any(n.op_type == "ConstantOfShape" for n in r.nodes) and len(r) < len(g)
    onnx.checker.check_model(r.to_proto())
    a = run_model(r, random_inputs(r, seed=0))
    b = run_model(r, random_inputs(r, seed=1))
    assert not compare(a, b).ok  # different inputs, different outputs: the check has teeth
