"""The Schedule panel: opened from the Lowering panel and from Compile & Run's kernel chart, the
course's mm_relu steps through the right-click menus and a drag in the loop tree, refusals,
undo/redo, measuring with the chart, "Use in compile" and Export."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QInputDialog

from tests.conftest import sample

LONG = 120_000
KERNEL = "fused_matmul_relu"


def _item(tree, name):
    found = []

    def walk(item):
        if item.data(0, Qt.UserRole) and item.data(0, Qt.UserRole)[1] == name:
            found.append(item)
        for i in range(item.childCount()):
            walk(item.child(i))

    for i in range(tree.topLevelItemCount()):
        walk(tree.topLevelItem(i))
    return found[0]


def _act(panel, kind, name, label_start):
    acts = dict(panel.actions_for(kind, name))
    label = next(lb for lb in acts if lb.startswith(label_start))
    acts[label]()


@pytest.fixture
def opened(window, qtbot):
    """mm_relu lowered, its kernel double-clicked at the FuseTIR stage: the Schedule panel's session."""
    assert window.open_model(str(sample("mm_relu")), wait=True)
    lowering = window.lowering_panel
    lowering.start()
    qtbot.waitUntil(lambda: not lowering.running, timeout=LONG)
    fuse = [s.name for s in lowering.stages].index("FuseTIR")
    lowering.select_stage(fuse)
    canvas = window.canvas
    qtbot.waitUntil(lambda: canvas.view is not None and canvas.view.title.startswith(f"{fuse}."), timeout=LONG)
    call = next(n for n in canvas.view.nodes if n.data.get("callee") == KERNEL)
    canvas.nodeActivated.emit(call.id)
    panel = window.schedule_panel
    qtbot.waitUntil(lambda: panel.session is not None and panel.job is None, timeout=LONG)
    return panel


def test_course_steps_through_menus_and_a_drag(opened, qtbot, monkeypatch):
    panel = opened
    assert window_dock_visible(panel)
    assert KERNEL in panel.header.text() and "MFLOP" in panel.header.text()
    assert _item(panel.tree, "matmul/i1").text(1) == "128"
    assert panel.measure_btn.isEnabled()

    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("None, 4", True))
    _act(panel, "loop", "matmul/i1", "split")
    assert panel.session.steps[-1]["factors"] == [None, 4]
    assert panel.ir.changed  # the lines the split changed are marked

    # drag k onto i1_1: a real drop event on the tree swaps the two loops (a reorder step)
    tree = panel.tree
    source, target = _item(tree, "k"), _item(tree, "i1_1")
    tree.setCurrentItem(source)
    pos = QPointF(tree.visualItemRect(target).center())
    event = QDropEvent(pos, Qt.MoveAction, QMimeData(), Qt.LeftButton, Qt.NoModifier)
    tree.dropEvent(event)
    assert panel.session.steps[-1] == {"primitive": "reorder", "loops": ["k", "i1_1"]}
    assert [b for b in panel.session.nest().blocks["matmul"].loops] == ["matmul/i0", "i1_0", "k", "i1_1"]

    monkeypatch.setattr(QInputDialog, "getItem", lambda *a, **k: ("i1_0", True))
    _act(panel, "block", "compute", "reverse_compute_at")
    _act(panel, "loop", "i1_1", "vectorize")
    _act(panel, "loop", "ax0", "vectorize")
    _act(panel, "loop", "i0", "parallel")
    monkeypatch.setattr(QInputDialog, "getItem", lambda *a, **k: ("k", True))
    _act(panel, "block", "matmul", "decompose_reduction")
    assert panel.steps_list.count() == 7 and panel.steps_list.item(6).text() == "7. decompose_reduction matmul at k"
    assert "T.parallel(T.int64(128))" in panel.ir.text and 'T.sblock("matmul_init")' in panel.ir.text
    assert "parallel" in _item(panel.tree, "i0").text(1)

    # a refused step: one red sentence, the steps stay
    _act(panel, "loop", "k", "vectorize")
    assert "vectorize k was refused by TVM" in panel.status.text() and "b00020" in panel.status.styleSheet()
    assert panel.steps_list.count() == 7

    panel.undo()
    assert panel.steps_list.count() == 6 and "matmul_init" not in panel.ir.text
    panel.redo()
    assert panel.steps_list.count() == 7 and panel.redo_btn.isEnabled() is False


def window_dock_visible(panel) -> bool:
    return panel.dock is not None and panel.dock.isVisible()


def test_export_python_and_json(opened, tmp_path):
    panel = opened
    panel.apply_step({"primitive": "split", "loop": "matmul/i1", "factors": [None, 4]})
    panel.export_python(tmp_path / "t.py")
    panel.export_json(tmp_path / "t.json")
    text = (tmp_path / "t.py").read_text()
    assert "sch.split(" in text and text.startswith("# TVM trace of kernel fused_matmul_relu")
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["steps"] == [{"primitive": "split", "loop": "matmul/i1", "factors": [None, 4]}] and data["tvm_trace"]


def test_compile_chart_double_click_opens_the_kernel(window, qtbot):
    assert window.open_model(str(sample("mm_relu")), wait=True)
    compile_panel = window.panels["compile"].panel
    # the compiled model names the kernel as the scheduled stages do (fused_matmul_relu1)
    from core.compiler.measure.bench import KernelTime

    compile_panel.chart.kernelActivated.emit(KernelTime("fused_matmul_relu1", 1.0, 1.0))
    panel = window.schedule_panel
    qtbot.waitUntil(lambda: panel.session is not None and panel.job is None, timeout=LONG)
    assert panel.session.name == KERNEL and panel.tree.topLevelItemCount() == 2


@pytest.mark.slow
def test_measure_chart_and_use_in_compile(opened, qtbot, tmp_path):
    panel = opened
    compile_panel = panel.window.panels["compile"].panel
    compile_panel.set_tune_db(str(tmp_path / "db"))
    panel.measure_btn.click()
    qtbot.waitUntil(lambda: panel.job is None and bool(panel.session.measurements), timeout=LONG)
    assert "ms" in panel.result.text() and "GFLOP/s" in panel.result.text() and "default schedule" in panel.result.text()
    assert len(panel.chart.points) == 1 and panel.chart.default_ms > 0
    panel.apply_step({"primitive": "split", "loop": "matmul/i1", "factors": [None, 4]})
    panel.apply_step({"primitive": "reorder", "loops": ["i1_0", "k", "i1_1"]})
    assert panel.use_btn.isEnabled()
    assert compile_panel.tuning_options() == {}
    panel.use_btn.click()
    qtbot.waitUntil(lambda: panel.job is None and "Filed in" in panel.status.text(), timeout=LONG)
    assert [p[0] for p in panel.chart.points] == [0, 2]
    assert compile_panel.use_db.isChecked()
    assert compile_panel.tuning_options() == {"tune_db": str(tmp_path / "db")}
    assert any(p.name == "database_workload.json" for p in (tmp_path / "db").rglob("*"))


def test_start_from_the_default_schedule_and_undo_to_naive(opened, qtbot):
    """Issue 41 item 9: the default schedule as steps in the panel, undone back to the naive kernel."""
    from core.compiler.manual.default_start import same_tir
    from core.compiler.schedules import schedule_cpu_func, with_root_block

    panel = opened
    naive = panel.session.script()
    assert "naive program" in panel.start_line.text() and "Measure to time" in panel.start_line.text()
    panel.start_box.setCurrentIndex(panel.start_box.findData("default"))
    qtbot.waitUntil(lambda: panel.job is None and panel.session.start == "default", timeout=LONG)
    s = panel.session
    default, _rule = schedule_cpu_func(with_root_block(s.base), s.target)
    assert same_tir(s.func, default)
    assert "default schedule" in panel.start_line.text() and "cpu.Matmul" in panel.status.text()
    assert panel.steps_list.count() == len(s.steps) and "pad_einsum" in panel.steps_list.item(0).text()
    assert panel.tree.columnWidth(1) >= panel.tree.header().minimumSectionSize()  # item 6: Extent stays readable
    while panel.undo_btn.isEnabled():
        panel.undo_btn.click()
    assert panel.session.script() == naive and panel.steps_list.count() == 0


def test_opening_another_model_clears_the_measured_text(opened, qtbot):
    """Issue 41 item 7: 'Measured: … ms (vectorize …)' does not outlive the model it measured."""
    from core.compiler.manual.session import Measurement

    panel = opened
    panel.apply_step({"primitive": "split", "loop": "matmul/i1", "factors": [None, 4]})
    m = Measurement(steps=1, ms=2.9146, flops=1, bytes=1, peak_gflops=1.0, default_ms=1.22, label="vectorize oc_block")
    panel.session.measurements.append(m)
    panel._measured(m)  # the panel's own path after a measurement, without timing anything
    assert "Measured: 2.9146 ms" in panel.status.text() and "2.9146" in panel.result.text()
    assert panel.window.open_model(str(sample("mlp")), wait=True)
    qtbot.waitUntil(lambda: panel.session is None, timeout=LONG)
    assert panel.status.text() == "" and panel.result.text() == "" and panel.start_line.text() == ""
    assert panel.steps_list.count() == 0 and panel.chart.points == []
    assert panel.start_box.currentData() == "naive"
