"""A big model's view from its protobuf (core.views.scope_preview): the same view, groups and
parameter counts as the loaded model's, drawn early only when something opens collapsed."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from core import load_model
from core.model.samples import scoped_bert
from core.model.summary import proto_constants
from core.model.shapes import infer_types
from core.views.scope_preview import open_view
from core.views.scopes import NAME_SCOPES_KEY, scope_tree, scoped_view
from core.views.viewgraph import from_graph

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _loaded_view(path: Path):
    graph = load_model(path)
    full = from_graph(graph)
    tree = scope_tree(full, graph)
    return graph, scoped_view(full, tree, tree.default_expanded(len(full.nodes)))


def _same_picture(preview, view) -> None:
    assert [asdict(n) for n in preview.nodes] == [asdict(n) for n in view.nodes]  # labels, shapes, parameter counts
    assert [asdict(e) for e in preview.edges] == [asdict(e) for e in view.edges]


def _open_view(path: Path, min_nodes: int = 0):
    proto = onnx.load(path)
    return open_view(proto, infer_types(proto)[0], path.name, path.parent, min_nodes=min_nodes)


def test_preview_has_the_boxes_and_edges_the_loaded_model_opens_with(tmp_path):
    proto = scoped_bert(layers=6, dim=8, heads=2, ffn=16, vocab=32)
    # constant-only nodes inside a layer (a Constant and a ConstantOfShape made from it) fold
    # away as in the loaded view: the groups hold the same nodes
    g = proto.graph
    first = next(i for i, n in enumerate(g.node) if n.op_type == "Add" and "layer.0" in n.name)
    add = g.node[first]
    shape = helper.make_node("Constant", [], ["extra_shape"], name="/encoder/layer.0/extra/Constant",
                             value=helper.make_tensor("s", TensorProto.INT64, [1], [1]))
    fill = helper.make_node("ConstantOfShape", ["extra_shape"], ["extra_zero"], name="/encoder/layer.0/extra/ConstantOfShape",
                            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))
    bump = helper.make_node("Add", [add.output[0], "extra_zero"], ["extra_out"], name="/encoder/layer.0/extra/Add")
    for n in g.node[first + 1:]:
        for k, x in enumerate(n.input):
            if x == add.output[0]:
                n.input[k] = "extra_out"
    for k, n in enumerate((shape, fill, bump)):
        g.node.insert(first + 1 + k, n)
    path = tmp_path / "bert.onnx"
    onnx.save(proto, path)
    onnx.checker.check_model(proto)

    graph, view = _loaded_view(path)
    opened = _open_view(path)
    assert opened is not None and opened.collapsed
    assert sum(n.category == "group" for n in opened.view.nodes) >= 6
    _same_picture(opened.view, view)
    box = next(n for n in opened.view.nodes if n.category == "group")
    assert "params" in box.detail or any("params" in b for b in box.badges) or "params" in box.tooltip
    assert proto_constants(onnx.load(path)) == set(graph.constant_values())


def test_scopes_from_dynamo_metadata_without_names(tmp_path):
    """torch's dynamo exporter keeps the module path in node metadata, not in the names."""
    proto = scoped_bert(layers=5, dim=8, heads=2, ffn=16, vocab=32)
    for i, n in enumerate(proto.graph.node):
        parts = [p for p in n.name.split("/") if p][:-1]
        scopes = [".".join(parts[: k + 1]) for k in range(len(parts))]
        n.name = f"node_{i}"
        if scopes:
            helper.set_metadata_props(n, {NAME_SCOPES_KEY: repr(scopes)})
    path = tmp_path / "dynamo.onnx"
    onnx.save(proto, path)
    _, view = _loaded_view(path)
    opened = _open_view(path)
    assert opened is not None and opened.collapsed
    _same_picture(opened.view, view)


@pytest.mark.parametrize("name", ["light_resnet50.onnx", "light_densenet121.onnx"])
def test_nothing_drawn_early_where_nothing_opens_collapsed(name):
    """The light models open expanded (no names to group by, a few hundred drawn nodes): their
    view is every node, laid out once the model is built."""
    opened = _open_view(LIGHT / name)
    assert opened is not None and not opened.collapsed
    _same_picture(opened.view, _loaded_view(LIGHT / name)[1])


def test_constants_from_the_protobuf_match_the_loaded_graph():
    """The light models make their weights with ConstantOfShape chains: the protobuf's constant
    analysis (the preview's and inspect's) finds what the loaded Graph finds."""
    for name in ("light_resnet50.onnx", "light_inception_v1.onnx"):
        assert proto_constants(onnx.load(LIGHT / name)) == set(load_model(LIGHT / name).constant_values())


def test_small_models_get_their_view_from_the_loaded_graph():
    proto = scoped_bert(layers=3, dim=8, heads=2, ffn=16, vocab=32)
    assert open_view(proto, infer_types(proto)[0], "small") is None
