"""Shape buckets (core.compiler.pipeline.buckets): main compiled again for named sizes of its
symbolic dims, picked at run time when the inputs match exactly, the general main otherwise.

Checked against what each would break: a bucket that is not bound (its kernels still symbolic),
a run that calls main at a bucket's shape (path_for / bench's path), a bucket the compile check
skips, a manifest that loses the buckets on export, run.py calling main regardless."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.pipeline.buckets import normalise_buckets
from core.compiler.runtime.artifact_check import choose_bucket, path_text, read_manifest
from core.compiler.runtime.manifest import Manifest, ShapeBucket, TensorSpec
from core.errors import WorkbenchError

SPECS = [TensorSpec("ids", ("batch", "seq"), "int64"), TensorSpec("mask", ("batch", "seq"), "int64")]


def test_buckets_must_name_every_symbolic_dim_and_only_those():
    assert normalise_buckets([{"seq": 96, "batch": 2}, {"batch": 2, "seq": 96}], SPECS) == [{"batch": 2, "seq": 96}]
    with pytest.raises(WorkbenchError, match="leaves 'seq' symbolic"):
        normalise_buckets([{"batch": 2}], SPECS)
    with pytest.raises(WorkbenchError, match="'len' is not a symbolic dim"):
        normalise_buckets([{"batch": 2, "len": 3}], SPECS)
    with pytest.raises(WorkbenchError, match="at least 1"):
        normalise_buckets([{"batch": 0, "seq": 3}], SPECS)
    with pytest.raises(WorkbenchError, match="no symbolic input dims"):
        normalise_buckets([{"batch": 2}], [TensorSpec("x", (1, 4), "float32")])


def test_a_bucket_is_chosen_only_on_an_exact_match():
    buckets = [ShapeBucket("main_bucket0", {"batch": 2, "seq": 96}), ShapeBucket("main_bucket1", {"batch": 1, "seq": 128})]
    assert choose_bucket(buckets, SPECS, [(2, 96), (2, 96)]).function == "main_bucket0"
    assert choose_bucket(buckets, SPECS, [(1, 128), (1, 128)]).function == "main_bucket1"
    assert choose_bucket(buckets, SPECS, [(2, 128), (2, 128)]) is None
    assert path_text(buckets[0]) == "bucket batch=2,seq=96"
    assert path_text(None) == "general kernels"


def test_the_manifest_keeps_its_buckets_and_refuses_a_damaged_one():
    m = Manifest(inputs=SPECS, shape_buckets=[ShapeBucket("main_bucket0", {"batch": 2, "seq": 96})])
    again = Manifest.from_json(m.to_json())
    assert again.shape_buckets == m.shape_buckets
    assert "shape_buckets" not in Manifest(inputs=SPECS).to_json()  # none: the key is left out, as before buckets
    bad = m.to_json()
    bad["shape_buckets"][0]["dims"] = {"batch": 0, "seq": 96}
    with pytest.raises(Exception, match="shape_buckets\\[0\\].dims"):
        read_manifest(bad, "m.json")


def _mlp(path):
    """x [batch, 64] -> MatMul 64x32 -> Add -> Relu -> MatMul 32x16: a symbolic-batch MLP."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w0", (64, 32)), ("b0", (32,)), ("w1", (32, 16)))]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="fc0"), helper.make_node("Add", ["h", "b0"], ["a"], name="bias0"),
             helper.make_node("Relu", ["a"], ["r"], name="relu0"), helper.make_node("MatMul", ["r", "w1"], ["y"], name="fc1")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _called(mod, function: str) -> set[str]:
    """The kernels `function` of `mod` calls (call_tir)."""
    from tvm import relax

    called: set[str] = set()
    relax.analysis.post_order_visit(mod[function], lambda e: called.add(e.args[0].name_hint)
                                    if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir" else None)
    return called


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from core.compiler.compile import compile_model

    path = _mlp(tmp_path_factory.mktemp("mlp") / "mlp.onnx")
    art = compile_model(str(path), "cpu", cpu="haswell", verify_dims={"batch": 3}, shape_buckets=[{"batch": 8}])
    return path, art


def test_a_bucket_is_main_with_its_dims_bound_and_its_kernels_static(compiled):
    from tvm import relax

    _, art = compiled
    (bucket,) = art.manifest.shape_buckets
    assert bucket.function == "main_bucket0" and bucket.dims == {"batch": 8}
    mod = art.scheduled_mod
    assert relax.analysis.defined_symbolic_vars(mod["main"])  # the general main keeps its batch
    assert not relax.analysis.defined_symbolic_vars(mod[bucket.function])
    called = _called(mod, bucket.function)
    assert called
    # every kernel of the bucket is static: a symbolic one declares its size vars (`def main[batch](...)`), as main's do
    for name in called:
        assert "def main[" not in mod[name].script(), name
    assert all("def main[batch]" in mod[name].script() for name in _called(mod, "main"))
    # the bucket's kernels trace to the model's nodes as main's do (its result too, renamed gv -> gv1 in the module)
    def nodes(function):
        return sorted(tuple(art.kernel_lineage.get(name, [])) for name in _called(mod, function))

    assert nodes(bucket.function) == nodes("main") and ("fc1",) in nodes("main")


def test_runs_pick_the_bucket_at_its_shape_and_main_elsewhere_and_both_are_checked(compiled):
    import onnxruntime as ort

    path, art = compiled
    (bucket,) = art.manifest.shape_buckets
    assert bucket.verification.checked and bucket.verification.dims == {"batch": 8}
    assert bucket.general_verification.checked and art.manifest.verification.dims == {"batch": 3}
    sess = ort.InferenceSession(str(path))
    for n, path_expected in ((8, "bucket batch=8"), (3, "general kernels")):
        x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
        assert art.path_for({"x": x}) == path_expected
        np.testing.assert_allclose(art.run({"x": x})[0], sess.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
    x8 = np.ones((8, 64), np.float32)
    np.testing.assert_allclose(art.run({"x": x8}, function="main")[0], art.run({"x": x8})[0], rtol=1e-5, atol=1e-5)


def test_the_exported_run_py_and_a_loaded_artifact_pick_the_bucket(compiled, tmp_path):
    from core.compiler.measure.bench import benchmark
    from core.compiler.runtime.artifact import load_artifact

    _, art = compiled
    folder = art.export(tmp_path / "art")
    loaded = load_artifact(folder)
    assert [b.label for b in loaded.manifest.shape_buckets] == ["batch=8"]
    assert loaded.path_for({"x": np.zeros((8, 64), np.float32)}) == "bucket batch=8"
    res = benchmark(loaded, runs=2, warmup=1, vs_ort=False, dims={"batch": 8})
    assert res.path == "bucket batch=8" and res.to_json()["path"] == "bucket batch=8"
    general = benchmark(loaded, runs=2, warmup=1, vs_ort=False, dims={"batch": 5})
    assert general.path == "general kernels"
    # the per-kernel view times the function that ran: the bucket's kernels are not main's
    assert {k.name for k in res.kernels}.isdisjoint({k.name for k in general.kernels})
    assert any(k.onnx_nodes for k in res.kernels)
    for dim, said in (("8", "ran: bucket batch=8"), ("5", "ran: general kernels")):
        out = subprocess.run([sys.executable, str(folder / "run.py"), "--dim", f"batch={dim}"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert said in out.stdout
