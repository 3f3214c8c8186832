"""The Compile panel's CPU choice (app.panels.cpu_choice): the code is built for the chosen CPU,
the manifest says which, and code this machine cannot run is compiled and offered for Export,
not run."""
from __future__ import annotations

import pytest

from tests.conftest import sample


@pytest.fixture(autouse=True)
def _no_cpu_env(monkeypatch):
    monkeypatch.delenv("MLCWB_CPU", raising=False)
    monkeypatch.delenv("MLCWB_CPU_FEATURES", raising=False)


def _panel(window):
    return window.panels["compile"].widget()


def test_the_choice_offers_this_host_and_named_cpus(qtbot, monkeypatch):
    from app.panels.cpu_choice import NAMED_CPUS, CpuChoice
    from core.compiler.target import host_cpu, make_target, target_cpu

    box = CpuChoice()
    qtbot.addWidget(box)
    # made without asking LLVM (no TVM import on the UI thread at start-up); opening the list names the host
    assert box.choice() == (None, None) and box.itemText(0) == "this host"
    box.showPopup()
    box.hidePopup()
    assert box.choice() == (None, None) and host_cpu() in box.itemText(0)
    wide = "avx512f" in target_cpu(make_target("cpu", mcpu="host"))["requires"]
    assert box.select("host", "-avx512f") == wide  # "this host without AVX-512" only where it has AVX-512
    for name, _ in NAMED_CPUS:
        assert box.select(name, "") and box.choice() == (name, "")
        make_target("cpu", mcpu=name)  # every name is one LLVM knows
    monkeypatch.setenv("MLCWB_CPU", "znver3")
    env_box = CpuChoice()
    qtbot.addWidget(env_box)
    assert "znver3 (MLCWB_CPU)" in env_box.itemText(0)


def test_compile_for_a_named_cpu_runs_and_records_it(window, qtbot):
    """haswell's AVX2 code runs on every host of this project (AVX2 and AVX-512 alike)."""
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    panel.runs.setValue(2)
    assert panel.cpu.select("haswell", "")
    panel.start()
    assert not panel.cpu.isEnabled()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=120_000)
    assert panel.result is not None and panel.cpu.isEnabled()
    assert panel.artifact.manifest.target.cpu["name"] == "haswell"
    assert "Compiled for CPU (haswell)" in panel.status.text() and "match onnxruntime" in panel.status.text()


def test_code_this_machine_cannot_run_is_offered_for_export(window, qtbot):
    from tests.helpers import foreign_cpu

    foreign = foreign_cpu()
    if foreign is None:
        pytest.skip("this host runs the code of every candidate CPU")
    assert window.open_model(str(sample("mlp")), wait=True)
    panel = _panel(window)
    if not panel.cpu.select(foreign, ""):
        panel.cpu.addItem(foreign, (foreign, ""))
        assert panel.cpu.select(foreign, "")
    panel.start()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=120_000)
    assert panel.artifact is not None and panel.result is None and panel.export_btn.isEnabled()
    text = panel.status.text()
    assert f"Compiled for CPU ({foreign})" in text and "This machine cannot run it: Export" in text
    assert "which this machine" in text  # why: the features it lacks


def test_the_window_starts_without_importing_tvm(tmp_path):
    """Start-up stays light: the CPU choice names the host (LLVM, i.e. importing TVM: ~1 s on the
    UI thread) only when its list is opened. Run in a fresh interpreter: this one has TVM already."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from app.main_window import MainWindow\n"
        "w = MainWindow(); w.show(); app.processEvents()\n"
        "print('tvm' in sys.modules)\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(root), "MLCWB_AUTOSAVE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
