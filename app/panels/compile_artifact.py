"""The Compile & Run panel's artifact actions: export the last compile, save the (rewritten) ONNX
model, and open an exported artifact folder to measure it (checked first, then asked: loading
runs its native code). A mixin of CompilePanel (its job, status line, table and chart)."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from app.panels.compile_results import format_ms, result_rows
from app.workers import Job
from core import WorkbenchError, save_model
from core.files import writing

__all__ = ["ArtifactActions"]


class ArtifactActions:
    """Export, Save ONNX… and Open Artifact… for CompilePanel."""

    # -- export ----------------------------------------------------------------------------

    def export_to(self, folder: str) -> None:
        """Export the last compile to `folder` on a worker thread (CUDA export runs nvcc)."""
        art = self.artifact
        if art is None:
            return

        def work(job: Job):
            job.report(0.1, "exporting")
            with writing(folder):  # the linker's "No space left on device" too: one sentence naming the folder
                return str(art.export(folder, measured=art.manifest.measured))

        def exported(path):
            self._busy(False)
            self.progress.setValue(1000)
            self.progress.setFormat("exported")
            self.status.setText(f"Exported to {path}: run it with python {path}/run.py --inputs IN.npz -o OUT.npz; "
                                f"rebuild it with TVM alone: python {path}/recipe/rebuild.py -o NEW_FOLDER")

        self._start_job(work, "Export", exported, None)

    def export_dialog(self) -> None:
        """Ask for the artifact folder: a new name is created, an existing folder written into."""
        from app.dialogs.files import ask_new_folder

        if self.artifact is None:
            return
        doc = self.window.document.path
        suggested = f"{Path(doc).stem if doc else 'model'}_{self.artifact.target}"
        folder = ask_new_folder(self.window, self, "export", "Export the compiled artifact to folder (type a new name to create it)", suggested)
        if folder:
            self.export_to(folder)

    def save_onnx_dialog(self) -> None:
        """Ask for a file and write the open (rewritten) model to it; a failure is one sentence."""
        graph = self.window.document.graph
        if graph is None:
            return
        from app.dialogs.files import save_file

        doc = self.window.document.path
        path = save_file(self.window, self, "onnx-out", "Save optimized ONNX", "ONNX models (*.onnx)",
                         suggested=f"{Path(doc).stem if doc else 'model'}_optimized.onnx")
        if not path:
            return
        # a refusal is a message box (as the main window's Save), not the compile's failure
        # path: a compile may be running, and its status line, progress and controls stay its own
        try:
            save_model(graph, path)
        except WorkbenchError as e:
            QMessageBox.warning(self, "Save ONNX", f"The optimized model was not saved: {e}")
            return
        except OSError as e:
            QMessageBox.warning(self, "Save ONNX", f"The optimized model was not saved: {path} cannot be written ({e.strerror or e}).")
            return
        self.status.setStyleSheet("")
        self.status.setText(f"Saved the optimized model to {path}.")

    # -- open a compiled artifact ------------------------------------------------------------

    def open_artifact_dialog(self) -> None:
        from app.dialogs.files import open_folder

        folder = open_folder(self.window, self, "artifact", "Open Compiled Artifact (a folder with manifest.json)")
        if folder:
            self.open_artifact(folder)

    def confirmation_box(self, folder: str) -> QMessageBox:
        """The question asked before loading: loading maps model.so, which runs its code at once."""
        from core.compiler.runtime.artifact import LIBRARY

        box = QMessageBox(QMessageBox.Warning, "Load compiled artifact?", f"Load and run the compiled artifact in\n{folder}?", parent=self)
        box.setInformativeText(
            f"Loading it executes the compiled native code inside it ({LIBRARY}) with the workbench's "
            "permissions. Only load artifacts you built yourself or trust."
        )
        box.load_button = box.addButton("Load and Run", QMessageBox.AcceptRole)
        cancel = box.addButton(QMessageBox.Cancel)
        box.setDefaultButton(cancel)
        box.setEscapeButton(cancel)
        return box

    def confirm_load(self, folder: str) -> bool:
        box = self.confirmation_box(folder)
        box.exec()
        return box.clickedButton() is box.load_button

    def open_artifact(self, folder: str) -> None:
        """Check `folder`, ask, then load the artifact and time it on a worker thread."""
        from core.compiler.runtime import artifact as core_artifact

        if self.job is not None and self.job.isRunning():
            return
        try:
            core_artifact.check_artifact_folder(folder)
        except WorkbenchError as e:
            QMessageBox.warning(self, "Open Compiled Artifact", str(e))
            return
        if not self.confirm_load(folder):
            self.status.setText(f"Did not load {folder}.")
            return
        try:
            art = core_artifact.load_artifact(folder)
        except WorkbenchError as e:
            QMessageBox.warning(self, "Open Compiled Artifact", str(e))
            return
        runs = self.runs.value()
        vs_ort = self.vs_ort.isChecked() and art.model_bytes is not None

        def work(job: Job):
            from core.compiler.measure.bench import benchmark

            return art, benchmark(
                art, runs=runs, vs_ort=vs_ort, cancel=job.is_cancelled,
                progress=lambda step, frac: job.report(frac, f"measure: {step}"),
            )

        self._start_job(work, "Run artifact", self._artifact_done, f"Running the artifact in {folder}…")

    def _artifact_done(self, result) -> None:
        art, res = result
        self.artifact = self.result = None
        self.stale = False
        self._busy(False)
        self.progress.setValue(1000)
        self.progress.setFormat("done")
        self._fill_table(result_rows(res))
        self.chart.set_kernels(res.kernels)
        self._warn_spread(res)
        # the heat map colours the open model only when the artifact was compiled from it (its
        # kernels' lineage names the open model's nodes); otherwise the old heat would lie
        graph = self.window.document.graph
        labels = {n.label for n in graph.nodes} if graph is not None else set()
        traced = [l for k in res.kernels for l in k.onnx_nodes]
        same_model = bool(traced) and all(l in labels for l in traced)
        self.heat_kernels = list(res.kernels) if same_model else []
        self._apply_heat()
        heat_note = "" if same_model else " The heat map is off: the open model is not the one this artifact was compiled from."
        dims = ", ".join(f"{k}={v}" for k, v in res.dims.items())
        match = ""
        if res.outputs_match_ort is not None:
            match = "; outputs match onnxruntime" if res.outputs_match_ort else "; outputs DIFFER from onnxruntime"
        self.status.setText(
            f"Artifact {art.folder} ({art.target.upper()}): median {format_ms(res.latency_ms.median)} over "
            f"{res.latency_ms.runs} runs on seeded random inputs{f' ({dims})' if dims else ''}{match}.{heat_note}"
        )
