"""An ARM64 artifact timed over TVM's RPC on an emulated ARM64 device: TVM's RPC server in the
AArch64 Python under qemu (core.compiler.runtime.emulation.device_server), registered with a
loopback tracker. The path is the device's (upload, load, time on the device, kernel times mapped
to the graph, outputs); the latencies are the emulator's and mean nothing."""
from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from tests.core.compiler.measure.test_remote import _free_port, _model
from tests.core.compiler.runtime.test_emulation import emulation  # noqa: F401 - the fixture (skips, or fails on CI, when not set up)

TRIPLE = "aarch64-linux-gnu"
KEY = "rpi5-emulated"


@pytest.fixture(scope="module")
def arm_device(emulation):  # noqa: F811
    """A loopback tracker with one emulated ARM64 device registered under KEY."""
    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    from core.compiler.runtime.emulation import device_server

    p = _free_port()
    tracker = Tracker("127.0.0.1", port=p, port_end=p + 50, silent=True)
    server = None
    try:
        server = device_server(TRIPLE, _free_port(), key=KEY, tracker=f"127.0.0.1:{tracker.port}")
        session = rpc.connect_tracker("127.0.0.1", tracker.port)
        for _ in range(600):  # importing TVM under emulation takes ~10 s, then the server registers
            if any(s["key"] == "server:" + KEY for s in session.summary()["server_info"]):
                break
            if server.poll() is not None:
                pytest.fail(f"the emulated RPC server ended with exit status {server.returncode}")
            time.sleep(0.1)
        else:
            pytest.fail("the emulated ARM64 RPC server did not register with the tracker within 60 s")
        session.close()
        yield f"127.0.0.1:{tracker.port}:{KEY}"
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        tracker.terminate()


def test_an_arm64_artifact_is_timed_on_an_emulated_arm64_device(arm_device, tmp_path):
    from core import load_model
    from core.compiler.check.reference import random_feeds
    from core.compiler.compile import compile_model
    from core.compiler.measure.remote import bench_remote

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("no aarch64 cross compiler to link the artifact")
    import onnxruntime as ort

    path = _model(tmp_path / "mlp.onnx")
    folder = compile_model(load_model(str(path)), "cpu", triple=TRIPLE, cpu="cortex-a76", cpu_features="+dotprod").export(tmp_path / "art")
    res = bench_remote(folder, arm_device, runs=2, warmup=1)
    d = res.to_json()
    assert d["latency_ms"]["runs"] == 2 and d["latency_ms"]["median"] > 0 and d["device"]["key"] == KEY
    assert {n for k in res.kernels for n in k.onnx_nodes} == {"fc1", "relu", "fc2"} and all(k.ms > 0 for k in res.kernels)
    # the device's outputs are onnxruntime's on this machine, on the same seeded inputs
    from core.compiler.runtime.artifact import load_artifact

    art = load_artifact(folder)  # another architecture's library: read, never loaded
    feeds = random_feeds(art.inputs, seed=0)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(res.outputs[0], expected, rtol=1e-4, atol=1e-4)


def test_tuning_for_arm64_measures_its_candidates_on_the_device(arm_device, tmp_path):
    """compile --tune-rpc for an ARM64 target: each candidate is cross-linked here (the device needs
    no C compiler) and measured on the device; the kernel gets a measured schedule."""
    from core import load_model
    from core.compiler.compile import compile_model

    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.skip("no aarch64 cross compiler to link the candidates")
    path = _model(tmp_path / "mlp.onnx")
    art = compile_model(load_model(str(path)), "cpu", triple=TRIPLE, cpu="cortex-a76", tune_budget_s=30, tune_rpc=arm_device, tune_db=tmp_path / "db")
    tuning = art.manifest.tuning
    assert tuning is not None and tuning.kernels >= 1
    assert tuning.summary.startswith(f"{tuning.kernels}/{tuning.kernels} kernels tuned"), tuning.summary
