"""The open model as the GUI sees it: one `Document` per window.

A Document holds the core `Graph`, the file path, the selection and a `QUndoStack`. Every change
to the graph goes through `Document.push(edit)` with a `core.model.history.Edit`: the edit is wrapped in
a QUndoCommand, so Undo/Redo, the dirty mark and the views all follow from the stack. Views
listen to the signals and never mutate the Graph themselves.

Signals
    graphReplaced()            a different model was opened (views rebuild from scratch)
    graphChanged()             an edit was done, undone or redone (views refresh)
    selectionChanged(list)     the selected node ids (ints for ONNX nodes; may be empty)
    tensorSelected(str)        a tensor (edge or constant badge) was picked; '' clears it
    dirtyChanged(bool)         the model differs from the file on disk (or not any more)
    pathChanged(str)           the file path changed (Save As)
    saved(str)                 the model was written to this file (`last_save` says where its weights went)
    pipelineChanged(str)       the pass pipeline for a target was set (the Lowering panel's list)

Besides the model, the document holds what a compile of it needs from the rest of the window:
the rewrites applied to the model (`applied_rewrites`, recorded in the model itself) and the
pass pipeline the user set up for a target (`set_pipeline` / `pipeline_for`), so no panel reads
another panel's widgets.
"""
from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoCommand, QUndoStack

from core import Graph, WorkbenchError, load_model, save_model
from core.model.external_data import SaveResult
from core.model.history import Edit

__all__ = ["Document", "EditCommand", "changes_shapes"]

logger = logging.getLogger(__name__)


class EditCommand(QUndoCommand):
    """A core Edit on the undo stack. The first redo (at push time) may raise EditError: the
    command keeps it in `refused` and goes obsolete, so the stack drops it (it never holds a
    command that did nothing) and Document.push reports the error."""

    def __init__(self, document: "Document", edit: Edit):
        super().__init__(edit.description)
        self.document = document
        self.edit = edit
        self._first = True
        self.refused: WorkbenchError | None = None
        # the node-id counter before the edit first applies: a journal replay starts from it
        # (app.autosave, core.model.journal)
        self.next_id = document.graph.next_node_id if document.graph is not None else None

    def redo(self) -> None:
        graph = self.document.graph
        if self._first:
            self._first = False
            try:
                self.edit.do(graph)
            except WorkbenchError as e:
                # QUndoStack.push cannot be refused from redo(): mark it obsolete so Qt drops it
                self.refused = e
                self.setObsolete(True)
                return
        else:
            self.edit.redo(graph)
        graph.changed()
        if changes_shapes(self.edit):  # views redraw from graphChanged: shapes must match the edited graph
            graph.infer_shapes()
        self.document.graphChanged.emit()

    def undo(self) -> None:
        graph = self.document.graph
        self.edit.undo(graph)
        graph.changed()
        if changes_shapes(self.edit):
            graph.infer_shapes()
        self.document.graphChanged.emit()


def changes_shapes(edit: Edit) -> bool:
    """Whether an edit can change any tensor's shape or type, i.e. needs shape inference again
    (0.1 s on DenseNet, ~0.9 s at 10k nodes, on the UI thread). Renames and graph-output changes
    cannot: inferred shapes live in the meta of the values, which stay the same objects (a new
    graph output is declared with the shape already inferred for it). An edit may say so itself
    with a `changes_shapes` attribute; unknown edits infer."""
    own = getattr(edit, "changes_shapes", None)
    if own is not None:
        return bool(own)
    from core.model import edits

    if isinstance(edit, (edits.RenameNode, edits.RenameTensor, edits.AddGraphOutput, edits.RemoveGraphOutput)):
        return False
    if isinstance(edit, edits.CompoundEdit):
        return any(changes_shapes(e) for e in edit.edits)
    return True


class Document(QObject):
    graphReplaced = Signal()
    graphChanged = Signal()
    selectionChanged = Signal(list)
    tensorSelected = Signal(str)
    dirtyChanged = Signal(bool)
    pathChanged = Signal(str)
    saved = Signal(str)
    pipelineChanged = Signal(str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self.graph: Graph | None = None
        self.path: Path | None = None
        self.undo_stack = QUndoStack(self)
        self._selection: list = []
        self._tensor = ""
        self._pipeline: tuple[str, list] | None = None  # (target, PassSpecs)
        self.last_save: SaveResult | None = None
        self.undo_stack.cleanChanged.connect(self._clean_changed)

    def _clean_changed(self, clean: bool) -> None:
        self.dirtyChanged.emit(not clean)

    # ---- model -------------------------------------------------------------------------------
    @property
    def is_dirty(self) -> bool:
        return self.graph is not None and not self.undo_stack.isClean()

    def open(self, path: str | Path) -> Graph:
        """Load a model and make it the document's (raises WorkbenchError and keeps the current
        model when the file is bad). Loading can also happen elsewhere: see `set_graph`."""
        graph = load_model(path)
        self.set_graph(graph, Path(path))
        return graph

    def set_graph(self, graph: Graph, path: str | Path | None) -> None:
        """Replace the model (e.g. after a background load): clears undo history and selection."""
        self.graph = graph
        self.path = Path(path) if path is not None else None
        self.undo_stack.clear()
        self.undo_stack.setClean()
        self._selection = []
        self._tensor = ""
        self.graphReplaced.emit()
        self.pathChanged.emit(str(self.path) if self.path else "")
        self.dirtyChanged.emit(False)
        self.selectionChanged.emit([])

    def save(self, path: str | Path | None = None) -> Path:
        """Write the model (to `path`, or where it came from) and mark the stack clean.

        Weights kept in an external data file outside the target's folder are copied into
        `<file>.data` beside it, so the saved model opens anywhere; `last_save.describe()` says so."""
        if self.graph is None:
            raise WorkbenchError("There is no model to save.")
        target = Path(path) if path is not None else self.path
        if target is None:
            raise WorkbenchError("The model has no file name yet; use Save As.")
        try:
            self.last_save = save_model(self.graph, target)  # a full disk or a permission: its WorkbenchError
        except OSError as e:  # another system error: still one sentence, and the edits stay unsaved
            raise WorkbenchError(f"{target} cannot be written: {e.strerror or e}.") from None
        if target != self.path:
            self.path = target
            self.graph.path = target
            self.pathChanged.emit(str(target))
        self.undo_stack.setClean()
        self.saved.emit(str(target))
        return target

    @property
    def applied_rewrites(self) -> list[str]:
        """The rewrites applied to the model, oldest first (core.model.graph.Graph.applied_rewrites:
        recorded in the model, so undo takes one back and a saved file keeps them)."""
        return self.graph.applied_rewrites if self.graph is not None else []

    # ---- pipeline ----------------------------------------------------------------------------
    def set_pipeline(self, target: str, specs: list) -> None:
        """The pass pipeline (core.compiler.pipeline.pass_list PassSpecs) the user set up for `target`."""
        specs = list(specs)
        if self._pipeline != (target, specs):
            self._pipeline = (target, specs)
            self.pipelineChanged.emit(target)

    def pipeline_for(self, target: str) -> list | None:
        """The pipeline set for `target`, or None (compile then uses the default one)."""
        if self._pipeline is None or self._pipeline[0] != target:
            return None
        return list(self._pipeline[1])

    # ---- edits -------------------------------------------------------------------------------
    def push(self, edit: Edit, show_errors: bool = True) -> bool:
        """Apply `edit` as one undoable step; True when it applied.

        When the edit cannot apply (EditError or another WorkbenchError from its `do`), nothing is
        pushed and the graph is untouched; the sentence is shown in a message box, or raised when
        `show_errors` is False (for callers that report it their own way)."""
        if self.graph is None:
            error: WorkbenchError | None = WorkbenchError("There is no model to edit.")
        else:
            command = EditCommand(self, edit)
            self.undo_stack.push(command)  # an obsolete command is dropped; its Python side stays readable
            error = command.refused
        if error is None:
            return True
        if not show_errors:
            raise error
        from PySide6.QtWidgets import QApplication, QMessageBox

        QMessageBox.warning(QApplication.activeWindow(), "Cannot apply the edit", str(error))
        return False

    # ---- selection ---------------------------------------------------------------------------
    @property
    def selection(self) -> list:
        return list(self._selection)

    def set_selection(self, ids) -> None:
        ids = list(ids)
        if ids != self._selection:
            self._selection = ids
            self.selectionChanged.emit(list(ids))

    @property
    def selected_tensor(self) -> str:
        return self._tensor

    def set_selected_tensor(self, name: str) -> None:
        """Pick a tensor (its producer and consumers get highlighted); '' clears the pick."""
        if name != self._tensor:
            self._tensor = name
            self.tensorSelected.emit(name)
