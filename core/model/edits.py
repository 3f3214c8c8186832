"""Reversible edit commands on a Graph: the only way the workbench changes a model.

Each command is a `core.model.history.Edit`:

* the constructor takes the graph and the edit's arguments, resolves what it names (so the
  `description` shown in Undo/Redo menus is known before it runs: "Delete Conv 'conv1'") and
  raises `EditError` when it names something that does not exist;
* `do` checks everything that could make it fail *before* it touches the graph, so a refused
  edit (EditError, one sentence naming the node or tensor) leaves the graph as it was;
* `undo` puts back the very `onnx_ir` objects it took out, at the same places (node order,
  attribute order, initializer order, graph output order), so after do+undo `Graph.to_bytes()`
  is byte-identical and node ids (kept in each node's `meta`) survive: the canvas keeps its
  selection across undo.

Edits work on the IR through `Graph.model`. They do not call `Graph.changed()`: whoever applies
them (`History.push`, the GUI's undo stack) does, once per applied edit, and then re-runs shape
inference and validation (`core.model.validation.refresh`).

Which edits are refused and which are allowed but flagged: an edit is refused when it cannot be
expressed in a valid ONNX file at all or would leave the graph ambiguous (unknown op or tensor,
duplicate names, a cycle, an attribute of the wrong type, a required attribute missing). Edits
that produce a well-formed but *broken* model (deleting a node whose output is still read,
disconnecting a required input, an attribute value shape inference rejects) are allowed: the
user is usually half-way through a change, and `core.model.validation` lists what is broken.

The op schemas come from `onnx.defs` for the model's own opset imports (`op_spec`,
`available_ops`); attribute values are typed and checked against them (`coerce_attribute`,
`parse_attribute_text`).
"""
from __future__ import annotations

import ast
import functools
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from ..errors import EditError
from .graph import Dim, Graph, Node, dtype_name
from .history import Edit

__all__ = [
    "DeleteNode",
    "InsertNode",
    "SetInput",
    "SetAttribute",
    "RemoveAttribute",
    "RenameNode",
    "RenameTensor",
    "AddGraphOutput",
    "RemoveGraphOutput",
    "SetInputShape",
    "ReplaceInitializer",
    "CompoundEdit",
    "AttributeSpec",
    "OpSpec",
    "op_spec",
    "available_ops",
    "coerce_attribute",
    "parse_attribute_text",
    "format_attribute_value",
    "parse_shape_text",
    "bridge_input_index",
    "node_text",
]

logger = logging.getLogger(__name__)

_ID = "wb.id"
_INFERRED = "wb.inferred"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]*$")


# ---- naming helpers ---------------------------------------------------------------------------


def node_text(n: ir.Node | Node) -> str:
    """How messages and menus name a node: "Conv 'conv1'" (or "Conv #12" when it has no name)."""
    irn = n.ir if isinstance(n, Node) else n
    if irn.name:
        return f"{irn.op_type} '{irn.name}'"
    return f"{irn.op_type} #{irn.meta.get(_ID, '?')}"


def _find_node(graph: Graph, node_id: int) -> ir.Node:
    if not graph.has_node(node_id):
        raise EditError(f"The model has no node with id {node_id} (was it deleted?).")
    return graph.node(node_id).ir


def _find_value(graph: Graph, name: str, what: str = "tensor") -> ir.Value:
    if not name or not graph.has_value(name):
        raise EditError(f"The model has no {what} named '{name}'.")
    return graph.value(name).ir


def _taken_value_names(g: ir.Graph) -> set[str]:
    """Every tensor name the serialized graph mentions, dangling references included."""
    names = {v.name for v in g.inputs if v.name}
    names.update(g.initializers.keys())
    names.update(v.name for v in g.outputs if v.name)
    for n in g:
        names.update(v.name for v in n.outputs if v.name)
        names.update(v.name for v in n.inputs if v is not None and v.name)
    return names


def _unique(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    k = 1
    while f"{base}_{k}" in taken:
        k += 1
    return f"{base}_{k}"


def _known_shape(graph: Graph, v: ir.Value) -> tuple[str, tuple[Dim, ...] | None]:
    w = graph.value(v.name) if v.name and graph.has_value(v.name) else None
    if w is None:
        return "?", None
    return w.dtype, w.shape


def _inferred_type(graph: Graph, v: ir.Value) -> tuple[ir.TypeProtocol | None, ir.Shape | None]:
    """(type, shape) ONNX shape inference gives `v` in the graph as it is now (None, None if unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(graph.to_proto(), check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - an untyped output is flagged by validation
        return None, None
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.name != v.name or not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
            continue
        tt = vi.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = ir.Shape([d.dim_value if d.HasField("dim_value") else ir.SymbolicDim(d.dim_param or None) for d in tt.shape.dim])
        return ir.TensorType(ir.DataType(tt.elem_type)), shape
    return None, None


# ---- node order -------------------------------------------------------------------------------


def _would_cycle(graph: Graph, producer: ir.Node | None, consumer: ir.Node) -> bool:
    """True when feeding a value made by `producer` into `consumer` closes a cycle."""
    if producer is None or producer.graph is not graph.model.graph:
        return False
    if producer is consumer:
        return True
    return producer.meta[_ID] in graph.descendants(consumer.meta[_ID])


def _in_topological_order(g: ir.Graph) -> bool:
    seen: set[int] = set()
    for n in g:
        for v in n.inputs:
            if v is None:
                continue
            p = v.producer()
            if p is not None and p.graph is g and id(p) not in seen:
                return False
        seen.add(id(n))
    return True


def _restore_order(g: ir.Graph, order: list[ir.Node]) -> None:
    """Put the nodes back in `order` (same objects, so names and meta are untouched)."""
    if list(g) == order:
        return
    g.remove(list(g))
    g.extend(order)


def _sort_if_needed(g: ir.Graph) -> list[ir.Node] | None:
    """Restore topological order after a rewiring; returns the previous order when it changed."""
    if _in_topological_order(g):
        return None
    before = list(g)
    g.sort()
    return before


def _insert_at(g: ir.Graph, node: ir.Node, prev: ir.Node | None) -> None:
    """Insert `node` right after `prev` (None: at the front)."""
    if prev is not None:
        g.insert_after(prev, node)
    elif len(g):
        g.insert_before(g[0], node)
    else:
        g.append(node)


# ---- op schemas -------------------------------------------------------------------------------

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


# ---- attribute values -------------------------------------------------------------------------


def _as_int(name: str, x: Any, where: str) -> int:
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)) and float(x).is_integer():
        return int(x)
    raise EditError(f"Attribute '{name}' of {where} takes integers; {x!r} is not one.")


def _as_float(name: str, x: Any, where: str) -> float:
    if isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool):
        v = float(x)
        if np.isfinite(v) or not np.isnan(v):
            return v
    raise EditError(f"Attribute '{name}' of {where} takes numbers; {x!r} is not one.")


def _as_list(name: str, x: Any, where: str) -> list:
    if isinstance(x, np.ndarray):
        return x.reshape(-1).tolist()
    if isinstance(x, (list, tuple)):
        return list(x)
    raise EditError(f"Attribute '{name}' of {where} takes a list; {x!r} is not one.")


def coerce_attribute(name: str, attr_type: ir.AttributeType, value: Any, where: str = "the node") -> ir.Attr:
    """An `ir.Attr` of `attr_type` from a plain Python value, or EditError saying why it does not fit."""
    T = ir.AttributeType
    if attr_type not in _EDITABLE_TYPES:
        raise EditError(f"Attribute '{name}' of {where} is a {attr_type.name.lower()} and cannot be edited here.")
    if attr_type == T.INT:
        return ir.AttrInt64(name, _as_int(name, value, where))
    if attr_type == T.FLOAT:
        return ir.AttrFloat32(name, _as_float(name, value, where))
    if attr_type == T.STRING:
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if not isinstance(value, str):
            raise EditError(f"Attribute '{name}' of {where} takes text; {value!r} is not text.")
        return ir.AttrString(name, value)
    if attr_type == T.INTS:
        return ir.AttrInt64s(name, [_as_int(name, x, where) for x in _as_list(name, value, where)])
    if attr_type == T.FLOATS:
        return ir.AttrFloat32s(name, [_as_float(name, x, where) for x in _as_list(name, value, where)])
    if attr_type == T.STRINGS:
        items = _as_list(name, value, where)
        if not all(isinstance(x, str) for x in items):
            raise EditError(f"Attribute '{name}' of {where} takes a list of texts.")
        return ir.AttrStrings(name, items)
    # TENSOR
    if isinstance(value, ir.TensorProtocol):
        return ir.AttrTensor(name, value)
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        raise EditError(f"Attribute '{name}' of {where} takes a numeric tensor; {value!r} is not one.")
    return ir.AttrTensor(name, ir.Tensor(np.ascontiguousarray(arr)))


def _infer_type(value: Any) -> ir.AttributeType:
    T = ir.AttributeType
    if isinstance(value, (bool, int, np.integer)):
        return T.INT
    if isinstance(value, (float, np.floating)):
        return T.FLOAT
    if isinstance(value, str):
        return T.STRING
    if isinstance(value, np.ndarray):
        return T.TENSOR
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(x, (bool, int, np.integer)) for x in value):
            return T.INTS
        if all(isinstance(x, (int, float, np.integer, np.floating)) for x in value):
            return T.FLOATS
        if all(isinstance(x, str) for x in value):
            return T.STRINGS
    raise EditError(f"Cannot tell the attribute type of {value!r}; give a number, text or a list of them.")


def parse_attribute_text(text: str, attr_type: ir.AttributeType, name: str = "value", like: Any = None) -> Any:
    """Read what a user typed into an attribute field as a value of `attr_type`.

    Lists may be written "1, 2" or "[1, 2]"; tensors as a (nested) list literal, cast to the
    dtype of `like` (the current value) when there is one. Raises EditError with one sentence.
    """
    T = ir.AttributeType
    s = text.strip()
    try:
        if attr_type == T.STRING:
            return text
        if attr_type == T.INT:
            return int(s, 0) if not re.fullmatch(r"[+-]?\d+\.0*", s) else int(float(s))
        if attr_type == T.FLOAT:
            return float(s)
        if attr_type in (T.INTS, T.FLOATS, T.STRINGS):
            inner = s[1:-1] if s.startswith("[") and s.endswith("]") else s
            parts = [p.strip() for p in inner.split(",")] if inner.strip() else []
            if attr_type == T.INTS:
                return [int(p) for p in parts]
            if attr_type == T.FLOATS:
                return [float(p) for p in parts]
            return [p.strip("'\"") for p in parts]
        if attr_type == T.TENSOR:
            lit = ast.literal_eval(s)
            dtype = like.dtype if isinstance(like, np.ndarray) else None
            return np.asarray(lit, dtype=dtype)
    except (ValueError, SyntaxError, TypeError) as e:
        kind = attr_type.name.lower()
        raise EditError(f"'{text}' is not a valid {kind} for attribute '{name}' ({e.__class__.__name__}).") from None
    raise EditError(f"Attribute '{name}' is a {attr_type.name.lower()} and cannot be edited as text.")


def format_attribute_value(value: Any) -> str:
    """The text an attribute field shows; `parse_attribute_text` reads it back."""
    if isinstance(value, np.ndarray):
        return repr(value.tolist())
    if isinstance(value, (list, tuple)):
        return ", ".join(format_attribute_value(x) if not isinstance(x, str) else x for x in value)
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 1e-4 or value == 0 else repr(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def parse_shape_text(text: str) -> list[Dim]:
    """'batch, 3, 224, 224' or '[N, 3, 224, 224]' -> ['batch', 3, 224, 224]; '?' is an unknown dim."""
    s = text.strip()
    if s.startswith("[") and s.endswith("]") or s.startswith("(") and s.endswith(")"):
        s = s[1:-1]
    dims: list[Dim] = []
    for part in (p.strip() for p in s.split(",")) if s.strip() else []:
        if part in ("?", ""):
            dims.append(None)
        elif re.fullmatch(r"\d+", part):
            dims.append(int(part))
        elif _IDENTIFIER.match(part):
            dims.append(part)
        else:
            raise EditError(f"'{part}' is not a dimension: write a size (224), a name (batch) or '?'.")
    return dims


# ---- the edits --------------------------------------------------------------------------------


def bridge_input_index(graph: Graph, node_id: int) -> tuple[int | None, str]:
    """Which input of a node can stand in for its (used) output when the node is deleted.

    Returns (input index, "") or (None, reason). Shapes must allow it: the input has the same
    dtype and the same fully known shape as the output. Prefers non-constant inputs (the data
    path over the weights).
    """
    n = _find_node(graph, node_id)
    used = [o for o in n.outputs if o.uses() or o.is_graph_output()]
    if not used:
        return None, f"{node_text(n)} has no used output to reconnect"
    if len(used) > 1:
        return None, f"{node_text(n)} has {len(used)} used outputs; only a node with one can be bridged"
    out = used[0]
    odt, oshape = _known_shape(graph, out)
    if oshape is None or any(d is None for d in oshape):
        return None, f"the shape of {node_text(n)}'s output '{out.name}' is not known"
    consts = graph.constant_values()
    candidates = []
    for i, v in enumerate(n.inputs):
        if v is None:
            continue
        idt, ishape = _known_shape(graph, v)
        if idt == odt and ishape == oshape:
            candidates.append((v.name in consts, i))
    if not candidates:
        return None, f"no input of {node_text(n)} has the shape and type of its output '{out.name}' ({odt} {list(oshape)})"
    return sorted(candidates)[0][1], ""


class DeleteNode(Edit):
    """Delete a node and its edges. With `bridge`, the readers of its output read its matching
    input instead ("Delete and reconnect", e.g. removing a Relu or a Dropout). Without, its
    readers are left with that input unconnected and graph outputs it produced are dropped, as
    deleting a node does in any node editor; validation flags the readers until they are
    rewired. (Readers are detached rather than left naming a tensor nobody makes, so the IR stays
    consistent for every other tool: clone, rewrites, lowering.)"""

    def __init__(self, graph: Graph, node_id: int, bridge: bool = False):
        self.node_id = node_id
        self.bridge = bridge
        n = _find_node(graph, node_id)
        self.description = f"{'Delete and reconnect' if bridge else 'Delete'} {node_text(n)}"
        self._node: ir.Node | None = None
        self._prev: ir.Node | None = None
        self._inputs: tuple[ir.Value | None, ...] = ()
        self._rewired: list[tuple[ir.Node, int, ir.Value]] = []
        self._outputs_rewired: list[tuple[int, ir.Value]] = []
        self._bridge_index: int | None = None
        self._typed: tuple | None = None
        self._dropped_outputs: list[tuple[int, ir.Value]] = []

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        n = _find_node(graph, self.node_id)
        src = None
        if self.bridge:
            # decided once: a redo must not depend on whether shapes were re-inferred since
            if self._bridge_index is None:
                idx, why = bridge_input_index(graph, self.node_id)
                if idx is None:
                    raise EditError(f"Cannot delete and reconnect {node_text(n)}: {why}.")
                self._bridge_index = idx
            src = n.inputs[self._bridge_index]
            out = next(o for o in n.outputs if o.uses() or o.is_graph_output())
            if out.is_graph_output() and (src.is_graph_output() or src.is_graph_input()):
                raise EditError(
                    f"Cannot delete and reconnect {node_text(n)}: its output '{out.name}' is a graph output "
                    f"and '{src.name}' is already a graph {'output' if src.is_graph_output() else 'input'}."
                )
        nodes = list(g)
        i = nodes.index(n)
        self._node, self._prev = n, nodes[i - 1] if i > 0 else None
        self._inputs = tuple(n.inputs)
        self._rewired, self._outputs_rewired = [], []
        if src is not None:
            for out in n.outputs:
                for use in out.uses():
                    self._rewired.append((use.node, use.idx, out))
                    use.node.replace_input_with(use.idx, src)
                for k, v in enumerate(g.outputs):
                    if v is out:
                        self._outputs_rewired.append((k, out))
                        g.outputs[k] = src
            if self._outputs_rewired and src.type is None:
                # graph outputs must declare a type; the bridge checked both sides agree
                self._typed = (src, src.type, src.shape)
                dt, shape = _known_shape(graph, out)
                src.type = ir.TensorType(out.dtype or ir.DataType.from_numpy(np.dtype(dt)))
                src.shape = ir.Shape(list(shape)) if shape is not None else None
        self._dropped_outputs = []
        if src is None:
            for out in n.outputs:
                for use in out.uses():
                    self._rewired.append((use.node, use.idx, out))
                    use.node.replace_input_with(use.idx, None)
            for k in reversed(range(len(g.outputs))):
                if g.outputs[k].producer() is n:
                    self._dropped_outputs.append((k, g.outputs[k]))
                    g.outputs.pop(k)
        for k in range(len(n.inputs)):
            n.replace_input_with(k, None)
        g.remove(n)

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        n = self._node
        assert n is not None
        _insert_at(g, n, self._prev)
        for k, v in enumerate(self._inputs):
            n.replace_input_with(k, v)
        for k, out in reversed(self._dropped_outputs):
            g.outputs.insert(k, out)
        for k, out in reversed(self._outputs_rewired):
            g.outputs[k] = out
        for consumer, idx, out in reversed(self._rewired):
            consumer.replace_input_with(idx, out)
        if self._typed is not None:
            v, t, shape = self._typed
            v.type, v.shape = t, shape
            self._typed = None


class InsertNode(Edit):
    """Insert a new node of any op the model's opsets define.

    `inputs` name existing tensors ('' for an omitted optional input); `attributes` are plain
    values checked against the op schema (defaults are left implicit, as exporters do).
    With `insert_on=TENSOR`, everything that read TENSOR (nodes and graph outputs) reads the new
    node's first output instead: "insert a Relu after conv1" is
    `InsertNode(g, "Relu", ["conv1_out"], insert_on="conv1_out")`.
    """

    def __init__(
        self,
        graph: Graph,
        op_type: str,
        inputs: Sequence[str],
        attributes: dict[str, Any] | None = None,
        *,
        domain: str = "",
        name: str | None = None,
        num_outputs: int | None = None,
        output_names: Sequence[str] | None = None,
        insert_on: str | None = None,
    ):
        self.op_type = op_type
        self.domain = "" if domain == "ai.onnx" else domain
        self.input_names = list(inputs)
        self.attributes = dict(attributes or {})
        self.name = name
        self.num_outputs = num_outputs
        self.output_names = list(output_names) if output_names is not None else None
        self.insert_on = insert_on
        label = op_type if not self.domain else f"{self.domain}.{op_type}"
        self.description = f"Insert {label}" + (f" '{name}'" if name else "") + (f" after '{insert_on}'" if insert_on else "")
        self._node: ir.Node | None = None
        self._prev: ir.Node | None = None
        self._rewired: list[tuple[ir.Node, int, ir.Value]] = []
        self._outputs_rewired: list[tuple[int, ir.Value]] = []
        self._order: list[ir.Node] | None = None
        self._out_type: tuple | None = None

    def _build(self, graph: Graph) -> ir.Node:
        g = graph.model.graph
        if self.domain not in graph.opset_imports and not (self.domain == "" and "ai.onnx" in graph.opset_imports):
            raise EditError(f"Cannot insert {self.op_type}: the model does not import the domain '{self.domain}'.")
        version = int(graph.opset_imports.get(self.domain, graph.opset_imports.get("ai.onnx", 0)))
        spec = op_spec(self.op_type, self.domain, version)
        label = self.op_type if not self.domain else f"{self.domain}.{self.op_type}"
        if spec is None:
            raise EditError(f"Cannot insert {label}: opset {version} of domain '{self.domain or 'ai.onnx'}' has no such op.")
        node_names = {n.name for n in g if n.name}
        if self.name is not None:
            if not self.name.strip():
                raise EditError(f"Cannot insert {label}: a node name cannot be empty.")
            if self.name in node_names:
                raise EditError(f"Cannot insert {label}: a node named '{self.name}' already exists.")
            name = self.name
        else:
            k = 1
            while f"{self.op_type}_{k}" in node_names:
                k += 1
            name = f"{self.op_type}_{k}"
        where = f"{label} '{name}'"
        n_in = len(self.input_names)
        if n_in < spec.min_input or n_in > spec.max_input:
            rng = f"{spec.min_input}" if spec.min_input == spec.max_input else f"{spec.min_input} to {min(spec.max_input, 99)}"
            raise EditError(f"Cannot insert {where}: it takes {rng} inputs, not {n_in}.")
        values: list[ir.Value | None] = []
        for i, t in enumerate(self.input_names):
            if not t:
                if i < len(spec.inputs) and not spec.inputs[i].optional:
                    raise EditError(f"Cannot insert {where}: its input {spec.input_name(i)} is required.")
                values.append(None)
                continue
            if not graph.has_value(t):
                raise EditError(f"Cannot insert {where}: the model has no tensor named '{t}' for its input {spec.input_name(i)}.")
            values.append(graph.value(t).ir)
        attrs: list[ir.Attr] = []
        for k, v in self.attributes.items():
            a = spec.attributes.get(k)
            if a is None:
                known = ", ".join(spec.attributes) or "none"
                raise EditError(f"Cannot insert {where}: {label} has no attribute '{k}' (it has: {known}).")
            attrs.append(coerce_attribute(k, a.type, v, where))
        for a in spec.attributes.values():
            if a.required and a.name not in self.attributes:
                raise EditError(f"Cannot insert {where}: its attribute '{a.name}' ({a.type_name}) is required.")
        n_out = self.num_outputs if self.num_outputs is not None else (
            len(self.output_names) if self.output_names is not None else max(spec.min_output, 1)
        )
        if n_out < spec.min_output or n_out > spec.max_output:
            raise EditError(f"Cannot insert {where}: it has {spec.min_output} to {spec.max_output} outputs, not {n_out}.")
        taken = _taken_value_names(g)
        if self.output_names is not None:
            if len(self.output_names) != n_out:
                raise EditError(f"Cannot insert {where}: {len(self.output_names)} output names given for {n_out} outputs.")
            out_names = list(self.output_names)
            for o in out_names:
                if not o or o in taken:
                    raise EditError(f"Cannot insert {where}: the output name '{o}' is {'empty' if not o else 'already used'}.")
            if len(set(out_names)) != len(out_names):
                raise EditError(f"Cannot insert {where}: its output names repeat.")
        else:
            out_names = []
            for i in range(n_out):
                o = _unique(f"{name}_out" if n_out == 1 else f"{name}_out{i}", taken)
                taken.add(o)
                out_names.append(o)
        outputs = [ir.Value(name=o) for o in out_names]
        return ir.Node(self.domain, self.op_type, values, attrs, outputs=outputs, name=name)

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        if self._node is None:
            node = self._build(graph)
            # the constructor registered the new node as a user of its inputs; detach until placed
            self._inputs = tuple(node.inputs)
            for k in range(len(node.inputs)):
                node.replace_input_with(k, None)
            self._node = node
        node = self._node
        target: ir.Value | None = None
        if self.insert_on is not None:
            target = _find_value(graph, self.insert_on)
            if target not in self._inputs:
                raise EditError(f"Cannot insert {node_text(node)} after '{self.insert_on}': the new node does not read it.")
            for use in target.uses():
                for v in self._inputs:
                    if v is not None and _would_cycle(graph, v.producer(), use.node):
                        raise EditError(
                            f"Cannot insert {node_text(node)} after '{self.insert_on}': its input '{v.name}' is computed from "
                            f"{node_text(use.node)}, which would then read the new node (a cycle)."
                        )
        # place it right after the last node that produces one of its inputs
        producers = {id(v.producer()) for v in self._inputs if v is not None and v.producer() is not None}
        prev = None
        for n in g:
            if id(n) in producers:
                prev = n
        self._prev = prev
        _insert_at(g, node, prev)
        for k, v in enumerate(self._inputs):
            node.replace_input_with(k, v)
        self._rewired, self._outputs_rewired = [], []
        if target is not None:
            new_out = node.outputs[0]
            for use in target.uses():
                if use.node is node:
                    continue
                self._rewired.append((use.node, use.idx, target))
                use.node.replace_input_with(use.idx, new_out)
            for k, v in enumerate(g.outputs):
                if v is target:
                    self._outputs_rewired.append((k, target))
                    g.outputs[k] = new_out
        self._order = _sort_if_needed(g)
        if self._outputs_rewired:
            # the new node's output is now a graph output, which must declare its type
            if self._out_type is None:
                self._out_type = _inferred_type(graph, new_out)
            new_out.type, new_out.shape = self._out_type

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        node = self._node
        assert node is not None
        if self._order is not None:
            _restore_order(g, self._order)
        for k, target in reversed(self._outputs_rewired):
            g.outputs[k] = target
        for consumer, idx, target in reversed(self._rewired):
            consumer.replace_input_with(idx, target)
        if self._outputs_rewired:
            node.outputs[0].type, node.outputs[0].shape = None, None
        for k in range(len(node.inputs)):
            node.replace_input_with(k, None)
        g.remove(node)

    @property
    def node_id(self) -> int | None:
        """The new node's id once it has been applied (and `Graph.changed()` gave it one)."""
        return None if self._node is None else self._node.meta.get(_ID)


class SetInput(Edit):
    """Connect tensor `tensor` to input `index` of a node (index == number of inputs appends an
    optional input), or disconnect it with `tensor=None`. Refused if it would close a cycle;
    nodes are re-sorted if the new edge runs against the file's node order."""

    def __init__(self, graph: Graph, node_id: int, index: int, tensor: str | None):
        self.node_id, self.index, self.tensor = node_id, index, tensor
        n = _find_node(graph, node_id)
        spec = _node_spec(graph, n)
        slot = spec.input_name(index) if spec else f"input {index}"
        self._slot = slot
        if tensor is None:
            self.description = f"Disconnect {slot} of {node_text(n)}"
        else:
            self.description = f"Connect '{tensor}' to {slot} of {node_text(n)}"
        self._old: ir.Value | None = None
        self._old_len = 0
        self._order: list[ir.Node] | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        n = _find_node(graph, self.node_id)
        spec = _node_spec(graph, n)
        count = len(n.inputs)
        max_in = spec.max_input if spec is not None else count + 1
        if self.index < 0 or self.index > count or self.index >= max_in:
            raise EditError(f"{node_text(n)} has no input {self.index} (it takes at most {min(max_in, count + 1)}).")
        value = None
        if self.tensor is not None:
            value = _find_value(graph, self.tensor)
            if _would_cycle(graph, value.producer(), n):
                raise EditError(f"Connecting '{self.tensor}' to {node_text(n)} would make a cycle: '{self.tensor}' is computed from it.")
            if self.index < count and n.inputs[self.index] is value:
                raise EditError(f"'{self.tensor}' is already connected to {self._slot} of {node_text(n)}.")
        elif self.index >= count or n.inputs[self.index] is None:
            raise EditError(f"{self._slot} of {node_text(n)} is not connected.")
        self._old_len = count
        self._old = n.inputs[self.index] if self.index < count else None
        if self.index == count:
            n.resize_inputs(count + 1)
        n.replace_input_with(self.index, value)
        if value is None:
            # trailing omitted inputs are dropped, as ONNX writers do
            size = len(n.inputs)
            while size and n.inputs[size - 1] is None:
                size -= 1
            n.resize_inputs(size)
        self._order = _sort_if_needed(g)

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        n = _find_node(graph, self.node_id)
        if self._order is not None:
            _restore_order(g, self._order)
        if len(n.inputs) < self._old_len:
            n.resize_inputs(self._old_len)
        if self.index < len(n.inputs):
            n.replace_input_with(self.index, self._old)
        n.resize_inputs(self._old_len)


class _AttributeEdit(Edit):
    def __init__(self, graph: Graph, node_id: int):
        self.node_id = node_id
        self._before: list[tuple[str, ir.Attr]] | None = None

    def _save(self, n: ir.Node) -> None:
        self._before = list(n.attributes.items())

    def undo(self, graph: Graph) -> None:
        n = _find_node(graph, self.node_id)
        assert self._before is not None
        n.attributes.clear()
        for k, a in self._before:
            n.attributes[k] = a


class SetAttribute(_AttributeEdit):
    """Set (or add) an attribute, typed by the op schema (or by the current value for ops ONNX
    does not define). A value of the wrong type, or a name the op does not have, is refused."""

    def __init__(self, graph: Graph, node_id: int, name: str, value: Any):
        super().__init__(graph, node_id)
        self.name, self.value = name, value
        n = _find_node(graph, node_id)
        shown = format_attribute_value(value)
        if isinstance(value, (list, tuple)):
            shown = f"[{shown}]"
        if len(shown) > 40:
            shown = shown[:37] + "..."
        self.description = f"Set {self.name} = {shown} on {node_text(n)}"

    def do(self, graph: Graph) -> None:
        n = _find_node(graph, self.node_id)
        where = node_text(n)
        spec = _node_spec(graph, n)
        if spec is not None:
            a = spec.attributes.get(self.name)
            if a is None:
                known = ", ".join(spec.attributes) or "none"
                raise EditError(f"{where} has no attribute '{self.name}' (its op has: {known}).")
            attr_type = a.type
        elif self.name in n.attributes:
            attr_type = n.attributes[self.name].type
        else:
            attr_type = _infer_type(self.value)
        attr = coerce_attribute(self.name, attr_type, self.value, where)
        old = n.attributes.get(self.name)
        if old is not None and old.type == attr.type and _same_attr(old, attr):
            raise EditError(f"Attribute '{self.name}' of {where} already has that value.")
        self._save(n)
        n.attributes[self.name] = attr


def _same_attr(a: ir.Attr, b: ir.Attr) -> bool:
    va, vb = a.value, b.value
    if isinstance(va, ir.TensorProtocol) or isinstance(vb, ir.TensorProtocol):
        try:
            x, y = va.numpy(), vb.numpy()
            return x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))
        except Exception:  # noqa: BLE001
            return False
    if isinstance(va, Sequence) and not isinstance(va, str):
        return list(va) == list(vb)
    return va == vb


class RemoveAttribute(_AttributeEdit):
    """Remove an attribute (the op's default applies again). Required attributes stay."""

    def __init__(self, graph: Graph, node_id: int, name: str):
        super().__init__(graph, node_id)
        self.name = name
        n = _find_node(graph, node_id)
        self.description = f"Remove {name} from {node_text(n)}"

    def do(self, graph: Graph) -> None:
        n = _find_node(graph, self.node_id)
        if self.name not in n.attributes:
            raise EditError(f"{node_text(n)} has no attribute '{self.name}' to remove.")
        spec = _node_spec(graph, n)
        if spec is not None and self.name in spec.attributes and spec.attributes[self.name].required:
            raise EditError(f"Attribute '{self.name}' of {node_text(n)} is required by {n.op_type} and cannot be removed.")
        self._save(n)
        del n.attributes[self.name]


class RenameNode(Edit):
    """Rename a node; node names must stay unique."""

    def __init__(self, graph: Graph, node_id: int, new_name: str):
        self.node_id, self.new_name = node_id, new_name
        n = _find_node(graph, node_id)
        self.description = f"Rename {node_text(n)} to '{new_name}'"
        self._old: str | None = None

    def do(self, graph: Graph) -> None:
        n = _find_node(graph, self.node_id)
        new = self.new_name
        if not new or not new.strip():
            raise EditError(f"Cannot rename {node_text(n)}: a node name cannot be empty.")
        if new == n.name:
            raise EditError(f"{node_text(n)} is already named '{new}'.")
        if any(m.name == new for m in graph.model.graph):
            raise EditError(f"Cannot rename {node_text(n)} to '{new}': another node has that name.")
        self._old = n.name
        n.name = new

    def undo(self, graph: Graph) -> None:
        n = _find_node(graph, self.node_id)
        n.name = self._old


class RenameTensor(Edit):
    """Rename a tensor everywhere: producers, consumers (subgraphs included, they share the
    IR value), graph inputs/outputs, initializers and the file's value_info."""

    def __init__(self, graph: Graph, old: str, new: str):
        self.old, self.new = old, new
        _find_value(graph, old)
        self.description = f"Rename tensor '{old}' to '{new}'"
        self._value: ir.Value | None = None
        self._init_order: list[ir.Value] | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        v = _find_value(graph, self.old)
        new = self.new
        if not new or not new.strip():
            raise EditError(f"Cannot rename tensor '{self.old}': a tensor name cannot be empty.")
        if new in _taken_value_names(g):
            raise EditError(f"Cannot rename tensor '{self.old}' to '{new}': that name is already used.")
        self._value = v
        self._init_order = list(g.initializers.values()) if v.is_initializer() else None
        v.name = new
        if self._init_order is not None:
            g.initializers.data = {x.name: x for x in self._init_order}  # keep the file's order
        if graph.value_info_names is not None and self.old in graph.value_info_names:
            graph.value_info_names.discard(self.old)
            graph.value_info_names.add(new)

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        v = self._value
        assert v is not None
        v.name = self.old
        if self._init_order is not None:
            g.initializers.data = {x.name: x for x in self._init_order}
        if graph.value_info_names is not None and self.new in graph.value_info_names:
            graph.value_info_names.discard(self.new)
            graph.value_info_names.add(self.old)


class AddGraphOutput(Edit):
    """Make a tensor a graph output (its inferred type is written down, as outputs need one)."""

    def __init__(self, graph: Graph, tensor: str):
        self.tensor = tensor
        _find_value(graph, tensor)
        self.description = f"Add graph output '{tensor}'"
        self._plan: tuple | None = None
        self._value: ir.Value | None = None
        self._old_type = None
        self._old_shape = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        v = _find_value(graph, self.tensor)
        if v.is_graph_output():
            raise EditError(f"'{self.tensor}' is already a graph output.")
        if self._plan is None:
            dtype = v.dtype or v.meta.get(_INFERRED, (None, None))[0]
            if dtype is None:
                raise EditError(f"Cannot make '{self.tensor}' a graph output: its type is unknown (shape inference could not tell).")
            inferred = v.meta.get(_INFERRED, (None, None))[1]
            new_type = ir.TensorType(dtype) if v.type is None else v.type
            new_shape = ir.Shape(list(inferred)) if v.shape is None and v.type is None and inferred is not None else v.shape
            self._plan = (new_type, new_shape)
        self._value, self._old_type, self._old_shape = v, v.type, v.shape
        v.type, v.shape = self._plan
        g.outputs.append(v)

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        v = self._value
        assert v is not None and g.outputs[-1] is v
        g.outputs.pop()
        v.type, v.shape = self._old_type, self._old_shape


class RemoveGraphOutput(Edit):
    """Stop exposing a tensor as a graph output (the model keeps at least one output)."""

    def __init__(self, graph: Graph, tensor: str):
        self.tensor = tensor
        self.description = f"Remove graph output '{tensor}'"
        self._index = -1
        self._value: ir.Value | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        idx = next((i for i, v in enumerate(g.outputs) if v.name == self.tensor), None)
        if idx is None:
            raise EditError(f"'{self.tensor}' is not a graph output.")
        if len(g.outputs) == 1:
            raise EditError(f"Cannot remove '{self.tensor}': it is the model's only output.")
        self._index, self._value = idx, g.outputs[idx]
        g.outputs.pop(idx)

    def undo(self, graph: Graph) -> None:
        assert self._value is not None
        graph.model.graph.outputs.insert(self._index, self._value)


class SetInputShape(Edit):
    """Change a graph input's shape (sizes, symbolic names such as 'batch', '?' for unknown).

    With `refresh` (the default), shapes the file declares further down (value_info, graph
    outputs) are re-inferred from the new input shape, so the saved model does not carry stale
    declarations (a batch of 1 written on the outputs of a model whose batch is now 'N').
    """

    def __init__(self, graph: Graph, input_name: str, dims: Sequence[Dim], refresh: bool = True):
        self.input_name, self.dims, self.refresh = input_name, list(dims), refresh
        shown = ", ".join("?" if d is None else str(d) for d in self.dims)
        self.description = f"Set shape of input '{input_name}' to [{shown}]"
        self._changed: list[tuple[ir.Value, ir.Shape | None]] = []
        self._updates: list[tuple[ir.Value, ir.Shape | None]] | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        v = next((x for x in g.inputs if x.name == self.input_name and not x.is_initializer()), None)
        if v is None:
            raise EditError(f"The model has no graph input named '{self.input_name}'.")
        for d in self.dims:
            if isinstance(d, bool) or not (d is None or (isinstance(d, (int, np.integer)) and d >= 0) or (isinstance(d, str) and _IDENTIFIER.match(d))):
                raise EditError(f"Cannot set the shape of '{self.input_name}': {d!r} is not a size, a name or '?'.")
        new_shape = ir.Shape([int(d) if isinstance(d, (int, np.integer)) else (ir.SymbolicDim(d)) for d in self.dims])
        if v.shape is not None and _dims_of(v.shape) == tuple(self.dims):
            raise EditError(f"Input '{self.input_name}' already has the shape {list(self.dims)}.")
        if self._updates is None:
            updates: list[tuple[ir.Value, ir.Shape | None]] = [(v, new_shape)]
            if self.refresh:
                updates += _reinferred_declared_shapes(graph, v, new_shape)
            self._updates = updates
        updates = self._updates
        self._changed = [(x, x.shape) for x, _ in updates]
        for x, s in updates:
            x.shape = s

    def undo(self, graph: Graph) -> None:
        for x, s in reversed(self._changed):
            x.shape = s


def _dims_of(shape: ir.Shape) -> tuple[Dim, ...]:
    return tuple(d if isinstance(d, int) else getattr(d, "value", None) for d in shape)


def _reinferred_declared_shapes(graph: Graph, changed: ir.Value, new_shape: ir.Shape) -> list[tuple[ir.Value, ir.Shape | None]]:
    """Declared shapes of node outputs, re-inferred as they would be with `changed` at `new_shape`."""
    g = graph.model.graph
    declared = [o for n in g for o in n.outputs if o.name and o.shape is not None]
    if not declared:
        return []
    proto = graph.to_proto()
    for vi in proto.graph.input:
        if vi.name == changed.name:
            vi.type.tensor_type.ClearField("shape")
            shp = vi.type.tensor_type.shape
            for d in new_shape:
                dim = shp.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif getattr(d, "value", None) is not None:
                    dim.dim_param = str(d.value)
    names = {o.name for o in declared}
    for vi in list(proto.graph.value_info) + list(proto.graph.output):
        if vi.name in names:
            vi.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001 - the edit still applies; validation reports the failure
        logger.info("re-inferring shapes after an input shape change failed: %s", e)
        return []
    found: dict[str, ir.Shape | None] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            found[vi.name] = None
            continue
        dims: list[int | ir.SymbolicDim] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            else:
                dims.append(ir.SymbolicDim(d.dim_param if d.HasField("dim_param") else None))
        found[vi.name] = ir.Shape(dims)
    out = []
    for o in declared:
        s = found.get(o.name)
        if o.name in found and (s is None or _dims_of(s) != _dims_of(o.shape)):
            out.append((o, s))
    return out


def _load_npy(path: str | os.PathLike) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise EditError(f"{p}: no such file.")
    try:
        arr = np.load(p, allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e).lower():
            raise EditError(f"{p} holds Python objects (pickled data), which the workbench never loads; save a plain numeric array.") from None
        raise EditError(f"{p} is not a .npy array file ({e}).") from None
    except Exception as e:  # noqa: BLE001 - numpy raises several types on malformed headers
        raise EditError(f"{p} is not a .npy array file ({e.__class__.__name__}: {e}).") from None
    if not isinstance(arr, np.ndarray):
        raise EditError(f"{p} is an .npz archive, not a single .npy array.")
    return arr


class ReplaceInitializer(Edit):
    """Replace a weight's data from a `.npy` file (read with allow_pickle=False) or an array.

    The dtype must match (a float64 array for a float32 weight is refused: cast it first); a
    different shape is allowed, and shape inference flags the consumers it breaks.
    """

    def __init__(self, graph: Graph, name: str, source: str | os.PathLike | np.ndarray):
        self.name = name
        v = _find_value(graph, name, "initializer")
        if not v.is_initializer():
            raise EditError(f"Tensor '{name}' is not an initializer (it is computed by a node), so its data cannot be replaced.")
        if isinstance(source, (np.ndarray, np.generic)):
            self.array, origin = np.asarray(source), "an array"
        else:
            self.array, origin = _load_npy(source), Path(source).name
        self.description = f"Replace initializer '{name}' from {origin}"
        self._value: ir.Value | None = None
        self._old_tensor = None
        self._old_shape: ir.Shape | None = None

    def do(self, graph: Graph) -> None:
        v = _find_value(graph, self.name, "initializer")
        old = v.const_value
        want = v.dtype or (old.dtype if old is not None else None)
        arr = self.array
        try:
            have = ir.DataType.from_numpy(arr.dtype)
        except Exception:  # noqa: BLE001
            raise EditError(f"Cannot replace '{self.name}': arrays of dtype {arr.dtype} have no ONNX type.") from None
        if want is not None and have != want:
            raise EditError(f"Cannot replace '{self.name}': it holds {dtype_name(want)} and the array is {arr.dtype.name}; cast it first.")
        self._value, self._old_tensor, self._old_shape = v, old, v.shape
        v.const_value = ir.Tensor(np.ascontiguousarray(arr), name=self.name)
        if v.shape is not None or v.is_graph_input():
            v.shape = ir.Shape(list(arr.shape))

    def undo(self, graph: Graph) -> None:
        v = self._value
        assert v is not None
        v.const_value = self._old_tensor
        v.shape = self._old_shape


class CompoundEdit(Edit):
    """Several edits as one undo step (e.g. deleting a selection). All apply or none does."""

    def __init__(self, description: str, edits: Iterable[Edit]):
        self.description = description
        self.edits = list(edits)

    def do(self, graph: Graph) -> None:
        done: list[Edit] = []
        try:
            for e in self.edits:
                e.do(graph)
                graph.changed()  # later edits look nodes up by id, new nodes need theirs
                done.append(e)
        except Exception:
            for e in reversed(done):
                e.undo(graph)
                graph.changed()
            raise

    def undo(self, graph: Graph) -> None:
        for e in reversed(self.edits):
            e.undo(graph)
            graph.changed()
