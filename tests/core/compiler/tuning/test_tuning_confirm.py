"""Template tuning never makes a kernel slower: a config picked on one thread replaces the
default only when it wins again, side by side with the default, where the model runs (the
confirm runner), by a margin; and the widened channel-blocked conv space computes correctly.

The measurements are injected (a builder and runners that hand out set times in the order the
tuner asks for them), so the decisions are tested without timing anything; the schedules, the
database files and the apply pass are the real ones."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from tests.core.compiler.tuning.test_tuning import _conv_model, _fused


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


class _Builder:
    """Builds nothing: every candidate 'builds' to a name (the runners below key on order)."""

    def build(self, inputs):
        return [SimpleNamespace(artifact_path=f"candidate{i}", error_msg=None) for i, _ in enumerate(inputs)]


class _Runner:
    """Hands out `times(position)` seconds for the position-th input it is asked to run."""

    def __init__(self, times):
        self.times, self.asked = times, 0

    def run(self, inputs):
        out = []
        for _ in inputs:
            secs = self.times(self.asked)
            self.asked += 1
            out.append(SimpleNamespace(result=lambda s=secs: SimpleNamespace(run_secs=[s], error_msg=None)))
        return out


FAST = 3  # the position of the config that is fastest on one thread


def _one_thread(position: int) -> float:
    """Stage 1 measures the configs in order: the default 1 ms, config FAST 0.5 ms, the rest 2 ms."""
    return 1e-3 if position == 0 else 0.5e-3 if position == FAST else 2e-3


def _at_threads(fast_secs: float):
    """The confirmation measures [default, FAST] in alternating rounds: default 1 ms."""
    return lambda position: 1e-3 if position % 2 == 0 else fast_secs


def _tune(tmp_path, target, fast_at_threads):
    """Tune the conv model's kernel with those figures (FAST's time at the model's threads: a
    number, or a function of the position); (its template record, the confirm runner, whether
    the compile's apply pass gives the kernel a tuned schedule)."""
    from core.compiler.tuning.tune import (
        TEMPLATES_FILE,
        apply_database_pass,
        database_dir,
        tune_module,
    )

    mod = _fused(_conv_model())
    confirm = _Runner(fast_at_threads if callable(fast_at_threads) else _at_threads(fast_at_threads))
    report = tune_module(mod, target, tmp_path, budget_s=300, trials_per_task=0, builder=_Builder(), runner=_Runner(_one_thread), confirm_runner=confirm)
    conv = next(t for t in report.tasks if "conv2d" in t.name)
    record = json.loads((database_dir(tmp_path, target) / TEMPLATES_FILE).read_text())[conv.workload]
    applied = apply_database_pass(target, tmp_path)(mod)
    kernel = next(f for g, f in applied.functions_items() if "conv2d" in g.name_hint)
    return record, confirm, "tirx.is_scheduled" in (kernel.attrs or {})


def test_a_config_fastest_on_one_thread_but_slower_at_the_models_threads_is_not_applied(tmp_path, target):
    record, confirm, scheduled = _tune(tmp_path, target, fast_at_threads=1.2e-3)
    fast_config = record["measured"][FAST][0]
    # it was the one-thread winner, and the only finalist: measured again beside the default, 3 rounds
    assert min(record["measured"], key=lambda m: m[1])[0] == fast_config
    assert confirm.asked == 2 * 3 and record["confirmed"]["finalists"] == [[fast_config, pytest.approx(1.2)]]
    # ... and lost there: the record keeps the default, which the compile then schedules as usual
    assert record["config"] == record["measured"][0][0] and record["ms"] == record["default_ms"]
    assert not scheduled


def test_a_win_within_the_margin_keeps_the_default(tmp_path, target):
    from core.compiler.tuning.runners import CONFIRM_MARGIN

    record, _, scheduled = _tune(tmp_path, target, fast_at_threads=1e-3 * (1 - CONFIRM_MARGIN / 2))
    assert record["config"] == record["measured"][0][0] and not scheduled


def test_one_lucky_round_does_not_make_a_winner(tmp_path, target):
    # fastest of all in the first round only (a quiet moment on a loaded machine), slower in the others
    record, confirm, scheduled = _tune(tmp_path, target, lambda position: 1e-3 if position % 2 == 0 else 0.5e-3 if position == 1 else 1.2e-3)
    assert confirm.asked == 6 and record["confirmed"]["finalists"][0][1] == pytest.approx(0.5)
    assert record["config"] == record["measured"][0][0] and not scheduled


def test_a_config_that_wins_at_the_models_threads_is_applied(tmp_path, target):
    record, _, scheduled = _tune(tmp_path, target, fast_at_threads=0.7e-3)
    assert record["config"] == record["measured"][FAST][0] != record["measured"][0][0]
    assert record["confirmed"]["ms"] == pytest.approx(0.7) and record["confirmed"]["default_ms"] == pytest.approx(1.0)
    assert record["ms"] == pytest.approx(0.5) and record["default_ms"] == pytest.approx(1.0)
    assert scheduled


def test_a_tuned_schedule_needs_the_margin_over_the_default():
    from core.compiler.tuning.db import SEARCH_MARGIN, _choose

    assert _choose([("default", 1.0), ("search", 1.0 - SEARCH_MARGIN / 2)]) == "default"
    assert _choose([("default", 1.0), ("search", 0.9)]) == "search"
    assert _choose([("default", None), ("search", 0.9)]) == "search"
    assert _choose([("default", 1.0), ("template", 0.99), ("search", 0.98)]) == "default"
    assert _choose([("default", 1.0), ("template", 0.9), ("search", 0.95)]) == "template"
    assert _choose([("default", None)]) is None


def _nchwc_conv(target, in_channels: int, out_channels: int, size: int, kernel: int):
    """A conv2d_NCHWc kernel (+ ReLU) as core.compiler.passes.layout.nchwc legalizes it, blocked by the
    target's vector width (8 or 16)."""
    from tvm import te, topi

    from core.compiler.target import vector_lanes

    b = vector_lanes(target)
    data = te.placeholder((1, in_channels // b, size, size, b), name="data")
    weight = te.placeholder((out_channels // b, in_channels // b, kernel, kernel, b, b), name="weight")
    pad = kernel // 2
    with target:
        out = topi.nn.conv2d_NCHWc(data, weight, (1, 1), (pad, pad), (1, 1), f"NCHW{b}c", f"NCHW{b}c")
    return te.create_prim_func([data, weight, topi.nn.relu(out)]), b


def _reference(x, w, b: int, kernel: int) -> np.ndarray:
    """numpy's conv + ReLU of NCHW{b}c data and OIHW{b}i{b}o weights, in NCHW{b}c."""
    _, _, size, _, _ = x.shape
    data = x.transpose(0, 1, 4, 2, 3).reshape(1, -1, size, size)
    weight = w.transpose(0, 5, 1, 4, 2, 3).reshape(w.shape[0] * b, w.shape[1] * b, kernel, kernel)
    pad = kernel // 2
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = sum(
        np.einsum("oc,nchw->nohw", weight[:, :, i, j], padded[:, :, i : i + size, j : j + size]) for i in range(kernel) for j in range(kernel)
    )
    out = np.maximum(out, 0)
    return out.reshape(1, -1, b, size, size).transpose(0, 1, 3, 4, 2)


@pytest.mark.isa
@pytest.mark.parametrize("kernel,size", [(1, 7), (3, 14)])
def test_widened_nchwc_space_starts_from_the_default_and_every_config_computes_the_same(target, kernel, size):
    """The space of the channel-blocked conv (1x1 on 7x7, 3x3 on 14x14): the default schedule
    first, two-channel-block tiles and the loop-order variants among the rest, each one
    compiled for this host's target and checked against numpy."""
    import tvm

    from core.compiler.target import vector_registers
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc

    rule = Conv2dNCHWc()
    func, b = _nchwc_conv(target, 16, 32, size, kernel)  # channels: whole blocks of 8 or 16 lanes
    configs = rule.candidates(func, target)
    default = rule.apply(func, target)
    tvm.ir.assert_structural_equal(rule.apply(func, target, configs[0]).mod, default.mod)  # the search starts from the default
    assert any(c.get("rows_outer") for c in configs)
    # two-channel-block tiles, except where the register file holds none: with AVX2's 16 registers,
    # a 7-wide output's tiles (7 columns or 1) of two vectors each leave no room for the weights
    assert any(c.get("oc2") == 2 for c in configs) or (vector_registers(target) < 32 and size == 7)
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)
    rng = np.random.default_rng(3)
    x = rng.standard_normal([int(d) for d in func.params[0].shape]).astype(np.float32)
    w = (rng.standard_normal([int(d) for d in func.params[1].shape]) / (b * kernel)).astype(np.float32)
    expected = _reference(x, w, b, kernel)
    for config in configs:
        lib = tvm.tirx.build(tvm.IRModule({"main": rule.apply(func, target, config).mod["main"].with_attr("global_symbol", "main")}), target)
        args = [tvm.runtime.tensor(x), tvm.runtime.tensor(w), tvm.runtime.tensor(np.zeros(expected.shape, np.float32))]
        lib["main"](*args)
        np.testing.assert_allclose(args[2].numpy(), expected, rtol=1e-4, atol=1e-4, err_msg=str(config))


def _dense(rows: int, inner: int, cols: int):
    """MatMul + bias + ReLU on [rows, inner] x [inner, cols] as one fused kernel, and its weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(rows)
    w = (rng.standard_normal((inner, cols)) / inner).astype(np.float32)
    bias = rng.standard_normal(cols).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, inner])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, cols])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")],
    )
    model: onnx.ModelProto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, w, bias


@pytest.mark.parametrize("rows", [1, 10])
def test_matmul_space_starts_from_the_default_and_every_tile_computes_the_same(target, rows):
    """The matmul's template space (a GEMV, and 10 rows: tiles that pad the rows): the default
    first, every tile compiled for this host's target and checked against numpy."""
    import tvm

    from core.compiler.schedules.cpu_matmul import Matmul
    from core.compiler.tuning.tune import _prepare, _template_rules

    assert any(rule.name == Matmul.name for rule in _template_rules())
    model, w, bias = _dense(rows, 24, 64)
    mod = _prepare(_fused(model))
    func = next(f for g, f in mod.functions_items() if "matmul" in g.name_hint)
    rule = Matmul()
    configs = rule.candidates(func, target)
    tvm.ir.assert_structural_equal(rule.apply(func, target, configs[0]).mod, rule.apply(func, target).mod)
    assert len(configs) >= 3 and len({(c["ti"], c["vb"]) for c in configs}) == len(configs)
    assert rows == 1 or any(rows % c["ti"] for c in configs)  # some tiles pad the rows
    x = np.random.default_rng(9).standard_normal((rows, 24)).astype(np.float32)
    expected = np.maximum(x @ w + bias, 0)
    assert len(func.params) == 4  # x, weight, bias, output
    for config in configs:
        lib = tvm.tirx.build(tvm.IRModule({"main": rule.apply(func, target, config).mod["main"].with_attr("global_symbol", "main")}), target)
        args = [tvm.runtime.tensor(a) for a in (x, w, bias, np.zeros(expected.shape, np.float32))]
        lib["main"](*args)
        np.testing.assert_allclose(args[-1].numpy(), expected, rtol=1e-4, atol=1e-4, err_msg=str(config))


class _OneThread:
    """Every config 1 ms but the second of each batch, 0.5 ms: the one-thread winner of every kernel."""

    def run(self, inputs):
        return _Runner(lambda position: 0.5e-3 if position == 1 else 1e-3).run(inputs)


class _ModelThreads:
    """The confirmation's rounds: the default (first of each round) 1 ms, the finalists 0.7 ms."""

    def run(self, inputs):
        from core.compiler.tuning.runners import CONFIRM_ROUNDS

        per_round = len(inputs) // CONFIRM_ROUNDS
        return _Runner(lambda position: 1e-3 if position % per_round == 0 else 0.7e-3).run(inputs)


@pytest.mark.slow
def test_the_benchmark_tunes_the_kernels_it_compiles_and_applies_a_database_without_searching(tmp_path, monkeypatch, capsys):
    """benchmarks/compiled_vs_onnxruntime.py: --tune-minutes tunes the workbench compile's own
    kernels (here with injected measurements that make a config win everywhere), and --tune-db
    alone then gives the tuned column from those records (no search), checked against onnxruntime.
    (The model-level A/B after tuning is left out: it would time the real model, which the injected
    kernel measurements say nothing about; test_tuning_ab has it.)"""
    from benchmarks import compiled_vs_onnxruntime as bench
    from core.compiler.tuning import tune as tuning, ab as tuning_ab

    monkeypatch.setattr(tuning_ab, "model_ab", lambda *args, **kwargs: None)
    monkeypatch.setattr(tuning, "local_builder", lambda *a, **k: _Builder())
    monkeypatch.setattr(tuning, "local_runner", lambda threads=1: _OneThread() if threads == 1 else _ModelThreads())
    common = ["--models", "small_cnn", "--tune-db", str(tmp_path), "--runs", "5", "--seconds", "0.2", "--blocks", "2", "--one-thread", "off"]
    assert bench.main([*common, "--tune-minutes", "1"]) == 0
    tuned_run = capsys.readouterr().out
    row = next(line for line in tuned_run.splitlines() if line.startswith("small_cnn"))
    found = re.search(r"tuned (\d+)/(\d+) kernels", row)
    assert "tuning small_cnn:" in tuned_run and found and int(found.group(1)) >= 1, tuned_run
    assert "MISMATCH" not in row

    def no_search(*args, **kwargs):
        raise AssertionError("--tune-db alone must not tune")

    monkeypatch.setattr(tuning, "tune_module", no_search)
    assert bench.main(common) == 0
    applied = capsys.readouterr().out
    row = next(line for line in applied.splitlines() if line.startswith("small_cnn"))
    assert f"tuned {found.group(1)}/{found.group(2)} kernels" in row and "MISMATCH" not in row and "tuning small_cnn" not in applied
