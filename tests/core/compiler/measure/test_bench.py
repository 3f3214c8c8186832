"""bench: latency stats, onnxruntime side by side, planned vs unplanned memory, per-kernel time with lineage."""
from __future__ import annotations

import json

import pytest

from core.compiler.measure.bench import BenchResult, KernelTime, MemoryUse, ThreadsUsed, benchmark, kernel_heat, latency_stats, node_heat, spread_warning
from core.compiler.compile import compile_model
from tests.conftest import sample
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def cnn_art():
    return compile_model(sample("small_cnn"), "cpu")


def test_latency_stats():
    s = latency_stats([3.0, 1.0, 2.0, 10.0])
    assert s.min == 1.0 and s.runs == 4 and s.median == 2.5 and 3.0 < s.p90 <= 10.0


def test_benchmark_reports_ours_and_onnxruntime(cnn_art):
    r = benchmark(cnn_art, runs=3, warmup=1, vs_ort=True)
    d = r.to_json()
    for key in ("median", "p90", "min", "runs"):
        assert key in d["latency_ms"] and key in d["ort_latency_ms"]
    assert d["latency_ms"]["runs"] == 3 and d["latency_ms"]["min"] > 0
    assert r.ratio == pytest.approx(d["latency_ms"]["median"] / d["ort_latency_ms"]["median"], rel=1e-2)
    assert r.outputs_match_ort is True
    from core.compiler.target import host_cores

    # the governor's count of the last run, the pool that launched it (the workbench's: conftest's
    # prepare() loaded it before tvm), onnxruntime's threads
    assert d["threads"]["pool"] == "workbench" and 1 <= d["threads"]["ours"] <= host_cores() and d["threads"]["ort"] == host_cores()


def test_onnxruntime_is_timed_in_its_own_process_in_alternating_blocks(cnn_art, monkeypatch):
    """Neither runtime is timed while the other's threads spin: onnxruntime runs in a child
    process, the two take turns in blocks."""
    import os

    from core.compiler.measure import alternation, bench, ort_worker

    calls = []
    real_run = ort_worker.OrtProcess.run

    def run(self, n):
        assert self.pid != os.getpid()
        calls.append(n)
        return real_run(self, n)

    monkeypatch.setattr(ort_worker.OrtProcess, "run", run)
    monkeypatch.setattr(alternation, "SETTLE_S", 0.0)
    r = benchmark(cnn_art, runs=7, warmup=1, vs_ort=True, kernels=False)
    sizes = alternation.block_sizes(7, bench.ALTERNATING_BLOCKS)
    warm = calls[1] - sizes[0]  # each block starts with the same number of untimed runs
    assert calls[0] == 1 and warm >= 1 and calls[1:] == [warm + size for size in sizes]
    assert r.ort_latency_ms.runs == 7 and r.outputs_match_ort is True


def test_memory_planning_saves_and_params_are_the_weights(cnn_art):
    import onnx

    m = benchmark(cnn_art, runs=1, warmup=0, vs_ort=False, kernels=False).memory
    assert 0 < m.planned_bytes < m.unplanned_bytes
    weights = sum(onnx.numpy_helper.to_array(t).nbytes for t in onnx.load(str(sample("small_cnn"))).graph.initializer)
    # batch-norm folds into per-channel scale/shift: the executable's constants are of the weights' order
    assert 0.5 * weights < m.params_bytes < 2 * weights
    assert m.peak_rss_bytes > 10 * 2**20


def test_kernels_map_back_to_onnx_nodes(cnn_art):
    kernels = benchmark(cnn_art, runs=1, warmup=0, vs_ort=False).kernels
    assert kernels and abs(sum(k.share for k in kernels) - 1.0) < 0.01
    assert [k.ms for k in kernels] == sorted((k.ms for k in kernels), reverse=True)
    convs = [k for k in kernels if "conv2d" in k.name]
    assert len(convs) == 4
    labels = {n.split(".")[0] for k in convs for n in k.onnx_nodes}
    assert {"stem", "block1", "block2"} <= labels
    for k in convs:
        assert any(n.endswith(".conv") for n in k.onnx_nodes), k
    heat = node_heat(kernels)
    assert heat and all(v >= 0 for v in heat.values())


def test_bench_cli_json_keys():
    r = run_cli("bench", sample("mlp"), "--runs", "2", "--vs-ort", "--json", "--dim", "batch=2", timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["latency_ms"]) == {"median", "p10", "p90", "min", "max", "runs"}
    assert set(d["ort_latency_ms"]) == {"median", "p10", "p90", "min", "max", "runs"}
    assert set(d["memory"]) == {"params_bytes", "planned_bytes", "unplanned_bytes", "peak_rss_bytes"}
    assert d["kernels"] and set(d["kernels"][0]) >= {"name", "ms", "share", "onnx_nodes"}
    assert d["dims"] == {"batch": 2}
    assert d["threads"]["pool"] == "workbench"


def test_bench_cli_bad_runs_is_exit_2():
    r = run_cli("bench", sample("mlp"), "--runs", "0")
    assert r.returncode == 2 and "--runs" in r.stderr


def test_kernel_heat_keeps_a_fused_kernels_time_whole():
    kernels = [
        KernelTime("fused_conv2d_add_relu", 20.0, onnx_nodes=["conv", "bn", "relu"]),
        KernelTime("pad", 1.0, onnx_nodes=["conv2"]),
        KernelTime("conv2d", 3.0, onnx_nodes=["conv2"]),
        KernelTime("reshape", 0.5),
    ]
    nodes, groups = kernel_heat(kernels)
    # every node of the fused kernel shows the kernel's time, none a third of it
    assert nodes == {"conv": 20.0, "bn": 20.0, "relu": 20.0, "conv2": 4.0}
    assert [(g.name, g.ms) for g in groups] == [("fused_conv2d_add_relu", 20.0), ("pad + conv2d", 4.0)]
    assert node_heat(kernels)["relu"] < 7  # the old even split, for comparison


def test_spread_warning_flags_a_median_the_runs_disagree_on():
    steady = latency_stats([1.0, 1.02, 0.98, 1.01, 0.99, 1.0])
    assert steady.p10 <= steady.median <= steady.p90 <= steady.max
    assert spread_warning(steady) == ""
    # the encoder of the issue: median 11.6 ms, best run 0.57 ms
    busy = latency_stats([0.57, 0.6, 11.0, 11.6, 12.0, 11.9, 14.0, 0.9, 11.7, 20.0])
    note = spread_warning(busy)
    assert note.startswith("Wide spread") and "best run took 0.57 ms" in note and "more runs" in note
    assert spread_warning(latency_stats([5.0])) == ""  # one run has no spread to judge


def test_bench_json_keeps_its_keys_without_onnxruntime():
    """BenchResult.to_json is `bench --json`: the keys it always had, onnxruntime's only when it ran."""
    res = BenchResult(target="cpu", dims={"batch": 2}, latency_ms=latency_stats([1.0, 2.0]), memory=MemoryUse(1, 2, 3, 4),
                      kernels=[KernelTime("k", 1.5, 1.0, 1, ["n"])], threads=ThreadsUsed(2, "tvm"))
    d = json.loads(json.dumps(res.to_json()))
    assert set(d) == {"target", "dims", "latency_ms", "memory", "kernels", "threads"}
    assert d["kernels"] == [{"name": "k", "ms": 1.5, "share": 1.0, "calls": 1, "onnx_nodes": ["n"]}]
    assert d["threads"] == {"ours": 2, "pool": "tvm"} and d["memory"]["peak_rss_bytes"] == 4
    res.ort_latency_ms, res.ratio, res.max_abs_err_vs_ort, res.outputs_match_ort = latency_stats([1.0]), 1.5, 0.0, True
    assert {"ort_latency_ms", "ratio", "max_abs_err_vs_ort", "outputs_match_ort"} <= set(res.to_json())
