"""What a rewrite rule is: a pattern, a condition and a replacement, able to say why it failed.

Two kinds of rule share one interface (`RewriteRule`), which is all the engine, the CLI and the GUI
ever see:

* `PatternRule`: the declarative kind, built on onnxscript's rewriter. A subclass writes three
  small methods, as onnxscript's own rules do:

      class FuseMatMulAdd(PatternRule):
          id = "fuse-matmul-add"
          def pattern(self, op, a, b, c):            # ops on symbolic values
              return op.Add(op.MatMul(a, b), c)
          def check(self, context, a, b, c, **_):    # conditions; `fail("...")` names the one that failed
              if rank(a) != 2: fail(f"input '{a.name}' has rank {rank(a)}; Gemm needs 2-D")
          def rewrite(self, op, a, b, c, **_):       # the replacement, with the same builder
              return op.Gemm(a, b, c)

  onnxscript's matcher finds the subgraph (and checks that the matched intermediate values are
  used nowhere else); its match tracing gives the structural reason when a node does not fit.

* A procedural rule (constant folding, dead code, reshape chains) overrides `match_at` and
  `rewrite_at` itself, for rewrites that are not a fixed-shape subgraph.

Rules are stateless singletons shared by threads (the GUI counts matches on a worker thread), so
the graph being matched is passed in a context variable (`current()`), never stored on the rule.
"""
from __future__ import annotations

import contextvars
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import onnx_ir as ir

from ..model.graph import INFERRED as _INFERRED
from ..model.graph import NODE_ID as _ID
from ..model.graph import Graph
from ..model.constants import ConstantEvaluator

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
    "splice",
    "try_pattern",
    "add_initializer",
    "remove_initializer",
]

logger = logging.getLogger(__name__)

WB_DOMAIN = "mlc.workbench"  # domain of the workbench's model-local functions (fused ops)


class ConditionFailed(Exception):
    """Raised by `fail()` inside a rule's check: the message is the failed condition."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def fail(reason: str) -> NoReturn:
    """Stop the current match attempt: `reason` is what "why not?" shows, one sentence."""
    from .onnxscript_compat import match_failure_error

    raise match_failure_error()(reason)


# ---- helpers rules use in their conditions --------------------------------------------------
def node_label(n: ir.Node) -> str:
    """How a message names a node: its name (or op#id) and op type."""
    name = n.name or f"{n.op_type}#{n.meta.get(_ID, '?')}"
    return f"'{name}' ({n.op_type})"


def static_shape(v: ir.Value | None) -> tuple[Any, ...] | None:
    """A value's shape as a tuple of int / str / None, from the file or from shape inference."""
    if v is None:
        return None
    if v.shape is not None:
        return tuple(d if isinstance(d, int) else getattr(d, "value", None) for d in v.shape)
    inferred = v.meta.get(_INFERRED)
    return None if inferred is None else inferred[1]


def rank(v: ir.Value | None) -> int | None:
    s = static_shape(v)
    return None if s is None else len(s)


def dtype_of(v: ir.Value | None) -> ir.DataType | None:
    if v is None:
        return None
    if v.dtype is not None:
        return v.dtype
    inferred = v.meta.get(_INFERRED)
    return None if inferred is None else inferred[0]


@dataclass
class RuleContext:
    """What a rule may look at while matching or rewriting one graph."""

    graph: Graph
    constants: ConstantEvaluator
    # per-apply scratch: names taken so far (new initializers must not collide)
    taken_names: set[str] = field(default_factory=set)

    @property
    def model(self) -> ir.Model:
        return self.graph.model

    @property
    def opset(self) -> int:
        return self.graph.opset

    def const(self, v: ir.Value | None) -> np.ndarray | None:
        """The value's numbers if it is constant (initializer, Constant, ConstantOfShape...)."""
        return self.constants.value(v)

    def is_const(self, v: ir.Value | None) -> bool:
        return self.constants.is_constant(v)

    def unique_name(self, base: str) -> str:
        """A tensor name not used in the graph yet."""
        if not self.taken_names:
            g = self.graph.model.graph
            self.taken_names.update(g.initializers.keys())
            self.taken_names.update(v.name for v in g.inputs if v.name)
            self.taken_names.update(o.name for n in g for o in n.outputs if o.name)
        name, i = base, 1
        while name in self.taken_names:
            i += 1
            name = f"{base}_{i}"
        self.taken_names.add(name)
        return name


_current: contextvars.ContextVar[RuleContext | None] = contextvars.ContextVar("wb_rule_context", default=None)


def current() -> RuleContext:
    """The context of the match or rewrite in progress (set by the engine)."""
    ctx = _current.get()
    if ctx is None:
        raise RuntimeError("no rewrite in progress: rules are run through core.rewrite's engine")
    return ctx


@contextmanager
def using(ctx: RuleContext) -> Iterator[RuleContext]:
    token = _current.set(ctx)
    try:
        yield ctx
    finally:
        _current.reset(token)


@dataclass(frozen=True)
class Match:
    """One place a rule applies, in node ids of the graph it was found in.

    `root_id` is the node the pattern ends at (where the engine re-finds the match when it
    applies it); `node_ids` are every node the match covers (what the canvas highlights).
    """

    rule_id: str
    root_id: int
    node_ids: tuple[int, ...]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "root": self.root_id, "nodes": list(self.node_ids), "summary": self.summary}


@dataclass(frozen=True)
class WhyNot:
    """The answer to "why didn't this rule apply to this node?" (or that it does apply)."""

    rule_id: str
    node_id: int
    matches: bool
    reason: str
    match: Match | None = None

    def __str__(self) -> str:
        return self.reason

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "node": self.node_id, "matches": self.matches, "reason": self.reason}


@dataclass
class Attempt:
    """The outcome of trying a rule at one root node.

    stage: 0 = the root's op type is not where this pattern ends; 1 = the subgraph around the
    root does not have the pattern's shape; 2 = the pattern is there but a condition failed;
    3 = it matches.
    """

    ok: bool
    nodes: list[ir.Node]
    reason: str = ""
    stage: int = 3
    payload: Any = None  # rule-specific (the onnxscript match, the chain found, ...)


class RewriteRule(ABC):
    """A rewrite, as the engine, CLI and GUI see it. Subclass PatternRule unless the rewrite is
    not a fixed subgraph. Class attributes declare what the rule is; `conditions` lists what
    must hold, in the words "why not?" uses."""

    id: str = ""
    description: str = ""
    family: str = ""
    conditions: tuple[str, ...] = ()
    # op types a match can end at (its root); the engine only tries these
    root_ops: frozenset[str] = frozenset()
    # op types a match can cover (for "why not?" on a node that is not a root)
    pattern_ops: frozenset[str] = frozenset()
    # how many consumer steps from any covered node to the root, at most
    span: int = 1
    # one line naming the pattern, for messages ("Add(MatMul(a, b), c)")
    pattern_text: str = ""
    # op types the rewrite produces: "why not?" on one of them says it is already the result
    produces: frozenset[str] = frozenset()
    # whose rule it is: "workbench" (rewrites/), "onnxscript" (its rule sets, wrapped)
    source: str = "workbench"

    def candidates(self, graph: Graph) -> Iterator[ir.Node]:
        """Roots to try, last node first (so a longer pattern claims its nodes before a shorter
        match inside it does)."""
        for n in reversed(list(graph.model.graph)):
            if not self.root_ops or n.op_type in self.root_ops:
                yield n

    @abstractmethod
    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        """Try the rule with `node` as the root. Never mutates the graph."""

    @abstractmethod
    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        """Apply a successful attempt to ctx.graph in place; return the nodes it created.
        Nodes it removes are the attempt's nodes (or fewer: `removed_by`)."""

    def claimed(self, attempt: Attempt) -> list[ir.Node]:
        """Nodes no other match may also rewrite (default: all the attempt covers)."""
        return attempt.nodes

    def summary(self, attempt: Attempt) -> str:
        ops = [n.op_type for n in attempt.nodes]
        root = attempt.nodes[0] if attempt.nodes else None
        if root is None:
            return self.id
        return f"'{root.name or root.op_type + '#' + str(root.meta.get(_ID, '?'))}': {' + '.join(reversed(ops))}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "description": self.description, "family": self.family, "source": self.source}

    def __repr__(self) -> str:
        return f"<rule {self.id}>"


class _LastLog:
    """An onnxscript MatchingTracer stand-in: keeps the last match and its status."""

    def __init__(self) -> None:
        self.match = None
        self.status = None

    def log(self, rule, container, node, match, status) -> None:  # noqa: D401 - onnxscript's signature
        self.match = match
        self.status = status


class PatternRule(RewriteRule):
    """A declarative rule on onnxscript's pattern matcher: override `pattern`, `check`, `rewrite`.

    `pattern(op, *vars)` returns the root output(s); `_outputs=["name"]` on a pattern op binds
    that op's output value under `name` for check/rewrite. `check(context, **bindings)` calls
    `fail("...")` for each condition that does not hold. `rewrite(op, **bindings)` builds the
    replacement with onnxscript's builder and returns its output value(s). Set `commute = True`
    to also match Add/Mul operand orders. `functions(ctx)` returns the model-local functions
    the replacement calls (added to the model once).
    """

    commute: bool = False
    # A rare op every match contains (Erf for GELU), and how many consumer steps below it the
    # root can be: the engine then only tries roots near one, instead of trying dozens of
    # commuted variants at every Mul of a big model.
    anchor_ops: frozenset[str] = frozenset()
    anchor_depth: int = 0

    def candidates(self, graph: Graph) -> Iterator[ir.Node]:
        if not self.anchor_ops:
            yield from super().candidates(graph)
            return
        g = graph.model.graph
        near: set[int] = set()
        frontier = [n for n in g if n.op_type in self.anchor_ops]
        for _ in range(self.anchor_depth + 1):
            nxt = []
            for n in frontier:
                if id(n) in near:
                    continue
                near.add(id(n))
                nxt.extend(c for o in n.outputs for c in o.consumers() if c.graph is g)
            frontier = nxt
        if not near:
            return
        for n in reversed(list(g)):
            if id(n) in near and (not self.root_ops or n.op_type in self.root_ops):
                yield n

    @abstractmethod
    def pattern(self, op, *args, **kwargs):
        ...

    def check(self, context, **bindings) -> None:
        return None

    @abstractmethod
    def rewrite(self, op, **bindings):
        ...

    def patterns(self) -> list:
        """Pattern functions (several when a rule matches variants of one computation)."""
        return [self.pattern]

    def functions(self, ctx: RuleContext) -> list[ir.Function]:
        return []

    # ---- onnxscript plumbing -------------------------------------------------------------
    def _compiled(self) -> list:
        cache = self.__dict__.get("_compiled_patterns")
        if cache is None:
            from onnxscript.rewriter.pattern import Pattern

            from .onnxscript_compat import graph_patterns

            cache = []
            for fn in self.patterns():
                cache.extend(Pattern(v, self._condition, name=self.id) for v in graph_patterns(fn, self.commute))
            self.__dict__["_compiled_patterns"] = cache
        return cache

    def _condition(self, context, **bindings):
        from onnxscript.rewriter.pattern import MatchResult

        self.check(context, **bindings)
        return MatchResult()

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        if self.root_ops and node.op_type not in self.root_ops:
            return Attempt(False, [], f"{node_label(node)} is not a {' or '.join(sorted(self.root_ops))}, where this pattern ends.", 0)
        best: Attempt | None = None
        for pat in self._compiled():
            att = try_pattern(pat, ctx, node)
            if att.ok:
                return att
            if best is None or att.stage > best.stage:
                best = att
        assert best is not None
        return best

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        from .onnxscript_compat import replacement

        pat, m = attempt.payload
        delta = replacement(self.rewrite, m)
        if delta is None:
            raise ConditionFailed(_clean(m.reason) or f"{self.id} could not build its replacement")
        return splice(ctx, attempt.nodes, delta.new_nodes, list(m.outputs), list(delta.new_outputs), delta.new_initializers, self.functions(ctx))


def try_pattern(pat, ctx: RuleContext, node: ir.Node, removable: bool = True) -> Attempt:
    """Match one onnxscript `Pattern` (or `RewriteRule`) at `node`, through its match tracer: a
    success carries `(pat, match)` as its payload; a failure says which stage failed and why, in
    the words of the failed condition or of the structural mismatch."""
    from onnxscript.rewriter.pattern import MatchStatus

    log = _LastLog()
    m = pat.match(ctx.graph.model, ctx.graph.model.graph, node, check_nodes_are_removable=removable, tracer=log)
    if m:
        return Attempt(True, list(m.nodes), "", 3, (pat, m))
    lm = log.match
    nodes = list(lm.nodes) if lm is not None else []
    reason = lm.reason if lm is not None else ""
    if log.status == MatchStatus.CONDITION_FAILED:
        return Attempt(False, nodes, _clean(reason), 2)
    if "other uses" in reason.lower() and nodes:
        return Attempt(False, nodes, _other_uses(node, nodes), 2)
    return Attempt(False, nodes, _structural(node, reason), 1)


def _clean(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        return "a condition of the rule does not hold."
    return reason if reason.endswith(".") else reason + "."


def _other_uses(root: ir.Node, nodes: list[ir.Node]) -> str:
    """Name the intermediate value that is also used outside the pattern (so it cannot go)."""
    inside = {id(n) for n in nodes}
    for n in nodes:
        if n is root:
            continue
        for o in n.outputs:
            if o.is_graph_output():
                return f"'{o.name}' from {node_label(n)} is a graph output, so the pattern ending at {node_label(root)} cannot remove it."
            for c in o.consumers():
                if id(c) not in inside:
                    return f"'{o.name}' from {node_label(n)} is also used by {node_label(c)}, so the pattern ending at {node_label(root)} cannot remove it."
    return f"an intermediate result of the pattern ending at {node_label(root)} is used elsewhere."


def _structural(node: ir.Node, reason: str) -> str:
    reason = (reason or "").strip().rstrip(".")
    if not reason:
        return f"the nodes around {node_label(node)} do not form this rule's pattern."
    if "removable" in reason.lower() or "used outside" in reason.lower() or "used by" in reason.lower():
        return f"the pattern ending at {node_label(node)} has an intermediate value used elsewhere ({reason})."
    return f"the nodes feeding {node_label(node)} do not form this rule's pattern: {reason}."


def add_initializer(ctx: RuleContext, value: ir.Value) -> None:
    """Register an initializer; models of IR version < 4 also list it among the graph inputs
    (their rule, which onnx.checker enforces)."""
    ctx.graph.model.graph.register_initializer(value)
    if (ctx.graph.model.ir_version or 0) < 4:
        ctx.graph.model.graph.inputs.append(value)


def remove_initializer(ctx: RuleContext, value: ir.Value) -> None:
    g = ctx.graph.model.graph
    if value.is_graph_input():
        g.inputs.remove(value)
    del g.initializers[value.name]


def splice(
    ctx: RuleContext,
    old_nodes: list[ir.Node],
    new_nodes: Iterable[ir.Node],
    old_outputs: list[ir.Value],
    new_outputs: list[ir.Value],
    new_initializers: Iterable[ir.Value] = (),
    functions: Iterable[ir.Function] = (),
    keep_used: bool = False,
) -> list[ir.Node]:
    """Put `new_nodes` in place of `old_nodes` (whose `old_outputs` become `new_outputs`).

    Keeps what the workbench needs: a new node of the same op type as a removed one takes over
    its id and name (so Conv + BN -> Conv shows as the Conv changed, not a new node); other new
    nodes are named after the root; inferred shapes move with the values; initializers get
    unique names; functions and their domains are added to the model once.

    `keep_used`: old nodes whose results are still read after the rewiring stay (a rule that does
    not own all it matched, e.g. onnxscript's rotary embedding sharing its cos/sin nodes).
    """
    from onnx_ir import convenience

    graph = ctx.graph.model.graph
    model = ctx.graph.model
    new_nodes = list(new_nodes)
    root = old_nodes[0]
    for init in new_initializers:
        init.name = ctx.unique_name(init.name or "folded")
        add_initializer(ctx, init)
    for f in functions:
        if f.identifier() not in model.functions:
            model.functions[f.identifier()] = f
    for n in new_nodes:
        if n.domain not in ("", "ai.onnx") and n.domain not in model.opset_imports:
            model.opset_imports[n.domain] = 1
    if keep_used:
        convenience.replace_nodes_and_values(graph, root, [], new_nodes, old_outputs, new_outputs)
        old_nodes = _unused(old_nodes)
        graph.remove(old_nodes, safe=True)
    # ids and names
    available = {}
    for old in old_nodes:
        available.setdefault(old.op_type, []).append(old)
    named: dict[str, int] = {}  # a replacement with two Shapes names them root/Shape, root/Shape_2
    for n in new_nodes:
        same = available.get(n.op_type)
        if same:
            old = same.pop(0)
            n.meta[_ID] = old.meta[_ID]
            n.name = old.name
        elif root.name:
            base = f"{root.name}/{n.op_type}"
            named[base] = named.get(base, 0) + 1
            n.name = base if named[base] == 1 else f"{base}_{named[base]}"
        else:
            n.name = None
    inferred = [o.meta.get(_INFERRED) for o in old_outputs]
    if not keep_used:
        convenience.replace_nodes_and_values(graph, root, old_nodes, new_nodes, old_outputs, new_outputs)
    for v, inf in zip(new_outputs, inferred):
        if inf is not None and v.meta.get(_INFERRED) is None:
            v.meta[_INFERRED] = inf
    for n in new_nodes:
        for o in n.outputs:
            if not o.name:
                o.name = ctx.unique_name(f"{n.name or n.op_type}_out")
    return new_nodes


def _unused(nodes: list[ir.Node]) -> list[ir.Node]:
    """Those of `nodes` nothing outside them reads any more (graph outputs count as read)."""
    gone: set[int] = set()
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if id(n) in gone:
                continue
            if all(not o.is_graph_output() and all(id(u.node) in gone for u in o.uses()) for o in n.outputs):
                gone.add(id(n))
                changed = True
    return [n for n in nodes if id(n) in gone]
