"""The rule browser at 30+ rules: grouped by family, searched by name, match counts per rule and
family for the open model (counted on a worker), and Apply family."""
from __future__ import annotations

from collections import Counter

from PySide6.QtCore import Qt

from core import save_model
from core.rewrite import find_matches
from rewrites import FAMILIES, all_rules, family_rules, get_rule
from tests.rewrites.models import llama_decoder


def _panel(window):
    return window.panels["rewrites"].widget()


def _open_llama(window, tmp_path, opset=23):
    path = tmp_path / "llama.onnx"
    save_model(llama_decoder(opset=opset), path)
    assert window.open_model(str(path), wait=True)
    panel = _panel(window)
    assert panel.wait_idle(60)
    return panel


def test_rules_are_grouped_by_family_with_counts_per_rule_and_family(window, tmp_path):
    panel = _open_llama(window, tmp_path)
    tree = panel.rule_list
    tops = [tree.topLevelItem(i) for i in range(tree.topLevelItemCount())]
    assert [t.data(0, Qt.UserRole + 1) for t in tops] == [f for f in FAMILIES if family_rules(f)]
    assert sum(t.childCount() for t in tops) == len(all_rules()) >= 30
    g = window.document.graph
    for top in tops:
        total = 0
        for j in range(top.childCount()):
            item = top.child(j)
            rule = get_rule(item.data(0, Qt.UserRole))
            assert rule.family == top.data(0, Qt.UserRole + 1)
            n = len(find_matches(g, rule))
            assert item.text(1) == str(n), rule.id
            total += n
        assert top.text(1) == str(total)
    assert panel.rule_items["fuse-rms-normalization"].text(1) == "5"
    assert panel.rule_items["fuse-rotary-embedding"].text(1) == "4"


def test_search_keeps_matching_rules_and_their_families(window, tmp_path):
    panel = _open_llama(window, tmp_path)
    panel.search.setText("ROTARY")
    visible = [rid for rid, item in panel.rule_items.items() if not item.isHidden()]
    assert visible == ["fuse-rotary-embedding"]
    shown = [f for f, top in panel.family_items.items() if not top.isHidden()]
    assert shown == ["transformer"]
    panel.search.setText("gelu")  # descriptions count too: every GELU rule, in three families
    visible = {rid for rid, item in panel.rule_items.items() if not item.isHidden()}
    assert {"fuse-gelu", "ort-bias-gelu", "ort-erf-gelu"} <= visible and "fuse-silu" not in visible
    panel.search.clear()
    assert not any(item.isHidden() for item in panel.rule_items.values())


def test_a_family_row_describes_its_rules_and_selecting_a_hidden_rule_clears_the_search(window, tmp_path):
    panel = _open_llama(window, tmp_path)
    panel.select_family("transformer")
    assert panel.current_rule() is None and panel.current_family() == "transformer"
    assert "fuse-rms-normalization" in panel.last_result and panel.apply_family_button.isEnabled()
    panel.search.setText("rotary")
    panel.select_rule("fuse-silu")
    assert panel.search.text() == "" and panel.current_rule().id == "fuse-silu"


def test_apply_family_applies_each_matching_rule_as_its_own_undoable_edit(window, qtbot, tmp_path):
    panel = _open_llama(window, tmp_path)
    before = window.document.graph.to_bytes()
    panel.select_family("transformer")
    panel.apply_family()
    qtbot.waitUntil(lambda: panel._family_run is None and panel._job is None, timeout=120000)
    assert panel.wait_idle(60)
    ops = Counter(n.op_type for n in window.document.graph.nodes)
    # fuse-silu runs before fuse-swiglu (library order), which then takes the SiLU functions in
    assert (ops["RMSNormalization"], ops["RotaryEmbedding"], ops["SwiGLU"], ops["Attention"]) == (5, 4, 2, 2)
    assert ops["Sigmoid"] == ops["SiLU"] == ops["Softmax"] == 0
    stack = window.document.undo_stack
    assert stack.count() == 5 and "5 rules applied" in panel.last_result
    assert [stack.text(i).split(" ")[0] for i in range(5)] == ["fuse-silu", "fuse-swiglu", "fuse-attention", "fuse-rms-normalization",
                                                              "fuse-rotary-embedding"]
    for _ in range(5):
        stack.undo()
    assert window.document.graph.to_bytes() == before
