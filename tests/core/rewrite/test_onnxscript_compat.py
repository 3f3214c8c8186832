"""core.rewrite.onnxscript_compat against the installed onnxscript: every adapter function, and no
private use elsewhere.

Checked on onnxscript 0.7.2. On an upgrade that moves one of the rewriter's privates, the test of
that function fails here (with the adapter's one sentence), not inside some rule.
"""
from __future__ import annotations

import onnx.parser
import onnx_ir as ir
import pytest
from onnxscript.rewriter.pattern import MatchStatus, Pattern

from core.errors import WorkbenchError
from core.rewrite import onnxscript_compat
from tests.core.compiler.test_tvm_compat import ROOT, private_uses, sources

_MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x, float[2] y) => (float[2] z) {
    z = Add(x, y)
}
"""


def _add_model() -> ir.Model:
    return ir.from_proto(onnx.parser.parse_model(_MODEL))


def _add(op, x, y):
    return op.Add(x, y)


class _LastLog:
    """A MatchingTracer stand-in keeping the last attempt and its status (as core.rewrite.rule's)."""

    match = status = None

    def log(self, rule, container, node, match, status) -> None:
        self.match, self.status = match, status


def test_the_adapter_names_the_version_it_was_checked_on():
    import onnxscript

    assert onnxscript_compat.CHECKED_ON == "0.7.2"
    assert onnxscript.__version__ == onnxscript_compat.CHECKED_ON, (
        f"onnxscript {onnxscript.__version__} is installed; check core/rewrite/onnxscript_compat.py against it "
        "and update CHECKED_ON.")


def test_graph_patterns_match_and_commute():
    assert len(onnxscript_compat.graph_patterns(_add)) == 1
    assert len(onnxscript_compat.graph_patterns(_add, commute=True)) == 2
    model = _add_model()
    (pattern,) = onnxscript_compat.graph_patterns(_add)
    match = Pattern(pattern, name="add").match(model, model.graph, model.graph.node(0))
    assert match and [n.op_type for n in match.nodes] == ["Add"]


def test_replacement_builds_what_rewrite_returns():
    model = _add_model()
    (pattern,) = onnxscript_compat.graph_patterns(_add)
    match = Pattern(pattern, name="add").match(model, model.graph, model.graph.node(0))
    delta = onnxscript_compat.replacement(lambda op, x, y: op.Sub(x, y), match)
    assert [n.op_type for n in delta.new_nodes] == ["Sub"] and len(delta.new_outputs) == 1


def test_match_failure_error_fails_a_match_with_its_reason():
    error = onnxscript_compat.match_failure_error()
    assert issubclass(error, Exception) and error("why not").reason == "why not"

    def condition(context, **bindings):
        raise error("the inputs are not constants")

    model = _add_model()
    (pattern,) = onnxscript_compat.graph_patterns(_add)
    tracer = _LastLog()
    match = Pattern(pattern, condition, name="add").match(model, model.graph, model.graph.node(0), tracer=tracer)
    assert match is None and tracer.match.reason == "the inputs are not constants"
    assert tracer.status == MatchStatus.CONDITION_FAILED


def test_pattern_shape_reads_roots_ops_and_size_of_a_shipped_rule():
    rule = onnxscript_compat.rules_from("rules.common", "fuse_pad_into_conv_rule")
    shape = onnxscript_compat.pattern_shape(rule)
    assert shape == onnxscript_compat.PatternShape(frozenset({"Conv"}), frozenset({"Pad", "Conv"}), 2)


def test_rules_from_reaches_the_private_modules_the_rule_sets_live_in():
    rules = onnxscript_compat.rules_from("rules.fusion._rms_normalization", "rms_normalization_rules")
    assert len(rules) == 2 and all(hasattr(r, "try_rewrite") for r in rules)
    with pytest.raises(WorkbenchError, match=r"rewrite rules 'gone_rules'.*checked on 0\.7\.2"):
        onnxscript_compat.rules_from("rules.common", "gone_rules")


def test_pattern_shape_of_a_rule_without_its_pattern_is_one_sentence():
    with pytest.raises(WorkbenchError, match=r"_target_pattern.*checked on 0\.7\.2"):
        onnxscript_compat.pattern_shape(object())


def test_a_missing_private_is_one_sentence_naming_it(monkeypatch):
    from onnxscript.rewriter import _basics

    monkeypatch.delattr(_basics, "MatchFailureError")
    with pytest.raises(WorkbenchError) as info:
        onnxscript_compat.match_failure_error()
    message = str(info.value)
    assert message.startswith("onnxscript ") and "(onnxscript.rewriter._basics.MatchFailureError)" in message
    assert message.endswith("; the workbench was checked on 0.7.2.")


def test_the_scan_finds_a_private_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from onnxscript.rewriter import pattern\n"
                      "from onnxscript.rewriter._basics import MatchFailureError\n"
                      "import onnxscript.rewriter._rewrite_rule\n"
                      "from onnxscript.rewriter import _pattern_ir\n")
    assert private_uses(sample, "onnxscript", set()) == [
        "sample.py:2 from onnxscript.rewriter._basics import ...", "sample.py:3 import onnxscript.rewriter._rewrite_rule",
        "sample.py:4 from onnxscript.rewriter import ..."]


def test_no_module_outside_the_adapter_uses_onnxscripts_privates():
    names = {"_to_graph_pattern", "MatchFailureError", "ReplacementPatternFunction"}
    uses = [f"{f.relative_to(ROOT).parent}/{u}" for f in sources("core/rewrite/onnxscript_compat.py")
            for u in private_uses(f, "onnxscript", names)]
    assert not uses, "onnxscript privates used outside core/rewrite/onnxscript_compat.py: " + "; ".join(uses)
