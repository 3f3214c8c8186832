"""Edit journals: every edit kind is written as data (name + arguments, arrays as .npy) and
replays on a fresh load of the same file to the very same model, node ids included."""
from __future__ import annotations

import json

import numpy as np
import pytest

from core import load_model
from core.model import edits as E
from core.model import journal
from core.model.history import History
from core.rewrite.engine import RewriteEdit, preview
from rewrites import get_rule
from tests.conftest import sample
from tests.helpers import external_weights_cnn


class Recorder(History):
    """A History that records each edit the way the GUI's undo stack does (next_id first)."""

    def __init__(self, graph, blobs):
        super().__init__(graph)
        self.blobs, self.entries = blobs, []

    def push(self, edit):
        next_id = self.graph.next_node_id
        super().push(edit)
        entry = journal.encode_edit(edit, self.blobs)
        entry.update(next_id=next_id, description=edit.description)
        self.entries.append(json.loads(json.dumps(entry)))  # it must survive JSON


def _session(graph, h):
    g = graph
    h.push(E.RenameNode(g, g.find_node("relu").id, "act"))
    pv = preview(g, get_rule("fold-conv-bn"))
    assert len(pv.applied) == 1
    h.push(RewriteEdit(pv))
    h.push(E.InsertNode(g, "Relu", ["r"], name="extra", insert_on="r"))
    h.push(E.SetAttribute(g, g.find_node("stem").id, "pads", [0, 0, 0, 0]))
    h.push(E.ReplaceInitializer(g, "fc_w", np.full((8, 4), 0.5, np.float32)))
    inserted = g.find_node("extra").id
    h.push(E.CompoundEdit("Two edits", [E.RenameNode(g, inserted, "extra2"), E.AddGraphOutput(g, "r")]))
    h.push(E.SetInputShape(g, "x", [1, 3, 8, 8]))
    h.push(E.RenameTensor(g, "f", "flat_out"))
    h.push(E.InsertNode(g, "Identity", ["flat_out"], name="after"))  # an id given after a rewrite


def test_every_edit_kind_replays_to_the_same_model(tmp_path):
    src = external_weights_cnn(tmp_path / "m")
    blobs = journal.Blobs(tmp_path / "blobs")
    g = load_model(src)
    rec = Recorder(g, blobs)
    _session(g, rec)
    assert [e["edit"] for e in rec.entries] == ["RenameNode", "Rewrite", "InsertNode", "SetAttribute", "ReplaceInitializer",
                                                "CompoundEdit", "SetInputShape", "RenameTensor", "InsertNode"]
    assert len(list((tmp_path / "blobs").glob("*.npy"))) == 1  # the array, never a pickle

    fresh = load_model(src)
    replayed = History(fresh)
    journal.replay(fresh, rec.entries, journal.Blobs(tmp_path / "blobs"), replayed.push, {"rules": get_rule})
    assert fresh.to_bytes() == g.to_bytes()
    assert sorted(n.id for n in fresh.nodes) == sorted(n.id for n in g.nodes)
    # and the replayed history undoes all the way back to the file
    while replayed.undo():
        pass
    assert fresh.to_bytes() == load_model(src).to_bytes()


def test_a_journal_entry_that_no_longer_fits_is_named(tmp_path):
    g = load_model(sample("small_cnn"))
    blobs = journal.Blobs(tmp_path)
    rec = Recorder(g, blobs)
    rec.push(E.RenameNode(g, g.find_node("stem.relu").id, "renamed"))
    entries = rec.entries
    entries[0]["args"]["node_id"] += 1  # another node than the one renamed
    other = load_model(sample("small_cnn"))
    with pytest.raises(journal.ReplayError, match=r"edit 1 of 1 .* cannot be replayed: it now reads"):
        journal.replay(other, entries, blobs, History(other).push)
    with pytest.raises(journal.ReplayError, match="unknown kind 'Explode'"):
        journal.replay(other, [{"edit": "Explode", "args": {}}], blobs, History(other).push)
    with pytest.raises(journal.ReplayError, match="not a file of its array folder"):
        blobs.get("../../etc/passwd.npy")


def test_an_edit_kind_nobody_registered_is_not_journaled(tmp_path):
    class Custom(E.RenameNode):
        pass

    g = load_model(sample("small_cnn"))
    with pytest.raises(journal.NotJournaled, match="Custom"):
        journal.encode_edit(Custom(g, g.find_node("stem.relu").id, "x"), journal.Blobs(tmp_path))


def test_a_scalar_array_keeps_its_0d_shape_through_the_journal(tmp_path):
    """NumPy 2.5's ascontiguousarray turns a 0-d array into shape (1,): a journaled scalar weight
    must come back as the scalar it was."""
    from core.model.journal import Blobs

    blobs = Blobs(tmp_path / "arrays")
    back = blobs.get(blobs.put(np.array(2.5, dtype=np.float32)))
    assert back.shape == () and back.dtype == np.float32 and float(back) == 2.5
