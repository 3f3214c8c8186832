"""bench over TVM's RPC (core.compiler.measure.remote, cli/bench_remote.py): a loopback tracker and
RPC servers started here stand in for the device; an x86 artifact built for this host is measured
through them. Everything listens on 127.0.0.1 and is stopped at the end of the module."""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import time

import numpy as np
import pytest

from core.errors import WorkbenchError

KEY = "wb-loopback"


def _model(path):
    """Gemm -> Relu -> Gemm with random weights: two kernels big enough to take measurable time."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((256, 128)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((256,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "w2")
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "w2"], ["y"], name="fc2", transB=1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])], [w1, b1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from core import load_model
    from core.compiler.compile import compile_model

    tmp = tmp_path_factory.mktemp("remote")
    art = compile_model(load_model(str(_model(tmp / "mlp.onnx"))), "cpu")
    folder = art.export(tmp / "art")
    return art, folder


@pytest.fixture(scope="module")
def devices():
    """A tracker with one server registered under KEY, and a server of its own (no tracker, no key)."""
    from tvm import rpc
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    started = []
    try:
        p = _free_port()
        tracker = Tracker("127.0.0.1", port=p, port_end=p + 50, silent=True)
        started.append(tracker)
        p = _free_port()
        started.append(Server("127.0.0.1", port=p, port_end=p + 50, key=KEY, tracker_addr=("127.0.0.1", tracker.port), silent=True))
        p = _free_port()
        direct = Server("127.0.0.1", port=p, port_end=p + 50, silent=True)
        started.append(direct)
        session = rpc.connect_tracker("127.0.0.1", tracker.port)
        for _ in range(100):  # the server registers itself a moment after it starts
            if any(s["key"] == "server:" + KEY for s in session.summary()["server_info"]):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the loopback RPC server did not register with the tracker within 10 s")
        session.close()
        yield {"tracker": f"127.0.0.1:{tracker.port}:{KEY}", "tracker_port": tracker.port, "server": f"127.0.0.1:{direct.port}"}
    finally:
        for proc in reversed(started):
            proc.terminate()


def test_bench_through_tracker_times_the_run_maps_kernels_and_matches_local_outputs(built, devices):
    from core.compiler.check.reference import random_feeds
    from core.compiler.measure.remote import bench_remote

    art, folder = built
    steps = []
    res = bench_remote(folder, devices["tracker"], runs=5, warmup=1, progress=lambda step, frac: steps.append(frac))
    d = res.to_json()
    assert d["latency_ms"]["runs"] == 5 and d["latency_ms"]["median"] > 0 and d["latency_ms"]["min"] > 0
    assert d["device"]["address"] == f"127.0.0.1:{devices['tracker_port']}" and d["device"]["key"] == KEY
    assert steps[0] == 0.0 and steps[-1] == 1.0
    # every kernel of the run, timed on the device and mapped to the ONNX nodes it came from
    nodes = {"fc1", "relu", "fc2"}
    assert len(res.kernels) >= 2 and all(k.onnx_nodes and set(k.onnx_nodes) <= nodes for k in res.kernels)
    assert {n for k in res.kernels for n in k.onnx_nodes} == nodes
    assert all(k.ms > 0 and k.calls == 1 for k in res.kernels) and abs(sum(k.share for k in res.kernels) - 1.0) < 0.01
    assert [k["name"] for k in d["kernels"]] == [k.name for k in res.kernels] and set(art.kernel_lineage) >= {k.name for k in res.kernels}
    # one remote run's outputs are the local run's on the same seeded inputs
    local = art.run(random_feeds(art.inputs, seed=0))
    assert len(res.outputs) == len(local) == 1
    np.testing.assert_allclose(res.outputs[0], local[0], rtol=1e-5, atol=1e-5)
    json.dumps(d)


def test_bench_on_a_server_directly_with_an_in_memory_artifact(built, devices):
    from core.compiler.measure.remote import bench_remote

    art, _ = built
    res = bench_remote(art, devices["server"], runs=3, warmup=1, per_kernel=False)
    assert res.latency_ms.runs == 3 and res.latency_ms.median > 0 and not res.kernels
    assert res.device["key"] is None and res.device["address"] == devices["server"]


def _sentence(fn) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(WorkbenchError) as err:
        fn()
    return str(err.value), time.monotonic() - started


def test_unknown_key_busy_device_unreachable_address_and_tracker_without_key_are_one_sentence_each(built, devices):
    from core.compiler.measure.remote import bench_remote

    _, folder = built
    port = devices["tracker_port"]
    text, took = _sentence(lambda: bench_remote(folder, f"127.0.0.1:{port}:no-such-device", runs=1))
    assert "no-such-device" in text and f"127.0.0.1:{port}" in text and KEY in text and took < 5
    closed = _free_port()
    text, took = _sentence(lambda: bench_remote(folder, f"127.0.0.1:{closed}:{KEY}", runs=1))
    assert text.startswith(f"nothing answers at 127.0.0.1:{closed}") and took < 5
    text, took = _sentence(lambda: bench_remote(folder, f"127.0.0.1:{port}", runs=1))
    assert "is a TVM RPC tracker" in text and took < 5
    from tvm import rpc

    held = rpc.connect_tracker("127.0.0.1", port).request(KEY, session_timeout=30)  # the one device, busy
    try:
        text, took = _sentence(lambda: bench_remote(folder, devices["tracker"], runs=1, wait_s=1))
        assert text.startswith(f"every device under key '{KEY}' at 127.0.0.1:{port} stayed busy for 1 s") and took < 5
    finally:
        del held
    assert bench_remote(folder, devices["tracker"], runs=1, per_kernel=False).latency_ms.runs == 1  # free again
    for text in (_sentence(lambda: bench_remote(folder, "127.0.0.1", runs=1))[0],
                 _sentence(lambda: bench_remote(folder, "127.0.0.1:99999:k", runs=1))[0]):
        assert text.startswith("--rpc") and text.count(". ") == 0


def test_cli_report_and_json(built, devices):
    from cli import bench_remote as cli

    _, folder = built
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    for flag, default in (("--runs", 20), ("--warmup", 3), ("--top", 10)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--dim", action="append", default=[])
    p.add_argument("--json", action="store_true")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.run(p.parse_args(["--rpc", devices["tracker"], "--runs", "3", "--warmup", "1"]), str(folder)) == 0
    text = out.getvalue()
    assert text.startswith("latency (cpu, 3 runs): median") and f"measured on device {KEY} at 127.0.0.1:{devices['tracker_port']}" in text
    assert "fc1" in text and "fc2" in text
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.run(p.parse_args(["--rpc", devices["server"], "--runs", "2", "--json"]), str(folder)) == 0
    d = json.loads(out.getvalue())
    assert d["latency_ms"]["runs"] == 2 and d["kernels"] and d["device"]["address"] == devices["server"]


def test_symbolic_dims_and_shape_buckets_are_measured_as_on_the_host(tmp_path, devices):
    """A symbolic batch: the dim given reaches the kernels' shapes; a bucket's shape runs its own function."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from core import load_model
    from core.compiler.check.reference import random_feeds
    from core.compiler.compile import compile_model
    from core.compiler.measure.remote import bench_remote

    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["h"], name="fc", transB=1), helper.make_node("Relu", ["h"], ["y"], name="relu")],
                              "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "dyn.onnx"))
    art = compile_model(load_model(str(tmp_path / "dyn.onnx")), "cpu", shape_buckets=[{"batch": 8}])
    for dims, path in (({"batch": 4}, "general kernels"), ({"batch": 8}, "bucket batch=8")):
        res = bench_remote(art, devices["server"], runs=2, warmup=1, dims=dims)
        assert res.dims == dims and res.path == path and res.kernels and all(set(k.onnx_nodes) == {"fc", "relu"} for k in res.kernels)
        np.testing.assert_allclose(res.outputs[0], art.run(random_feeds(art.inputs, seed=0, dims=dims))[0], rtol=1e-5, atol=1e-5)
        assert res.outputs[0].shape == (dims["batch"], 64)


def test_an_artifact_for_another_architecture_is_refused_by_name_before_it_is_uploaded(built, devices, tmp_path):
    """An aarch64 model.so (cross-linked here) against this x86 loopback device: one sentence naming both."""
    import shutil

    from core import load_model
    from core.compiler.compile import compile_model
    from core.compiler.measure.remote import bench_remote

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("no aarch64 cross compiler to link the artifact")
    art = compile_model(load_model(str(_model(tmp_path / "mlp.onnx"))), "cpu", triple="aarch64-linux-gnu")
    folder = art.export(tmp_path / "arm")
    text, took = _sentence(lambda: bench_remote(folder, devices["server"], runs=1))
    # the sentence itself says the architecture check refused it; the bound only catches a hang
    assert text.startswith("the artifact's model.so is built for aarch64-linux-gnu and the RPC server at") and took < 30
