"""core.rewrite: non-overlapping matches, why-not, preview ids, one undoable edit restoring the exact
bytes and ids, verification refusing a wrong rewrite, and the light-model sweep (a few models)."""
from __future__ import annotations

import onnx
import pytest

from core import EditError, load_model
from core.model.history import History
from core.rewrite import PatternRule, RewriteEdit, apply_rewrite, explain, find_matches, preview, run_rules
from core.verify import VerificationError, with_random_weights
from rewrites import all_rules, get_rule, get_rules
from tests.conftest import light, sample


class BrokenGemm(PatternRule):
    """MatMul + Add -> Gemm with alpha=2: a wrong rewrite that verification must refuse."""

    id = "broken-gemm"
    family = "test"
    root_ops = frozenset({"Add"})
    pattern_ops = frozenset({"MatMul", "Add"})
    span = 2

    def pattern(self, op, a, b, c):
        return op.Add(op.MatMul(a, b), c)

    def rewrite(self, op, a, b, c, **_):
        return op.Gemm(a, b, c, alpha=2.0)


def test_registry_ids_are_stable_and_unique():
    ids = [r.id for r in all_rules()]
    assert ids[:10] == [  # the first rules keep their places; new ones are appended
        "fold-constants", "eliminate-dead-code", "eliminate-identity", "fold-conv-bn", "fuse-matmul-add",
        "fuse-linear-relu", "fuse-gelu", "fuse-layernorm", "collapse-reshapes", "fuse-transpose-matmul",
    ]
    assert len(ids) == len(set(ids)) >= 25
    assert all(r.description and r.family for r in all_rules())
    with pytest.raises(Exception, match="unknown rule 'nope'"):
        get_rules("fold-conv-bn,nope")


def test_matches_do_not_overlap_and_longest_pattern_wins():
    g = load_model(sample("mlp"))
    # fuse-linear-relu and fuse-matmul-add overlap; within one rule matches never share nodes
    for rule in all_rules():
        ms = find_matches(g, rule)
        ids = [i for m in ms for i in m.node_ids]
        assert len(ids) == len(set(ids)), rule.id


def test_preview_leaves_the_graph_alone_and_apply_is_one_exact_undo():
    g = load_model(sample("small_cnn"))
    before = g.to_bytes()
    ids = [n.id for n in g.nodes]
    rule = get_rule("fold-conv-bn")
    pv = preview(g, rule)
    assert g.to_bytes() == before
    assert [n.id for n in pv.graph.nodes if n.id in set(ids)] == [i for i in ids if i not in pv.removed]
    h = History(g)
    h.push(RewriteEdit(pv))
    assert not any(n.op_type == "BatchNormalization" for n in g.nodes)
    assert len(g) == len(ids) - 4
    h.undo()
    assert g.to_bytes() == before and [n.id for n in g.nodes] == ids
    h.redo()
    assert not any(n.op_type == "BatchNormalization" for n in g.nodes)
    new_id = max(n.id for n in g.nodes)
    h.undo()
    # ids are never reused: a later edit gets a fresh one
    pv2 = preview(g, get_rule("fold-conv-bn"), find_matches(g, rule)[:1])
    assert len(pv2.applied) == 1 and pv2.changed and max(pv2.changed) <= new_id


def test_apply_one_match_only():
    g = load_model(sample("small_cnn"))
    rule = get_rule("fold-conv-bn")
    ms = find_matches(g, rule)
    pv = apply_rewrite(g, rule, ms[1:2], verify=True)
    assert pv.verification.ok
    assert [n.op_type for n in g.nodes].count("BatchNormalization") == 3
    assert ms[1].root_id not in {n.id for n in g.nodes}


def test_stale_preview_is_refused():
    g = load_model(sample("small_cnn"))
    pv = preview(g, get_rule("fold-conv-bn"))
    History(g).push(RewriteEdit(preview(g, get_rule("fold-conv-bn"), find_matches(g, get_rule("fold-conv-bn"))[:1])))
    with pytest.raises(EditError, match="out of date"):
        RewriteEdit(pv).do(g)


def test_verification_refuses_a_wrong_rewrite():
    g = load_model(sample("mlp"))
    before = g.to_bytes()
    with pytest.raises(VerificationError, match="broken-gemm is refused.*differs beyond tolerance"):
        run_rules(g, [BrokenGemm()], verify=True)
    assert g.to_bytes() == before
    pv = preview(g, BrokenGemm())
    pv.verify()
    with pytest.raises(EditError, match="refused"):
        RewriteEdit(pv)


def test_explain_on_a_matching_node_says_it_applies():
    g = load_model(sample("small_cnn"))
    conv = next(n for n in g.nodes if n.op_type == "Conv")
    w = explain(g, get_rule("fold-conv-bn"), conv.id)
    assert w.matches and "applies here" in w.reason and conv.id in w.match.node_ids
    with pytest.raises(EditError):
        explain(g, get_rule("fold-conv-bn"), 10_000)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_light_models_every_rule_applies_and_verifies_or_does_not_match(name):
    shipped = load_model(light(name))
    g = with_random_weights(shipped, seed=0)
    assert not any(n.op_type == "ConstantOfShape" for n in g.nodes)
    # as shipped (IR version 3: initializers are graph inputs too), folding round-trips exactly
    pv = preview(shipped, get_rule("fold-constants"))
    assert pv.applied and not pv.skipped
    before = shipped.to_bytes()
    h = History(shipped)
    h.push(RewriteEdit(pv))
    onnx.checker.check_model(shipped.to_proto())
    h.undo()
    assert shipped.to_bytes() == before
    for rule in all_rules():
        pv = preview(g, rule)
        assert not pv.skipped, (rule.id, pv.skipped)
        if pv.applied:
            onnx.checker.check_model(pv.graph.to_proto())
            c = pv.verify()
            assert c.ok, (rule.id, c.explain())
            before, ids = g.to_bytes(), [n.id for n in g.nodes]
            h = History(g)
            h.push(RewriteEdit(pv))
            assert len(g) == len(pv.graph)
            h.undo()
            assert g.to_bytes() == before and [n.id for n in g.nodes] == ids, rule.id
