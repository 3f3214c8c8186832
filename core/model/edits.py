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

The op schemas come from `onnx.defs` for the model's own opset imports (core.model.op_schema:
`op_spec`, `available_ops`); attribute values are typed and checked against them
(core.model.attributes: `coerce_attribute`, `parse_attribute_text`). The edits of the model's
boundary (tensor names, graph outputs, input shapes, weights) are in core.model.boundary_edits;
this module re-exports all of them, so `core.model.edits` stays the one place to import edits from.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from ..errors import EditError
from .attributes import _infer_type, coerce_attribute, format_attribute_value, parse_attribute_text, parse_shape_text
from .boundary_edits import AddGraphOutput, RemoveGraphOutput, RenameTensor, ReplaceInitializer, SetInputShape
from .edit_support import (
    _find_node,
    _find_value,
    _inferred_type,
    _known_shape,
    _restore_order,
    _sort_if_needed,
    _taken_value_names,
    _unique,
    _would_cycle,
    node_text,
)
from .graph import NODE_ID as _ID
from .graph import Graph
from .history import Edit
from .op_schema import AttributeSpec, OpSpec, _node_spec, available_ops, op_spec

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
        self._undo: list = []  # the Graph primitives' undos, in the order they ran
        self._bridge_index: int | None = None
        self._typed: tuple | None = None

    def do(self, graph: Graph) -> None:
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
        # readers of its outputs read the bridged input (or nothing; graph outputs it made are
        # dropped), then the node, read by nobody, goes
        became_output = src is not None and any(o.is_graph_output() for o in n.outputs)
        self._undo = [graph.replace_all_uses(out, src) for out in n.outputs]
        if became_output and src.type is None:
            # graph outputs must declare a type; the bridge checked both sides agree
            self._typed = (src, src.type, src.shape)
            dt, shape = _known_shape(graph, out)
            src.type = ir.TensorType(out.dtype or ir.DataType.from_numpy(np.dtype(dt)))
            src.shape = ir.Shape(list(shape)) if shape is not None else None
        self._undo.append(graph.remove_node(n))

    def undo(self, graph: Graph) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []
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
        self._undo: list = []  # the Graph primitives' undos, in the order they ran
        self._became_output = False
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
        self._undo = [graph.insert_node(node, prev, self._inputs)]
        self._became_output = target is not None and target.is_graph_output()
        if target is not None:
            new_out = node.outputs[0]
            self._undo.append(graph.replace_all_uses(target, new_out, except_node=node))
        self._order = _sort_if_needed(g)
        if self._became_output:
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
        if self._became_output:
            node.outputs[0].type, node.outputs[0].shape = None, None
        for undo in reversed(self._undo):
            undo()
        self._undo = []

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
