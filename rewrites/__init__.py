"""The rule library: one module per family of rewrites (folding, cleanup, fusion).

Adding a rule = writing it in a family module (or a new one) and adding one line to `_RULES`.
Ids are stable: the CLI, saved sessions and tests name rules by them.
"""
from __future__ import annotations

from core.errors import WorkbenchError
from core.rewrite import RewriteRule

from rewrites import cleanup, folding, fusion

__all__ = ["RULES", "get_rule", "get_rules", "all_rules", "UnknownRuleError"]

_RULES: list[RewriteRule] = [
    folding.FoldConstants(),
    cleanup.EliminateDeadCode(),
    cleanup.EliminateIdentity(),
    folding.FoldConvBatchNorm(),
    fusion.FuseMatMulAdd(),
    fusion.FuseLinearRelu(),
    fusion.FuseGelu(),
    fusion.FuseLayerNorm(),
    cleanup.CollapseReshapes(),
    fusion.FuseTransposeMatMul(),
]

RULES: dict[str, RewriteRule] = {r.id: r for r in _RULES}


class UnknownRuleError(WorkbenchError):
    """A rule id that the library does not have."""


def all_rules() -> list[RewriteRule]:
    return list(RULES.values())


def get_rule(rule_id: str) -> RewriteRule:
    try:
        return RULES[rule_id]
    except KeyError:
        raise UnknownRuleError(f"unknown rule '{rule_id}'; known rules: {', '.join(RULES)}.") from None


def get_rules(spec: str | list[str]) -> list[RewriteRule]:
    """Rules from a comma-separated list of ids (or a list), in the order given."""
    ids = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if not ids:
        raise UnknownRuleError("no rule ids given; known rules: " + ", ".join(RULES) + ".")
    return [get_rule(i) for i in ids]
