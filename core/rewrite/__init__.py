"""The rewrite engine: declarative rules, matches, "why not?", preview, undoable apply.

The rule library lives in `rewrites/` (one module per family, registered in
`rewrites/__init__.py`); this package is the machinery every rule, the CLI and the GUI share:

* `RewriteRule` / `PatternRule` (rule.py): what a rule is (pattern + condition + replacement);
* `find_matches`, `explain`, `preview`, `RewriteEdit`, `apply_rewrite`, `run_rules` (engine.py);
* `ConstantEvaluator` (constants.py): the numbers behind constant values, however they are made.
"""
from __future__ import annotations

from ..model.constants import ConstantEvaluator, is_constant_value
from .engine import Preview, SpareCopy, RewriteEdit, RuleReport, apply_rewrite, explain, find_matches, preview, run_rules
from .rule import WB_DOMAIN, Attempt, ConditionFailed, Match, PatternRule, RewriteRule, RuleContext, WhyNot, current, fail, node_label, rank, static_shape

__all__ = [
    "RewriteRule",
    "PatternRule",
    "Match",
    "WhyNot",
    "Attempt",
    "RuleContext",
    "ConditionFailed",
    "fail",
    "current",
    "node_label",
    "rank",
    "static_shape",
    "WB_DOMAIN",
    "find_matches",
    "explain",
    "preview",
    "Preview",
    "RewriteEdit",
    "apply_rewrite",
    "run_rules",
    "RuleReport",
    "SpareCopy",
    "ConstantEvaluator",
    "is_constant_value",
]
