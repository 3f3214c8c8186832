"""onnxscript's own rewrite rules behind the workbench's rule API.

onnxscript ships rule sets (`onnxscript.rewriter.rules.common`, the opset-23 fusions of
`rules.fusion`, the onnxruntime fusions of `ort_fusions`) as public `RewriteRule` objects. An
`OnnxscriptRule` wraps one or several of them (alternatives of one computation) as a workbench
rule: matches through `RewriteRule.match` with its tracer (so "why not?" reports onnxscript's
own failure reason), the replacement through `RewriteRule.try_rewrite`, spliced into the graph
like every other rule's so preview, verification and the undoable edit work unchanged.

    OnnxscriptRule("fuse-rms-normalization", "transformer", "...", load=lambda: [...],
                   produces=("RMSNormalization",), min_opset=23)

Some onnxscript rules keep state between their `check` and `rewrite` (the RMS norm rule stashes a
dtype on itself), and rules are shared by threads (the GUI counts matches on a worker), so every
match and rewrite of a wrapped rule runs under one lock.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import onnx_ir as ir

from ..model.graph import INFERRED
from .onnxscript_compat import pattern_shape
from .rule import Attempt, ConditionFailed, RewriteRule, RuleContext, node_label, splice, try_pattern

__all__ = ["OnnxscriptRule"]

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()


class OnnxscriptRule(RewriteRule):
    """A workbench rule made of onnxscript `RewriteRule`s.

    `load()` returns the onnxscript rules (or rule sets), imported on first use. `min_opset`:
    the default-domain opset the result needs (RMSNormalization: 23); below it a match is
    reported with the reason (apply upgrade-opset first) and not rewritten. `commute`: also try
    the operand orders of Add/Mul (for patterns written in one order only).
    """

    def __init__(
        self,
        id: str,
        family: str,
        description: str,
        load: Callable[[], Iterable],
        *,
        conditions: Sequence[str] = (),
        produces: Sequence[str] = (),
        min_opset: int = 0,
        pattern_text: str = "",
        commute: bool = False,
    ):
        self.id = id
        self.family = family
        self.description = description
        self.conditions = tuple(conditions)
        self.produces = frozenset(produces)
        self.min_opset = min_opset
        self.pattern_text = pattern_text
        self.source = "onnxscript"
        self._load = load
        self._commute = commute
        self._loaded: list | None = None

    # ---- what the pattern is (read from onnxscript's rules on first use) -------------------------
    def _rules(self) -> list:
        with _LOCK:
            if self._loaded is None:
                rules = []
                for item in self._load():
                    for r in getattr(item, "rules", [item]):  # a RewriteRuleSet or one rule
                        if getattr(r, "as_function", False):
                            continue  # would add a model function per match: not a single edit
                        rules.extend(r.commute() if self._commute else [r])
                self._loaded = rules
            return self._loaded

    def _shapes(self):
        return [pattern_shape(r) for r in self._rules()]

    @property
    def root_ops(self) -> frozenset[str]:  # type: ignore[override]
        shapes = self._shapes()
        if any(not s.roots for s in shapes):
            return frozenset()  # a root of no fixed op type: try every node
        return frozenset().union(*(s.roots for s in shapes))

    @property
    def pattern_ops(self) -> frozenset[str]:  # type: ignore[override]
        shapes = self._shapes()
        if any(not s.ops for s in shapes):
            return frozenset()
        return frozenset().union(*(s.ops for s in shapes))

    @property
    def span(self) -> int:  # type: ignore[override]
        return max((s.nodes for s in self._shapes()), default=1)

    # ---- matching and rewriting --------------------------------------------------------------
    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        roots = self.root_ops
        if roots and node.op_type not in roots:
            return Attempt(False, [], f"{node_label(node)} is not a {' or '.join(sorted(roots))}, where this pattern ends.", 0)
        best: Attempt | None = None
        with _LOCK, _inferred_types_visible(node, self.span):
            for r in self._rules():
                if r.graph_pre_visitor is not None:
                    r.graph_pre_visitor()
                att = try_pattern(r, ctx, node, removable=r.remove_nodes)
                if att.ok:
                    att.payload = (r, node)  # the rule that matched, and where
                    best = att
                    break
                if best is None or att.stage > best.stage:
                    best = att
        assert best is not None
        if best.ok and self.min_opset and ctx.opset < self.min_opset:
            what = " and ".join(sorted(self.produces)) or "the result"
            return Attempt(
                False, best.nodes,
                f"the pattern is here, but the model imports opset {ctx.opset} and {what} needs opset {self.min_opset}: apply upgrade-opset first.",
                2,
            )
        return best

    def claimed(self, attempt: Attempt) -> list[ir.Node]:
        """A rule that leaves what others still read (onnxscript's remove_nodes=False: the rotary
        embedding, whose cos/sin nodes serve q and k) claims only the nodes its match alone
        reads, so the next match may share the rest."""
        rule, root = attempt.payload
        if rule.remove_nodes:
            return attempt.nodes
        owned = {id(root)}
        changed = True
        while changed:
            changed = False
            for n in attempt.nodes:
                if id(n) not in owned and all(not o.is_graph_output() and all(id(u.node) in owned for u in o.uses()) for o in n.outputs):
                    owned.add(id(n))
                    changed = True
        return [n for n in attempt.nodes if id(n) in owned]

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        from onnxscript.optimizer import basic_constant_propagation

        rule, root = attempt.payload
        with _LOCK, _inferred_types_visible(root, self.span):  # match, check and replacement again, atomically
            delta = rule.try_rewrite(ctx.graph.model, ctx.graph.model.graph, root)
        if delta is None:
            raise ConditionFailed(f"{self.id} could not build its replacement at {node_label(root)}.")
        basic_constant_propagation(delta.new_nodes)
        read = [i for n in delta.match.nodes for i in n.inputs if i is not None]
        new_nodes = splice(
            ctx, list(delta.match.nodes), delta.new_nodes, list(delta.match.outputs), list(delta.new_outputs),
            delta.new_initializers, keep_used=not rule.remove_nodes,
        )
        _remove_orphans(ctx.graph.model.graph, read)
        return new_nodes


@contextmanager
def _inferred_types_visible(root: ir.Node, depth: int) -> Iterator[None]:
    """onnxscript's checks read `value.shape` and `.dtype`, which hold only what the file says; the
    workbench keeps what shape inference found beside them (meta INFERRED). For the duration of
    one match, the values of the nodes up to `depth` producers above `root` show the inferred type,
    and are put back as they were after (nothing is saved, nothing goes stale after an edit)."""
    changed: list[tuple[ir.Value, object, object]] = []
    nodes, frontier, seen = [], [root], {id(root)}
    for _ in range(max(depth, 1)):
        nodes.extend(frontier)
        nxt = []
        for n in frontier:
            for i in n.inputs:
                p = i.producer() if i is not None else None
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    nxt.append(p)
        frontier = nxt
    try:
        for n in nodes:
            for v in (*n.inputs, *n.outputs):
                if v is None or (v.shape is not None and v.dtype is not None):
                    continue
                found = v.meta.get(INFERRED)
                if found is None:
                    continue
                changed.append((v, v.type, v.shape))
                dtype, shape = found
                if v.dtype is None and dtype is not None:
                    v.dtype = dtype
                if v.shape is None and shape is not None:
                    v.shape = ir.Shape(shape)
        yield
    finally:
        for v, type_, shape in changed:
            v.type = type_
            v.shape = shape


def _remove_orphans(graph: ir.Graph, values: list[ir.Value]) -> None:
    """Remove the nodes the rewrite left computing nothing used (a Reshape's shape computation,
    once the shape is a constant), as onnxscript's own rewrite pass does after its rules."""
    work = list(values)
    while work:
        v = work.pop()
        p = v.producer()
        if p is None or p.graph is not graph or v.is_graph_output():
            continue
        if any(o.uses() or o.is_graph_output() for o in p.outputs):
            continue
        work.extend(i for i in p.inputs if i is not None)
        graph.remove(p, safe=True)


