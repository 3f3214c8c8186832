"""The rule library: one module per family of rewrites (folding, cleanup, fusion, transformer
activations, opset steps), and onnxscript's own rule sets wrapped as workbench rules
(`onnxscript_sets`; the "onnxruntime" family's results run on onnxruntime only).

Adding a rule = writing it in a family module (or a new one) and adding one line to `_RULES`.
Ids are stable: the CLI, saved sessions and tests name rules by them.
"""
from __future__ import annotations

from core.errors import WorkbenchError
from core.rewrite import RewriteRule

from rewrites import activations, attention, cleanup, folding, fusion, onnxscript_sets, opset
from rewrites.onnxscript_sets import ORT_FAMILY

__all__ = [
    "RULES", "ORT_FAMILY", "FAMILIES", "GOALS", "get_rule", "get_rules", "all_rules", "family_rules", "recipe", "check_goal",
    "UnknownRuleError",
]

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
    activations.FuseSiLU(),
    activations.FuseSwiGLU(),
    attention.FuseAttention(),
    opset.UpgradeOpset(),
    activations.FuseSiLUForOrt(),
    *onnxscript_sets.RULES,
]

RULES: dict[str, RewriteRule] = {r.id: r for r in _RULES}
assert len(RULES) == len(_RULES), "two rules share an id"

# how the rule browser titles each family, in the order it lists them
FAMILIES: dict[str, str] = {
    "cleanup": "Clean-up",
    "folding": "Folding",
    "fusion": "Fusion",
    "transformer": "Transformer blocks",
    "opset": "Opset",
    ORT_FAMILY: "For onnxruntime",
}


# what `rewrite --for GOAL` applies when no --rules are named, in order: structural clean-ups,
# then the fusions (LayerNorm before SkipLayerNorm, Gelu before BiasGelu), then the arithmetic
# no-ops, last: an untrained LayerNorm's scale of ones and shift of zeros are such no-ops, and
# removing them first would leave no LayerNorm pattern to fuse
GOALS: dict[str, tuple[str, ...]] = {
    "ort": (
        "eliminate-identity", "simplify-casts", "simplify-transposes", "merge-unsqueezes", "collapse-slices",
        "remove-redundant-expand", "fuse-layernorm", "ort-skip-layer-normalization", "ort-erf-gelu", "ort-bias-gelu",
        "ort-silu", "ort-fused-matmul", "remove-arithmetic-no-ops", "eliminate-identity", "eliminate-dead-code",
    ),
}


class UnknownRuleError(WorkbenchError):
    """A rule id that the library does not have, or a rule the goal does not allow."""


def all_rules() -> list[RewriteRule]:
    return list(RULES.values())


def family_rules(family: str) -> list[RewriteRule]:
    """The rules of one family, in library order."""
    return [r for r in RULES.values() if r.family == family]


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


def recipe(goal: str) -> list[RewriteRule]:
    """The rules `rewrite --for GOAL` applies, in order."""
    try:
        return [get_rule(i) for i in GOALS[goal]]
    except KeyError:
        raise UnknownRuleError(f"unknown goal '{goal}'; known goals: {', '.join(GOALS)}.") from None


def check_goal(rules: list[RewriteRule], goal: str | None) -> None:
    """Refuse rules whose results only onnxruntime runs unless the goal is onnxruntime: the
    compiler (TVM) cannot take com.microsoft ops."""
    if goal == "ort":
        return
    for r in rules:
        if r.family == ORT_FAMILY:
            raise UnknownRuleError(
                f"rule '{r.id}' makes onnxruntime contrib ops (family '{ORT_FAMILY}'), which only onnxruntime runs; "
                "add --for ort to rewrite for onnxruntime."
            )
