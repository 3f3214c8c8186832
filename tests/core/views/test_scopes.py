"""Name scopes: grouping by exporter naming and by structure, box facts, collapsed views."""
from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from core.model.graph import Graph
from core.model.samples import scoped_bert
from core.views.scopes import scope_parts, scope_tree, scoped_view, scope_node_id
from core.views.viewgraph import from_graph


def _graph(model: onnx.ModelProto) -> Graph:
    g = Graph(ir.from_proto(model))
    g.infer_shapes()
    return g


def _chain(names: list[str], op: str = "Relu") -> onnx.ModelProto:
    nodes = [helper.make_node(op, [f"t{i}"], [f"t{i + 1}"], name=nm) for i, nm in enumerate(names)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(f"t{len(names)}", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_scope_parts_of_each_naming_style():
    assert scope_parts("/encoder/layer.3/attention/self/MatMul", "/") == ["encoder", "layer.3", "attention", "self"]
    assert scope_parts("model/dense/MatMul", "/") == ["model", "dense"]
    assert scope_parts("encoder::layer3::MatMul", "::") == ["encoder", "layer3"]
    assert scope_parts("attn.q.matmul", ".") == ["attn", "q"]
    assert scope_parts("MatMul", "/") == [] and scope_parts("", "/") == []


def test_bert_groups_by_torch_scopes_with_box_facts():
    g = _graph(scoped_bert(layers=3))
    view = from_graph(g)
    tree = scope_tree(view, g)
    assert tree.source == "names:/"
    assert [s.name for s in tree.top_level()] == ["embeddings", "encoder", "pooler"]
    enc = tree.by_path["encoder"]
    assert [c.name for c in enc.children] == ["layer.0", "layer.1", "layer.2"]
    layer = tree.by_path["encoder/layer.1"]
    assert [c.name for c in layer.children] == ["attention", "intermediate", "output"]
    assert layer.size == 33 and layer.ops["MatMul"] == 8 and layer.ops["Softmax"] == 1
    # 6 dense layers (32x32 four times, 32x128, 128x32) + biases, 2 layer norms, and the 11
    # elements of shared constants (reshape shapes, scalars) the summary counts as parameters too
    weights = 4 * (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32) + 2 * 2 * 32
    assert layer.params == weights + 11
    assert list(layer.inputs.values()) == ["1×16×32 float32"] and list(layer.outputs.values()) == ["1×16×32 float32"]
    assert enc.size == sum(c.size for c in enc.children) and enc.params == 3 * weights + 11  # shared ones once
    # every drawn node is in exactly one innermost scope
    assert sorted(map(str, tree.root.members())) == sorted(str(n.id) for n in view.nodes)


def test_collapsed_view_bundles_edges_and_expands():
    g = _graph(scoped_bert(layers=3))
    view = from_graph(g)
    tree = scope_tree(view, g)
    collapsed = scoped_view(view, tree, set())
    ids = [n.id for n in collapsed.nodes]
    assert ids[1:4] == [scope_node_id("embeddings"), scope_node_id("encoder"), scope_node_id("pooler")]
    box = collapsed.node(scope_node_id("encoder"))
    assert box.data["kind"] == "scope" and box.data["size"] == 99 and "MatMul ×24" in box.badges[0]
    assert sorted(box.origin) == sorted(tree.by_path["encoder"].members())
    assert all(e.src in ids and e.dst in ids and e.src != e.dst for e in collapsed.edges)
    assert len(collapsed.edges) == 5  # input->emb->enc->pooler, enc->output, pooler->output
    # expanding the encoder shows its layers as boxes; edges between them are single tensors
    opened = scoped_view(view, tree, {"encoder"})
    assert [n.label for n in opened.nodes if n.data.get("kind") == "scope"] == ["embeddings", "layer.0", "layer.1", "layer.2", "pooler"]
    # the residual stream is one tensor between layers, and the bundle says which
    e = next(e for e in opened.edges if e.src == scope_node_id("encoder/layer.0"))
    assert e.dst == scope_node_id("encoder/layer.1") and e.data["tensors"] == [e.label]
    # everything expanded is the original view
    full = scoped_view(view, tree, {s.path for s in tree.groups})
    assert [n.id for n in full.nodes] == [n.id for n in view.nodes] and len(full.edges) == len(view.edges)
    # expand-to-node: the scopes to open to show a node deep inside
    softmax = next(n.id for n in g.nodes if n.name == "/encoder/layer.2/attention/self/Softmax")
    assert tree.path_to(softmax) == ["encoder", "encoder/layer.2", "encoder/layer.2/attention", "encoder/layer.2/attention/self"]
    assert tree.visible_id(softmax, {"encoder"}) == scope_node_id("encoder/layer.2")


def test_big_graphs_open_collapsed_small_ones_expanded():
    g = _graph(scoped_bert(layers=12))
    view = from_graph(g)
    tree = scope_tree(view, g)
    opened = tree.default_expanded(len(view.nodes))
    assert opened == {"embeddings", "encoder", "pooler"}  # the next level would show 45 boxes
    first = scoped_view(view, tree, opened)
    assert len(first.nodes) == 21  # input, embeddings' 3 nodes, 12 layers, pooler's 3 nodes, 2 outputs
    assert sum(1 for n in first.nodes if n.data.get("kind") == "scope") == 12
    small = _graph(scoped_bert(layers=1))
    v = from_graph(small)
    t = scope_tree(v, small)
    assert t.default_expanded(len(v.nodes)) == {s.path for s in t.groups}


def test_single_node_scopes_dissolve_and_single_child_chains_merge():
    names = ["/model/body/a/Relu", "/model/body/a/Relu_1", "/model/body/b/Relu", "/model/body/b/Relu_1", "/model/lonely/Relu", "/Relu"]
    g = _graph(_chain(names))
    tree = scope_tree(from_graph(g), g)
    assert [s.name for s in tree.top_level()] == ["model"]
    model = tree.top_level()[0]
    assert [c.name for c in model.children] == ["body"] and [c.name for c in model.children[0].children] == ["a", "b"]
    lonely = next(n.id for n in g.nodes if n.name == "/model/lonely/Relu")
    assert tree.scope_of[lonely] is model  # a one-node scope dissolves into its parent
    g = _graph(_chain(names[:4]))
    assert [s.name for s in scope_tree(from_graph(g), g).top_level()] == ["model/body"]  # one child only: merged


def test_colon_and_dot_styles_and_dynamo_metadata():
    g = _graph(_chain(["enc::l0::Relu", "enc::l0::Relu2", "enc::l1::Relu", "enc::l1::Relu2"]))
    assert scope_tree(from_graph(g), g).source == "names:::"
    g = _graph(_chain(["l0.a", "l0.b", "l1.a", "l1.b"]))
    assert [s.name for s in scope_tree(from_graph(g), g).top_level()] == ["l0", "l1"]
    m = _chain([f"node_Relu_{i}" for i in range(4)])
    for i, n in enumerate(m.graph.node):
        scopes = ["", "encoder", f"encoder.layer.{i // 2}"]
        n.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=repr(scopes))
    g = _graph(m)
    tree = scope_tree(from_graph(g), g)
    assert tree.source == "metadata"
    assert [c.name for c in tree.by_path["encoder"].children] == ["layer.0", "layer.1"]


def test_unnamed_chain_groups_by_structure_within_fan_out():
    g = _graph(_chain([""] * 3000))
    view = from_graph(g)
    tree = scope_tree(view, g)
    assert tree.source == "structure"
    assert all(len(s.children) + len(s.node_ids) <= 32 for s in tree.groups)
    assert len(tree.top_level()) + len(tree.root.node_ids) <= 32
    assert tree.root.size == 0 and sum(s.size for s in tree.top_level()) == 3000
    first = scoped_view(view, tree, tree.default_expanded(len(view.nodes)))
    assert len(first.nodes) <= 34


def test_residual_blocks_become_structural_blocks():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from canvas import make_big_model

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        from core import load_model

        g = load_model(make_big_model(1500, Path(d) / "m.onnx"))
    view = from_graph(g)
    tree = scope_tree(view, g)
    assert tree.source == "structure"
    blocks = [s for s in tree.groups if s.name.startswith("block")]
    assert len(blocks) >= 290 and all(s.size == 5 for s in blocks)  # Conv-Relu-Conv-Add-Relu, or the 2-branch form


def test_a_collapsed_group_shows_the_heat_of_the_nodes_it_holds():
    from core.views.scopes import with_group_totals
    from core.views.viewgraph import ViewGraph, ViewNode

    view = ViewGraph("g", [ViewNode("grp", "layer.0", category="group", origin=[1, 2, 3]), ViewNode(4, "Relu", origin=[4])], [])
    values = {1: 0.5, 2: 0.25, 4: 1.0}
    out = with_group_totals(values, view)
    assert out["grp"] == 0.75 and out[4] == 1.0 and "grp" not in values  # the caller's dict is left alone
    assert with_group_totals({}, view) == {}


def _canon(view):
    nodes = [(n.id, n.label, n.detail, n.category, n.badges, n.tooltip, n.origin, n.data) for n in view.nodes]
    edges = [(e.src, e.dst, e.label, e.detail, e.data) for e in view.edges]
    return nodes, edges, view.data


def test_drawn_part_only_view_equals_the_full_scan():
    """scoped_view of the tree's own view visits only what is drawn (core.views.scope_visible);
    it must give exactly what the scan over every node and edge gives, for any set of open
    groups: nested ones, ones inside closed groups, structural ranges."""
    import random

    from core.views.viewgraph import ViewGraph

    for model in (scoped_bert(layers=40, dim=16, heads=2, ffn=32, vocab=64), _chain([f"n{i}" for i in range(1200)])):
        g = _graph(model)
        view = from_graph(g)
        tree = scope_tree(view, g)
        copy = ViewGraph(view.title, view.nodes, view.edges, view.data)  # not the tree's view: full scan
        paths = sorted(tree.by_path)
        rng = random.Random(0)
        sets = [set(), {paths[1]}, tree.default_expanded(len(view.nodes))]
        sets += [set(rng.sample(paths, k)) for k in (2, 5, 12, 30) for _ in range(3)]
        drawn_part = 0
        for expanded in sets:
            fast, full = scoped_view(view, tree, expanded), scoped_view(copy, tree, expanded)
            assert _canon(fast) == _canon(full), sorted(expanded)
            drawn_part += len(fast.nodes) * 2 <= len(view.nodes)
        assert drawn_part >= 5  # the drawn-part path was taken, not only the fallback
