"""ONNX op schemas for the model's own opset imports: which ops can be inserted, their inputs,
outputs and attributes (types, required, defaults).

Read from `onnx.defs` (cached per domain and version), so the Add Node dialog, the inspector and
InsertNode all see what the model's opsets define, not what the newest ONNX has.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import onnx
import onnx_ir as ir

from .graph import Graph

__all__ = ["AttributeSpec", "FormalParameter", "OpSpec", "op_spec", "available_ops"]

logger = logging.getLogger(__name__)


_ONNX_DOMAINS = {"", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training"}


_EDITABLE_TYPES = {
    ir.AttributeType.INT,
    ir.AttributeType.FLOAT,
    ir.AttributeType.STRING,
    ir.AttributeType.INTS,
    ir.AttributeType.FLOATS,
    ir.AttributeType.STRINGS,
    ir.AttributeType.TENSOR,
}


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute of an op schema: its type, whether it is required, its default."""

    name: str
    type: ir.AttributeType
    required: bool
    default: Any = None  # plain Python value; None when the schema has no default
    description: str = ""

    @property
    def type_name(self) -> str:
        return self.type.name.lower()


@dataclass(frozen=True)
class FormalParameter:
    name: str
    optional: bool
    variadic: bool
    type_str: str = ""
    description: str = ""


@dataclass(frozen=True)
class OpSpec:
    """An operator as the model's opset defines it (from onnx.defs)."""

    op_type: str
    domain: str
    since_version: int
    inputs: tuple[FormalParameter, ...]
    outputs: tuple[FormalParameter, ...]
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    attributes: dict[str, AttributeSpec] = field(default_factory=dict)
    doc: str = ""

    @property
    def qualified_name(self) -> str:
        return self.op_type if not self.domain else f"{self.domain}.{self.op_type}"

    def input_name(self, index: int) -> str:
        if index < len(self.inputs):
            return self.inputs[index].name
        if self.inputs and self.inputs[-1].variadic:
            return f"{self.inputs[-1].name}[{index - len(self.inputs) + 1}]"
        return f"input {index}"


def _default_value(proto: onnx.AttributeProto) -> Any:
    if not proto.type:
        return None
    v = onnx.helper.get_attribute_value(proto)
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    if isinstance(v, onnx.TensorProto):
        return onnx.numpy_helper.to_array(v)
    return v


def _spec_from_schema(s: onnx.defs.OpSchema) -> OpSpec:
    opt = onnx.defs.OpSchema.FormalParameterOption

    def params(ps) -> tuple[FormalParameter, ...]:
        return tuple(
            FormalParameter(p.name, p.option == opt.Optional, p.option == opt.Variadic, p.type_str, p.description.strip())
            for p in ps
        )

    attrs = {
        name: AttributeSpec(name, ir.AttributeType(int(a.type)), bool(a.required), _default_value(a.default_value), a.description.strip())
        for name, a in s.attributes.items()
    }
    return OpSpec(
        op_type=s.name,
        domain=s.domain,
        since_version=s.since_version,
        inputs=params(s.inputs),
        outputs=params(s.outputs),
        min_input=s.min_input,
        max_input=s.max_input,
        min_output=s.min_output,
        max_output=s.max_output,
        attributes=attrs,
        doc=(s.doc or "").strip(),
    )


@functools.lru_cache(maxsize=4096)
def op_spec(op_type: str, domain: str = "", opset: int | None = None) -> OpSpec | None:
    """The schema of `op_type` as of `opset` (None: the newest), or None when ONNX does not know it."""
    domain = "" if domain == "ai.onnx" else domain
    try:
        if opset is None:
            s = onnx.defs.get_schema(op_type, domain)
        else:
            s = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    return _spec_from_schema(s)


@functools.lru_cache(maxsize=64)
def _ops_of(domain: str, version: int) -> tuple[OpSpec, ...]:
    latest: dict[str, onnx.defs.OpSchema] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain != domain or s.since_version > version:
            continue
        cur = latest.get(s.name)
        if cur is None or s.since_version > cur.since_version:
            latest[s.name] = s
    return tuple(_spec_from_schema(s) for name, s in sorted(latest.items()) if not s.deprecated)


def available_ops(graph: Graph) -> list[OpSpec]:
    """Every op the model's opset imports define (ONNX-known domains only), sorted by name."""
    out: list[OpSpec] = []
    for domain, version in sorted(graph.opset_imports.items()):
        d = "" if domain == "ai.onnx" else domain
        if d in _ONNX_DOMAINS:
            out.extend(_ops_of(d, int(version)))
    return sorted(out, key=lambda s: (s.op_type.lower(), s.domain))


def _node_spec(graph: Graph, n: ir.Node) -> OpSpec | None:
    domain = n.domain or ""
    version = graph.opset_imports.get(domain, graph.opset_imports.get("ai.onnx") if domain == "" else None)
    if version is None:
        return None
    return op_spec(n.op_type, domain, int(version))
