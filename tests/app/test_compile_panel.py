"""Compile & Run panel: compile off the UI thread, results beside onnxruntime, kernel chart,
heat overlay through lineage, cancel, export, and a refused compile explained in one sentence."""
from __future__ import annotations

import json

import pytest

from core.compiler.target import gpu_present
from tests.conftest import sample


def _panel(window):
    return window.panels["compile"].widget()


def test_compile_and_run_fills_table_chart_and_heat(window, qtbot, tmp_path):
    assert window.open_model(str(sample("small_cnn")), wait=True)
    panel = _panel(window)
    panel.runs.setValue(2)
    panel.start()
    assert not panel.compile_btn.isEnabled() and panel.cancel_btn.isEnabled()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
    labels = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
    assert "Latency median" in labels and "Activations, planned" in labels and "Ratio ours / onnxruntime" in labels
    row = labels.index("Latency median")
    assert panel.table.item(row, 1).text().endswith("ms") and panel.table.item(row, 2).text().endswith("ms")
    assert "match onnxruntime" in panel.status.text()
    assert panel.chart.kernels and panel.chart.kernels[0].ms >= panel.chart.kernels[-1].ms
    heat = panel.heat_values()
    conv_ids = {n.id for n in window.document.graph.nodes if n.op_type == "Conv"}
    assert conv_ids <= set(heat)
    assert window.canvas._overlay is not None and set(window.canvas._overlay[0]) == set(heat)
    # a fused kernel's time is the kernel's: every node of it shows all of it, under one outline
    from app.graph_items import ChipItem, GroupItem

    fused = next(k for k in panel.chart.kernels if len(k.onnx_nodes) > 1)
    ids = panel._node_ids(fused.onnx_nodes)
    assert all(heat[i] >= fused.ms for i in ids)
    assert sum(isinstance(it, GroupItem) for it in window.canvas._group_items) >= 4
    assert any(isinstance(it, ChipItem) and it.text.endswith("ms") for it in window.canvas._group_items)
    # the scale's top is the chart's top bar
    assert window.canvas._overlay_max == panel.chart.kernels[0].ms
    # clicking the top bar selects the ONNX nodes its kernel came from
    panel._select_kernel(panel.chart.kernels[0])
    assert set(window.document.selection) == set(panel._node_ids(panel.chart.kernels[0].onnx_nodes))
    panel.heat.setChecked(False)
    assert window.canvas._overlay is None
    # export on the worker, with the measured figures in the manifest
    panel.export_to(str(tmp_path / "out"))
    qtbot.waitUntil(lambda: (tmp_path / "out" / "manifest.json").exists() and panel.compile_btn.isEnabled(), timeout=60_000)
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert man["measured"]["latency_ms"]["runs"] == 2 and (tmp_path / "out" / "run.py").exists()


def test_cancel_stops_the_compile(window, qtbot):
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    panel.start()
    panel.cancel()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert panel.result is None and panel.progress.format() == "cancelled"


def test_unsupported_op_is_explained(window, qtbot, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    m = helper.make_model(helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], name="norm", axis=1, p=2)], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, tmp_path / "lp.onnx")
    assert window.open_model(str(tmp_path / "lp.onnx"), wait=True)
    panel = _panel(window)
    panel.start()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert "LpNormalization" in panel.status.text() and panel.result is None
    norm = window.document.graph.find_node("norm")
    assert list(window.document.selection) == [norm.id]


def test_cuda_compile_without_gpu_offers_export(window, qtbot):
    from core.compiler.target import gpu_present

    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    panel.target.setCurrentIndex(panel.target.findData("cuda"))
    panel.start()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=120_000)
    assert panel.artifact is not None and panel.artifact.target == "cuda" and panel.export_btn.isEnabled()
    if not gpu_present():
        assert panel.result is None and "No GPU here" in panel.status.text()
        labels = [panel.table.item(r, 0).text() for r in range(panel.table.rowCount())]
        assert "Parameters" in labels and "Latency median" not in labels


def test_compile_uses_the_lowering_panels_pipeline(window):
    from core.compiler.pipeline.pass_list import PassSpec

    lowering = window.panels.get("lowering")
    if lowering is None:
        return
    lp = lowering.widget()
    lp.target_box.setCurrentText("cpu")
    specs = [PassSpec(s.name, enabled=(s.name != "FuseOps" and s.enabled)) for s in lp.specs()]
    changed = []
    window.document.pipelineChanged.connect(changed.append)
    lp.set_specs(specs)
    # the Lowering panel hands its list to the document, where the Compile panel reads it
    assert changed == ["cpu"]
    assert window.document.pipeline_for("cpu") == specs
    assert window.document.pipeline_for("cuda") is None


# -- tuning ---------------------------------------------------------------------------------


def _fake_tuning_compile(monkeypatch, calls: list):
    """compile_model replaced by one that records its keywords, reports tuning progress the way
    core.compiler.compile does and waits for cancel (a tuning run that never ends by itself)."""
    import time

    import core.compiler.compile as core_compile
    from core.progress import Progress

    def fake(model, target, **kwargs):
        calls.append(kwargs)
        progress, cancel = kwargs["progress"], kwargs["cancel"]
        rounds = dict(step="MetaSchedule tuning", cancellable=False, stops_after="the measuring round in progress")
        progress(Progress(0.05, "MetaSchedule tuning", **rounds))
        trials = 0
        while not cancel():
            trials += 16
            progress(Progress(0.05 + 0.5 * min(trials / 1000, 0.9), f"tuning fused_conv2d_add_relu: {trials} trials", **rounds))
            time.sleep(0.02)
        raise core_compile.CompileCancelled("compile cancelled.")

    monkeypatch.setattr(core_compile, "compile_model", fake)


def test_tuning_options_reach_compile_and_cancel_stops_tuning(window, qtbot, monkeypatch, tmp_path):
    calls: list[dict] = []
    _fake_tuning_compile(monkeypatch, calls)
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    assert not panel.tune.isChecked() and not panel.tune_minutes.isEnabled()
    assert panel.tune_minutes.value() == 10 and panel.tune_trials.value() == 64
    from core.compiler.tuning.tune import default_database_root

    assert panel.tune_db_path == str(default_database_root())
    panel.tune.setChecked(True)
    assert panel.tune_minutes.isEnabled() and panel.tune_trials.isEnabled() and panel.tune_db_btn.isEnabled()
    panel.tune_minutes.setValue(2.5)
    panel.tune_trials.setValue(32)
    panel.set_tune_db(str(tmp_path / "db"))
    assert "db" in panel.tune_db_label.text()
    panel.start()
    assert not panel.tune.isEnabled() and not panel.tune_trials.isEnabled()
    qtbot.waitUntil(lambda: "trials" in panel.progress.format(), timeout=20_000)
    kwargs = calls[0]
    assert kwargs["tune_trials"] == 32 and kwargs["tune_budget_s"] == 150.0 and kwargs["tune_db"] == str(tmp_path / "db")
    assert "tune_rpc" not in kwargs  # measured here unless a tracker is named
    assert panel.progress.toolTip().startswith("tuning fused_conv2d_add_relu: ") and "trials" in panel.progress.format()
    assert 0 < panel.progress.value() < 700
    assert "Tuning (budget 2.5 min)" in panel.status.text() and "trials" in panel.status.text()
    panel.cancel()
    assert "measuring round" in panel.status.text()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=20_000)
    assert panel.result is None and panel.progress.format() == "cancelled"
    assert "stay in the database" in panel.status.text()
    assert panel.tune.isEnabled() and panel.tune_trials.isEnabled()
    # 0 search trials: template search only, still a tuning run (the budget is passed)
    panel.tune_trials.setValue(0)
    assert panel.tune_trials.text() == "template search only"
    assert panel.tuning_options()["tune_trials"] == 0 and panel.tuning_options()["tune_budget_s"] == 150.0
    # a tracker named in the Tune box: compile measures there (compile_model(tune_rpc=...))
    assert panel.tune_rpc.isEnabled()
    panel.tune_rpc.setText(" 10.0.0.2:9190:cpu-znver4 ")
    assert panel.tuning_options()["tune_rpc"] == "10.0.0.2:9190:cpu-znver4"
    # unchecked: no tuning keywords at all
    panel.tune.setChecked(False)
    assert not panel.tune_rpc.isEnabled()
    assert panel.tuning_options() == {}


@pytest.mark.skipif(gpu_present(), reason="CUDA tuning is offered where a GPU is")
def test_tune_controls_are_disabled_for_cuda_without_a_gpu(window):
    panel = _panel(window)
    panel.tune.setChecked(True)
    panel.target.setCurrentIndex(panel.target.findData("cuda"))
    assert not panel.tune.isEnabled() and not panel.tune_minutes.isEnabled() and not panel.tune_db_btn.isEnabled()
    assert "this machine has none" in panel.tune.toolTip() and "this machine has none" in panel.tune_trials.toolTip()
    assert panel.tune_db_label.text() == "tuning: needs a GPU here"
    assert panel.tuning_options() == {}
    panel.target.setCurrentIndex(panel.target.findData("cpu"))
    assert panel.tune.isEnabled() and panel.tune_minutes.isEnabled()
    assert "has none" not in panel.tune.toolTip() and panel.tune_db_label.text().startswith("database: ")


def test_results_table_reports_tuning(window):
    from types import SimpleNamespace

    from core.compiler.runtime.manifest import Manifest, TuningRecord

    panel = _panel(window)
    tuning = TuningRecord(trials=64, budget_s=600.0, database="/db/llvm", kernels=23, kernels_from_database=12,
                          summary="5/23 kernels tuned (7 reused from the database), 600 s, budget spent")
    panel.artifact = SimpleNamespace(target="cuda", manifest=Manifest(compile_seconds=1.0, tuning=tuning))
    panel.result = None
    panel._show_results()
    rows = {panel.table.item(r, 0).text(): panel.table.item(r, 1).text() for r in range(panel.table.rowCount())}
    assert rows["Tuning"] == tuning.summary
    assert rows["Kernels on tuned schedules"].startswith("12 of 23")
    assert "12 of 23 kernels on tuned schedules" in panel.status.text()
    assert "Model-level A/B" not in rows
    # the model-level A/B after tuning: its line in the status and the table
    tuning.model_ab = {"records": ["k1"], "candidates": {"k1": "template", "k2": "search"}, "untuned_ms": 9.5,
                          "tuned_ms": 8.75, "untuned_p10_ms": 9.0, "tuned_p10_ms": 8.5}
    panel._show_results()
    rows = {panel.table.item(r, 0).text(): panel.table.item(r, 1).text() for r in range(panel.table.rowCount())}
    assert rows["Model-level A/B"] == "untuned 9.5 ms, tuned 8.75 ms (p10 9 vs 8.5 ms), kept 1 of 2 records"
    assert "model-level A/B: untuned 9.5 ms, tuned 8.75 ms" in panel.status.text()
    panel.artifact.manifest.tuning = None
    panel._show_results()
    assert not any(panel.table.item(r, 0).text().startswith("Tuning") for r in range(panel.table.rowCount()))


@pytest.mark.slow
def test_cancel_stops_a_real_tuning_run_within_a_round(window, qtbot, tmp_path):
    """A real tuning run on small_cnn with a 20-minute budget: Cancel as soon as kernels are
    being tuned (template search or MetaSchedule) ends the job after the batch or round in
    flight; no kernel gets a second MetaSchedule round."""
    import time

    assert window.open_model(str(sample("small_cnn")), wait=True)
    panel = _panel(window)
    panel.tune.setChecked(True)
    panel.tune_trials.setValue(32)  # two MetaSchedule rounds of 16 per kernel
    panel.tune_minutes.setValue(20)  # far more than the test waits: only Cancel can end it early
    panel.set_tune_db(str(tmp_path / "db"))
    panel.start()

    def tuning_work_started():
        tip = panel.progress.toolTip()
        return tip.startswith("tuning") and "extracting kernels" not in tip

    qtbot.waitUntil(tuning_work_started, timeout=600_000)
    panel.cancel()
    assert "measuring round" in panel.status.text()
    t0 = time.monotonic()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=400_000)
    waited = time.monotonic() - t0
    assert panel.progress.format() == "cancelled" and panel.result is None
    # a MetaSchedule round is ~30-110 s on 2 busy cores (its search cannot be interrupted)
    assert waited < 300, f"tuning went on for {waited:.0f} s after Cancel"
    saved = next((tmp_path / "db").glob("*/progress.json"), None)
    progress = json.loads(saved.read_text()) if saved is not None else {}
    assert sum(v.get("trials", 0) for v in progress.values()) <= 16, progress  # the round in flight at most


def test_heat_comes_back_with_the_model_after_a_stage_was_shown(window, qtbot):
    """A compile that finishes while a lowering stage is drawn colours the model once it is back."""
    from tests.app.test_canvas import _stage_view

    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    panel.runs.setValue(1)
    panel.start()
    with qtbot.waitSignal(window.canvas.viewShown, timeout=10000):
        window.canvas.show_view(_stage_view())
    qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
    assert window.canvas._overlay is None  # a stage is drawn: no model heat on it
    with qtbot.waitSignal(window.canvas.viewShown, timeout=10000):
        window.canvas.show_model()
    assert window.canvas._overlay is not None and set(window.canvas._overlay[0]) == set(panel.heat_values())


def test_a_wide_spread_is_shown_with_the_median(window):
    from app.panels.compile_results import result_rows
    from core.compiler.measure.bench import BenchResult, latency_stats

    panel = _panel(window)
    res = BenchResult(
        target="cpu", dims={}, latency_ms=latency_stats([0.57, 0.6, 11.0, 11.6, 12.0, 11.9, 14.0, 0.9, 11.7, 20.0]),
        ort_latency_ms=latency_stats([1.0, 1.01, 0.99, 1.0]), ratio=11.6,
    )
    panel._fill_table(result_rows(res))
    panel._warn_spread(res)
    rows = {panel.table.item(r, 0).text(): r for r in range(panel.table.rowCount())}
    assert panel.table.item(rows["Latency p10 – p90"], 1).text() == "0.597 – 14.600 ms"
    assert panel.table.item(rows["Latency min – max"], 1).text() == "0.570 – 20.000 ms"
    median = panel.table.item(rows["Latency median"], 1)
    assert median.text().startswith("⚠") and "Wide spread" in median.toolTip()
    assert not panel.table.item(rows["Latency median"], 2).text().startswith("⚠")  # onnxruntime's runs agree
    assert "Wide spread" in panel.status.text() and panel.spread_note.startswith("Ours")


def test_export_into_a_new_folder_name_and_dialogs_remember_where(window, qtbot, monkeypatch, tmp_path):
    from PySide6.QtWidgets import QFileDialog

    from app.dialogs.files import start_dir

    assert window.open_model(str(sample("mlp")), wait=True)
    # before any pick: the model's folder
    assert start_dir(window, "export") == str(sample("mlp").parent)
    panel = _panel(window)
    panel.runs.setValue(1)
    panel.start()
    qtbot.waitUntil(lambda: panel.result is not None and panel.compile_btn.isEnabled(), timeout=120_000)
    asked = []
    target = tmp_path / "not" / "there" / "yet"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: asked.append(a[2]) or (str(target), ""))
    panel.export_dialog()
    assert asked[0].endswith("mlp_cpu")  # a suggested name in the start folder
    qtbot.waitUntil(lambda: (target / "manifest.json").exists() and panel.compile_btn.isEnabled(), timeout=60_000)
    assert "Exported to" in panel.status.text()
    # the next export dialog starts where this one went
    assert start_dir(window, "export") == str(target.parent)
    panel.export_dialog()
    assert asked[1] == str(target.parent / "mlp_cpu")
