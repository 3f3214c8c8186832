"""The Compile & Run panel's device row, shown for a deployment CPU (a named x86-64 CPU, an ARM64
device) and for code this machine cannot run:
"Check under emulation" runs the compiled model under user-mode emulation and compares it with
onnxruntime (core.compiler.check.artifact_run_check.check_artifact: it says whether the outputs
match and the largest error, and that an emulated run measures nothing), and the device field
("HOST:PORT:KEY", a TVM RPC tracker and the key its device registered under) with "Time on
device" times the artifact there (core.compiler.measure.remote.bench_remote), its per-kernel
times put on the graph's heat badges and the bar chart as the host's are. Both run on the panel's
worker, as a compile does. A mixin of CompilePanel (its job, status line, table, chart and heat).

Either core function may be missing from an older core: its button is then off, and its tooltip
says what it needs."""
from __future__ import annotations

import importlib
import logging
import os
import re
import tempfile

from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton

from app.panels.compile_results import format_ms
from app.workers import Job
from core import WorkbenchError
from core.errors import Cancelled
from core.compiler.target import TargetKind
from core.progress import Progress

__all__ = ["DeviceControls", "check_function", "remote_function", "check_address"]

logger = logging.getLogger(__name__)

_CHECK = ("core.compiler.check.artifact_run_check", "check_artifact")
_REMOTE = ("core.compiler.measure.remote", "bench_remote")
_ADDRESS = re.compile(r"^\s*([^:\s]+):(\d{1,5}):(\S+)\s*$")


def _core_function(where: tuple[str, str]):
    module, name = where
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def check_function():
    """check_artifact(art, dims=None) -> ArtifactRunCheck, or None where core has none yet."""
    return _core_function(_CHECK)


def remote_function():
    """bench_remote(art, address, runs=, warmup=, dims=, per_kernel=, progress=), or None where core has none yet."""
    return _core_function(_REMOTE)


def check_address(text: str) -> str:
    """The device field's 'HOST:PORT:KEY' (or 'HOST:PORT', an RPC server without a tracker), as
    core.compiler.measure.remote reads it, stripped; one sentence in the panel's words otherwise."""
    shown = (text or "").strip()
    if not shown:
        raise WorkbenchError("the device field is empty: give HOST:PORT:KEY (a TVM RPC tracker and the key its device registered under).")
    try:
        from core.compiler.measure.remote import parse_device_address
    except ImportError:
        parse_device_address = None
    try:
        if parse_device_address is not None:
            parse_device_address(shown)
        elif not _ADDRESS.match(shown):
            raise WorkbenchError(shown)
    except WorkbenchError:  # core's sentence names the CLI's --rpc: say it for the field
        raise WorkbenchError(f"the device field wants HOST:PORT:KEY (a TVM RPC tracker and the key its device registered under, "
                             f"e.g. 127.0.0.1:9190:rpi5) or HOST:PORT (an RPC server), not '{shown}'.") from None
    return shown


def _field(res, name: str, default=None):
    """A result's field, whether bench_remote returns an object (as benchmark does) or a dict (JSON)."""
    if isinstance(res, dict):
        return res.get(name, default)
    return getattr(res, name, default)


def remote_kernels(res) -> list:
    """The per-kernel times of a remote result as KernelTime rows (what the chart and heat take)."""
    from core.compiler.measure.bench import KernelTime

    out = []
    for k in _field(res, "kernels", None) or []:
        if isinstance(k, KernelTime):
            out.append(k)
        elif isinstance(k, dict):
            out.append(KernelTime(name=str(k.get("name", "?")), ms=float(k.get("ms", 0.0)), share=float(k.get("share", 0.0) or 0.0),
                                  calls=int(k.get("calls", 1) or 1), onnx_nodes=[str(n) for n in k.get("onnx_nodes", []) or []]))
    return out


def remote_rows(res) -> list[tuple[str, str, str]]:
    """The results table's rows for a device's timing (label, on the device, '–': onnxruntime did not run there)."""
    lat = _field(res, "latency_ms")
    rows = []
    get = (lambda n: lat.get(n)) if isinstance(lat, dict) else (lambda n: getattr(lat, n, None))
    for label, a, b in (("Latency median", "median", None), ("Latency p10 – p90", "p10", "p90"), ("Latency min – max", "min", "max")):
        x, y = get(a) if lat is not None else None, get(b) if lat is not None and b else None
        if x is not None:
            rows.append((label, f"{format_ms(x).removesuffix(' ms')} – {format_ms(y)}" if y is not None else format_ms(x), "–"))
    runs = get("runs") if lat is not None else None
    if runs is not None:
        rows.append(("Runs", str(runs), "–"))
    device = _field(res, "device") or {}
    if isinstance(device, dict) and device:
        # its CPU (the address is in the status line): "cortex-a76", else what the device did not say
        rows.append(("Device CPU", str(device.get("name") or device.get("arch") or "not reported"), "–"))
    return rows


def remote_median(res) -> tuple[float | None, int | None]:
    """(median ms, runs) of a remote result's latency."""
    lat = _field(res, "latency_ms")
    if lat is None:
        return None, None
    if isinstance(lat, dict):
        return lat.get("median"), lat.get("runs")
    if isinstance(lat, (int, float)):
        return float(lat), None
    return getattr(lat, "median", None), getattr(lat, "runs", None)


class DeviceControls:
    """The device row's widgets and jobs, for CompilePanel (which lays them out)."""

    def _make_device_controls(self) -> QHBoxLayout:
        self.emulate_btn = QPushButton("Check under emulation")
        self.device_label = QLabel("device")
        self.device = QLineEdit()
        self.device.setPlaceholderText("RPC HOST:PORT:KEY")
        self.device.setMinimumWidth(QFontMetrics(self.device.font()).horizontalAdvance("192.168.100.100:9190:rpi5") + 16)
        self.device.setToolTip("The device to time the model on: HOST:PORT of a TVM RPC tracker and the KEY its device registered "
                               "under (on the device: python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY)")
        self.device_btn = QPushButton("Time on device")
        self.device.textChanged.connect(self._update_device_controls)
        self.device.returnPressed.connect(self.time_on_device)
        self.emulate_btn.clicked.connect(self.check_emulated)
        self.device_btn.clicked.connect(self.time_on_device)
        row = QHBoxLayout()
        row.addWidget(self.device_label)
        row.addWidget(self.device)
        row.addWidget(self.device_btn)
        row.addSpacing(12)
        row.addWidget(self.emulate_btn)
        row.addStretch(1)
        return row

    def artifact_foreign(self) -> bool:
        """Whether the last compile's code is for another architecture (ARM64 on this x86-64)."""
        from core.compiler.target import code_arch, host_arch

        art = self.artifact
        return art is not None and art.target == TargetKind.CPU and code_arch(art.manifest.target.cpu) != host_arch()

    def _cannot_run_here(self) -> bool:
        """The last compile's CPU code needs features this machine lacks (AVX-512 on an AVX2 host)."""
        from core.compiler.target import foreign_code

        art = self.artifact
        return art is not None and art.target == TargetKind.CPU and bool(foreign_code(art.manifest.target.cpu))

    def _update_device_controls(self, *_args) -> None:
        """The row shows for a deployment CPU (a named one, an ARM64 device) or code this machine
        cannot run, "Check under emulation" for another architecture's only; each button says why
        it is off."""
        foreign = self.artifact_foreign()
        choice = self.cpu.choice() if self.target_kind() is TargetKind.CPU else None
        arm = foreign or (choice is not None and choice.foreign_arch)
        shown = arm or (choice is not None and choice.cpu is not None) or self._cannot_run_here()
        for w in (self.device_label, self.device, self.device_btn):
            w.setVisible(shown)
        self.emulate_btn.setVisible(arm)
        busy = self._busy_now
        if check_function() is None:
            self.emulate_btn.setEnabled(False)
            self.emulate_btn.setToolTip("Needs the emulation check of core (core.compiler.check.artifact_run_check.check_artifact), "
                                        "which this build lacks.")
        else:
            self.emulate_btn.setEnabled(foreign and not busy)
            self.emulate_btn.setToolTip("Run the compiled model here under qemu-user emulation of its device and compare it with "
                                        "onnxruntime (bench --check-only): whether it computes right, not how fast"
                                        if foreign else "Compile for an ARM64 device first: this checks its build under emulation.")
        if remote_function() is None:
            self.device_btn.setEnabled(False)
            self.device_btn.setToolTip("Needs RPC timing in core (core.compiler.measure.remote.bench_remote), which this build lacks.")
        else:
            self.device_btn.setEnabled(self.artifact is not None and not busy and bool(self.device.text().strip()))
            self.device_btn.setToolTip("Time the compiled model on the device behind the RPC tracker (bench --rpc), per kernel, "
                                       "with the kernel times on the graph" if self.artifact is not None else
                                       "Compile first: this times the compiled model on the device.")
        self.device.setEnabled(not busy)

    # -- jobs ----------------------------------------------------------------------------

    def check_emulated(self) -> None:
        """Run the last (foreign) compile under emulation against onnxruntime, on the worker."""
        check = check_function()
        art = self.artifact
        if check is None or art is None or (self.job is not None and self.job.isRunning()):
            return
        dims = dict(self.dims_used)

        def work(job: Job):
            job.report(Progress(0.1, "running under emulation (slow: many times the device's time)"))
            return check(art, dims=dims or None)

        self._start_job(work, "Check under emulation", self._emulated_done, "Checking under emulation (no latency: an emulated run measures nothing)…")

    def _emulated_done(self, found) -> None:
        self._busy(False)
        self.progress.setValue(1000)
        self.progress.setFormat("outputs match" if found.match else "outputs differ")
        by = f" ({found.emulator})" if found.emulator else ""
        if found.match:
            self.status.setStyleSheet("")
            self.status.setText(f"Checked under emulation{by}: outputs match {found.reference} (max abs error {found.max_abs_err:.3g}) "
                                "on seeded random inputs; ran emulated, so no latency (time it on the device for that).")
        else:
            self.status.setStyleSheet("color: #d62728;")
            self.status.setText(f"Checked under emulation{by}: outputs DIFFER (max abs error {found.max_abs_err:.3g}): {found.sentence}")

    def time_on_device(self) -> None:
        """Time the last compile on the device named in the field (bench_remote), on the worker."""
        bench_remote = remote_function()
        art = self.artifact
        if bench_remote is None or art is None or (self.job is not None and self.job.isRunning()):
            return
        try:
            address = check_address(self.device.text())
        except WorkbenchError as e:
            self.status.setStyleSheet("color: #d62728;")
            self.status.setText(str(e)[0].upper() + str(e)[1:])
            self.device.setFocus()
            return
        runs = self.runs.value()
        dims = dict(self.dims_used)
        foreign = self.artifact_foreign()

        def work(job: Job):
            def progress(step: str, fraction: float) -> None:
                job.report(Progress(float(fraction), f"device: {step}"))

            try:
                with tempfile.TemporaryDirectory(prefix="mlcwb-device-") as tmp:
                    what = art
                    if foreign:  # another architecture's model.so: exported (cross-linked) as Export does, then sent
                        job.report(Progress(0.02, "device: exporting the cross-linked library"))
                        exported_to = art.folder
                        try:
                            what = str(art.export(os.path.join(tmp, "artifact")))
                        finally:
                            art.folder = exported_to  # the temporary folder goes with this job
                    return address, bench_remote(what, address, runs=runs, warmup=3, dims=dims or None, per_kernel=True,
                                                 progress=progress, cancel=job.is_cancelled)
            except (WorkbenchError, Cancelled):
                raise
            except Exception as e:  # noqa: BLE001 - RPC raises TVMError, OSError, TimeoutError…
                logger.exception("Time on device %s", address)
                lines = [l.strip() for l in str(e).splitlines() if l.strip()] or [type(e).__name__]
                said = lines[0] + (f" {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else "")
                raise WorkbenchError(f"timing on the device {address} failed: {said.rstrip('.')} (details in the log).") from e

        self._start_job(work, "Time on device", self._device_done, f"Timing on the device {address} (through the RPC tracker)…")

    def _device_done(self, result) -> None:
        address, res = result
        self._busy(False)
        self.progress.setValue(1000)
        self.progress.setFormat("timed on device")
        self.status.setStyleSheet("")
        median, runs = remote_median(res)
        kernels = remote_kernels(res)
        self._fill_table(remote_rows(res))
        # the per-kernel times take the host's path: the chart, and the heat badges on the graph
        self.chart.set_kernels(kernels)
        self.heat_kernels = kernels
        self._apply_heat()
        where = f"the device {address}"
        lat = f"median {format_ms(median)}" + (f" over {runs} runs" if runs else "") if median is not None else "no latency came back"
        note = _field(res, "kernels_note")
        heat = f"; {len(kernels)} kernel times on the graph" if kernels else (f"; {str(note).rstrip('.')}" if note else "")
        self.status.setText(f"Timed on {where}: {lat}{heat}.")
