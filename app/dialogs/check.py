"""The compile check's settings: which inputs the compiled model is checked on against onnxruntime,
and with which tolerances (the GUI's `compile --verify-inputs IN.npz --rtol R --atol A`).

`CheckChoice` is what the Compile & Run panel holds for the open model (reset when another model
is opened) and hands to compile_model exactly as the CLI does: `verify_inputs` (input name ->
array, or None for seeded random inputs), `rtol`, `atol`. `CheckDialog` edits it: seeded random
inputs (the default) or an .npz file, whose arrays are checked against the model's inputs (names,
dtypes, shapes) when it is chosen, and the two tolerances (numbers of at least 0). A bad file or
number is one sentence in the dialog, which stays open with everything the user typed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from core import WorkbenchError
from core.compiler.check.user_inputs import fit_check_inputs, parse_tolerance, read_npz
from core.compiler.check.reference import ATOL, RTOL

__all__ = ["CheckChoice", "CheckDialog", "read_check_inputs"]


@dataclass(frozen=True)
class CheckChoice:
    """The compile check's inputs and tolerances. `inputs_path` None: seeded random inputs."""

    inputs_path: str | None = None
    inputs: dict = field(default=None, compare=False, repr=False)  # name -> array, read from inputs_path
    rtol: float = RTOL
    atol: float = ATOL

    @property
    def is_default(self) -> bool:
        return self.inputs_path is None and self.rtol == RTOL and self.atol == ATOL

    def with_atol(self, atol: float) -> CheckChoice:
        return replace(self, atol=atol)

    def compile_options(self) -> dict:
        """compile_model's keywords, as `compile --verify-inputs --rtol --atol` passes them."""
        return {"verify_inputs": self.inputs, "rtol": self.rtol, "atol": self.atol}

    def summary(self) -> str:
        """'check: random, default tolerances' / 'check: in.npz, atol 12' (the panel's label)."""
        where = Path(self.inputs_path).name if self.inputs_path else "random"
        tol = [f"{name} {value:g}" for name, value, default in (("rtol", self.rtol, RTOL), ("atol", self.atol, ATOL)) if value != default]
        return f"check: {where}, {', '.join(tol) if tol else 'default tolerances'}"

    def tooltip(self) -> str:
        where = (f"the arrays of {self.inputs_path}" if self.inputs_path
                 else "seeded random inputs (each drawn in a range its ops can take)")
        return (f"Compile & Run checks the compiled model against onnxruntime on {where}, with rtol {self.rtol:g} "
                f"and atol {self.atol:g}, and refuses a result that differs more (Check… to change)")


def read_check_inputs(path: str, graph) -> dict[str, np.ndarray]:
    """The arrays of the .npz at `path`, checked against `graph`'s inputs
    (core.compiler.check.user_inputs); one sentence naming the file and the input when not."""
    label = Path(path).name
    return fit_check_inputs(read_npz(path, label), graph.inputs, label)


class CheckDialog(QDialog):
    """Seeded random inputs or an .npz file, rtol and atol. `choice()` after accept()."""

    def __init__(self, parent: QWidget, window, current: CheckChoice, suggested_atol: float | None = None):
        super().__init__(parent)
        self.setWindowTitle("Compile check")
        self.window = window
        self._path, self._arrays = current.inputs_path, current.inputs
        self.random = QRadioButton("Seeded random inputs (default)")
        self.from_file = QRadioButton("Inputs from an .npz file (arrays named by input):")
        group = QButtonGroup(self)
        group.addButton(self.random)
        group.addButton(self.from_file)
        self.file_label = QLabel()
        self.file_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.browse = QPushButton("Choose…")
        self.rtol = QLineEdit(f"{current.rtol:g}")
        self.atol = QLineEdit(f"{current.atol:g}")
        self.rtol.setToolTip(f"Relative tolerance (default {RTOL:g})")
        self.atol.setToolTip(f"Absolute tolerance (default {ATOL:g})")
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d62728;")
        self.error.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.note = QLabel()
        self.note.setWordWrap(True)
        if suggested_atol is not None:
            self.atol.setText(f"{suggested_atol:g}")
            self.note.setText(f"The last refusal named atol {suggested_atol:g}, which accepts the error it measured: "
                              "OK uses it for this model.")
        self.note.setVisible(suggested_atol is not None)

        file_row = QHBoxLayout()
        file_row.setContentsMargins(24, 0, 0, 0)
        file_row.addWidget(self.file_label, 1)
        file_row.addWidget(self.browse)
        form = QFormLayout()
        form.addRow("rtol", self.rtol)
        form.addRow("atol", self.atol)
        buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel | QDialogButtonBox.RestoreDefaults)
        self.ok_button = buttons.button(QDialogButtonBox.Ok)
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel("Compile & Run checks the compiled model against onnxruntime on:"))
        lay.addWidget(self.random)
        lay.addWidget(self.from_file)
        lay.addLayout(file_row)
        lay.addLayout(form)
        lay.addWidget(self.note)
        lay.addWidget(self.error)
        lay.addWidget(buttons)

        (self.from_file if self._path else self.random).setChecked(True)
        self._show_file()
        self.browse.clicked.connect(self.choose_file)
        self.from_file.toggled.connect(self._show_file)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.RestoreDefaults).clicked.connect(self.restore_defaults)
        self.setMinimumWidth(460)
        self._choice = current

    def _show_file(self, *_args) -> None:
        self.file_label.setText(Path(self._path).name if self._path else "(no file chosen)")
        self.file_label.setToolTip(self._path or "")
        self.file_label.setEnabled(self.from_file.isChecked())

    def choose_file(self) -> None:
        from app.dialogs.files import open_file

        path = open_file(self.window, self, "npz", "Check inputs (.npz keyed by input name)", "NumPy archives (*.npz);;All files (*)")
        if path:
            self.set_file(path)

    def set_file(self, path: str) -> bool:
        """Read and check `path` against the model's inputs; on error say so and keep the last good file."""
        try:
            arrays = read_check_inputs(path, self.window.document.graph)
        except WorkbenchError as e:
            self.error.setText(str(e))
            return False
        self._path, self._arrays = path, arrays
        self.error.setText("")
        self.from_file.setChecked(True)
        self._show_file()
        return True

    def restore_defaults(self) -> None:
        self.random.setChecked(True)
        self.rtol.setText(f"{RTOL:g}")
        self.atol.setText(f"{ATOL:g}")
        self.error.setText("")

    def accept(self) -> None:
        try:
            if self.from_file.isChecked() and not self._path:
                raise WorkbenchError("Choose an .npz file of inputs, or check on seeded random inputs.")
            rtol = parse_tolerance(self.rtol.text(), "rtol")
            atol = parse_tolerance(self.atol.text(), "atol")
        except WorkbenchError as e:
            self.error.setText(str(e))
            return
        use_file = self.from_file.isChecked()
        self._choice = CheckChoice(self._path if use_file else None, self._arrays if use_file else None, rtol, atol)
        super().accept()

    def choice(self) -> CheckChoice:
        return self._choice
