"""ARM64 as a target in the GUI (issue 46): the Compile panel's CPU choice offers the device
presets and "ARM64 device…", compiles and cross-links for the device without running anything
here, says so, and exports an AArch64 model.so; "Check under emulation" and the device field
("Time on device") act on that build; the Lowering panel's ARM64 choice ends in AArch64 assembly."""
from __future__ import annotations

import os
import struct

import pytest

from tests.conftest import sample

EM_AARCH64 = 183  # ELF e_machine of AArch64


@pytest.fixture(autouse=True)
def _no_cpu_env(monkeypatch):
    monkeypatch.delenv("MLCWB_CPU", raising=False)
    monkeypatch.delenv("MLCWB_CPU_FEATURES", raising=False)


def _panel(window):
    return window.panels["compile"].widget()


def _needs_cross_compiler():
    import shutil

    if not (os.environ.get("MLCWB_CROSS_CC") or shutil.which("aarch64-linux-gnu-gcc")):
        pytest.skip("no aarch64-linux-gnu-gcc here to cross-link model.so (apt-get install gcc-aarch64-linux-gnu)")


def _compile_for_rpi5(window, qtbot, monkeypatch):
    """mm_relu compiled for the Raspberry Pi 5 entry, with any attempt to measure it recorded."""
    import core.compiler.measure.bench as bench

    ran = []
    monkeypatch.setattr(bench, "benchmark", lambda *a, **k: ran.append(a) or pytest.fail("an ARM64 build was run here"))
    assert window.open_model(str(sample("mm_relu")), wait=True)
    panel = _panel(window)
    assert not panel.device.isVisible()  # the device row belongs to ARM64 choices
    assert panel.cpu.select_device("Raspberry Pi 5")
    assert panel.device.isVisible() and panel.emulate_btn.isVisible()
    panel.start()
    assert "Compiling for Raspberry Pi 5 (cortex-a76 +dotprod, aarch64-linux-gnu)" in panel.status.text()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=180_000)
    assert not ran
    return panel


def test_the_choice_offers_the_arm64_presets_and_a_device_dialog(qtbot):
    from app.panels.cpu_choice import OTHER_ARM_DEVICE, CpuChoice
    from core.compiler.target import DEVICE_PRESETS

    box = CpuChoice()
    qtbot.addWidget(box)
    texts = [box.itemText(i) for i in range(box.count())]
    assert all(p.title in texts for p in DEVICE_PRESETS.values()) and texts[-1] == OTHER_ARM_DEVICE
    assert box.select_device("rpi5")
    assert box.choice().options() == {"cpu": "cortex-a76", "cpu_features": "+dotprod", "triple": "aarch64-linux-gnu", "cores": 4}
    assert box.select_device("jetson-orin") and box.choice().cores == 8
    assert box.select("haswell", "") and box.choice() == ("haswell", "") and box.choice().triple is None
    # "ARM64 device…": an unknown CPU is one sentence in the dialog, which stays open; OK adds the device
    box.activated.emit(box.findText(OTHER_ARM_DEVICE))
    dialog = box.dialog
    assert dialog is not None and box.currentText().startswith("haswell")  # never left on the "…" entry
    assert dialog.cpu.findText("cortex-a55") >= 0  # LLVM's AArch64 list
    dialog.cpu.setCurrentText("cortex-a999")
    dialog.accept()
    assert dialog.isVisible() and "unknown CPU 'cortex-a999'" in dialog.error.text()
    dialog.cpu.setCurrentText("cortex-a55")
    dialog.features.setText("+dotprod")
    dialog.cores.setValue(6)
    dialog.accept()
    assert not dialog.isVisible() and box.currentText() == "ARM64: cortex-a55 +dotprod, 6 cores"
    assert box.choice().options() == {"cpu": "cortex-a55", "cpu_features": "+dotprod", "triple": "aarch64-linux-gnu", "cores": 6}
    # Cancel goes back to the entry chosen before
    box.activated.emit(box.findText(OTHER_ARM_DEVICE))
    box.dialog.reject()
    assert box.currentText() == "ARM64: cortex-a55 +dotprod, 6 cores"


def test_compile_for_raspberry_pi_5_runs_nothing_here_and_exports_aarch64(window, qtbot, monkeypatch, tmp_path):
    _needs_cross_compiler()
    from core.compiler.target import host_arch

    if host_arch() == "aarch64":
        pytest.skip("this machine is ARM64: its code runs here")
    panel = _compile_for_rpi5(window, qtbot, monkeypatch)
    art = panel.artifact
    assert art is not None and panel.result is None, panel.status.text()
    cpu = art.manifest.target.cpu
    assert cpu["triple"] == "aarch64-linux-gnu" and cpu["name"] == "cortex-a76"
    text = panel.status.text()
    assert text.startswith("Compiled for Raspberry Pi 5 (cortex-a76 +dotprod, aarch64-linux-gnu)"), text
    assert f"not run on this {host_arch()} machine — export it, check it under emulation, or time it on the device." in text
    assert panel.export_btn.isEnabled() and panel.device.isVisible()
    assert panel.table.rowCount() > 0  # the compile-time memory estimate and compile time
    panel.export_to(str(tmp_path / "rpi5"))
    qtbot.waitUntil(lambda: panel.progress.format() in ("exported", "failed"), timeout=120_000)
    assert panel.progress.format() == "exported", panel.status.text()
    header = (tmp_path / "rpi5" / "model.so").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and struct.unpack("<H", header[18:20])[0] == EM_AARCH64


def test_lowering_for_an_arm64_device_ends_in_aarch64_assembly(window, qtbot):
    assert window.open_model(str(sample("mm_relu")), wait=True)
    panel = window.panels["lowering"].widget()
    assert panel.cpu_box.isVisible()
    assert panel.cpu_box.select_device("rpi5")
    panel.start()
    qtbot.waitUntil(lambda: panel.job is None, timeout=120_000)
    assert not panel.error, panel.status.text()
    last = panel.stages[-1]
    assert last.name == "Assembly" and "fmla" in last.text  # NEON's fused multiply-add
    assert " stages for Raspberry Pi 5, " in panel.status.text()
    panel.target_box.setCurrentText("cuda")
    assert not panel.cpu_box.isVisible()  # CUDA's host is this machine


def test_the_device_field_refuses_a_bad_address_in_one_sentence(window, qtbot, monkeypatch):
    _needs_cross_compiler()
    from app.panels.device_field import remote_function

    panel = _compile_for_rpi5(window, qtbot, monkeypatch)
    if remote_function() is None:  # RPC timing has not landed in core: the button says what it needs
        assert not panel.device_btn.isEnabled() and "bench_remote" in panel.device_btn.toolTip()
        return
    panel.device.setText("rpi5.local:port:key")
    assert panel.device_btn.isEnabled()
    panel.device_btn.click()
    text = panel.status.text()
    assert "HOST:PORT:KEY" in text and "rpi5.local:port:key" in text and "\n" not in text and "--rpc" not in text
    assert panel.compile_btn.isEnabled()  # nothing started
    # a tracker nobody listens on: one sentence, and the panel comes back
    panel.device.setText("127.0.0.1:1:nokey")
    panel.device_btn.click()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=120_000)
    assert "127.0.0.1:1" in panel.status.text() and panel.progress.format() == "failed"


def test_check_under_emulation_says_match_and_no_latency(window, qtbot, monkeypatch):
    _needs_cross_compiler()
    from app.panels.device_field import check_function

    panel = _compile_for_rpi5(window, qtbot, monkeypatch)
    if check_function() is None:
        assert not panel.emulate_btn.isEnabled() and "check_artifact" in panel.emulate_btn.toolTip()
        return
    assert panel.emulate_btn.isEnabled()
    # the compile's worker thread may still be winding down (a loaded host): the click waits for it
    qtbot.waitUntil(lambda: panel.job is None or not panel.job.isRunning(), timeout=60_000)
    panel.emulate_btn.click()
    qtbot.waitUntil(lambda: panel.progress.format() in ("outputs match", "outputs differ", "failed"), timeout=300_000)
    text = panel.status.text()
    from core.compiler.runtime.emulation import emulator

    if emulator("aarch64-linux-gnu") is None:  # not set up here: the sentence says how
        assert panel.progress.format() == "failed" and "setup_emulation" in text, text
        return
    assert text.startswith("Checked under emulation") and "outputs match" in text and "no latency" in text, text
    assert "max abs error" in text


def test_time_on_device_puts_kernel_times_on_the_graph(window, qtbot, monkeypatch):
    """The device's per-kernel times take the host's path to the chart and the heat badges
    (bench_remote stands in here; a real tracker and server in the loopback test below)."""
    _needs_cross_compiler()
    import app.panels.device_field as device_field
    from core.compiler.measure.bench import BenchResult, KernelTime, latency_stats

    panel = _compile_for_rpi5(window, qtbot, monkeypatch)
    labels = [n.label for n in window.document.graph.nodes]
    calls = []

    def fake_remote(art, address, **kw):
        calls.append((address, kw))
        return BenchResult(target="cpu", dims={}, latency_ms=latency_stats([2.0, 2.5, 3.0]),
                           kernels=[KernelTime(name="fused_matmul_relu", ms=1.5, share=1.0, onnx_nodes=labels)])

    monkeypatch.setattr(device_field, "remote_function", lambda: fake_remote)
    panel.device.setText("127.0.0.1:9190:rpi5")
    panel._update_device_controls()
    assert panel.device_btn.isEnabled()
    panel.device_btn.click()
    qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=60_000)
    assert calls and calls[0][0] == "127.0.0.1:9190:rpi5" and calls[0][1]["per_kernel"] is True
    assert panel.status.text().startswith("Timed on the device 127.0.0.1:9190:rpi5: median 2.5"), panel.status.text()
    assert panel.heat_values() and set(panel.heat_values().values()) == {1.5}
    assert window.canvas.has_overlay


def test_time_on_device_through_a_loopback_rpc_server(window, qtbot, monkeypatch):
    """A real TVM RPC tracker and server on 127.0.0.1 (this host's code: the server runs what it
    is sent, so only an artifact this machine runs is timed)."""
    from app.panels.device_field import remote_function

    if remote_function() is None:
        pytest.skip("core.compiler.measure.remote.bench_remote has not landed")
    import tvm.rpc
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host="127.0.0.1", port=9190, port_end=9290, silent=True)
    server = tvm.rpc.Server(host="127.0.0.1", port=9300, port_end=9400, key="loopback", tracker_addr=("127.0.0.1", tracker.port), silent=True)
    try:
        assert window.open_model(str(sample("mm_relu")), wait=True)
        panel = _panel(window)
        panel.runs.setValue(3)
        assert not panel.device.isVisible()  # this host: nothing to deploy to
        assert panel.cpu.select("haswell", "")  # a deployment CPU (AVX2: every host of this project runs it)
        assert panel.device.isVisible() and not panel.emulate_btn.isVisible()
        panel.start()
        qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=180_000)
        assert panel.artifact is not None, panel.status.text()
        panel.device.setText(f"127.0.0.1:{tracker.port}:loopback")
        panel.device_btn.click()
        qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=180_000)
        assert panel.status.text().startswith(f"Timed on the device 127.0.0.1:{tracker.port}:loopback: median"), panel.status.text()
        assert panel.heat_values() and panel.table.item(panel.table.rowCount() - 1, 0).text() == "Device CPU"
        # an ARM64 build sent to this x86-64 server: exported cross-linked, then refused in one sentence naming both
        _needs_cross_compiler()
        assert panel.cpu.select_device("rpi5")
        panel.start()
        qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=180_000)
        assert panel.artifact_foreign()
        panel.device_btn.click()
        qtbot.waitUntil(lambda: panel.compile_btn.isEnabled(), timeout=180_000)
        text = panel.status.text()
        assert panel.progress.format() == "failed" and "built for aarch64-linux-gnu" in text and "x86_64" in text, text
        assert panel.artifact.folder is None  # the temporary export went with the job
    finally:
        server.terminate()
        tracker.terminate()
