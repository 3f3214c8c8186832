"""What differs between two graphs: nodes matched by name, then by structure.

Two models on disk, a model before and after its rewrites, two lowering stages: the question is
always which nodes are the same node, and what happened to the rest. Matching runs as a diff tool's:

1. by name: a name that occurs once on each side, on nodes of the same op type;
2. by structure: an unmatched node is paired with the unmatched node of its op type on the other
   side that has the most evidence of being it (inputs from the same values: matched producers,
   the same graph input or initializer; outputs read by matched nodes at the same input slot; the
   same graph output). Each pairing queues its neighbours again, so matches spread forwards from
   the inputs and backwards from the outputs until nothing more matches, and an edit in the middle
   stops neither. Ties go to equal attributes, then more equal facts, then position.

Matched nodes are compared (attributes, output shapes and dtypes, input count, and inputs wired to a
different producer); the unmatched ones are removed (only in A) or added (only in B). An input
rewired around a removed node (or through an added one) is part of that removal, not a change:
deleting one node and reconnecting its readers reads as one removed node.

For ONNX models, `diff_graphs` first lists the model-level differences (core.views.model_diff:
opsets, IR version, producer, metadata, graph inputs and outputs); "identical" needs those equal too.

The same algorithm serves ONNX graphs (`diff_graphs`, ids are the Graphs' node ids) and any two
ViewGraphs (`diff_views`, e.g. Relax stages of the Lowering panel; ids are view node ids).
"""
from __future__ import annotations

import logging
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Hashable
from dataclasses import dataclass, field

from .model_diff import ModelChange, model_changes

__all__ = ["NodeRecord", "GraphDiff", "match_records", "records_from_graph", "records_from_view", "diff_graphs", "diff_views"]

logger = logging.getLogger(__name__)


@dataclass
class NodeRecord:
    """One node as the matcher sees it.

    `inputs` holds one key per input: ("node", producer id, output index), ("input", name) for a
    graph input, ("const", name) for a constant (name "" where it has none), ("none",) for an
    omitted optional input. `facts` maps what is compared ('attribute alpha', 'output 0 shape') to
    its text; `graph_outputs` lists (output index, graph output name) for outputs the graph returns."""

    id: Hashable
    name: str
    op: str
    inputs: list[tuple] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    label: str = ""  # how reports name it: the node name, or 'Op#position'
    graph_outputs: tuple[tuple[int, str], ...] = ()


@dataclass
class GraphDiff:
    """The outcome: `matched` maps A ids to B ids; `changed` maps B ids to what differs."""

    matched: dict[Hashable, Hashable]
    added: list[Hashable]  # B ids
    removed: list[Hashable]  # A ids
    changed: dict[Hashable, list[str]]  # B id -> ["attribute alpha 0.1 → 0.2", ...]
    labels_a: dict[Hashable, str]
    labels_b: dict[Hashable, str]
    by: dict[str, int] = field(default_factory=dict)  # how many matched by name / structure
    model: list[ModelChange] = field(default_factory=list)  # model-level differences (ONNX models)

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed or self.model)

    def to_json(self) -> dict:
        """The CLI's object: whether identical, the model-level differences, added / removed node
        labels, changed nodes with what changed, and the matched count."""
        return {
            "identical": self.identical,
            "model": [c.to_json() for c in self.model],
            "added": [self.labels_b[i] for i in self.added],
            "removed": [self.labels_a[i] for i in self.removed],
            "changed": [{"node": self.labels_b[i], "what": "; ".join(w)} for i, w in self.changed.items()],
            "matched": len(self.matched),
        }

    def summary(self) -> str:
        return f"{len(self.matched)} matched, {len(self.changed)} changed, {len(self.removed)} removed, {len(self.added)} added"


_STRONG, _WEAK = 2, 1  # evidence weights: a matched neighbour or a graph input/output by name; an initializer by name
_SOURCE_BUDGET = 64  # values looked through when explaining a rewired input
_HUB = 48  # beyond this many readers of one value, slot and op, only the nearest are weighed (docs/performance.md: Graph diff hubs)


def _anchor(k: tuple) -> bool:
    """Whether an input key can be the same value on both sides before any node is matched."""
    return k[0] == "input" or (k[0] == "const" and len(k) > 1 and bool(k[1]))


class _Matcher:
    """The state of one matching: both sides' records, the pairs found, and the indexes evidence
    is looked up in. Every lookup is a dictionary access, so a diff is linear in the graphs' edges;
    a value read by many nodes of one op at one slot (a graph input or shared constant read all
    over) is a hub, whose readers are kept unmatched-only, in order, and weighed only near the
    position a neighbour predicts, so hubs do not make it quadratic."""

    def __init__(self, a: list[NodeRecord], b: list[NodeRecord]):
        self.a, self.b = a, b
        self.rec_a = {r.id: r for r in a}
        self.rec_b = {r.id: r for r in b}
        self.pos_a = {r.id: i for i, r in enumerate(a)}
        self.pos_b = {r.id: i for i, r in enumerate(b)}
        self.a_to_b: dict[Hashable, Hashable] = {}
        self.b_to_a: dict[Hashable, Hashable] = {}
        self.by = {"name": 0, "structure": 0}
        # A's readers by (value, input slot, op): a B node's inputs are looked up here (forwards)
        self.readers_a: dict[tuple, list[Hashable]] = defaultdict(list)
        for r in a:
            for i, k in enumerate(r.inputs):
                if k[0] == "node" or _anchor(k):
                    self.readers_a[(k, i, r.op)].append(r.id)
        # B's readers of each node: (reader, input slot, output index), for backward evidence
        self.readers_b: dict[Hashable, list[tuple]] = defaultdict(list)
        for r in b:
            for i, k in enumerate(r.inputs):
                if k[0] == "node":
                    self.readers_b[k[1]].append((r.id, i, k[2]))
        self.sinks_a = {(name, k, r.op): r.id for r in a for k, name in r.graph_outputs}
        self._attrs: dict[tuple[str, Hashable], tuple] = {}
        self.hub_keys: dict[Hashable, list[tuple]] = defaultdict(list)  # A id -> the hub lists holding it
        for key, ids in self.readers_a.items():
            if len(ids) > _HUB:
                for aid in ids:
                    self.hub_keys[aid].append(key)

    def pair(self, aid: Hashable, bid: Hashable, how: str) -> None:
        self.a_to_b[aid] = bid
        self.b_to_a[bid] = aid
        self.by[how] += 1
        for key in self.hub_keys.get(aid, ()):
            hub = self.readers_a[key]
            j = bisect_left(hub, self.pos_a[aid], key=self.pos_a.__getitem__)
            if j < len(hub) and hub[j] == aid:
                del hub[j]

    def to_a(self, k: tuple) -> tuple | None:
        """A B input key in A's terms (a matched producer's A id); None where there is no such value."""
        if k[0] == "node":
            aid = self.b_to_a.get(k[1])
            return None if aid is None else ("node", aid, k[2])
        return k if _anchor(k) else None

    # ---- 1. names --------------------------------------------------------------------------------
    def by_name(self) -> None:
        def unique(records):
            count: dict[str, int] = defaultdict(int)
            for r in records:
                if r.name:
                    count[r.name] += 1
            return {r.name: r for r in records if r.name and count[r.name] == 1}

        names_a = unique(self.a)
        for name, rb in unique(self.b).items():
            ra = names_a.get(name)
            if ra is not None and ra.op == rb.op:
                self.pair(ra.id, rb.id, "name")

    # ---- 2. structure, propagated from what is matched -------------------------------------------
    def by_structure(self) -> None:
        """Unmatched B nodes in topological order, each paired with its best-supported A node;
        a pairing queues the pair's unmatched neighbours again, so matches spread forwards from the
        inputs and backwards from the outputs until nothing more matches. A node whose candidates
        only position tells apart waits until nothing unambiguous is left (as a diff anchors on
        unique lines first): by then a neighbour matched from the other end may decide it."""
        pending = deque(r.id for r in self.b if r.id not in self.b_to_a)
        queued = set(pending)
        waiting: deque = deque()
        while pending or waiting:
            settle = not pending
            bid = pending.popleft() if pending else waiting.popleft()
            queued.discard(bid)
            if bid in self.b_to_a:
                continue
            rb = self.rec_b[bid]
            aid, ambiguous = self._best(rb)
            if aid is None:
                continue
            if ambiguous and not settle:
                waiting.append(bid)
                continue
            self.pair(aid, bid, "structure")
            around = [k[1] for k in rb.inputs if k[0] == "node"] + [c for c, _i, _k in self.readers_b.get(bid, ())]
            for nb in around:
                if nb not in self.b_to_a and nb not in queued:
                    queued.add(nb)
                    pending.append(nb)

    def _best(self, rb: NodeRecord) -> tuple[Hashable | None, bool]:
        """The unmatched A node of rb's op with the most evidence: inputs from the same values
        (matched producers, graph inputs, initializers, slot by slot), outputs read by matched nodes
        at the same slots, the same graph outputs. Ties: equal attributes, more equal facts, the
        position nearest to where a matched neighbour puts it, then the earliest. Also returns
        whether only position decided."""
        score: dict[Hashable, int] = defaultdict(int)
        offset: dict[Hashable, int] = {}
        taken = self.a_to_b
        for i, k in enumerate(rb.inputs):
            ka = self.to_a(k)
            if ka is None:
                continue
            w = _STRONG if ka[0] != "const" else _WEAK
            readers = self.readers_a.get((ka, i, rb.op), ())
            if len(readers) > _HUB:
                shift = self.pos_a[ka[1]] - self.pos_b[k[1]] if ka[0] == "node" else self._shift(rb)
                at = bisect_left(readers, self.pos_b[rb.id] + shift, key=self.pos_a.__getitem__)
                readers = readers[max(0, at - _HUB // 2):at + _HUB // 2]
            for aid in readers:
                if aid not in taken:
                    score[aid] += w
                    if ka[0] == "node":
                        offset.setdefault(aid, self.pos_a[ka[1]] - self.pos_b[k[1]])
        for cid, i, out in self.readers_b.get(rb.id, ()):
            ca = self.b_to_a.get(cid)
            if ca is None:
                continue
            ins = self.rec_a[ca].inputs
            if i < len(ins) and ins[i][0] == "node" and ins[i][2] == out:
                aid = ins[i][1]
                if aid not in taken and self.rec_a[aid].op == rb.op:
                    score[aid] += _STRONG
                    offset.setdefault(aid, self.pos_a[ca] - self.pos_b[cid])
        for out, name in rb.graph_outputs:
            aid = self.sinks_a.get((name, out, rb.op))
            if aid is not None and aid not in taken:
                score[aid] += _STRONG
        if not score:
            return None, False
        top = max(score.values())
        best = [aid for aid, s in score.items() if s == top]
        if len(best) == 1:
            return best[0], False
        pb, sig_b = self.pos_b[rb.id], self._attr_sig("b", rb)

        def rank(aid):
            ra = self.rec_a[aid]
            same = sum(1 for key, v in rb.facts.items() if ra.facts.get(key) == v)
            near = abs(self.pos_a[aid] - pb - offset.get(aid, 0))
            return (self._attr_sig("a", ra) == sig_b, same, -near, -self.pos_a[aid])

        ranked = sorted(best, key=rank, reverse=True)
        return ranked[0], rank(ranked[0])[:2] == rank(ranked[1])[:2]

    def _shift(self, rb: NodeRecord) -> int:
        """Where A has rb's neighbourhood relative to B (A position - B position of a matched
        neighbour), 0 when none is matched."""
        for k in rb.inputs:
            if k[0] == "node" and k[1] in self.b_to_a:
                return self.pos_a[self.b_to_a[k[1]]] - self.pos_b[k[1]]
        for cid, _i, _k in self.readers_b.get(rb.id, ()):
            if cid in self.b_to_a:
                return self.pos_a[self.b_to_a[cid]] - self.pos_b[cid]
        return 0

    def _attr_sig(self, side: str, r: NodeRecord) -> tuple:
        key = (side, r.id)
        sig = self._attrs.get(key)
        if sig is None:
            sig = self._attrs[key] = tuple(sorted((k, v) for k, v in r.facts.items() if k.startswith("attribute ")))
        return sig

    # ---- 3. what differs between matched nodes ---------------------------------------------------
    def compare(self, ra: NodeRecord, rb: NodeRecord) -> list[str]:
        what: list[str] = []
        for key in list(ra.facts) + [k for k in rb.facts if k not in ra.facts]:
            va, vb = ra.facts.get(key), rb.facts.get(key)
            if va != vb:
                if va is None:
                    what.append(f"{key} {vb} added")
                elif vb is None:
                    what.append(f"{key} {va} removed")
                else:
                    what.append(f"{key} {va} → {vb}")
        if len(ra.inputs) != len(rb.inputs):
            what.append(f"inputs {len(ra.inputs)} → {len(rb.inputs)}")
            return what
        for i, (ka, kb) in enumerate(zip(ra.inputs, rb.inputs)):
            if ka[0] in ("const", "none") and kb[0] == ka[0]:
                continue  # an initializer's name is no identity (exporters number them)
            if self.to_a(kb) == ka or self._rewired(ka, kb):
                continue
            if ka[0] == "node" and kb[0] == "node":
                la, lb = self.rec_a[ka[1]].label, self.rec_b[kb[1]].label
                what.append(f"input {i} comes from another node: {lb or kb[1]} instead of {la or ka[1]}")
            else:
                what.append(f"input {i} is {_input_text(kb)} instead of {_input_text(ka)}")
        return what

    def _rewired(self, ka: tuple, kb: tuple) -> bool:
        """Whether an input differs only by a removed node taken out of its path or an added one
        put into it (the reconnection is part of that edit, not a change of this node): the values
        it reads, looking through unmatched producers, meet on both sides."""
        return not self._sources(ka, "a").isdisjoint(self._sources(kb, "b"))

    def _sources(self, k: tuple, side: str) -> set:
        rec, matched = (self.rec_a, self.a_to_b) if side == "a" else (self.rec_b, self.b_to_a)
        out: set = set()
        todo = [k]
        while todo and len(out) < _SOURCE_BUDGET:
            k = todo.pop()
            if k[0] == "node" and k[1] not in matched:
                if ("unmatched", side) + k not in out:
                    out.add(("unmatched", side) + k)
                    todo.extend(rec[k[1]].inputs)
            elif k[0] in ("node", "input"):
                out.add(k if side == "a" else self.to_a(k))
        return out


def match_records(a: list[NodeRecord], b: list[NodeRecord]) -> GraphDiff:
    """Match two graphs' nodes (lists in topological order) and compare the matched pairs."""
    m = _Matcher(a, b)
    m.by_name()
    m.by_structure()
    changed: dict[Hashable, list[str]] = {}
    for rb in b:
        aid = m.b_to_a.get(rb.id)
        if aid is not None:
            what = m.compare(m.rec_a[aid], rb)
            if what:
                changed[rb.id] = what
    return GraphDiff(
        matched={ra.id: m.a_to_b[ra.id] for ra in a if ra.id in m.a_to_b},
        added=[r.id for r in b if r.id not in m.b_to_a],
        removed=[r.id for r in a if r.id not in m.a_to_b],
        changed=changed,
        labels_a={r.id: r.label or r.name or str(r.id) for r in a},
        labels_b={r.id: r.label or r.name or str(r.id) for r in b},
        by=m.by,
    )


def _input_text(k: tuple) -> str:
    return {"node": "a node's output", "const": "a constant", "none": "omitted"}.get(k[0], f"graph input '{k[-1]}'")


# ---- producers of records ------------------------------------------------------------------------

def records_from_graph(graph) -> list[NodeRecord]:
    """Records of an ONNX `Graph`'s nodes (constant-computing nodes included), ids = node ids."""
    from .viewgraph import _attr_text

    consts = graph.constant_values()
    returned = {v.name for v in graph.outputs if v.name}
    producer: dict[str, tuple] = {}
    out: list[NodeRecord] = []
    for pos, n in enumerate(graph.nodes):
        inputs = []
        for v in n.input_values:
            if v is None:
                inputs.append(("none",))
            elif v.name in producer:
                inputs.append(producer[v.name])
            elif v.name in consts:
                inputs.append(("const", v.name))
            else:
                inputs.append(("input", v.name))
        facts = {f"attribute {k}": _attr_text(v) for k, v in n.attributes.items()}
        sinks = []
        for i, v in enumerate(n.output_values):
            facts[f"output {i} shape"] = v.shape_text
            facts[f"output {i} dtype"] = v.dtype
            if v.name:
                producer[v.name] = ("node", n.id, i)
                if v.name in returned:
                    sinks.append((i, v.name))
        op = n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}.{n.op_type}"
        out.append(NodeRecord(id=n.id, name=n.name, op=op, inputs=inputs, facts=facts, label=n.name or f"{op}#{pos}",
                              graph_outputs=tuple(sinks)))
    return out


def records_from_view(view) -> list[NodeRecord]:
    """Records of any ViewGraph (ONNX, Relax or TIR stage): label as op, `data['name']` as name,
    edges as inputs (in `data['index']` order when given), detail as the compared fact."""
    inputs: dict[Hashable, list[tuple[int, tuple]]] = defaultdict(list)
    ids = {n.id for n in view.nodes}
    out_index: dict[Hashable, dict[str, int]] = defaultdict(dict)
    for e in view.edges:
        if e.src not in ids or e.dst not in ids:
            continue
        outs = out_index[e.src]
        k = outs.setdefault(e.label, len(outs))
        order = e.data.get("index", len(inputs[e.dst]))
        inputs[e.dst].append((order, ("node", e.src, k)))
    out = []
    for pos, n in enumerate(view.nodes):
        ins = [k for _, k in sorted(inputs.get(n.id, []), key=lambda t: t[0])]
        name = str(n.data.get("name") or n.data.get("tensor") or "")
        kind = n.data.get("kind")
        if kind in ("input", "output"):
            name = f"{kind}:{name}"
        out.append(NodeRecord(id=n.id, name=name, op=n.label if kind not in ("input", "output") else kind, inputs=ins,
                              facts={"detail": n.detail} if n.detail else {}, label=name or f"{n.label}#{pos}"))
    return out


def diff_graphs(a, b) -> GraphDiff:
    """Diff two ONNX Graphs (`core.model.graph.Graph`): model-level differences, then nodes."""
    d = match_records(records_from_graph(a), records_from_graph(b))
    d.model = model_changes(a, b)
    logger.debug("diff: %s (%s)", d.summary(), d.by)
    return d


def diff_views(a, b) -> GraphDiff:
    """Diff two ViewGraphs (two lowering stages, or any two drawn graphs)."""
    return match_records(records_from_view(a), records_from_view(b))
