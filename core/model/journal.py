"""Edits as data: an undo history written down so it can be replayed on a fresh load.

Crash recovery brings back the undo history, not just the edited model: the autosave keeps a
journal of the session's edits (each one a name plus its arguments, as JSON; arrays go to `.npy`
files beside it, never pickles), and recovery loads the file the edits started from and replays
them one by one through the same commands, so Undo and Redo work as before the crash.

Node ids are part of the arguments (`RenameNode(graph, 12, ...)`). A graph numbers its nodes in
file order at load and gives new nodes the next free id, so a replay from the same file gives the
same ids provided each edit starts from the same counter: every entry records `next_id`, the
counter before the edit was first applied (see `Graph.next_node_id`).

Edit kinds register an encoder and a decoder (`register`); the plain edits of core.model.edits are
registered here, rewrites by core.rewrite.engine. An edit of a kind nobody registered makes
`encode_edit` raise `NotJournaled`: the journal is then not written, and recovery falls back to
the autosaved model without history (it says so).
"""
from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from ..errors import WorkbenchError
from . import edits as E
from .graph import Graph
from .history import Edit

__all__ = ["NotJournaled", "ReplayError", "Blobs", "register", "encode_edit", "decode_edit", "replay", "JOURNAL_VERSION"]

logger = logging.getLogger(__name__)

JOURNAL_VERSION = 1


class NotJournaled(WorkbenchError):
    """An edit that cannot be written down as data (its kind has no encoder)."""


class ReplayError(WorkbenchError):
    """A journal entry that cannot be turned back into an edit, or does not apply."""


@dataclass
class Blobs:
    """Arrays referenced by journal entries, stored as `.npy` files (allow_pickle=False) in
    `folder`, named by content hash so each array is written once however often it is journaled."""

    folder: Path
    written: set[str] = field(default_factory=set)

    def put(self, array: np.ndarray) -> str:
        array = np.asarray(array, order="C")
        if array.dtype == object:
            raise NotJournaled("an edit holds an array of Python objects, which is never written to disk")
        h = hashlib.sha1(array.tobytes() + str((array.dtype.str, array.shape)).encode()).hexdigest()[:20]
        name = f"{h}.npy"
        if name not in self.written:
            self.folder.mkdir(parents=True, exist_ok=True)
            path = self.folder / name
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                with open(tmp, "wb") as f:
                    np.save(f, array, allow_pickle=False)
                tmp.replace(path)
            self.written.add(name)
        return name

    def get(self, name: str) -> np.ndarray:
        if "/" in name or "\\" in name or not name.endswith(".npy"):
            raise ReplayError(f"the journal names the array '{name}', which is not a file of its array folder.")
        try:
            return np.load(self.folder / name, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ReplayError(f"the journal's array {name} cannot be read ({e}).") from None


Encoder = Callable[[Any, Blobs], dict]
Decoder = Callable[[Graph, dict, Blobs, dict], Edit]
_ENCODERS: dict[type, tuple[str, Encoder]] = {}
_DECODERS: dict[str, Decoder] = {}


def register(cls: type, name: str, encode: Encoder, decode: Decoder) -> None:
    """Make edits of class `cls` journalable under `name`: `encode(edit, blobs) -> dict` of
    JSON-able arguments; `decode(graph, args, blobs, context) -> Edit` builds it again."""
    _ENCODERS[cls] = (name, encode)
    _DECODERS[name] = decode


def encode_edit(edit: Edit, blobs: Blobs) -> dict:
    """{"edit": NAME, "args": {...}} for `edit` (raises NotJournaled when it cannot be)."""
    entry = _ENCODERS.get(type(edit))
    if entry is None:
        raise NotJournaled(f"edits of kind {type(edit).__name__} ('{edit.description}') cannot be written to the journal")
    name, encode = entry
    return {"edit": name, "args": encode(edit, blobs)}


def decode_edit(graph: Graph, data: dict, blobs: Blobs, context: dict | None = None) -> Edit:
    """The edit a journal entry describes, built against `graph` as it is now. `context` carries
    what decoders need from layers above core.model (e.g. "rules": rule id -> RewriteRule)."""
    if not isinstance(data, dict) or not isinstance(data.get("args"), dict):
        raise ReplayError(f"a journal entry is malformed ({str(data)[:80]}).")
    decode = _DECODERS.get(data.get("edit"))
    if decode is None:
        raise ReplayError(f"the journal holds an edit of unknown kind '{data.get('edit')}'.")
    try:
        return decode(graph, data["args"], blobs, context or {})
    except (KeyError, TypeError, ValueError) as e:
        raise ReplayError(f"the journal's {data.get('edit')} entry is malformed ({e}).") from None


# ---- values ------------------------------------------------------------------------------------
def _value_out(x: Any, blobs: Blobs) -> Any:
    """A plain or array value as JSON: arrays and tensors go to blobs."""
    if isinstance(x, ir.TensorProtocol):
        return {"$tensor": blobs.put(x.numpy()), "name": x.name}
    if isinstance(x, (np.ndarray, np.generic)) and not isinstance(x, (np.bool_,)) and np.ndim(x) > 0:
        return {"$array": blobs.put(np.asarray(x))}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (list, tuple)):
        return {"$list": [_value_out(v, blobs) for v in x], "tuple": isinstance(x, tuple)}
    if isinstance(x, dict):
        return {"$dict": {str(k): _value_out(v, blobs) for k, v in x.items()}}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise NotJournaled(f"an edit argument of type {type(x).__name__} cannot be written to the journal")


def _value_in(x: Any, blobs: Blobs) -> Any:
    if isinstance(x, dict):
        if "$tensor" in x:
            return ir.Tensor(blobs.get(x["$tensor"]), name=x.get("name"))
        if "$array" in x:
            return blobs.get(x["$array"])
        if "$list" in x:
            items = [_value_in(v, blobs) for v in x["$list"]]
            return tuple(items) if x.get("tuple") else items
        if "$dict" in x:
            return {k: _value_in(v, blobs) for k, v in x["$dict"].items()}
    return x


# ---- the edits of core.model.edits --------------------------------------------------------------
def _simple(cls: type, name: str, fields: tuple[str, ...], build: Callable[[Graph, dict], Edit]) -> None:
    register(cls, name, lambda e, blobs: {f: _value_out(getattr(e, f), blobs) for f in fields},
             lambda g, a, blobs, ctx: build(g, {k: _value_in(v, blobs) for k, v in a.items()}))


_simple(E.DeleteNode, "DeleteNode", ("node_id", "bridge"), lambda g, a: E.DeleteNode(g, a["node_id"], bridge=a["bridge"]))
_simple(E.SetInput, "SetInput", ("node_id", "index", "tensor"), lambda g, a: E.SetInput(g, a["node_id"], a["index"], a["tensor"]))
_simple(E.SetAttribute, "SetAttribute", ("node_id", "name", "value"), lambda g, a: E.SetAttribute(g, a["node_id"], a["name"], a["value"]))
_simple(E.RemoveAttribute, "RemoveAttribute", ("node_id", "name"), lambda g, a: E.RemoveAttribute(g, a["node_id"], a["name"]))
_simple(E.RenameNode, "RenameNode", ("node_id", "new_name"), lambda g, a: E.RenameNode(g, a["node_id"], a["new_name"]))
_simple(E.RenameTensor, "RenameTensor", ("old", "new"), lambda g, a: E.RenameTensor(g, a["old"], a["new"]))
_simple(E.AddGraphOutput, "AddGraphOutput", ("tensor",), lambda g, a: E.AddGraphOutput(g, a["tensor"]))
_simple(E.RemoveGraphOutput, "RemoveGraphOutput", ("tensor",), lambda g, a: E.RemoveGraphOutput(g, a["tensor"]))
_simple(E.SetInputShape, "SetInputShape", ("input_name", "dims", "refresh"),
        lambda g, a: E.SetInputShape(g, a["input_name"], a["dims"], refresh=a["refresh"]))
_simple(E.InsertNode, "InsertNode",
        ("op_type", "input_names", "attributes", "domain", "name", "num_outputs", "output_names", "insert_on"),
        lambda g, a: E.InsertNode(g, a["op_type"], a["input_names"], a["attributes"], domain=a["domain"], name=a["name"],
                                  num_outputs=a["num_outputs"], output_names=a["output_names"], insert_on=a["insert_on"]))


def _replace_initializer(g: Graph, a: dict, blobs: Blobs, ctx: dict) -> Edit:
    edit = E.ReplaceInitializer(g, a["name"], blobs.get(a["array"]))
    edit.description = a.get("description", edit.description)  # "from weights.npy", as the user did it
    return edit


register(E.ReplaceInitializer, "ReplaceInitializer",
         lambda e, blobs: {"name": e.name, "array": blobs.put(e.array), "description": e.description}, _replace_initializer)


def _compound_out(e: E.CompoundEdit, blobs: Blobs) -> dict:
    return {"description": e.description, "edits": [encode_edit(x, blobs) for x in e.edits]}


def _compound_in(g: Graph, a: dict, blobs: Blobs, ctx: dict) -> Edit:
    # the parts are built against the graph as it is before any of them applies, as when recorded
    return E.CompoundEdit(a["description"], [decode_edit(g, x, blobs, ctx) for x in a["edits"]])


register(E.CompoundEdit, "CompoundEdit", _compound_out, _compound_in)


def replay(graph: Graph, entries: list[dict], blobs: Blobs, push: Callable[[Edit], None], context: dict | None = None) -> None:
    """Apply journal `entries` to `graph` (loaded from the file the edits started from) through
    `push` (which applies an edit as one undo step and raises when it is refused). Raises
    ReplayError naming the entry that does not replay as it was recorded."""
    for i, entry in enumerate(entries, 1):
        where = f"edit {i} of {len(entries)}"
        try:
            if entry.get("next_id") is not None:
                graph.continue_ids_at(int(entry["next_id"]))
            edit = decode_edit(graph, entry, blobs, context)
            recorded = entry.get("description")
            if recorded is not None and edit.description != recorded:
                raise ReplayError(f"it now reads \"{edit.description}\" instead of \"{recorded}\".")
            push(edit)
        except WorkbenchError as e:
            raise ReplayError(f"{where} ({entry.get('description', entry.get('edit', '?'))}) cannot be replayed: {e}") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise ReplayError(f"{where} is malformed ({e}).") from None
