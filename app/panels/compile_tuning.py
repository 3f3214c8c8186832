"""The Compile & Run panel's Tune box: tune or only apply a database, the budget, MetaSchedule's
trials per kernel, where candidates are measured (here or an RPC tracker) and the database folder;
`tuning_options()` turns them into compile_model's keywords. A mixin of CompilePanel (it reads
the panel's target and busy state)."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFileDialog,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
)

from core.compiler.target import TargetKind

__all__ = ["TuneControls"]

_TUNE_CPU_ONLY = ("Tuning for CUDA measures every candidate on a GPU, and this machine has none; CUDA compiles here use "
                  "dlight's default GPU schedules.")


class TuneControls:
    """The Tune box's widgets and state, for CompilePanel (which lays them out)."""

    def _make_tune_controls(self) -> None:
        from core.compiler.tuning.tune import default_database_root

        self.tune = QCheckBox("Tune")
        self.use_db = QCheckBox("Use database")
        self.tune_minutes = QDoubleSpinBox()
        self.tune_minutes.setRange(0.1, 24 * 60)
        self.tune_minutes.setDecimals(1)
        self.tune_minutes.setValue(10.0)
        self.tune_minutes.setPrefix("budget ")
        self.tune_minutes.setSuffix(" min")
        self.tune_trials = QSpinBox()
        self.tune_trials.setRange(0, 100_000)
        self.tune_trials.setValue(64)
        self.tune_trials.setSingleStep(16)
        self.tune_trials.setSuffix(" search trials per kernel")
        self.tune_trials.setSpecialValueText("template search only")
        # where candidates are measured: here (empty) or the devices behind a TVM RPC tracker
        self.tune_rpc = QLineEdit()
        self.tune_rpc.setPlaceholderText("here, or RPC HOST:PORT:KEY")
        self.tune_rpc.setMinimumWidth(QFontMetrics(self.tune_rpc.font()).horizontalAdvance(self.tune_rpc.placeholderText()) + 16)
        self.tune_db_path = str(default_database_root())  # another one chosen with "…" lasts this session
        self.tune_db_label = QLabel()
        self.tune_db_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.tune_db_btn = QPushButton("…")
        self.tune_db_btn.setFixedWidth(QFontMetrics(self.tune_db_btn.font()).horizontalAdvance("…") + 24)
        # what each control says on CPU; on CUDA they all say why they are off
        self._tune_tips = {
            self.tune: "Tune every kernel before compiling: measure each candidate config of the schedule templates, "
            "then search with MetaSchedule (records go to the database and are reused)",
            self.tune_minutes: "Time for tuning the whole model; the kernels that cost the most are tuned first",
            self.tune_trials: "MetaSchedule schedules measured per kernel after the template search (in rounds of 16; "
            "0: template search only); kernels already tuned this far are reused",
            self.tune_rpc: "Empty: candidates are measured on this machine. HOST:PORT:KEY: on the devices registered "
            "under KEY with the TVM RPC tracker at HOST:PORT (python -m tvm.exec.rpc_tracker / rpc_server); "
            "the target must describe those devices",
            self.tune_db_btn: "Choose the tuning database folder (for this session)",
            self.use_db: "Without tuning, give each kernel the fastest measured schedule the database holds "
            "(tuned, or filed from the Schedule panel with 'Use in compile')",
        }

    def set_tune_db(self, folder: str) -> None:
        self.tune_db_path = str(folder)
        self._show_tune_db()

    def choose_tune_db(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Tuning database folder", self.tune_db_path)
        if folder:
            self.set_tune_db(folder)

    def tuning_available(self) -> bool:
        """CPU always; CUDA where a GPU is here to measure on."""
        if self.target_kind() is TargetKind.CPU:
            return True
        from core.compiler.target import gpu_present

        return gpu_present()

    def _update_tune_controls(self, *_args) -> None:
        busy = self._busy_now
        cpu = self.tuning_available()
        self.tune.setEnabled(cpu and not busy)
        self.use_db.setEnabled(cpu and not busy and not self.tune.isChecked())
        on = cpu and self.tune.isChecked() and not busy
        for w in (self.tune_minutes, self.tune_trials, self.tune_rpc):
            w.setEnabled(on)
        for w in (self.tune_db_label, self.tune_db_btn):
            w.setEnabled(on or (cpu and not busy and self.use_db.isChecked()))
        for w, tip in self._tune_tips.items():
            w.setToolTip(tip if cpu else _TUNE_CPU_ONLY)
        self._show_tune_db()

    def _show_tune_db(self) -> None:
        if not self.tuning_available():
            self.tune_db_label.setText("tuning: needs a GPU here")
            self.tune_db_label.setToolTip(_TUNE_CPU_ONLY)
            return
        fm = QFontMetrics(self.tune_db_label.font())
        self.tune_db_label.setText("database: " + fm.elidedText(self.tune_db_path, Qt.ElideMiddle, 120))
        self.tune_db_label.setToolTip(f"Tuning database folder (records are reused by every later compile):\n{self.tune_db_path}")

    def tuning_options(self) -> dict:
        """compile_model's tuning keywords for the controls' state (empty: no tuning; the
        database alone with "Use database")."""
        if self.tuning_available() and not self.tune.isChecked() and self.use_db.isChecked():
            return {"tune_db": self.tune_db_path}
        if not (self.tune.isChecked() and self.tuning_available()):
            return {}
        options = {
            "tune_trials": self.tune_trials.value(),
            "tune_budget_s": round(self.tune_minutes.value() * 60.0, 3),
            "tune_db": self.tune_db_path,
        }
        if self.tune_rpc.text().strip():
            options["tune_rpc"] = self.tune_rpc.text().strip()
        return options
