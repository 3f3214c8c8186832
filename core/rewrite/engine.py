"""The rewrite engine: find matches, explain a miss, preview, apply as one undoable edit.

    matches = find_matches(graph, rule)               # all non-overlapping matches
    why = explain(graph, rule, node_id)               # "why didn't this fuse?" for one node
    pv = preview(graph, rule, matches)                # rewritten copy + removed/added/changed ids
    pv.verify()                                       # onnxruntime before/after on random inputs
    history.push(RewriteEdit(pv))                     # one undoable edit (GUI: Document.push)

A preview is computed on a copy of the graph that keeps every node id, so the canvas can ghost
the removed nodes and outline the added ones. Applying swaps the copy's model into the graph;
undo swaps the untouched original back, so the bytes and node ids after undo are exactly those
before. The copy is made with onnx_ir's in-memory clone (not a protobuf round trip): previewing
a rule on DenseNet-121 takes tens of milliseconds once its matches are known.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

from ..errors import EditError
from ..model.graph import NODE_ID as _ID
from ..model.graph import Graph
from ..model.history import Edit
from ..model.constants import ConstantEvaluator
from .onnxscript_compat import match_failure_error
from .rule import ConditionFailed, Match, RewriteRule, RuleContext, WhyNot, node_label, remove_initializer, using

__all__ = [
    "find_matches",
    "explain",
    "preview",
    "Preview",
    "RewriteEdit",
    "apply_rewrite",
    "SpareCopy",
    "RuleReport",
    "run_rules",
]

logger = logging.getLogger(__name__)


def rewrite_description(rule_id: str, matches: int) -> str:
    """'fuse-gelu (2 matches)': how an applied rewrite is named in Undo, the model and manifests."""
    return f"{rule_id} ({matches} match{'es' if matches != 1 else ''})"


def _context(graph: Graph) -> RuleContext:
    return RuleContext(graph, ConstantEvaluator(graph.model))


def find_matches(graph: Graph, rule: RewriteRule, cancel=None) -> list[Match]:
    """Every place `rule` applies, non-overlapping (a later root claims its nodes first), in
    graph order. `cancel()` returning True stops the search early (the GUI's cancel)."""
    ctx = _context(graph)
    claimed: set[int] = set()
    found: list[Match] = []
    with using(ctx):
        for node in rule.candidates(graph):
            if cancel is not None and cancel():
                break
            if node.meta.get(_ID) in claimed:
                continue
            att = rule.match_at(ctx, node)
            if not att.ok:
                continue
            ids = [n.meta[_ID] for n in rule.claimed(att)]
            if any(i in claimed for i in ids):
                continue
            claimed.update(ids)
            found.append(Match(rule.id, node.meta[_ID], tuple(n.meta[_ID] for n in att.nodes), rule.summary(att)))
    order = {n.meta[_ID]: i for i, n in enumerate(graph.model.graph)}
    found.sort(key=lambda m: order.get(m.root_id, 0))
    return found


def explain(graph: Graph, rule: RewriteRule, node_id: int) -> WhyNot:
    """Why `rule` does (or does not) apply to the node `node_id`, naming the failed condition.

    The node may sit anywhere in the pattern, so roots downstream of it (up to the rule's span)
    are tried too; the most informative failure wins: a failed condition on a pattern that covers
    the node, then the pattern's shape failing at the node itself, then further away.
    """
    if not graph.has_node(node_id):
        raise EditError(f"there is no node with id {node_id} in the graph.")
    node = graph.node(node_id).ir
    if node.op_type in rule.produces and node.op_type not in rule.pattern_ops:
        return WhyNot(rule.id, node_id, False, f"{node_label(node)} is already a {node.op_type}, what {rule.id} produces: nothing left to rewrite.")
    if rule.pattern_ops and node.op_type not in rule.pattern_ops:
        what = f" ({rule.pattern_text})" if rule.pattern_text else ""
        return WhyNot(rule.id, node_id, False, f"{node_label(node)} is not part of this rule's pattern{what}.")
    ctx = _context(graph)
    with using(ctx):
        roots: list[ir.Node] = []
        frontier = [node]
        seen = {id(node)}
        for _ in range(max(rule.span, 1)):
            roots.extend(frontier)
            nxt = []
            for n in frontier:
                for o in n.outputs:
                    for c in o.consumers():
                        if id(c) not in seen and c.graph is graph.model.graph:
                            seen.add(id(c))
                            nxt.append(c)
            frontier = nxt
        best = None
        best_key = None
        for r in roots:
            if rule.root_ops and r.op_type not in rule.root_ops:
                continue
            att = rule.match_at(ctx, r)
            covers = r is node or any(n is node for n in att.nodes)
            if att.ok and covers:
                m = Match(rule.id, r.meta[_ID], tuple(n.meta[_ID] for n in att.nodes), rule.summary(att))
                return WhyNot(rule.id, node_id, True, f"{rule.id} applies here: {m.summary}.", m)
            if att.ok:
                # a match downstream that only reads this node's result
                att = type(att)(False, att.nodes, f"{node_label(node)} only feeds a {rule.id} match (at {node_label(r)}); it is an input of the pattern, not part of it.", 3)
                covers = True
            # rank: condition failures that cover the node, then the node's own root attempt
            key = (att.stage if covers else att.stage - 2, r is node)
            if best_key is None or key > best_key:
                best, best_key = att, key
        label = node_label(node)
        if best is None:
            if rule.pattern_ops and node.op_type not in rule.pattern_ops:
                what = f" ({rule.pattern_text})" if rule.pattern_text else ""
                reason = f"{label} is not part of this rule's pattern{what}."
            else:
                ends = " or ".join(sorted(rule.root_ops)) or "node"
                reason = f"no {ends} follows {label} closely enough for this rule's pattern" + (
                    f" ({rule.pattern_text})." if rule.pattern_text else "."
                )
            return WhyNot(rule.id, node_id, False, reason)
        return WhyNot(rule.id, node_id, False, best.reason)


# ---- preview -----------------------------------------------------------------------------------
@dataclass
class Preview:
    """A rewrite before it happens: the rewritten copy and what changed, in node ids.

    `removed` are ids only in the original, `added` only in the rewritten graph, `changed` in
    both but with different inputs, outputs or attributes (e.g. the Conv whose weights took in
    a BatchNormalization). `skipped` lists matches that no longer applied (with why).
    """

    rule: RewriteRule
    base: Graph
    base_revision: int
    graph: Graph
    matches: list[Match]
    applied: list[Match]
    removed: set[int]
    added: set[int]
    changed: set[int]
    skipped: list[tuple[Match, str]] = field(default_factory=list)
    seconds: float = 0.0
    verification: Any = None  # core.verify.Comparison once verify() ran

    @property
    def nodes_before(self) -> int:
        return len(self.base) if self.base.revision == self.base_revision else len(self.graph) + len(self.removed) - len(self.added)

    @property
    def nodes_after(self) -> int:
        return len(self.graph)

    @property
    def is_stale(self) -> bool:
        return self.base.revision != self.base_revision

    def verify(self, seed: int = 0, dims: dict[str, int] | None = None, atol: float | None = None, rtol: float | None = None, before=None):
        """Run before and after on the same seeded random inputs; keep and return the Comparison.
        `before`: the original as a copy, bytes or proto, when `base` should not be read here."""
        from .. import verify as V

        before = before if before is not None else self.base
        kw = {}
        if atol is not None:
            kw["atol"] = atol
        if rtol is not None:
            kw["rtol"] = rtol
        self.verification = V.verify(before, self.graph, seed=seed, dims=dims, **kw)
        return self.verification

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule.id,
            "matches": len(self.matches),
            "applied": len(self.applied),
            "removed": sorted(self.removed),
            "added": sorted(self.added),
            "changed": sorted(self.changed),
            "skipped": [{"match": m.to_dict(), "reason": r} for m, r in self.skipped],
            "seconds": self.seconds,
            "verification": None if self.verification is None else self.verification.to_dict(),
        }


def _signature(n: ir.Node) -> tuple:
    return (
        n.op_type,
        tuple(v.name if v is not None else "" for v in n.inputs),
        tuple(v.name for v in n.outputs),
    )


class SpareCopy:
    """A copy of a graph made ahead of time (e.g. on the worker thread that counts matches), so
    that the preview the user asks for next only has to rewrite, not copy. Used once."""

    def __init__(self, graph: Graph):
        self.base = graph
        self.revision = graph.revision
        self.copy: Graph | None = graph.clone()

    def take(self, graph: Graph) -> Graph | None:
        if self.copy is None or graph is not self.base or graph.revision != self.revision:
            return None
        c, self.copy = self.copy, None
        return c


def preview(graph: Graph, rule: RewriteRule, matches: Sequence[Match] | None = None, spare: SpareCopy | None = None) -> Preview:
    """Apply `matches` (default: all of the rule's matches) to a copy of the graph (`spare`'s
    copy when one was prepared for this revision, else a fresh one)."""
    t0 = time.perf_counter()
    if matches is None:
        matches = find_matches(graph, rule)
    matches = list(matches)
    clone = spare.take(graph) if spare is not None else None
    if clone is None:
        clone = graph.clone()
    ctx = RuleContext(clone, ConstantEvaluator(clone.model))
    applied: list[Match] = []
    skipped: list[tuple[Match, str]] = []
    reused: set[int] = set()
    touched: list[ir.Value] = []  # inputs of rewritten nodes: where dead constants and changed readers are
    created: list[ir.Node] = []
    with using(ctx):
        index = {n.meta[_ID]: n for n in clone.model.graph}
        for m in matches:
            node = index.get(m.root_id)
            if node is None or node.graph is not clone.model.graph:
                skipped.append((m, f"node {m.root_id} is gone (an earlier match removed it)."))
                continue
            att = rule.match_at(ctx, node)
            if not att.ok:
                skipped.append((m, att.reason))
                continue
            ins = [i for n in att.nodes for i in n.inputs if i is not None]
            try:
                new_nodes = rule.rewrite_at(ctx, att)
            except ConditionFailed as e:
                skipped.append((m, e.reason))
                continue
            except match_failure_error() as e:  # fail() inside a rewrite
                skipped.append((m, e.reason))
                continue
            touched.extend(ins)
            created.extend(new_nodes)
            reused.update(n.meta[_ID] for n in new_nodes if _ID in n.meta)
            applied.append(m)
        _remove_dead_constants(ctx, touched)
    if applied:
        clone.record_rewrite(rewrite_description(rule.id, len(applied)))
    clone.changed()
    # plain dicts, not Graph caches: previews run on worker threads
    before = {n.meta[_ID]: n for n in graph.model.graph}
    after = {n.meta[_ID]: n for n in clone.model.graph}
    removed = set(before) - set(after)
    added = set(after) - set(before)
    # Readers of rewritten values are the only nodes whose inputs can have changed.
    readers = {c.meta[_ID] for v in touched for c in v.consumers() if c.graph is clone.model.graph}
    readers.update(c.meta[_ID] for n in created for o in n.outputs for c in o.consumers() if c.graph is clone.model.graph)
    changed = {i for i in readers | reused if i in before and i in after and (i in reused or _signature(before[i]) != _signature(after[i]))}
    return Preview(rule, graph, graph.revision, clone, matches, applied, removed, added, changed, skipped, time.perf_counter() - t0)


def _remove_dead_constants(ctx: RuleContext, touched: list[ir.Value]) -> None:
    """Drop what the rewrite left unused: constant nodes that only fed rewritten nodes, and
    initializers nobody reads any more. Only values the rewritten nodes read are considered:
    clearing what was unused before is eliminate-dead-code's job, not a side effect."""
    g = ctx.graph.model.graph
    old_ir = (ctx.graph.model.ir_version or 0) < 4  # there, initializers are listed as inputs too
    work = list(touched)  # a value still read now is pushed again when its last reader goes
    while work:
        v = work.pop()
        if v.uses() or v.is_graph_output():
            continue
        if v.is_initializer():
            if (old_ir or not v.is_graph_input()) and g.initializers.get(v.name) is v:
                remove_initializer(ctx, v)
            continue
        p = v.producer()
        if p is None or p.graph is not g or p.domain not in ("", "ai.onnx"):
            continue
        if any(o.uses() or o.is_graph_output() for o in p.outputs):
            continue
        if not (p.op_type == "Constant" or (p.inputs and all(ctx.is_const(i) for i in p.inputs if i is not None))):
            continue
        ins = [i for i in p.inputs if i is not None]
        g.remove(p, safe=True)
        work.extend(ins)


# ---- apply ----------------------------------------------------------------------------------------
class RewriteEdit(Edit):
    """Applies a preview as one undoable edit: do swaps in the rewritten model, undo swaps the
    original back (its bytes and node ids are untouched by construction)."""

    def __init__(self, pv: Preview):
        if pv.verification is not None and not pv.verification.ok:
            raise EditError(f"{pv.rule.id} is refused: the rewritten model's {pv.verification.explain()}")
        self.preview = pv
        self.description = rewrite_description(pv.rule.id, len(pv.applied))
        self._after: tuple | None = None
        self._undo = None

    def do(self, graph: Graph) -> None:
        pv = self.preview
        if self._after is None:
            if pv.base is not graph or pv.is_stale:
                raise EditError(f"the preview of {pv.rule.id} is out of date: the graph changed since; preview again.")
            self._after = (pv.graph.model, pv.graph.value_info_names, list(pv.graph.shape_problems))
        self._undo = graph.swap_model(*self._after)

    def undo(self, graph: Graph) -> None:
        assert self._undo is not None
        self._undo()
        self._undo = None


def _journal_rewrite(edit: RewriteEdit, blobs) -> dict:
    pv = edit.preview
    return {"rule": pv.rule.id, "matches": [m.root_id for m in pv.matches], "applied": [m.root_id for m in pv.applied]}


def _replay_rewrite(graph: Graph, args: dict, blobs, context: dict) -> RewriteEdit:
    """A journaled rewrite, applied again: the same rule at the same roots (node ids replay as
    recorded, see core.model.journal), refused when it no longer applies at the same places."""
    from ..model.journal import ReplayError

    lookup = context.get("rules")
    if lookup is None:
        raise ReplayError(f"the journal holds a rewrite ({args['rule']}) and no rule library was given to replay it.")
    try:
        rule = lookup(args["rule"])
    except Exception as e:  # noqa: BLE001 - unknown rule id, in whatever words the library says it
        raise ReplayError(f"the journal's rewrite {args['rule']} is not in the rule library ({e}).") from None
    wanted = [int(i) for i in args["matches"]]
    found = {m.root_id: m for m in find_matches(graph, rule)}
    missing = [i for i in wanted if i not in found]
    if missing:
        raise ReplayError(f"{rule.id} no longer matches at node{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}.")
    pv = preview(graph, rule, [found[i] for i in wanted])
    if [m.root_id for m in pv.applied] != [int(i) for i in args["applied"]]:
        raise ReplayError(f"{rule.id} applies at different places than it did ({len(pv.applied)} of {len(wanted)} matches).")
    return RewriteEdit(pv)


def _register_journal() -> None:
    from ..model import journal

    journal.register(RewriteEdit, "Rewrite", _journal_rewrite, _replay_rewrite)


_register_journal()


def apply_rewrite(graph: Graph, rule: RewriteRule, matches: Sequence[Match] | None = None, history=None, verify: bool = False, **verify_kw) -> Preview:
    """Preview, optionally verify (refusing a rewrite that changes the outputs), then apply as one
    edit through `history` (a core.model.history.History or anything with push(edit))."""
    pv = preview(graph, rule, matches)
    if verify and pv.applied:
        pv.verify(**verify_kw)
    edit = RewriteEdit(pv)
    if history is not None:
        history.push(edit)
    else:
        edit.do(graph)
        graph.changed()
    return pv


@dataclass
class RuleReport:
    """What one rule did in `run_rules`: for the CLI's table and --json."""

    rule: str
    matches: int
    applied: int
    nodes_before: int
    nodes_after: int
    seconds: float
    verification: Any = None
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "matches": self.matches,
            "applied": self.applied,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "seconds": round(self.seconds, 4),
            "max_abs_error": None if self.verification is None else self.verification.to_dict()["max_abs"],
            "max_rel_error": None if self.verification is None else self.verification.to_dict()["max_rel"],
            "verified": None if self.verification is None else self.verification.ok,
            "verification": None if self.verification is None else self.verification.to_dict(),
            "skipped": self.skipped,
        }


def run_rules(graph: Graph, rules: Iterable[RewriteRule], history=None, verify: bool = False, seed: int = 0, dims: dict[str, int] | None = None) -> list[RuleReport]:
    """Apply each rule's matches in turn (each one edit), verifying each when asked.

    A rule whose rewritten model fails verification raises core.verify.VerificationError
    (the graph keeps the edits of the rules before it).
    """
    from ..verify import VerificationError

    reports = []
    for rule in rules:
        t0 = time.perf_counter()
        before = len(graph)
        pv = preview(graph, rule)
        if verify and pv.applied:
            c = pv.verify(seed=seed, dims=dims)
            if not c.ok:
                raise VerificationError(f"{rule.id} is refused: the rewritten model's {c.explain()}")
        if pv.applied:
            edit = RewriteEdit(pv)
            if history is not None:
                history.push(edit)
            else:
                edit.do(graph)
                graph.changed()
        reports.append(
            RuleReport(rule.id, len(pv.matches), len(pv.applied), before, len(graph), time.perf_counter() - t0, pv.verification, [r for _, r in pv.skipped])
        )
    return reports
