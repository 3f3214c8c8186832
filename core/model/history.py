"""Reversible edits and a plain (Qt-free) undo history.

An `Edit` is a command on a `Graph`: `do` applies it, `undo` restores the graph exactly (the
serialized bytes after do+undo equal the bytes before). Concrete edits live in `core.model.edits`;
the rewrite engine applies a match as one `Edit` too. The GUI wraps each Edit in a QUndoCommand
and pushes it on its QUndoStack; scripts and the CLI use `History`. Nobody mutates a Graph
outside an Edit.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from .graph import Graph

__all__ = ["Edit", "History"]


class Edit(ABC):
    """A reversible change to a Graph. Subclasses set `description` (shown in Undo/Redo menus)."""

    description: str = "edit"

    @abstractmethod
    def do(self, graph: Graph) -> None:
        """Apply the change. Raise core.errors.EditError (graph untouched) if it cannot apply."""

    @abstractmethod
    def undo(self, graph: Graph) -> None:
        """Revert exactly what `do` changed."""

    def redo(self, graph: Graph) -> None:
        self.do(graph)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.description}>"


class History:
    """Undo/redo stack for scripts: `history.push(edit)` applies it."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._done: list[Edit] = []
        self._undone: list[Edit] = []
        self._clean = 0

    def push(self, edit: Edit) -> None:
        edit.do(self.graph)
        self.graph.changed()
        if self._clean > len(self._done):
            self._clean = -1  # the saved state was on the branch this push discards
        self._done.append(edit)
        self._undone.clear()

    def undo(self) -> Edit | None:
        if not self._done:
            return None
        edit = self._done.pop()
        edit.undo(self.graph)
        self.graph.changed()
        self._undone.append(edit)
        return edit

    def redo(self) -> Edit | None:
        if not self._undone:
            return None
        edit = self._undone.pop()
        edit.redo(self.graph)
        self.graph.changed()
        self._done.append(edit)
        return edit

    @property
    def can_undo(self) -> bool:
        return bool(self._done)

    @property
    def can_redo(self) -> bool:
        return bool(self._undone)

    def set_clean(self) -> None:
        """Mark the current state as saved."""
        self._clean = len(self._done)

    @property
    def is_clean(self) -> bool:
        return self._clean == len(self._done)
