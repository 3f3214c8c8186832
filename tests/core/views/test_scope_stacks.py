"""Layer stacks: a graph with repeated layers opens with them collapsed, in one column, and a
tensor that feeds every layer (BERT's attention mask) drawn as stubs, not edges across them."""
from __future__ import annotations

from pathlib import Path

import onnx_ir as ir
import pytest

from benchmarks.architectures.transformers import bert_encoder, gpt2_blocks
from core.model.graph import Graph
from core.model.onnx_io import load_model
from core.views.layout import STUB_LENGTH, layout
from core.views.scope_layout import relayout
from core.views.scopes import scope_tree, scoped_view
from core.views.viewgraph import from_graph

SAMPLES = Path(__file__).resolve().parents[3] / "resources" / "models"


def _opened(model):
    g = Graph(ir.from_proto(model))
    g.infer_shapes()
    view = from_graph(g)
    tree = scope_tree(view, g)
    return view, tree, scoped_view(view, tree, tree.default_expanded(len(view.nodes)))


def _small_bert(layers=12):
    return bert_encoder(layers=layers, hidden=32, heads=2, mlp=64, seq=16, vocab=50)


def test_bert_under_the_size_threshold_opens_with_its_layers_collapsed():
    view, tree, shown = _opened(_small_bert(layers=4))
    assert 100 < len(view.nodes) <= 300  # a size that used to open fully expanded
    boxes = [n for n in shown.nodes if n.data.get("kind") == "scope"]
    assert [b.label for b in boxes if b.data.get("column")] == [f"layer.{i}" for i in range(4)]
    assert {b.data["column"] for b in boxes if b.data.get("column")} == {"encoder"}
    assert len(shown.nodes) < 40


def test_layers_sit_in_one_column_and_the_mask_is_a_stub_per_layer():
    _, _, shown = _opened(_small_bert(layers=12))
    stubs = [e for e in shown.edges if e.data.get("stub")]
    # the mask feeds all 12 layers: layer.0 keeps its edge, the 11 others get a stub
    assert sorted(e.dst for e in stubs) == sorted(f"scope:encoder/layer.{i}" for i in range(1, 12))
    assert {e.data["stub_label"] for e in stubs} == {"attention_mask"}
    assert not any(e.data.get("stub") for e in shown.edges if e.dst == "scope:encoder/layer.0")
    lo = layout(shown, {n.id: (160.0 if n.data.get("kind") == "scope" else 90.0, 40.0) for n in shown.nodes})
    xs = {round(lo.boxes[f"scope:encoder/layer.{i}"].x, 1) for i in range(12)}
    assert len(xs) == 1  # one straight column, not a staircase
    for e, route in zip(shown.edges, lo.routes):
        if e.data.get("stub"):
            b = lo.boxes[e.dst]
            assert abs(route[-1][1] - (b.y - b.h / 2)) < 0.01 and abs(route[0][1] - route[-1][1]) == STUB_LENGTH
            assert b.x - b.w / 2 <= route[0][0] <= b.x + b.w / 2
    # the same holds for the layered fallback (big views)
    lo = layout(shown, {n.id: (160.0, 40.0) for n in shown.nodes}, method="layered")
    assert all(len(r) == 4 for e, r in zip(shown.edges, lo.routes) if e.data.get("stub"))


def test_opening_a_layer_keeps_the_mask_a_stub_into_it():
    view, tree, shown = _opened(_small_bert(layers=4))
    sizes = {n.id: (120.0, 40.0) for n in shown.nodes}
    lo = layout(shown, sizes)
    expanded = set(shown.data["scopes"]["expanded"]) | {"encoder/layer.2"}
    opened = scoped_view(view, tree, expanded)
    stubs = [e for e in opened.edges if e.data.get("stub")]
    assert any(str(e.dst).startswith("scope:encoder/layer.2/") for e in stubs)  # into what opened
    new = relayout(shown, lo, opened, {n.id: (120.0, 40.0) for n in opened.nodes if n.id not in lo.boxes})
    for e, route in zip(opened.edges, new.routes):
        if e.data.get("stub"):
            assert abs(route[0][1] - route[-1][1]) == STUB_LENGTH


def test_gpt2_blocks_open_collapsed_in_a_column():
    view, tree, shown = _opened(gpt2_blocks(layers=6, hidden=32, heads=2, seq=8))
    assert len(view.nodes) <= 300
    cols = [n for n in shown.nodes if n.data.get("column") is not None]
    assert [n.label for n in cols] == [f"h.{i}" for i in range(6)]


@pytest.mark.parametrize("name", ["mlp", "small_cnn", "tiny_transformer"])
def test_small_samples_still_open_expanded(name):
    g = load_model(SAMPLES / f"{name}.onnx")
    view = from_graph(g)
    tree = scope_tree(view, g)
    assert tree.default_expanded(len(view.nodes)) == {s.path for s in tree.groups}
