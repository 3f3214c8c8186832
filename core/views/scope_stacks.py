"""Layer stacks: the repeated layers of a model (BERT's `encoder/layer.0` … `layer.11`, GPT-2's
`h.0` … `h.11`) and what the collapsed view does with them.

A stack is a group whose child groups are numbered copies of one name ('layer.0', 'layer.1', …;
'h.3'; 'block 2'). A graph with a stack opens with its layers collapsed whatever its size
(`ScopeTree.default_expanded`): a 12-layer BERT from torch.onnx draws ~180 nodes, few enough to
lay out, too many to read. `mark_stacks` adds two hints to a collapsed view that
core.views.layout reads:

* `node.data["column"]` on each collapsed layer box: the stack's path, so the layers of one stack
  sit in one straight column instead of a staircase;
* `edge.data["stub"]` on the edges of one tensor that feeds `STUB_MIN_LAYERS` or more layers of
  one stack (BERT's attention mask, position ids): the first layer keeps its edge, the others get
  a short stub labelled with where the tensor comes from (`edge.data["stub_label"]`) instead of a
  long edge across every box.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Hashable
from dataclasses import replace

from .viewgraph import ViewGraph

__all__ = ["STUB_MIN_LAYERS", "layer_index", "has_stack", "mark_stacks"]

logger = logging.getLogger(__name__)

STUB_MIN_LAYERS = 3  # a tensor read by this many layers of one stack is drawn as stubs
_NUMBERED = re.compile(r"^(.*?)(\d+)$")
_SCOPE = "scope:"


def _stem(name: str) -> str | None:
    m = _NUMBERED.match(name)
    return m.group(1) if m else None


def layer_index(tree) -> dict[int, tuple[str, int]]:
    """id(scope) -> (path of its stack, position in the stack) for every layer of every stack.
    Made once per tree (cached in `tree.cache`)."""
    index = tree.cache.get("layers")
    if index is None:
        index = {}
        for s in tree.root.walk():
            kids = s.children
            if len(kids) < 2:
                continue
            stems = Counter(_stem(c.name) for c in kids)
            stem, k = stems.most_common(1)[0]
            if stem is None or k < 2 or 2 * k < len(kids):
                continue
            pos = 0
            for c in kids:
                if _stem(c.name) == stem:
                    index[id(c)] = (s.path, pos)
                    pos += 1
        tree.cache["layers"] = index
    return index


def has_stack(tree) -> bool:
    return bool(layer_index(tree))


def _layer_of(tree, layers: dict, memo: dict, nid: Hashable) -> tuple[str, int] | None:
    """The (stack, position) of the layer holding drawn node or box `nid`, if any."""
    if isinstance(nid, str) and nid.startswith(_SCOPE):
        s = tree.by_path.get(nid[len(_SCOPE):])
    else:
        s = tree.scope_of.get(nid)
    if s is None:
        return None
    key = id(s)
    if key in memo:
        return memo[key]
    found = None
    t = s
    while t is not None:
        found = layers.get(id(t))
        if found is not None:
            break
        t = t.parent
    memo[key] = found
    return found


def _origin_label(view: ViewGraph, src: Hashable, incoming: dict) -> str:
    """What a stub says: the graph input the source is computed from through a chain of
    one-input steps (BERT's mask: attention_mask -> Unsqueeze -> Cast -> Sub -> Mul), else the
    source's own label."""
    node = view.node(src)
    cur = src
    for _ in range(8):
        preds = incoming.get(cur, ())
        if len(preds) != 1:
            break
        cur = preds[0]
        n = view.node(cur)
        if n.data.get("kind") == "input":
            return n.label
    return node.label


def mark_stacks(view: ViewGraph, tree) -> ViewGraph:
    """`view` (a scoped view of `tree`'s graph) with layer boxes put in columns and fan-out
    edges into layers turned into stubs (new node data / edge copies; shared objects unchanged)."""
    layers = layer_index(tree)
    if not layers:
        return view
    memo: dict = {}
    for n in view.nodes:
        if n.data.get("kind") == "scope":
            s = tree.by_path.get(n.data.get("path"))
            if s is not None and id(s) in layers:
                n.data["column"] = layers[id(s)][0]  # boxes are made fresh for each view
    fans: dict[tuple, dict[int, list[int]]] = {}  # (source, stack) -> layer position -> edge indices
    for k, e in enumerate(view.edges):
        d = _layer_of(tree, layers, memo, e.dst)
        if d is None or _layer_of(tree, layers, memo, e.src) == d:
            continue
        fans.setdefault((e.src, d[0]), {}).setdefault(d[1], []).append(k)
    stubs: dict[int, Hashable] = {}
    for (src, _stack), by_layer in fans.items():
        if len(by_layer) < STUB_MIN_LAYERS:
            continue
        first = min(by_layer)
        for pos, ks in by_layer.items():
            if pos != first:
                for k in ks:
                    stubs[k] = src
    if not stubs:
        return view
    incoming: dict = {}
    for e in view.edges:
        incoming.setdefault(e.dst, []).append(e.src)
    labels: dict = {}
    edges = list(view.edges)
    for k, src in stubs.items():
        if src not in labels:
            labels[src] = _origin_label(view, src, incoming)
        e = edges[k]
        edges[k] = replace(e, data={**e.data, "stub": True, "stub_label": labels[src]})
    logger.debug("%d fan-out edges drawn as stubs", len(stubs))
    return ViewGraph(title=view.title, nodes=view.nodes, edges=edges, data=view.data)
