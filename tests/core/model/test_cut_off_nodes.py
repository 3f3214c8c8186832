"""A node cut off from its data (a plain Delete upstream leaves a required input unconnected) is
still the user's node, not a constant (issue 41 item 1): it is drawn, marked, keeps its weights in
the parameter count, and fold-constants does not offer it. Checked against the failure the issue
describes: in the 18-node unnamed CNN, deleting the Relu after the first Add hid the 8 nodes below
it, the parameter count fell from 764 to 448 here, and fold-constants offered one match."""
from __future__ import annotations

import json

import numpy as np
import onnx

from core.model.edits import DeleteNode
from core.model.onnx_io import load_model_bytes
from core.model.summary import summarize, summarize_proto
from core.rewrite import explain, find_matches
from core.views.viewgraph import from_graph
from rewrites import get_rule
from tests.core.views.test_diff_matching import cnn
from tests.helpers import run_cli
from tests.rewrites.util import graph_from_text

RELU_AFTER_ADD = 10  # node ids count from 1: Add #9, then its Relu
CUT_OFF = {11: ["X"], 16: ["B"]}  # the Conv that read the Relu, the Add of the next block's skip


def _cut_cnn():
    g = load_model_bytes(cnn().SerializeToString(), "cnn_bn.onnx")
    before = summarize(g)["params"]
    assert g.node(RELU_AFTER_ADD).op_type == "Relu" and g.node(RELU_AFTER_ADD + 1).op_type == "Conv"
    DeleteNode(g, RELU_AFTER_ADD).do(g)
    return g, before


def test_a_cut_off_node_is_not_a_constant_and_keeps_its_weights():
    g, before = _cut_cnn()
    assert before["count"] == 764 and before["tensors"] == 25
    consts = g.constant_values()
    assert not consts & {o for n in g.nodes for o in n.outputs}  # nothing downstream became a constant
    assert summarize(g)["params"] == before  # weights are still weights
    # inspect's protobuf-only summary agrees with the loaded Graph
    assert summarize_proto(g.to_proto())["params"] == before


def test_a_cut_off_node_is_drawn_and_says_which_input_waits():
    g, _ = _cut_cnn()
    view = from_graph(g)
    drawn = {n.id for n in view.nodes if n.data.get("kind") == "node"}
    assert drawn == {n.id for n in g.nodes}  # all 17, not 9
    for nid, names in CUT_OFF.items():
        vn = view.node(nid)
        assert list(vn.data["unconnected"]) == names
        assert vn.detail == f"{names[0]} not connected"
        assert f"Input {names[0]} is not connected" in vn.tooltip
    assert all(not view.node(n.id).data["unconnected"] for n in g.nodes if n.id not in CUT_OFF)
    # the graph output still has its producer drawn, so it is not left floating
    assert any(e.dst == "output:y" for e in view.edges)


def test_fold_constants_does_not_offer_a_cut_off_node_and_says_why():
    g, _ = _cut_cnn()
    rule = get_rule("fold-constants")
    assert find_matches(g, rule) == []
    why = explain(g, rule, 11).reason
    assert "nothing connected to a required input" in why, why


def test_an_omitted_optional_input_still_folds():
    # Clip's min is optional: a Clip of constants with min omitted is a constant all the same
    g = graph_from_text(
        """<ir_version: 8, opset_import: ["": 17]>
        m (float[3] x) => (float[3] y) {
          c = Clip(w, , hi)
          y = Mul(x, c)
        }""",
        {"w": np.array([-1.0, 0.5, 9.0], np.float32), "hi": np.array(2.0, np.float32)},
    )
    assert "c" in g.constant_values()
    assert len(find_matches(g, get_rule("fold-constants"))) == 1


def test_cli_edit_delete_keeps_the_parameters_of_the_cut_off_part(tmp_path):
    src, cut = tmp_path / "cnn_bn.onnx", tmp_path / "cut.onnx"
    onnx.save(cnn(), src)
    r = run_cli("edit", src, "--delete", f"#{RELU_AFTER_ADD}", "-o", cut, "--allow-invalid", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["nodes_after"] == 17 and len(report["problems"]) == 2
    # the written file is what `inspect` summarizes (it refuses to load it: a required input is empty)
    assert summarize_proto(onnx.load(cut))["params"]["count"] == 764
    # ... in one sentence naming the unnamed node as the app does (onnx.checker says "Node ()")
    r = run_cli("inspect", cut)
    conv = next(i for i, n in enumerate(onnx.load(cut).graph.node) if n.op_type == "Conv" and n.input[0] == "")
    assert r.returncode == 2 and f"Conv #{conv + 1}'s input 0" in r.stderr and "Node ()" not in r.stderr, r.stderr
