"""What differs between two graphs: nodes matched by name, then by structure.

Two models on disk, a model before and after its rewrites, two lowering stages: the question is
always which nodes are the same node, and what happened to the rest. Matching runs in passes:

1. by name: a name that occurs once on each side, on nodes of the same op type;
2. by structure, forwards: an unmatched node whose op type and inputs (producers already matched,
   the same graph input, or a constant) equal an unmatched node's on the other side;
3. by structure, backwards: the same with the nodes that read its outputs, for what step 2 cannot
   reach (a node whose producer was replaced), then forwards again.

Matched nodes are compared (attributes, output shapes and dtypes, input count, and inputs wired to a
different matched producer); the unmatched ones are removed (only in A) or added (only in B).
The passes use dictionaries keyed by structure, so a diff is linear in the graphs' sizes.

The same algorithm serves ONNX graphs (`diff_graphs`, ids are the Graphs' node ids) and any two
ViewGraphs (`diff_views`, e.g. Relax stages of the Lowering panel; ids are view node ids).
"""
from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass, field

__all__ = ["NodeRecord", "GraphDiff", "match_records", "records_from_graph", "records_from_view", "diff_graphs", "diff_views"]

logger = logging.getLogger(__name__)


@dataclass
class NodeRecord:
    """One node as the matcher sees it.

    `inputs` holds one key per input: ("node", producer id, output index), ("input", name) for a
    graph input, ("const",) for a constant, ("none",) for an omitted optional input. `facts` maps
    what is compared ('attribute alpha', 'output 0 shape') to its text."""

    id: Hashable
    name: str
    op: str
    inputs: list[tuple] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    label: str = ""  # how reports name it: the node name, or 'Op#position'


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

    @property
    def identical(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_json(self) -> dict:
        """The CLI's object: added / removed node labels, changed nodes with what changed, matched count."""
        return {
            "added": [self.labels_b[i] for i in self.added],
            "removed": [self.labels_a[i] for i in self.removed],
            "changed": [{"node": self.labels_b[i], "what": "; ".join(w)} for i, w in self.changed.items()],
            "matched": len(self.matched),
        }

    def summary(self) -> str:
        return f"{len(self.matched)} matched, {len(self.changed)} changed, {len(self.removed)} removed, {len(self.added)} added"


def _forward_key(r: NodeRecord, producer_map: dict | None):
    """(op, inputs) with producers translated through `producer_map` (B -> A); None if one is unmatched."""
    keys = []
    for k in r.inputs:
        if k[0] == "node":
            if producer_map is not None:
                a = producer_map.get(k[1])
                if a is None:
                    return None
                k = ("node", a, k[2])
        keys.append(k)
    return (r.op, tuple(keys))


def match_records(a: list[NodeRecord], b: list[NodeRecord]) -> GraphDiff:
    """Match two graphs' nodes (lists in topological order) and compare the matched pairs."""
    b_to_a: dict[Hashable, Hashable] = {}
    a_to_b: dict[Hashable, Hashable] = {}
    by = {"name": 0, "structure": 0}

    def pair(ra: NodeRecord, rb: NodeRecord, how: str) -> None:
        a_to_b[ra.id] = rb.id
        b_to_a[rb.id] = ra.id
        by[how] += 1

    # 1. names unique on both sides, same op
    def unique(records):
        count: dict[str, int] = defaultdict(int)
        for r in records:
            if r.name:
                count[r.name] += 1
        return {r.name: r for r in records if r.name and count[r.name] == 1}

    names_a, names_b = unique(a), unique(b)
    for name, rb in names_b.items():
        ra = names_a.get(name)
        if ra is not None and ra.op == rb.op:
            pair(ra, rb, "name")

    def forward() -> None:
        index: dict[tuple, list[NodeRecord]] = defaultdict(list)
        for ra in a:
            if ra.id not in a_to_b:
                index[_forward_key(ra, None)].append(ra)
        for rb in b:
            if rb.id in b_to_a:
                continue
            key = _forward_key(rb, b_to_a)
            cands = index.get(key) if key is not None else None
            while cands:
                ra = cands.pop(0)
                if ra.id not in a_to_b:
                    pair(ra, rb, "structure")
                    break

    def consumers_of(records) -> dict:
        out: dict[Hashable, list[tuple]] = defaultdict(list)
        for r in records:
            for i, k in enumerate(r.inputs):
                if k[0] == "node":
                    out[k[1]].append((r.id, i, k[2]))
        return out

    def backward() -> None:
        cons_a, cons_b = consumers_of(a), consumers_of(b)
        index: dict[tuple, list[NodeRecord]] = defaultdict(list)
        for ra in a:
            if ra.id not in a_to_b and cons_a.get(ra.id):
                index[(ra.op, frozenset(cons_a[ra.id]))].append(ra)
        for rb in reversed(b):
            if rb.id in b_to_a or not cons_b.get(rb.id):
                continue
            uses = []
            for cid, i, k in cons_b[rb.id]:
                ca = b_to_a.get(cid)
                if ca is None:
                    break
                uses.append((ca, i, k))
            else:
                cands = index.get((rb.op, frozenset(uses)))
                while cands:
                    ra = cands.pop(0)
                    if ra.id not in a_to_b:
                        pair(ra, rb, "structure")
                        break

    forward()
    backward()
    forward()

    rec_a = {r.id: r for r in a}
    changed: dict[Hashable, list[str]] = {}
    for rb in b:
        aid = b_to_a.get(rb.id)
        if aid is None:
            continue
        what = _compare(rec_a[aid], rb, b_to_a)
        if what:
            changed[rb.id] = what
    return GraphDiff(
        matched={ra.id: a_to_b[ra.id] for ra in a if ra.id in a_to_b},
        added=[r.id for r in b if r.id not in b_to_a],
        removed=[r.id for r in a if r.id not in a_to_b],
        changed=changed,
        labels_a={r.id: r.label or r.name or str(r.id) for r in a},
        labels_b={r.id: r.label or r.name or str(r.id) for r in b},
        by=by,
    )


def _compare(ra: NodeRecord, rb: NodeRecord, b_to_a: dict) -> list[str]:
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
    else:
        for i, (ka, kb) in enumerate(zip(ra.inputs, rb.inputs)):
            if ka[0] == "node" and kb[0] == "node":
                mapped = b_to_a.get(kb[1])
                if mapped is not None and (mapped, kb[2]) != (ka[1], ka[2]):
                    what.append(f"input {i} comes from another node")
            elif ka[0] != kb[0] or (ka[0] == "input" and ka != kb):
                what.append(f"input {i} is {_input_text(kb)} instead of {_input_text(ka)}")
    return what


def _input_text(k: tuple) -> str:
    return {"node": "a node's output", "const": "a constant", "none": "omitted"}.get(k[0], f"graph input '{k[-1]}'")


# ---- producers of records ------------------------------------------------------------------------

def records_from_graph(graph) -> list[NodeRecord]:
    """Records of an ONNX `Graph`'s nodes (constant-computing nodes included), ids = node ids."""
    from .viewgraph import _attr_text

    consts = graph.constant_values()
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
                inputs.append(("const",))
            else:
                inputs.append(("input", v.name))
        facts = {f"attribute {k}": _attr_text(v) for k, v in n.attributes.items()}
        for i, v in enumerate(n.output_values):
            facts[f"output {i} shape"] = v.shape_text
            facts[f"output {i} dtype"] = v.dtype
            if v.name:
                producer[v.name] = ("node", n.id, i)
        op = n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}.{n.op_type}"
        out.append(NodeRecord(id=n.id, name=n.name, op=op, inputs=inputs, facts=facts, label=n.name or f"{op}#{pos}"))
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
    """Diff two ONNX Graphs (`core.model.graph.Graph`)."""
    d = match_records(records_from_graph(a), records_from_graph(b))
    logger.debug("diff: %s (%s)", d.summary(), d.by)
    return d


def diff_views(a, b) -> GraphDiff:
    """Diff two ViewGraphs (two lowering stages, or any two drawn graphs)."""
    return match_records(records_from_view(a), records_from_view(b))
