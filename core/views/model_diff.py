"""What differs between two models above their nodes: the facts a runtime or a converter reads first.

Two models with the same nodes can still behave differently: another opset changes what an op
means, another IR version what a loader accepts, another input dtype or shape what a caller must
feed. `model_changes` lists each such difference once, in this order:

1. IR version, opset imports (per domain; '' and 'ai.onnx' are one domain), producer name and version;
2. model metadata, then graph metadata (metadata_props, per key);
3. graph inputs, then graph outputs, matched by name: element type and shape (symbolic dims by
   their names), one present on one side only, and the order when both have the same names.

`core.views.diff.diff_graphs` attaches the list to its GraphDiff, so "identical" means these agree too.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["ModelChange", "model_changes"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelChange:
    """One model-level difference: `field` ('ir_version', 'opset', 'producer_name', 'producer_version',
    'metadata', 'graph_metadata', 'input', 'output', 'input_order', 'output_order'), `key` (the
    domain, metadata key or tensor name; '' where there is none), and its value in A and in B
    (None where that side lacks it)."""

    field: str
    key: str
    a: int | str | None
    b: int | str | None

    @property
    def text(self) -> str:
        """One line, e.g. "opset ai.onnx 17 → 13", "input 'x' float32 [1, 3] → float16 [1, 3]"."""
        label = _LABELS[self.field] + (f" '{self.key}'" if self.field in _QUOTED else f" {self.key}" if self.key else "")
        if self.a is None:
            return f"{label} {_shown(self.b)} only in B"
        if self.b is None:
            return f"{label} {_shown(self.a)} only in A"
        return f"{label} {_shown(self.a)} → {_shown(self.b)}"

    def to_json(self) -> dict:
        return {"field": self.field, "key": self.key, "a": self.a, "b": self.b, "what": self.text}


_LABELS = {
    "ir_version": "IR version", "opset": "opset", "producer_name": "producer name", "producer_version": "producer version",
    "metadata": "metadata", "graph_metadata": "graph metadata", "input": "input", "output": "output",
    "input_order": "input order", "output_order": "output order",
}
_QUOTED = {"metadata", "graph_metadata", "input", "output"}


def model_changes(a, b) -> list[ModelChange]:
    """The model-level differences between two `core.model.graph.Graph`s (empty when they agree)."""
    out: list[ModelChange] = []

    def keyed(field: str, va: dict, vb: dict) -> None:
        for k in list(va) + [k for k in vb if k not in va]:
            if va.get(k) != vb.get(k):
                out.append(ModelChange(field, k, va.get(k), vb.get(k)))

    if a.ir_version != b.ir_version:
        out.append(ModelChange("ir_version", "", a.ir_version, b.ir_version))
    keyed("opset", _opsets(a), _opsets(b))
    for field in ("producer_name", "producer_version"):
        va, vb = getattr(a.model, field) or "", getattr(b.model, field) or ""
        if va != vb:
            out.append(ModelChange(field, "", va, vb))
    keyed("metadata", dict(a.model.metadata_props), dict(b.model.metadata_props))
    keyed("graph_metadata", dict(a.ir_graph.metadata_props), dict(b.ir_graph.metadata_props))
    for field, va, vb in (("input", a.inputs, b.inputs), ("output", a.outputs, b.outputs)):
        ta, tb = {v.name: _tensor_text(v) for v in va}, {v.name: _tensor_text(v) for v in vb}
        keyed(field, ta, tb)
        order_a, order_b = [v.name for v in va], [v.name for v in vb]
        if set(order_a) == set(order_b) and order_a != order_b:  # callers that pass by position notice
            out.append(ModelChange(f"{field}_order", "", ", ".join(order_a), ", ".join(order_b)))
    if out:
        logger.debug("model-level differences: %s", "; ".join(c.text for c in out))
    return out


def _shown(v: int | str) -> str:
    return '""' if v == "" else str(v)


def _opsets(g) -> dict[str, int]:
    return {("ai.onnx" if d in ("", "ai.onnx") else d): int(v) for d, v in g.opset_imports.items()}


def _tensor_text(v) -> str:
    """Element type and shape as declared: "float32 [N, 3, 224, 224]"; "?" where unknown."""
    return f"{v.dtype} {v.shape_text}"
