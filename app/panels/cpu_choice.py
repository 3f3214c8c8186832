"""The choice of the CPU code is built for, in the Compile and Lowering panels: this host (or the
environment's MLCWB_CPU default), this host without AVX-512, a few named x86-64 deployment CPUs,
the ARM64 devices of core.compiler.target.DEVICE_PRESETS (Raspberry Pi 4 / 5, Jetson Orin,
Graviton 2 / 3, any ARM64), and "ARM64 device…": a dialog for another AArch64 CPU, its features
and cores. The names are LLVM's; core.compiler.target checks them and says what this machine
lacks to run the code."""
from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QStyle,
    QStyleOptionComboBox,
    QStylePainter,
    QVBoxLayout,
)

__all__ = ["CpuChoice", "CpuTarget", "ArmDeviceDialog", "NAMED_CPUS", "ARM_TRIPLE", "OTHER_ARM_DEVICE"]

# (LLVM CPU name, what it is): common deployment hosts of both ISAs
NAMED_CPUS = (
    ("znver4", "AMD Zen 4, AVX-512"),
    ("znver3", "AMD Zen 3, AVX2"),
    ("skylake-avx512", "Intel Skylake-SP, AVX-512"),
    ("icelake-server", "Intel Ice Lake-SP, AVX-512"),
    ("haswell", "Intel Haswell, AVX2"),
    ("x86-64-v3", "any x86-64 with AVX2"),
)

ARM_TRIPLE = "aarch64-linux-gnu"
OTHER_ARM_DEVICE = "ARM64 device…"


class CpuTarget(tuple):
    """What a CPU entry builds for: the pair (cpu, cpu_features) as before (None, None: the
    default), with `triple` (None: this machine's architecture), `cores` (None: the default) and
    `device`, how a sentence names it ("Raspberry Pi 5"; "" for an x86-64 CPU).
    `options()` is compile_model's keyword arguments for it."""

    def __new__(cls, cpu: str | None, cpu_features: str | None, triple: str | None = None, cores: int | None = None, device: str = ""):
        self = super().__new__(cls, (cpu, cpu_features))
        self.triple, self.cores, self.device = triple, cores, device
        return self

    @property
    def cpu(self) -> str | None:
        return self[0]

    @property
    def cpu_features(self) -> str | None:
        return self[1]

    @property
    def foreign_arch(self) -> bool:
        """Code for another architecture (ARM64): cross-linked, never run on this machine."""
        return self.triple is not None

    def options(self) -> dict:
        """compile_model's cpu, cpu_features, triple and cores."""
        return {"cpu": self.cpu, "cpu_features": self.cpu_features, "triple": self.triple, "cores": self.cores}

    def target(self, kind="cpu"):
        """The tvm Target it builds for (imports TVM; one sentence for an unknown name)."""
        from core.compiler.target import make_target

        return make_target(kind, mcpu=self.cpu, mattr=self.cpu_features, triple=self.triple, cores=self.cores)

    def describe(self) -> str:
        """'cortex-a76 +dotprod, aarch64-linux-gnu': the CPU, its feature changes and the triple."""
        text = " ".join(x for x in (self.cpu or "generic", self.cpu_features or "") if x)
        return f"{text}, {self.triple}" if self.triple else text


def _arm_entries() -> list[tuple[str, CpuTarget]]:
    """(item text, CpuTarget) of each ARM64 device preset, titled as core names it."""
    from core.compiler.target import DEVICE_PRESETS

    out = []
    for p in DEVICE_PRESETS.values():
        device = p.title.split(" (", 1)[0]
        out.append((p.title, CpuTarget(p.cpu, ",".join(p.features), p.triple, p.cores, device)))
    return out


def aarch64_cpus() -> list[str]:
    """The CPU names LLVM knows for AArch64 (the dialog's list; imports TVM)."""
    from core.compiler.target import known_cpus

    return sorted(known_cpus(ARM_TRIPLE))


class ArmDeviceDialog(QDialog):
    """Another ARM64 device: its CPU (LLVM's AArch64 names, e.g. cortex-a55, neoverse-n2), feature
    changes (+dotprod, +i8mm) and cores. OK checks them with LLVM (make_target): an unknown name is
    one sentence in the dialog, which stays open."""

    def __init__(self, parent=None, start: CpuTarget | None = None):
        super().__init__(parent)
        self.setWindowTitle("ARM64 device")
        self.cpu = QComboBox()
        self.cpu.setEditable(True)
        self.cpu.setInsertPolicy(QComboBox.NoInsert)
        try:
            names = aarch64_cpus()
        except Exception:  # noqa: BLE001 - without the list the name is typed and checked on OK
            names = []
        self.cpu.addItems(names)
        self.cpu.completer().setCompletionMode(QCompleter.PopupCompletion)
        self.cpu.completer().setFilterMode(Qt.MatchContains)
        self.cpu.setCurrentText((start.cpu if start is not None else None) or "generic")
        self.cpu.setToolTip("The device's CPU as LLVM names it (cat /proc/cpuinfo on the device: 'CPU part' 0xd0b is cortex-a76)")
        self.features = QLineEdit((start.cpu_features if start is not None else None) or "")
        self.features.setPlaceholderText("e.g. +dotprod,+i8mm")
        self.features.setToolTip("Feature changes for that CPU, as LLVM names them: +dotprod, +i8mm, +bf16, -neon…")
        self.cores = QSpinBox()
        self.cores.setRange(1, 256)
        self.cores.setValue((start.cores if start is not None else None) or 4)
        self.cores.setToolTip("Cores the model runs on (the kernels' parallel split)")
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d62728;")
        self.error.hide()
        form = QFormLayout()
        form.addRow("CPU", self.cpu)
        form.addRow("Features", self.features)
        form.addRow("Cores", self.cores)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel(f"Code for an ARM64 Linux device ({ARM_TRIPLE}), cross-linked here and run there."))
        lay.addLayout(form)
        lay.addWidget(self.error)
        lay.addWidget(buttons)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance("M") * 36)

    def choice(self) -> CpuTarget:
        return CpuTarget(self.cpu.currentText().strip() or "generic", self.features.text().strip(), ARM_TRIPLE, self.cores.value(), "ARM64 device")

    def accept(self) -> None:
        from core import WorkbenchError

        try:
            self.choice().target()
        except WorkbenchError as e:
            self.error.setText(str(e))
            self.error.show()
            return
        super().accept()


class CpuChoice(QComboBox):
    """A combo box whose `choice()` is a CpuTarget: the pair (cpu, cpu_features) for compile_model,
    (None, None) the default (MLCWB_CPU / MLCWB_CPU_FEATURES, else this host), with the triple and
    cores of an ARM64 device (`choice().options()`: all four, as compile_model takes them)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        from core.compiler.target import CPU_ENV, CPU_FEATURES_ENV

        # Naming this host (and asking whether it has AVX-512) needs LLVM, i.e. importing TVM:
        # ~1 s on the UI thread, so not at start-up: the host entries are completed when the
        # list is first opened or searched (complete()); until then the default reads "this host".
        self._env = " ".join(x for x in (os.environ.get(CPU_ENV, "").strip(), os.environ.get(CPU_FEATURES_ENV, "").strip()) if x)
        self._complete = False
        self._last = 0  # the entry before "ARM64 device…" was picked: back to it when its dialog is cancelled
        self.dialog: ArmDeviceDialog | None = None
        self.addItem(f"{self._env} (MLCWB_CPU)" if self._env else "this host", CpuTarget(None, None))
        for name, what in NAMED_CPUS:
            self.addItem(f"{name} ({what})", CpuTarget(name, ""))
        self.insertSeparator(self.count())
        for title, target in _arm_entries():
            self.addItem(title, target)
            self.setItemData(self.count() - 1, f"ARM64: {target.describe()}, {target.cores} cores; cross-linked, run on the device", Qt.ToolTipRole)
        self.addItem(OTHER_ARM_DEVICE, None)
        self.setItemData(self.count() - 1, "Another ARM64 device: its CPU, features and cores", Qt.ToolTipRole)
        self.setToolTip("The CPU the code is built for (its instruction set and vector width). Code this machine cannot run "
                        "(AVX-512 on an AVX2 host, ARM64) compiles and exports, and runs on such a CPU only.")
        self._tip = self.toolTip()
        self.activated.connect(self._activated)
        self.currentIndexChanged.connect(self._remember)

    def complete(self) -> None:
        """Name this host in the default entry and add "this host without AVX-512" where it has
        AVX-512 (or plain "this host" when MLCWB_CPU chose another default). Idempotent."""
        if self._complete:
            return
        self._complete = True
        from core.compiler.target import host_cpu, make_target, target_cpu

        host = host_cpu()
        if not self._env:
            self.setItemText(0, f"this host ({host})")
        if "avx512f" in target_cpu(make_target("cpu", mcpu="host"))["requires"]:
            self.insertItem(1, "this host without AVX-512", CpuTarget("host", "-avx512f"))
        elif self._env:
            self.insertItem(1, f"this host ({host})", CpuTarget("host", ""))

    def showPopup(self) -> None:  # noqa: N802 - Qt's name
        self.complete()
        super().showPopup()

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        """The current entry elided with "…" at the box's width (a device's title is longer than
        the row leaves it; Qt would cut it mid-word); the whole of it is in the tooltip."""
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        painter.drawComplexControl(QStyle.CC_ComboBox, opt)
        room = self.style().subControlRect(QStyle.CC_ComboBox, opt, QStyle.SC_ComboBoxEditField, self).width()
        opt.currentText = self.fontMetrics().elidedText(opt.currentText, Qt.ElideRight, max(10, room - 2))
        painter.drawControl(QStyle.CE_ComboBoxLabel, opt)

    def choice(self) -> CpuTarget:
        return self._target(self.currentIndex()) or CpuTarget(None, None)

    def _target(self, index: int) -> CpuTarget | None:
        """Entry `index`'s CpuTarget (an entry added as a plain (cpu, features) pair counts as one;
        a separator or "ARM64 device…" has none)."""
        data = self.itemData(index)
        if isinstance(data, CpuTarget) or data is None:
            return data
        return CpuTarget(*data) if isinstance(data, (tuple, list)) and len(data) == 2 else None

    def select(self, cpu: str | None, features: str | None = "") -> bool:
        """Select the entry for (cpu, features) of this machine's architecture; False when there is none."""
        self.complete()
        for i in range(self.count()):
            data = self._target(i)
            if data is not None and not data.foreign_arch and tuple(data) == (cpu, features if cpu is not None else None):
                self.setCurrentIndex(i)
                return True
        return False

    def select_device(self, name: str) -> bool:
        """Select the ARM64 preset called `name` (rpi5) or titled so ("Raspberry Pi 5"); False when there is none."""
        from core.compiler.target import DEVICE_PRESETS

        preset = DEVICE_PRESETS.get(name)
        for i in range(self.count()):
            data = self.itemData(i)
            if isinstance(data, CpuTarget) and data.foreign_arch and (
                    data.device == name or self.itemText(i) == name or (preset is not None and self.itemText(i) == preset.title)):
                self.setCurrentIndex(i)
                return True
        return False

    def add_device(self, target: CpuTarget) -> None:
        """Add (or reuse) the entry for another ARM64 device, just above "ARM64 device…", and select it."""
        text = f"ARM64: {target.describe().removesuffix(', ' + ARM_TRIPLE)}, {target.cores} cores"
        found = self.findText(text)
        if found < 0:
            found = self.findText(OTHER_ARM_DEVICE)
            self.insertItem(found, text, target)
        self.setCurrentIndex(found)

    def _remember(self, index: int) -> None:
        if self._target(index) is not None:
            self._last = index
        self.setToolTip(f"{self.itemText(index)}\n\n{self._tip}" if index >= 0 else self._tip)

    def _activated(self, index: int) -> None:
        if self.itemText(index) == OTHER_ARM_DEVICE:
            self.open_device_dialog()

    def open_device_dialog(self) -> ArmDeviceDialog:
        """"ARM64 device…": the dialog, opened (not run: a test or the user answers it); OK adds
        and selects the device, Cancel goes back to the entry chosen before."""
        back = self._last
        current = self.itemData(back)
        self.setCurrentIndex(back)  # never left on the "…" entry, whose data builds nothing
        self.dialog = ArmDeviceDialog(self, current if isinstance(current, CpuTarget) and current.foreign_arch else None)
        self.dialog.accepted.connect(lambda d=self.dialog: self.add_device(d.choice()))
        self.dialog.open()
        return self.dialog
