"""Name scopes: a big graph as a tree of collapsible groups, and the view with groups collapsed.

Exporters write where a node came from into its name, and that is the structure a person knows
the model by: torch.onnx writes `/encoder/layer.3/attention/self/MatMul`, TensorFlow converters
`model/dense/MatMul`, others `encoder::layer3::MatMul`, small hand-built models `attn.q.matmul`;
torch's dynamo exporter also keeps the module path in node metadata (`pkg.torch.onnx.name_scopes`).
`scope_tree` reads those paths into a `ScopeTree`; a graph whose names carry no scopes (generated,
or stripped) gets groups from its repeated structure instead: the topological order is cut where a
single tensor is alive (between residual blocks, between layers of a chain), the runs between
cuts become blocks, and long runs of blocks are nested in ranges of at most `FAN_OUT` so no level
shows more than that many boxes.

Each `Scope` knows what a collapsed box shows: its op histogram, the tensors that enter and leave
it with their shapes, and its parameter count. `scoped_view` turns a ViewGraph (`from_graph`) plus
the set of expanded scope paths into the ViewGraph the canvas draws: every collapsed group is one
node (id `scope:PATH`, `data["kind"] == "scope"`) and the edges between two boxes, or a box and a
node, are bundled into one edge that lists its tensors. Both are linear in the graph's size.
"""
from __future__ import annotations

import ast
import logging
import math
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from ..model.meta import NODE_ID
from .scope_stacks import layer_index, mark_stacks
from .scope_summary import ScopeFacts, scope_facts
from .scope_visible import bundle_edges, scoped_view_visible
from .viewgraph import ViewGraph, ViewNode

__all__ = [
    "with_group_totals",
    "Scope",
    "ScopeTree",
    "scope_tree",
    "scope_parts",
    "scoped_view",
    "scope_node_id",
    "is_scope_id",
    "AUTO_COLLAPSE_NODES",
    "FAN_OUT",
    "NAME_SCOPES_KEY",
]

logger = logging.getLogger(__name__)

AUTO_COLLAPSE_NODES = 300  # graphs with more drawn nodes than this open with their groups collapsed
STACK_COLLAPSE_NODES = 100  # ... and graphs with layer stacks (core.views.scope_stacks) above this
DEFAULT_BOXES = 30  # a big graph's first screen: about this many boxes
FAN_OUT = 32  # structural grouping: at most this many boxes per level
STRUCTURE_MIN_NODES = 1000  # below this an unscoped graph opens flat (the canvas copes; groups would hide it)
_SCOPE = "scope:"
NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"


def scope_node_id(path: str) -> str:
    """View id of the box of the scope at `path`."""
    return _SCOPE + path


def is_scope_id(node_id: Hashable) -> bool:
    return isinstance(node_id, str) and node_id.startswith(_SCOPE)


# ---- reading scopes from names ------------------------------------------------------------------

def scope_parts(name: str, style: str) -> list[str]:
    """The scope path in a node name under a naming `style` ('/', '::' or '.'), without the last
    part (the node's own name): '/encoder/layer.3/attention/self/MatMul' -> ['encoder', 'layer.3',
    'attention', 'self']."""
    if not name or style not in name:
        return []
    parts = [p for p in name.split(style) if p]
    return parts[:-1]


def _meta_parts(text: str) -> list[str]:
    """Scope path from dynamo's `pkg.torch.onnx.name_scopes` list: each entry extends the one
    before it ('encoder', 'encoder.layer.0'); the path keeps what each adds ('layer.0')."""
    try:
        scopes = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return []
    parts: list[str] = []
    prev = ""
    for s in scopes if isinstance(scopes, list) else []:
        s = str(s)
        if not s:
            continue
        parts.append(s[len(prev) + 1:] if prev and s.startswith(prev + ".") else s)
        prev = s
    return parts


def _naming_style(names: list[str]) -> str | None:
    """The separator most node names use for scopes, if enough of them use one."""
    if not names:
        return None
    counts = {sep: sum(1 for n in names if sep in n.strip(sep)) for sep in ("/", "::", ".")}
    # '/' and '::' are unambiguous; '.' only counts when nothing else does (torch's 'layer.3' parts)
    for sep in ("/", "::"):
        if counts[sep] >= 0.3 * len(names):
            return sep
    if counts["."] >= 0.5 * len(names):
        return "."
    return None


# ---- the tree -----------------------------------------------------------------------------------

@dataclass(eq=False)
class Scope:
    """One group: a name-scope prefix (or a structural block) and the view nodes under it."""

    path: str  # parts joined by '/', '' for the root
    name: str  # what the box says: the last part (merged single-child chains: 'bert/encoder')
    parent: "Scope | None" = None
    children: list["Scope"] = field(default_factory=list)
    node_ids: list = field(default_factory=list)  # view node ids directly here, in view order
    size: int = 0  # view nodes under this scope, children included
    first: int = 0  # position of its first node in the view, for ordering
    tree: "ScopeTree | None" = field(default=None, repr=False)  # set on the root only
    _facts: ScopeFacts | None = field(default=None, repr=False)

    # What its box says, worked out on first use (core.views.scope_summary): the op histogram,
    # tensor entering / leaving -> "dims dtype", elements of the constant tensors its nodes read,
    # and the indices of the view edges with one end inside.
    @property
    def facts(self) -> ScopeFacts:
        f = self._facts
        if f is None:
            root = self
            while root.parent is not None:
                root = root.parent
            f = self._facts = scope_facts(self, root.tree)
        return f

    ops = property(lambda self: self.facts.ops)
    inputs = property(lambda self: self.facts.inputs)
    outputs = property(lambda self: self.facts.outputs)
    params = property(lambda self: self.facts.params)
    crossing = property(lambda self: self.facts.crossing)

    def walk(self) -> Iterator["Scope"]:
        """This scope and all below it, depth first, in view order."""
        stack = [self]
        while stack:
            s = stack.pop()
            yield s
            stack.extend(reversed(s.children))

    def members(self) -> list:
        """All view node ids under this scope, children included."""
        out: list = []
        for s in self.walk():
            out.extend(s.node_ids)
        return out

    def ancestors(self) -> list["Scope"]:
        """Enclosing scopes, innermost first, the root excluded."""
        out = []
        s = self.parent
        while s is not None and s.parent is not None:
            out.append(s)
            s = s.parent
        return out

    def histogram_text(self, limit: int = 4) -> str:
        top = self.ops.most_common()
        parts = [f"{op} ×{k}" if k > 1 else op for op, k in top[:limit]]
        if len(top) > limit:
            parts.append(f"+{len(top) - limit} more")
        return "  ".join(parts)


@dataclass
class ScopeTree:
    """The scopes of one view: `root` (path '') holds the nodes outside every scope."""

    root: Scope
    by_path: dict[str, Scope]
    scope_of: dict[Hashable, Scope]  # view node id -> innermost scope holding it
    source: str  # 'names:/', 'names::', 'names:.', 'metadata', 'structure' or 'none'
    view: ViewGraph | None = field(default=None, repr=False, compare=False)  # the view it was made from
    graph: object = field(default=None, repr=False, compare=False)  # the ONNX Graph (parameter counts), if given
    cache: dict = field(default_factory=dict, repr=False, compare=False)  # scoped_view's indexes of `view`

    @property
    def groups(self) -> list[Scope]:
        """Every scope but the root."""
        return [s for s in self.root.walk() if s is not self.root]

    def top_level(self) -> list[Scope]:
        return list(self.root.children)

    def path_to(self, node_id: Hashable) -> list[str]:
        """Paths of the scopes holding `node_id`, outermost first (what to expand to show it)."""
        s = self.scope_of.get(node_id)
        if s is None or s is self.root:
            if is_scope_id(node_id) and node_id[len(_SCOPE):] in self.by_path:
                s = self.by_path[node_id[len(_SCOPE):]].parent
            else:
                return []
        out = []
        while s is not None and s is not self.root:
            out.append(s.path)
            s = s.parent
        return out[::-1]

    def visible_id(self, node_id: Hashable, expanded: set[str]) -> Hashable:
        """The id that shows `node_id` when only `expanded` scopes are open: the outermost
        collapsed scope holding it, or the node itself."""
        for path in self.path_to(node_id):
            if path not in expanded:
                return scope_node_id(path)
        return node_id

    def default_expanded(self, view_size: int, boxes: int = DEFAULT_BOXES) -> set[str]:
        """What opens expanded: everything for small graphs; for big ones, and for graphs with a
        stack of layers (a torch.onnx BERT: ~180 drawn nodes), whole levels of the tree from the
        top while the first screen stays within `boxes` boxes and nodes, the layers of a stack
        never opened (a BERT: embeddings, its 12 layers, the pooler)."""
        layers = layer_index(self)
        if view_size <= AUTO_COLLAPSE_NODES and not (layers and view_size > STACK_COLLAPSE_NODES):
            return {s.path for s in self.groups}
        opened: set[str] = set()
        level = [s for s in self.root.children if id(s) not in layers]
        visible = len(self.root.children) + len(self.root.node_ids)
        while level:
            grow = sum(len(s.children) + len(s.node_ids) - 1 for s in level)
            if visible > 1 and visible + grow > boxes:
                break
            opened.update(s.path for s in level)
            visible += grow
            level = [c for s in level for c in s.children if id(c) not in layers]
        return opened


def _assign_paths(view: ViewGraph, metadata: dict | None) -> tuple[dict, str]:
    """node id -> scope parts, and where they came from."""
    kinds = [n for n in view.nodes if n.data.get("kind") == "node"]
    if metadata:
        meta = {nid: _meta_parts(text) for nid, text in metadata.items()}
        if sum(1 for p in meta.values() if p) >= 0.3 * max(len(kinds), 1):
            return meta, "metadata"
    names = [str(n.data.get("name") or "") for n in kinds]
    style = _naming_style([x for x in names if x])
    if style is not None:
        return {n.id: scope_parts(str(n.data.get("name") or ""), style) for n in kinds}, f"names:{style}"
    if len(kinds) >= STRUCTURE_MIN_NODES:
        return _structural_parts(view), "structure"
    return {}, "none"


def _structural_parts(view: ViewGraph) -> dict:
    """Scopes from repeated structure, for graphs whose names carry none.

    Cuts the view order where exactly one producer's tensor is alive: in a chain after every
    node, in a residual network between blocks. Runs of two or more nodes between cuts become
    'block N' (with one single node after it: the block's closing Relu or norm); more items than FAN_OUT at a level are nested into ranges '[a–b]'."""
    order = [n.id for n in view.nodes if n.data.get("kind") == "node"]
    pos = {nid: i for i, nid in enumerate(order)}
    n = len(order)
    last_use = [-1] * n
    for e in view.edges:
        s, d = pos.get(e.src), pos.get(e.dst)
        if s is not None and d is not None and d > last_use[s]:
            last_use[s] = d
    # alive[i]: producers at or before i whose tensor is read after i
    delta = [0] * (n + 1)
    for i, last in enumerate(last_use):
        if last > i:
            delta[i] += 1
            delta[last] -= 1
    items: list[list] = []  # runs of node ids between cuts
    run: list = []
    alive = 0
    absorbed = True
    for i in range(n):
        alive += delta[i]
        run.append(order[i])
        if alive <= 1:
            if len(run) == 1 and not absorbed:
                items[-1].append(run[0])  # a block's trailing activation / norm belongs to it
                absorbed = True
            else:
                items.append(run)
                absorbed = len(run) == 1
            run = []
    if run:
        items.append(run)
    parts: dict = {}
    labels: list[str] = []
    k = 0
    for r in items:
        if len(r) > 1:
            k += 1
            labels.append(f"block {k}")
        else:
            labels.append("")
    _nest(items, labels, [], parts, 1)
    return parts


def _range_size(n: int) -> int:
    """Items per range so that n items nest in balanced levels of at most FAN_OUT: with L levels
    needed, n^((L-1)/L) per range (60,000 nodes: 16 ranges of 3,750, of 16 of 235, ...)."""
    levels = max(1, math.ceil(math.log(n) / math.log(FAN_OUT) - 1e-9))
    size = math.ceil(n ** ((levels - 1) / levels))
    while math.ceil(n / size) > FAN_OUT:
        size += 1
    return max(1, size)


def _nest(items: list[list], labels: list[str], prefix: list[str], parts: dict, start: int) -> None:
    """Give items (runs of node ids) their scope parts under `prefix`, in ranges of <= FAN_OUT."""
    if len(items) <= FAN_OUT:
        for r, label in zip(items, labels):
            p = prefix + [label] if label else prefix
            for nid in r:
                parts[nid] = p
        return
    size = _range_size(len(items))
    for a in range(0, len(items), size):
        b = min(a + size, len(items))
        label = f"[{start + a}–{start + b - 1}]"
        _nest(items[a:b], labels[a:b], prefix + [label], parts, start + a)


def scope_tree(view: ViewGraph, graph=None, metadata: dict | None = None) -> ScopeTree:
    """The scope tree of a view (from `from_graph`); `graph` (the ONNX Graph) adds parameter
    counts and dynamo's name-scope metadata (`metadata`, node id -> its text, gives that without
    a graph). Single-node scopes dissolve into their parent, and a scope holding nothing but one
    child scope merges with it ('bert/encoder')."""
    if graph is not None:
        metadata = {}
        for node in graph.model.graph:
            text = node.metadata_props.get(NAME_SCOPES_KEY)
            if text:
                metadata[node.meta[NODE_ID]] = text
    parts_of, source = _assign_paths(view, metadata)
    root = Scope(path="", name="")
    by_path: dict[str, Scope] = {"": root}
    scope_of: dict[Hashable, Scope] = {}
    innermost: dict[tuple, Scope] = {(): root}  # scope parts -> scope (neighbours share their parts)
    for i, n in enumerate(view.nodes):
        parts = tuple(parts_of.get(n.id, ()))
        s = innermost.get(parts)
        if s is None:
            s = root
            for part in parts:
                path = f"{s.path}/{part}" if s.path else part
                child = by_path.get(path)
                if child is None:
                    child = by_path[path] = Scope(path=path, name=part, parent=s, first=i)
                    s.children.append(child)
                s = child
            innermost[parts] = s
        s.node_ids.append(n.id)
        scope_of[n.id] = s
    _simplify(root, by_path, scope_of)
    for s in list(root.walk()):
        if len(s.children) > FAN_OUT:
            _range_children(s, by_path)
    _summarize(root, view, scope_of)
    tree = ScopeTree(root=root, by_path=by_path, scope_of=scope_of, source=source if root.children else "none", view=view, graph=graph)
    root.tree = tree
    logger.debug("scope tree from %s: %d groups", tree.source, len(by_path) - 1)
    return tree


def _simplify(root: Scope, by_path: dict, scope_of: dict) -> None:
    """Dissolve groups of one node; merge a group whose only content is one child group."""
    # post-order: children first
    order = list(root.walk())
    for s in reversed(order):
        if s is root:
            continue
        total = len(s.node_ids) + sum(1 for _ in s.children)
        if not s.children and len(s.node_ids) <= 1:
            parent = s.parent
            parent.children.remove(s)
            for nid in s.node_ids:
                scope_of[nid] = parent
            parent.node_ids.extend(s.node_ids)
            del by_path[s.path]
            continue
        if total == 1 and s.children:
            child = s.children[0]
            s.name = f"{s.name}/{child.name}"
            s.children = child.children
            s.node_ids = child.node_ids
            for c in s.children:
                c.parent = s
            for nid in s.node_ids:
                scope_of[nid] = s
            del by_path[child.path]
            # descendants keep their paths (they stay unique); only the merged level goes
    for s in root.walk():
        s.children.sort(key=lambda c: c.first)  # node lists are put back in view order by _summarize


def _range_children(s: Scope, by_path: dict) -> None:
    """More than FAN_OUT child groups (a 300-layer encoder) are nested into ranges
    ('layer.0 … layer.31') so no level shows more than FAN_OUT boxes."""
    kids = s.children
    size = _range_size(len(kids))
    ranges = []
    for a in range(0, len(kids), size):
        part = kids[a:a + size]
        name = f"{part[0].name} … {part[-1].name}" if len(part) > 1 else part[0].name
        path = f"{s.path}/{name}" if s.path else name
        r = Scope(path=path, name=name, parent=s, children=part, first=part[0].first)
        for c in part:
            c.parent = r
        by_path[path] = r
        ranges.append(r)
        if len(part) > FAN_OUT:
            _range_children(r, by_path)
    s.children = ranges


def _summarize(root: Scope, view: ViewGraph, scope_of: dict) -> None:
    """Put node lists in view order and fill sizes; the rest of what a box says comes on first
    use (core.views.scope_summary)."""
    position = {n.id: i for i, n in enumerate(view.nodes)}
    order = list(root.walk())
    for s in order:
        s.node_ids.sort(key=position.__getitem__)
        s.size = len(s.node_ids) if s is not root else 0
    for s in reversed(order):  # children before parents
        p = s.parent
        if p is not None and p is not root:
            p.size += s.size


# ---- the view with collapsed groups -------------------------------------------------------------

def _params_text(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.1f}B params"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M params"
    if n >= 1e3:
        return f"{n / 1e3:.1f}k params"
    return f"{n} params" if n else "no params"


def _shape_list(tensors: dict[str, str], limit: int = 2) -> str:
    dims = [d.split(" ")[0] if d else "?" for d in tensors.values()]
    shown = ", ".join(dims[:limit])
    return shown + (f" +{len(dims) - limit}" if len(dims) > limit else "")


def group_node(scope: Scope) -> ViewNode:
    """The box of a collapsed scope: name; size and params; op histogram; shapes in and out."""
    lines = [scope.histogram_text()]
    if scope.inputs or scope.outputs:
        lines.append(f"in {_shape_list(scope.inputs) or '—'}  →  out {_shape_list(scope.outputs) or '—'}")
    tip = [f"{scope.path}  ({scope.size} nodes, {_params_text(scope.params)})", ""]
    tip += [f"{op}: {k}" for op, k in scope.ops.most_common(12)]
    tip += ["", "inputs:"] + [f"  {t}: {d}" for t, d in list(scope.inputs.items())[:8]]
    tip += ["outputs:"] + [f"  {t}: {d}" for t, d in list(scope.outputs.items())[:8]]
    tip.append("double-click or → to expand")
    return ViewNode(
        id=scope_node_id(scope.path),
        label=scope.name,
        detail=f"{scope.size} nodes · {_params_text(scope.params)}",
        category="group",
        badges=lines,
        tooltip="\n".join(tip),
        origin=[],
        data={
            "kind": "scope",
            "path": scope.path,
            "name": scope.path,
            "size": scope.size,
            "params": scope.params,
            "ops": dict(scope.ops.most_common()),
            "inputs": list(scope.inputs),
            "outputs": list(scope.outputs),
            "shapes": {**scope.inputs, **scope.outputs},  # tensor -> "dims dtype"
            "children": len(scope.children),
        },
    )


def scoped_view(view: ViewGraph, tree: ScopeTree, expanded: Iterable[str] = ()) -> ViewGraph:
    """`view` with every scope not in `expanded` (or inside a collapsed one) drawn as one box.

    Boxes take the place of their first member in the node order; edges into, out of and
    between boxes are bundled: one edge per (source, destination) pair, `data["tensors"]` listing
    the tensors it carries. Edges between plain nodes are kept as they are. The boxes' `origin`
    lists the ONNX node ids they hold (lineage and heat add up over it).

    With `view` the one `tree` was made from and most of it hidden in boxes (opening or closing
    one group of a big model), only the drawn nodes, the boxes and the edges crossing the boxes'
    borders are visited (core.views.scope_visible), not every node and edge of the model."""
    expanded = set(expanded)
    if tree.view is view and view.nodes:
        out = scoped_view_visible(view, tree, expanded, group_node, scope_node_id)
        if out is not None:
            return mark_stacks(out, tree)
    rep: dict[Hashable, str] = {}
    boxes: dict[str, Scope] = {}
    stack = list(tree.root.children)
    while stack:
        s = stack.pop()
        if s.path in expanded:
            stack.extend(s.children)
            continue
        boxes[s.path] = s
        sid = scope_node_id(s.path)
        for nid in s.members():
            rep[nid] = sid
    nodes: list[ViewNode] = []
    emitted: dict[str, ViewNode] = {}
    for n in view.nodes:
        r = rep.get(n.id)
        if r is None:
            nodes.append(n)
            continue
        box = emitted.get(r)
        if box is None:
            box = emitted[r] = group_node(boxes[r[len(_SCOPE):]])
            nodes.append(box)
        box.origin.extend(n.origin)
    edges = bundle_edges(view.edges, lambda nid: rep.get(nid, nid))
    data = dict(view.data)
    data["scopes"] = {"expanded": sorted(expanded), "boxes": len(boxes), "source": tree.source}
    return mark_stacks(ViewGraph(title=view.title, nodes=nodes, edges=edges, data=data), tree)


def with_group_totals(values: dict, view: ViewGraph | None) -> dict:
    """Heat values with each collapsed group's total (the sum over the nodes it holds) added, so
    a group box shows its compiled time when the heat overlay is on."""
    if not values or view is None:
        return values
    out = None
    for n in view.nodes:
        if n.category == "group" and n.id not in values:
            total = sum(float(values[o]) for o in n.origin if o in values)
            if total:
                if out is None:
                    out = dict(values)
                out[n.id] = total
    return out if out is not None else values

