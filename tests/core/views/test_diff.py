"""Graph diff: matching by name then structure; added/removed/changed; the `diff` CLI."""
from __future__ import annotations

import json

import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from core.model.graph import Graph
from core.model.samples import scoped_bert
from core.views.diff import diff_graphs, diff_views
from core.views.viewgraph import from_graph
from tests.helpers import run_cli


def _graph(model: onnx.ModelProto) -> Graph:
    g = Graph(ir.from_proto(model))
    g.infer_shapes()
    return g


def _net(alpha: float = 0.1, names: bool = True, extra: bool = False, width: int = 4) -> onnx.ModelProto:
    nm = (lambda s: s) if names else (lambda s: "")
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name=nm("relu")),
        helper.make_node("LeakyRelu", ["a"], ["b"], name=nm("leaky"), alpha=alpha),
        helper.make_node("Flatten", ["b"], ["c"], name=nm("flat"), axis=1),
    ]
    out = "c"
    if extra:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["d"], name=nm("sig")))
        out = "d"
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width, 2])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_identical_models_match_entirely():
    d = diff_graphs(_graph(_net()), _graph(_net()))
    assert d.identical and len(d.matched) == 3 and d.by["name"] == 3


def test_changed_attribute_and_shape_added_node():
    d = diff_graphs(_graph(_net()), _graph(_net(alpha=0.2, extra=True, width=5)))
    j = d.to_json()
    assert j["added"] == ["sig"] and j["removed"] == [] and j["matched"] == 3
    changed = {c["node"]: c["what"] for c in j["changed"]}
    assert "attribute alpha 0.1 → 0.2" in changed["leaky"]
    assert "output 0 shape [1, 4, 2] → [1, 5, 2]" in changed["relu"]
    assert "output 0 shape [1, 4, 2] → [1, 5, 2]" in changed["leaky"]


def test_unnamed_nodes_match_by_structure():
    d = diff_graphs(_graph(_net(names=False)), _graph(_net(names=False, alpha=0.3)))
    assert len(d.matched) == 3 and d.by["structure"] == 3 and not d.added and not d.removed
    assert [w for w in d.changed.values()] == [["attribute alpha 0.1 → 0.3"]]
    assert d.to_json()["changed"][0]["node"] == "LeakyRelu#1"


def test_renamed_nodes_match_by_structure_and_a_removed_middle_node():
    a = _net()
    b = _net()
    for n in b.graph.node:
        n.name = "renamed_" + n.name
    d = diff_graphs(_graph(a), _graph(b))
    assert len(d.matched) == 3 and d.by["structure"] == 3
    # drop the LeakyRelu and reconnect the Flatten to the Relu: one removed node; the Flatten's
    # rewiring is part of that removal, not a change of its own
    c = _net()
    del c.graph.node[1]
    c.graph.node[1].input[0] = "a"
    d = diff_graphs(_graph(a), _graph(c))
    assert d.to_json()["removed"] == ["leaky"] and len(d.matched) == 2 and not d.changed
    # wired to another node with nothing removed in between: a change
    e = _net()
    e.graph.node[2].input[0] = "a"
    d = diff_graphs(_graph(a), _graph(e))
    assert d.changed and "input 0 comes from another node: relu instead of leaky" in d.changed[next(iter(d.changed))]


def test_bert_before_and_after_fuse_gelu():
    from core.rewrite.engine import apply_rewrite
    from rewrites import get_rule

    before = _graph(scoped_bert(layers=2))
    after = before.clone()
    apply_rewrite(after, get_rule("fuse-gelu"))
    d = diff_graphs(before, after)
    j = d.to_json()
    assert len(j["removed"]) == 10 and all("intermediate_act_fn" in r for r in j["removed"])
    assert len(j["added"]) == 2 and all("Gelu" in a for a in j["added"])
    assert j["matched"] == len(before) - 10
    # the same on the drawn views (as the Compare view of two lowering stages does)
    dv = diff_views(from_graph(before), from_graph(after))
    assert len(dv.removed) == 10 and len(dv.added) == 2


def test_diff_cli_json_text_and_bad_input(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(_net(), a)
    onnx.save(_net(alpha=0.2, extra=True), b)
    r = run_cli("diff", a, b, "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert set(obj) == {"identical", "model", "added", "removed", "changed", "matched"}
    assert obj["added"] == ["sig"] and obj["matched"] == 3 and obj["changed"][0]["node"] == "leaky"
    r = run_cli("diff", a, b)
    assert r.returncode == 0 and "+ sig" in r.stdout and "~ leaky: attribute alpha" in r.stdout
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    r = run_cli("diff", a, bad)
    assert r.returncode == 2 and str(bad) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("diff", a, tmp_path / "missing.onnx")
    assert r.returncode == 2 and "no such file" in r.stderr
