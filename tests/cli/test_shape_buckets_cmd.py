"""`compile --shape-buckets` and `bench`: the buckets are compiled, listed and checked, bench says
which code ran, and a bucket that leaves a dim symbolic or names an unknown one is refused (exit 2)
in one sentence before anything is compiled."""
from __future__ import annotations

import json

from tests.core.compiler.pipeline.test_shape_buckets import _mlp
from tests.helpers import run_cli


def test_compile_lists_the_buckets_and_bench_says_which_code_ran(tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    out = tmp_path / "art"
    done = run_cli("compile", model, "-o", out, "--cpu", "haswell", "--shape-buckets", "batch=8", "--shape-buckets", "batch=2", "--json")
    assert done.returncode == 0, done.stderr
    buckets = json.loads(done.stdout)["shape_buckets"]
    assert [(b["function"], b["dims"]) for b in buckets] == [("main_bucket0", {"batch": 8}), ("main_bucket1", {"batch": 2})]
    assert all(b["verification"]["checked"] and b["general_verification"]["checked"] for b in buckets)
    for dim, said in (("8", "code: bucket batch=8"), ("3", "code: general kernels")):
        bench = run_cli("bench", out, "--dim", f"batch={dim}", "--runs", "2")
        assert bench.returncode == 0, bench.stderr
        assert said in bench.stdout
    assert json.loads(run_cli("bench", out, "--dim", "batch=2", "--runs", "2", "--json").stdout)["path"] == "bucket batch=2"
    import numpy as np

    for n, said in ((8, "ran: bucket batch=8"), (5, "ran: general kernels")):
        np.savez(tmp_path / "in.npz", x=np.ones((n, 64), np.float32))
        ran = run_cli("run", out, "--inputs", tmp_path / "in.npz")
        assert ran.returncode == 0 and said in ran.stdout, ran.stderr


def test_a_bucket_names_several_dims_separated_by_commas(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu", [x], [y])
    model = tmp_path / "two_dims.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    done = run_cli("compile", model, "-o", tmp_path / "art", "--cpu", "haswell", "--shape-buckets", "batch=2,seq=3", "--json")
    assert done.returncode == 0, done.stderr
    assert [b["dims"] for b in json.loads(done.stdout)["shape_buckets"]] == [{"batch": 2, "seq": 3}]
    partial = run_cli("compile", model, "-o", tmp_path / "b", "--shape-buckets", "batch=2")
    assert partial.returncode == 2 and "leaves 'seq' symbolic" in partial.stderr


def test_a_bucket_must_name_the_models_dims(tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    unknown = run_cli("compile", model, "-o", tmp_path / "a", "--shape-buckets", "rows=8")
    assert unknown.returncode == 2 and "no symbolic dim 'rows'" in unknown.stderr
    bad = run_cli("compile", model, "-o", tmp_path / "b", "--shape-buckets", "batch=0")
    assert bad.returncode == 2 and "batch" in bad.stderr and "import" not in bad.stderr
