"""Clean-up: remove what computes nothing useful (dead code, identities, reshape chains)."""
from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from core.rewrite import Attempt, RewriteRule, RuleContext, fail, node_label, static_shape
from core.rewrite.rule import splice

__all__ = ["EliminateDeadCode", "EliminateIdentity", "CollapseReshapes"]

logger = logging.getLogger(__name__)

_RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def _used(v: ir.Value, graph: ir.Graph) -> bool:
    return bool(v.uses()) or v.is_graph_output()


class EliminateDeadCode(RewriteRule):
    """Remove nodes whose results reach no graph output.

    A match is a dead node none of whose outputs is used; the nodes feeding only it go too.

    Conditions:
    1. no output of the node is a graph output;
    2. no output is read by another node.
    """

    id = "eliminate-dead-code"
    family = "cleanup"
    description = "remove nodes whose results reach no graph output"
    conditions = ("no output is a graph output", "no output is read by another node")
    span = 1

    def candidates(self, graph):
        g = graph.model.graph
        for n in reversed(list(g)):
            if n.outputs and not any(_used(o, g) for o in n.outputs):
                yield n

    def _feeders(self, node: ir.Node) -> list[ir.Node]:
        """The node and the nodes that only feed it (transitively), root first."""
        dead = [node]
        dead_ids = {id(node)}
        frontier = [node]
        while frontier:
            nxt = []
            for n in frontier:
                for i in n.inputs:
                    p = i.producer() if i is not None else None
                    if p is None or id(p) in dead_ids or p.graph is not node.graph:
                        continue
                    if all(not o.is_graph_output() and all(id(u.node) in dead_ids for u in o.uses()) for o in p.outputs):
                        dead_ids.add(id(p))
                        dead.append(p)
                        nxt.append(p)
            frontier = nxt
        return dead

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        label = node_label(node)
        for o in node.outputs:
            if o.is_graph_output():
                return Attempt(False, [node], f"{label} computes graph output '{o.name}'.", 1)
        for o in node.outputs:
            users = [u.node for u in o.uses()]
            if users:
                return Attempt(False, [node], f"output '{o.name}' of {label} is read by {node_label(users[0])}" + (f" and {len(users) - 1} more" if len(users) > 1 else "") + ".", 1)
        if not node.outputs:
            return Attempt(False, [node], f"{label} has no outputs.", 1)
        return Attempt(True, self._feeders(node), "", 3)

    def claimed(self, attempt: Attempt) -> list[ir.Node]:
        return attempt.nodes

    def summary(self, attempt: Attempt) -> str:
        extra = f" and {len(attempt.nodes) - 1} node(s) feeding only it" if len(attempt.nodes) > 1 else ""
        return f"remove {node_label(attempt.nodes[0])}{extra}"

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        ctx.graph.model.graph.remove(attempt.nodes, safe=True)
        return []


class EliminateIdentity(RewriteRule):
    """Remove Identity nodes, and Dropout nodes that are identities at inference.

    Conditions:
    1. the node is an Identity, or a Dropout in inference (no training_mode input set to true,
       mask output unused);
    2. when its output is a graph output, its input must be produced by a node (the node's
       output can take the graph output's name) and not be a graph output itself.
    """

    id = "eliminate-identity"
    family = "cleanup"
    description = "remove Identity nodes and inference-time Dropout"
    conditions = ("Identity, or Dropout in inference with the mask unused", "a graph output can take over the input's name")
    root_ops = frozenset({"Identity", "Dropout"})
    pattern_ops = root_ops
    span = 1
    pattern_text = "Identity(x) or Dropout(x) at inference"

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        label = node_label(node)
        if node.op_type not in self.root_ops:
            return Attempt(False, [], f"{label} is not an Identity or Dropout.", 0)
        x = node.inputs[0] if node.inputs else None
        if x is None:
            return Attempt(False, [node], f"{label} has no input.", 1)
        y = node.outputs[0]
        if node.op_type == "Dropout":
            if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
                return Attempt(False, [node], f"the mask output '{node.outputs[1].name}' of {label} is used.", 2)
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                tm = ctx.const(node.inputs[2])
                if tm is None:
                    return Attempt(False, [node], f"training_mode of {label} is not a constant.", 2)
                if bool(np.asarray(tm).reshape(-1)[0]):
                    return Attempt(False, [node], f"{label} has training_mode true: it drops values.", 2)
            if node.attributes.get_int("is_test", 1) == 0 and ctx.opset < 7:
                return Attempt(False, [node], f"{label} has is_test=0: it drops values.", 2)
        if y.is_graph_output():
            if x.is_graph_input() or x.const_value is not None or x.producer() is None:
                return Attempt(False, [node], f"output '{y.name}' of {label} is a graph output and its input '{x.name}' is a graph input or initializer; removing it would merge the two.", 2)
            if x.is_graph_output():
                return Attempt(False, [node], f"output '{y.name}' of {label} is a graph output and its input '{x.name}' is another graph output.", 2)
        return Attempt(True, [node], "", 3)

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        node = attempt.nodes[0]
        g = ctx.graph.model.graph
        x, y = node.inputs[0], node.outputs[0]
        if y.is_graph_output():
            name = y.name
            # the graph output keeps its declared type and shape
            x.type = y.type if y.type is not None else x.type
            x.shape = y.shape if y.shape is not None else x.shape
            ir.convenience.replace_all_uses_with(y, x, replace_graph_outputs=True)
            g.remove(node, safe=True)
            x.name = name  # the graph output keeps its name; x's other readers follow the object
        else:
            ir.convenience.replace_all_uses_with(y, x)
            g.remove(node, safe=True)
        return []


class CollapseReshapes(RewriteRule):
    """A chain of Reshape / Flatten / Squeeze / Unsqueeze -> one Reshape.

    Conditions:
    1. the chain has at least two reshape-like nodes, each feeding only the next;
    2. the final shape is known: the last node is a Reshape with a constant shape that copies
       no dim from its input (no 0), or the inferred output shape has at most one unknown dim.
    """

    id = "collapse-reshapes"
    family = "cleanup"
    description = "collapse chains of Reshape/Flatten/Squeeze/Unsqueeze into one Reshape"
    conditions = ("two or more reshape-like nodes, each feeding only the next", "the final shape is known (at most one unknown dim)")
    root_ops = _RESHAPES
    pattern_ops = _RESHAPES
    span = 6
    pattern_text = "Reshape/Flatten/Squeeze/Unsqueeze chains"

    def _chain(self, node: ir.Node) -> tuple[list[ir.Node], str]:
        chain = [node]
        why = ""
        cur = node
        while True:
            x = cur.inputs[0] if cur.inputs else None
            p = x.producer() if x is not None else None
            if p is None or p.graph is not node.graph:
                why = f"the input of {node_label(cur)} is not computed by a node"
                break
            if p.op_type not in _RESHAPES:
                why = f"the input of {node_label(cur)} comes from {node_label(p)}, not a reshape-like op"
                break
            if x.is_graph_output():
                why = f"'{x.name}' between {node_label(p)} and {node_label(cur)} is a graph output"
                break
            if len(x.uses()) != 1 or len(p.outputs) != 1:
                why = f"'{x.name}' from {node_label(p)} is read by {len(x.uses())} nodes, not only {node_label(cur)}"
                break
            chain.append(p)
            cur = p
        return chain, why

    def _target(self, ctx: RuleContext, node: ir.Node) -> list[int]:
        if node.op_type == "Reshape" and len(node.inputs) > 1:
            arr = ctx.const(node.inputs[1])
            if arr is not None:
                dims = [int(d) for d in np.asarray(arr).reshape(-1)]
                if 0 not in dims or node.attributes.get_int("allowzero", 0):
                    return dims
        shape = static_shape(node.outputs[0])
        if shape is None:
            fail(f"the output shape of {node_label(node)} is unknown, so one Reshape cannot reproduce it.")
        unknown = [i for i, d in enumerate(shape) if not isinstance(d, int)]
        if len(unknown) > 1:
            fail(f"the output of {node_label(node)} has {len(unknown)} unknown dims; one Reshape can infer only one (-1).")
        return [-1 if not isinstance(d, int) else int(d) for d in shape]

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        from core.rewrite.onnxscript_compat import match_failure_error

        label = node_label(node)
        if node.op_type not in _RESHAPES:
            return Attempt(False, [], f"{label} is not a Reshape, Flatten, Squeeze or Unsqueeze.", 0)
        chain, why = self._chain(node)
        if len(chain) < 2:
            return Attempt(False, chain, f"{label} is not part of a chain: {why}.", 1)
        try:
            target = self._target(ctx, node)
        except match_failure_error() as e:
            return Attempt(False, chain, e.reason, 2)
        return Attempt(True, chain, "", 3, target)

    def summary(self, attempt: Attempt) -> str:
        return f"{' -> '.join(n.op_type for n in reversed(attempt.nodes))} into one Reshape at {node_label(attempt.nodes[0])}"

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        chain = attempt.nodes
        root, first = chain[0], chain[-1]
        target = np.asarray(attempt.payload, dtype=np.int64)
        shape_v = ir.Value(
            name=ctx.unique_name(f"{root.name or 'reshape'}.shape"), shape=ir.Shape([len(target)]), type=ir.TensorType(ir.DataType.INT64), const_value=ir.tensor(target)
        )
        node = ir.Node("", "Reshape", [first.inputs[0], shape_v], num_outputs=1)
        return splice(ctx, chain, [node], [root.outputs[0]], [node.outputs[0]], [shape_v])
