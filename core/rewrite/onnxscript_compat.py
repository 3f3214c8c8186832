"""The one place the workbench touches onnxscript's private (underscore) rewriter modules.

`PatternRule` (core.rewrite.rule) runs on onnxscript's pattern matcher, whose public surface
(`onnxscript.rewriter.pattern`: Pattern, MatchResult, MatchStatus) lacks three things a rule
needs: turning a pattern function into a graph pattern, building the replacement of one match,
and the exception a check raises to fail a match with a reason. They live in
`onnxscript.rewriter._pattern_ir`, `_rewrite_rule` and `_basics`; each is reached through a
small function here, checked on onnxscript 0.7.2 (`CHECKED_ON`). When an upgrade moves one, the
function raises one sentence ("onnxscript X.Y.Z no longer provides ...; the workbench was checked
on 0.7.2") instead of an ImportError deep in a rule; tests/core/rewrite/test_onnxscript_compat.py
exercises each against the installed onnxscript and fails if a module outside this one imports
the private modules.
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import WorkbenchError

__all__ = ["CHECKED_ON", "graph_patterns", "match_failure_error", "replacement", "PatternShape", "pattern_shape", "rules_from"]

logger = logging.getLogger(__name__)

CHECKED_ON = "0.7.2"  # the onnxscript version every function here was checked on


def _private(module: str, name: str, what: str) -> Any:
    """`onnxscript.rewriter.<module>.<name>`, or one sentence naming `what` when it is gone."""
    path = f"onnxscript.rewriter.{module}"
    try:
        return getattr(importlib.import_module(path), name)
    except (ImportError, AttributeError) as e:
        import onnxscript

        raise WorkbenchError(
            f"onnxscript {onnxscript.__version__} no longer provides {what} ({path}.{name}); "
            f"the workbench was checked on {CHECKED_ON}."
        ) from e


def match_failure_error() -> type[Exception]:
    """The exception a pattern's condition raises to fail the match with a reason: constructed
    as `error(reason)`, it carries `.reason`, and the matcher reports the match as
    CONDITION_FAILED with that reason (`_basics.MatchFailureError`, onnxscript 0.7.2)."""
    return _private("_basics", "MatchFailureError", "the match-failure exception")


def graph_patterns(pattern: Callable, commute: bool = False) -> list:
    """The graph pattern(s) onnxscript matches for a pattern function `pattern(op, *vars)`: one,
    or with `commute` one per operand order of its commutative ops (Add, Mul)
    (`_pattern_ir._to_graph_pattern`, onnxscript 0.7.2). Each goes into a public
    `onnxscript.rewriter.pattern.Pattern`."""
    graph_pattern = _private("_pattern_ir", "_to_graph_pattern", "the pattern-function compiler")(pattern)
    return graph_pattern.commute() if commute else [graph_pattern]


def replacement(rewrite: Callable, match) -> Any:
    """The replacement subgraph `rewrite(op, **bindings)` builds for a successful `match` (new
    nodes, outputs, initializers), or None when it declines
    (`_rewrite_rule.ReplacementPatternFunction`, onnxscript 0.7.2)."""
    builder = _private("_rewrite_rule", "ReplacementPatternFunction", "the replacement builder")
    return builder(rewrite).get_replacement(match)


@dataclass(frozen=True)
class PatternShape:
    """What an onnxscript rule's pattern is made of: the op types it can end at (`roots`), every
    op type it covers (`ops`, empty when one is not a fixed name) and its number of nodes."""

    roots: frozenset[str]
    ops: frozenset[str]
    nodes: int


def pattern_shape(rule) -> PatternShape:
    """The shape of a public `onnxscript.rewriter.pattern.RewriteRule`'s target pattern, read from
    its private `_target_pattern` (a `_pattern_ir.GraphPattern`: `output_nodes`, iteration over
    NodePatterns whose `op` has `value()`, onnxscript 0.7.2)."""
    graph_pattern = getattr(rule, "_target_pattern", None)
    if graph_pattern is None or not hasattr(graph_pattern, "output_nodes"):
        import onnxscript

        raise WorkbenchError(
            f"onnxscript {onnxscript.__version__} no longer keeps a rule's pattern where the workbench reads it "
            f"(RewriteRule._target_pattern.output_nodes); the workbench was checked on {CHECKED_ON}."
        )

    def name(node_pattern) -> str | None:
        value = getattr(node_pattern.op, "value", None)
        return value() if callable(value) else None

    roots = {name(n) for n in graph_pattern.output_nodes}
    ops = {name(n) for n in graph_pattern}
    return PatternShape(
        frozenset() if None in roots else frozenset(roots),
        frozenset() if None in ops else frozenset(ops),
        graph_pattern.num_nodes(),
    )


def rules_from(module: str, name: str) -> Any:
    """`onnxscript.rewriter.<module>.<name>`: a rule, list of rules or rule set as onnxscript keeps
    it (its opset-23 fusions only in private modules, `rules.fusion._rms_normalization`,
    onnxscript 0.7.2), or one sentence naming it when an upgrade moved it."""
    return _private(module, name, f"the rewrite rules '{name}'")
