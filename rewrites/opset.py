"""Opset steps: take the whole model to a newer ONNX opset, so rules whose results are newer ops
(RMSNormalization and RotaryEmbedding at 23) can apply. One match, at the model's last node."""
from __future__ import annotations

import logging

import onnx_ir as ir

from core.model.graph import NODE_ID
from core.rewrite import Attempt, ConditionFailed, RewriteRule, RuleContext

__all__ = ["UpgradeOpset"]

logger = logging.getLogger(__name__)


class UpgradeOpset(RewriteRule):
    """The model, converted to opset 23 by onnx's version converter.

    Node ids and metadata (torch's name scopes) are kept when the converter keeps the node list
    (same op types in the same order), which it does for models at opset 18 and later; older ones get new nodes where an op's
    signature changed (ReduceMean's axes became an input at 18).

    Conditions:
    1. the model imports an opset below 23;
    2. onnx's version converter can convert every node.
    """

    id = "upgrade-opset"
    family = "opset"
    description = "convert the whole model to ONNX opset 23 (onnx's version converter), for the opset-23 fusions"
    conditions = ("the model imports an opset below 23", "onnx's version converter converts every node")
    target = 23

    def candidates(self, graph):
        nodes = list(graph.model.graph)
        if nodes:
            yield nodes[-1]

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        nodes = list(ctx.graph.model.graph)
        if not nodes or node is not nodes[-1]:
            return Attempt(False, [], f"{self.id} rewrites the whole model; its one match is at the last node.", 0)
        if ctx.opset >= self.target:
            return Attempt(False, [node], f"the model already imports opset {ctx.opset}.", 2)
        return Attempt(True, [node], "", 3)

    def summary(self, attempt: Attempt) -> str:
        return f"the whole model, opset {_opset_of(attempt)} -> {self.target}"

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        from onnx import version_converter

        graph = ctx.graph
        before = list(graph.model.graph)
        try:
            converted = version_converter.convert_version(graph.to_proto(), self.target)
        except Exception as e:  # noqa: BLE001 - the converter's own words, first line
            line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ConditionFailed(f"onnx's version converter cannot take this model from opset {ctx.opset} to {self.target}: {line}") from None
        model = ir.serde.deserialize_model(converted)
        after = list(model.graph)
        if [n.op_type for n in before] == [n.op_type for n in after]:
            for old, new in zip(before, after):
                new.meta[NODE_ID] = old.meta[NODE_ID]
                for key, value in old.metadata_props.items():  # the converter drops them (torch's name scopes)
                    new.metadata_props.setdefault(key, value)
        graph.swap_model(model, graph.value_info_names, graph.shape_problems)
        graph.infer_shapes()
        return [n for n in after if NODE_ID not in n.meta]


def _opset_of(attempt: Attempt) -> int:
    node = attempt.nodes[0]
    return node.graph.opset_imports.get("", 0) if node.graph is not None else 0
