"""Reversible mutation primitives of a Graph: the few ways its wiring changes.

Mixed into `core.model.graph.Graph`. Each primitive changes the onnx_ir graph and returns its
`undo` (a no-argument callable putting back the very objects it took out, at the same places),
so an edit is a short sequence of primitives whose undos run in reverse::

    undos = [graph.replace_all_uses(out, src), graph.remove_node(node)]
    ...
    for undo in reversed(undos):
        undo()

As in torch.fx, `remove_node` refuses a node whose outputs are still read (by a node or as a
graph output): rewire its users first with `replace_all_uses`. `swap_model` replaces the whole
model (what an applied rewrite does) without reaching into the Graph's caches or id counter.
The primitives do not call `Graph.changed()`: whoever applies an edit does, once (History).
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence

import onnx_ir as ir

from ..errors import EditError
from .meta import NODE_ID

__all__ = ["Mutations", "Undo"]

logger = logging.getLogger(__name__)

Undo = Callable[[], None]


def _place(g: ir.Graph, node: ir.Node, after: ir.Node | None) -> None:
    """Insert `node` right after `after` (None: at the front)."""
    if after is not None:
        g.insert_after(after, node)
    elif len(g):
        g.insert_before(g[0], node)
    else:
        g.append(node)


def _label(n: ir.Node) -> str:
    return f"{n.op_type} '{n.name}'" if n.name else n.op_type


class Mutations:
    """The mutation primitives of core.model.graph.Graph (see the module docstring)."""

    model: ir.Model  # provided by Graph

    def replace_all_uses(self, old: ir.Value, new: ir.Value | None, *, graph_outputs: bool = True,
                         except_node: ir.Node | None = None) -> Undo:
        """Every node reading `old` reads `new` instead (None: the input is left unconnected),
        except `except_node`. With `graph_outputs`, a graph output `old` becomes `new` (None:
        it is dropped from the outputs)."""
        g = self.model.graph
        rewired: list[tuple[ir.Node, int]] = []
        for use in list(old.uses()):
            if use.node is except_node:
                continue
            rewired.append((use.node, use.idx))
            use.node.replace_input_with(use.idx, new)
        replaced: list[int] = []
        dropped: list[int] = []
        if graph_outputs:
            for k in reversed(range(len(g.outputs))):
                if g.outputs[k] is old:
                    if new is None:
                        dropped.append(k)
                        g.outputs.pop(k)
                    else:
                        replaced.append(k)
                        g.outputs[k] = new

        def undo() -> None:
            for k in reversed(dropped):
                g.outputs.insert(k, old)
            for k in replaced:
                g.outputs[k] = old
            for node, idx in reversed(rewired):
                node.replace_input_with(idx, old)

        return undo

    def insert_node(self, node: ir.Node, after: ir.Node | None, inputs: Sequence[ir.Value | None] | None = None) -> Undo:
        """Put a detached `node` right after `after` (None: first) and connect its `inputs`
        (default: those it has)."""
        g = self.model.graph
        _place(g, node, after)
        if inputs is not None:
            for k, v in enumerate(inputs):
                node.replace_input_with(k, v)

        def undo() -> None:
            for k in range(len(node.inputs)):
                node.replace_input_with(k, None)
            g.remove(node)

        return undo

    def remove_node(self, node: ir.Node | int) -> Undo:
        """Take out a node nothing reads any more (its inputs are disconnected); refuses, naming
        it, a node whose outputs are still read or are graph outputs."""
        g = self.model.graph
        if isinstance(node, int):
            node = self.node(node).ir  # type: ignore[attr-defined]
        for out in node.outputs:
            if out.uses() or out.is_graph_output():
                readers = [_label(u.node) for u in out.uses()] + (["the graph outputs"] if out.is_graph_output() else [])
                raise EditError(f"cannot remove {_label(node)}: its output '{out.name}' is still read by {', '.join(readers)}.")
        nodes = list(g)
        i = nodes.index(node)
        prev = nodes[i - 1] if i > 0 else None
        inputs = tuple(node.inputs)
        for k in range(len(inputs)):
            node.replace_input_with(k, None)
        g.remove(node)

        def undo() -> None:
            _place(g, node, prev)
            for k, v in enumerate(inputs):
                node.replace_input_with(k, v)

        return undo

    def swap_model(self, model: ir.Model, value_info_names: set[str] | None, shape_problems: Sequence[str]) -> Undo:
        """Replace the whole model (an applied rewrite's result) with its saved-file state; ids
        of new nodes continue after every id the model holds."""
        before = (self.model, self.value_info_names, list(self.shape_problems))  # type: ignore[attr-defined]
        self._set_model(model, value_info_names, shape_problems)

        def undo() -> None:
            self._set_model(*before)

        return undo

    def _set_model(self, model: ir.Model, value_info_names, shape_problems) -> None:
        self.model = model
        self.value_info_names = value_info_names  # type: ignore[attr-defined]
        self.shape_problems = list(shape_problems)  # type: ignore[attr-defined]
        self._cache.clear()  # type: ignore[attr-defined]
        top = max((n.meta.get(NODE_ID, 0) for n in model.graph), default=0)
        nxt = next(self._next_id)  # type: ignore[attr-defined]
        self._next_id = itertools.count(max(nxt, top + 1))
