"""The Compile panel's choice of the CPU code is built for: this host (or the environment's
MLCWB_CPU default), this host without AVX-512, or a few named deployment CPUs. The names are
LLVM's; core.compiler.target checks them and says what this machine lacks to run the code."""
from __future__ import annotations

import os

from PySide6.QtWidgets import QComboBox

__all__ = ["CpuChoice", "NAMED_CPUS"]

# (LLVM CPU name, what it is): common deployment hosts of both ISAs
NAMED_CPUS = (
    ("znver4", "AMD Zen 4, AVX-512"),
    ("znver3", "AMD Zen 3, AVX2"),
    ("skylake-avx512", "Intel Skylake-SP, AVX-512"),
    ("icelake-server", "Intel Ice Lake-SP, AVX-512"),
    ("haswell", "Intel Haswell, AVX2"),
    ("x86-64-v3", "any x86-64 with AVX2"),
)


class CpuChoice(QComboBox):
    """A combo box whose `choice()` is (cpu, cpu_features) for compile_model: (None, None) is the
    default (MLCWB_CPU / MLCWB_CPU_FEATURES, else this host)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        from core.compiler.target import CPU_ENV, CPU_FEATURES_ENV

        # Naming this host (and asking whether it has AVX-512) needs LLVM, i.e. importing TVM:
        # ~1 s on the UI thread, so not at start-up: the host entries are completed when the
        # list is first opened or searched (complete()); until then the default reads "this host".
        self._env = " ".join(x for x in (os.environ.get(CPU_ENV, "").strip(), os.environ.get(CPU_FEATURES_ENV, "").strip()) if x)
        self._complete = False
        self.addItem(f"{self._env} (MLCWB_CPU)" if self._env else "this host", (None, None))
        for name, what in NAMED_CPUS:
            self.addItem(f"{name} ({what})", (name, ""))
        self.setToolTip("The CPU the code is built for (its vector width and instruction set). Code for a CPU with "
                        "features this machine lacks compiles and exports, and runs on such a CPU only.")

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
            self.insertItem(1, "this host without AVX-512", ("host", "-avx512f"))
        elif self._env:
            self.insertItem(1, f"this host ({host})", ("host", ""))

    def showPopup(self) -> None:  # noqa: N802 - Qt's name
        self.complete()
        super().showPopup()

    def choice(self) -> tuple[str | None, str | None]:
        cpu, features = self.currentData()
        return cpu, features

    def select(self, cpu: str | None, features: str | None = "") -> bool:
        """Select the entry for (cpu, features); False when there is none."""
        self.complete()
        for i in range(self.count()):
            if tuple(self.itemData(i)) == (cpu, features if cpu is not None else None):
                self.setCurrentIndex(i)
                return True
        return False
