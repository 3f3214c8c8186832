"""Layered (top-to-bottom) layout of a ViewGraph: where each box goes and how each edge bends.

Two methods, one result type:

* ``"dot"``: Graphviz's `dot` (the ``graphviz-pure`` port shipped in the venv), run as a subprocess
  with ``-Tplain``. Best crossing minimisation and spline routing, fast for model-sized graphs
  (ResNet-50's 178 drawn nodes: ~0.1 s), but super-linear: 0.3 s at 300 nodes, 0.7 s at 1,000,
  ~40 s at 10,000.
* ``"layered"``: a compact Sugiyama layout in pure Python (longest-path layering, dummy nodes for
  long edges, barycentre ordering sweeps, and x placement by isotonic regression so every box sits as
  close to its neighbours' median as the row allows; boxes outweigh edge bends, long edges run
  straight through rows, ports spread along box sides). 670 nodes in ~0.1 s, 10,000 in ~1 s.

``method="auto"`` picks `dot` up to `DOT_NODE_LIMIT` nodes (measured: benchmarks/canvas.py) and
falls back to `layered` beyond it, or when `dot` is missing, fails, or runs past its time budget.
The environment variable MLCWB_LAYOUT=dot|layered overrides the automatic choice.

No Qt here: box sizes come in from the caller (the canvas measures its labels with its fonts), so
the same layout serves the screenshot command, tests and scripts. Coordinates are in scene units
(1 unit = 1 pixel at 100 %), y grows downwards. Long work can be cancelled through a callback.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Cancelled
from .viewgraph import ViewGraph

__all__ = ["Box", "Layout", "LayoutCancelled", "layout", "stub_route", "find_dot", "DOT_NODE_LIMIT", "DOT_TIME_BUDGET_S"]

logger = logging.getLogger(__name__)

# dot's time grows super-linearly (2-core dev machine: ~0.1 s at 300 drawn nodes, 0.2-0.5 s at 670,
# 40 s at 10,000; `benchmarks/canvas.py` prints the sweep), the layered fallback's linearly (0.13 s
# at 670, ~2 s at 10,000). Up to this size dot's better crossing reduction is worth its time within
# the 1 s open budget; above it the fallback draws.
DOT_NODE_LIMIT = 500
# A dot run that takes longer than this is abandoned for the fallback.
DOT_TIME_BUDGET_S = 8.0

NODE_SEP = 18.0  # horizontal gap between boxes
RANK_SEP = 34.0  # vertical gap between rows
STUB_LENGTH = 20.0  # a stub edge's length (core.views.scope_stacks), within one row gap


# raised inside `layout` when its `cancel` callback returns True: the one cancel error of core
# (core.errors.Cancelled), under the name older callers import
LayoutCancelled = Cancelled


@dataclass
class Box:
    """A laid-out node: centre (x, y) and size, in scene units."""

    x: float
    y: float
    w: float
    h: float


@dataclass
class Layout:
    """Positions for every node and a route for every edge (parallel to `view.edges`).

    An edge route is a cubic Bézier chain: points p0, c1, c2, p1, c1, c2, p2, ... (3k+1 points),
    starting at the source box and ending at the destination box.
    """

    boxes: dict[Hashable, Box]
    routes: list[list[tuple[float, float]]]
    width: float
    height: float
    method: str
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def find_dot() -> str | None:
    """The `dot` executable: graphviz-pure next to this Python (the venv), else on PATH."""
    exe_dir = Path(sys.executable).parent
    for name in ("graphviz-pure", "dot"):
        cand = exe_dir / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return shutil.which("graphviz-pure") or shutil.which("dot")


def layout(
    view: ViewGraph,
    sizes: Mapping[Hashable, tuple[float, float]],
    method: str = "auto",
    cancel: Callable[[], bool] | None = None,
    progress: Callable[[float], None] | None = None,
    direction: str = "TB",
) -> Layout:
    """Lay `view` out top to bottom (`direction="TB"`) or left to right ("LR").
    `sizes[id] = (w, h)`; `method` is auto, dot or layered.

    Left to right is the top-to-bottom layout of the boxes turned on their side (sizes swapped),
    mirrored about the diagonal: rows become columns, so wide screens hold long chains."""
    if direction not in ("TB", "LR"):
        raise ValueError(f"unknown layout direction {direction!r}")
    if direction == "LR":
        turned = layout(view, {k: (h, w) for k, (w, h) in sizes.items()}, method, cancel, progress)
        return _transposed(turned)
    t0 = time.perf_counter()
    cancel = cancel or (lambda: False)
    progress = progress or (lambda f: None)
    notes: list[str] = []
    result: Layout | None = None
    if method == "auto" and os.environ.get("MLCWB_LAYOUT") in ("dot", "layered"):
        method = os.environ["MLCWB_LAYOUT"]  # to compare the two on a given model
    if method not in ("auto", "dot", "layered"):
        raise ValueError(f"unknown layout method {method!r}")
    if any(e.data.get("stub") for e in view.edges):
        return _with_stubs(view, sizes, method, cancel, progress)
    use_dot = method == "dot" or (method == "auto" and len(view.nodes) <= DOT_NODE_LIMIT)
    if use_dot:
        dot = find_dot()
        if dot is None:
            notes.append("dot not found; used the layered fallback")
        else:
            try:
                result = _dot_layout(view, sizes, dot, cancel, progress, None if method == "dot" else DOT_TIME_BUDGET_S)
            except Cancelled:
                raise
            except _DotFailed as e:
                notes.append(f"dot: {e}; used the layered fallback")
                logger.info("dot layout failed (%s); falling back", e)
    if result is None:
        result = _layered_layout(view, sizes, cancel, progress)
    result.seconds = time.perf_counter() - t0
    result.notes = notes + result.notes
    progress(1.0)
    return result


def _with_stubs(view, sizes, method, cancel, progress) -> Layout:
    """Lay out `view` without its stub edges (core.views.scope_stacks: one tensor feeding every
    layer of a stack), then give each stub a short route into the top-left of its reader."""
    kept = [e for e in view.edges if not e.data.get("stub")]
    inner = layout(ViewGraph(title=view.title, nodes=view.nodes, edges=kept, data=view.data), sizes, method, cancel, progress)
    routes = iter(inner.routes)
    out: list[list[tuple[float, float]]] = []
    for e in view.edges:
        out.append(stub_route(inner.boxes.get(e.dst)) if e.data.get("stub") else next(routes))
    inner.routes = out
    return inner


def stub_route(dst: Box | None) -> list[tuple[float, float]]:
    """A stub edge: a short vertical arrow into the top of `dst`, near its left end."""
    if dst is None:
        return []
    x = dst.x - dst.w / 2 + min(14.0, dst.w / 4)
    top = dst.y - dst.h / 2
    y0 = top - STUB_LENGTH
    return [(x, y0), (x, y0 + STUB_LENGTH / 3), (x, top - STUB_LENGTH / 3), (x, top)]


def _transposed(lo: Layout) -> Layout:
    """The layout mirrored about the diagonal (x <-> y), boxes back to their own width and height."""
    boxes = {k: Box(b.y, b.x, b.h, b.w) for k, b in lo.boxes.items()}
    routes = [[(y, x) for x, y in pts] for pts in lo.routes]
    return Layout(boxes, routes, lo.height, lo.width, lo.method, lo.seconds, lo.notes)


# ---- dot -------------------------------------------------------------------------------------


class _DotFailed(Exception):
    pass


def _dot_layout(view, sizes, dot, cancel, progress, budget_s) -> Layout:
    index = {n.id: i for i, n in enumerate(view.nodes)}
    lines = [
        "digraph G {",
        f"graph [rankdir=TB, nodesep={NODE_SEP / 72:.3f}, ranksep={RANK_SEP / 72:.3f}, splines=spline, outputorder=edgesfirst];",
        "node [shape=box, fixedsize=true, label=\"\"];",
    ]
    for n in view.nodes:
        w, h = sizes[n.id]
        column = n.data.get("column")  # the layers of one stack (core.views.scope_stacks): one straight column
        group = f", group=\"c{_quoted(column)}\"" if column is not None else ""
        lines.append(f"n{index[n.id]} [width={w / 72:.4f}, height={h / 72:.4f}{group}];")
    for e in view.edges:
        if e.src in index and e.dst in index:
            lines.append(f"n{index[e.src]} -> n{index[e.dst]};")
    lines.append("}")
    src = "\n".join(lines)
    progress(0.1)
    try:
        proc = subprocess.Popen([dot, "-Tplain"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise _DotFailed(f"cannot run {dot}: {e}") from None
    import threading

    out: dict[str, str] = {}

    def communicate() -> None:
        out["stdout"], out["stderr"] = proc.communicate(src)

    t = threading.Thread(target=communicate, daemon=True)
    t.start()
    start = time.perf_counter()
    while t.is_alive():
        t.join(0.05)
        if cancel():
            proc.kill()
            t.join()
            raise Cancelled("layout cancelled.")
        elapsed = time.perf_counter() - start
        if budget_s is not None and elapsed > budget_s:
            proc.kill()
            t.join()
            raise _DotFailed(f"took over {budget_s:.0f} s")
        progress(min(0.8, 0.1 + 0.7 * elapsed / (budget_s or 10.0)))
    if proc.returncode != 0:
        raise _DotFailed((out.get("stderr") or "failed").strip().splitlines()[0] if out.get("stderr") else f"exit {proc.returncode}")
    return _parse_plain(view, sizes, index, out["stdout"])


def _quoted(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')


def _parse_plain(view, sizes, index, text: str) -> Layout:
    height = 0.0
    width = 0.0
    boxes: dict[Hashable, Box] = {}
    ids = [n.id for n in view.nodes]
    pending: dict[tuple[int, int], list[list[tuple[float, float]]]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "graph":
            width, height = float(parts[2]) * 72, float(parts[3]) * 72
        elif parts[0] == "node":
            i = int(parts[1][1:])
            nid = ids[i]
            w, h = sizes[nid]
            boxes[nid] = Box(float(parts[2]) * 72, height - float(parts[3]) * 72, w, h)
        elif parts[0] == "edge":
            a, b = int(parts[1][1:]), int(parts[2][1:])
            n = int(parts[3])
            pts = [(float(parts[4 + 2 * k]) * 72, height - float(parts[5 + 2 * k]) * 72) for k in range(n)]
            pending.setdefault((a, b), []).append(pts)
    routes: list[list[tuple[float, float]]] = []
    for e in view.edges:
        if e.src not in index or e.dst not in index:
            routes.append([])
            continue
        key = (index[e.src], index[e.dst])
        lst = pending.get(key)
        pts = lst.pop(0) if lst else []
        if pts:
            pts = _clip_route(pts, boxes[e.src], boxes[e.dst])
        else:
            pts = _straight(boxes[e.src], boxes[e.dst])
        routes.append(pts)
    return Layout(boxes, routes, width, height, "dot")


def _clip_route(pts, src: Box, dst: Box):
    """dot's -Tplain splines stop where the arrowhead would start; extend them to the box."""
    pts = list(pts)
    (xa, ya), (xb, yb) = pts[-2], pts[-1]
    top = dst.y - dst.h / 2
    dx, dy = xb - xa, yb - ya
    n = (dx * dx + dy * dy) ** 0.5 or 1.0
    dx, dy = dx / n, dy / n
    if dy > 0.2 and yb < top:
        t = (top - yb) / dy
        tx, ty = xb + dx * t, top
        tx = min(max(tx, dst.x - dst.w / 2 + 2), dst.x + dst.w / 2 - 2)
    else:  # enters from the side: aim at the box's nearest edge point
        tx = min(max(xb, dst.x - dst.w / 2), dst.x + dst.w / 2)
        ty = min(max(yb, dst.y - dst.h / 2), dst.y + dst.h / 2)
    if abs(tx - xb) + abs(ty - yb) > 0.5:
        pts += [(xb + (tx - xb) / 3, yb + (ty - yb) / 3), (xb + 2 * (tx - xb) / 3, yb + 2 * (ty - yb) / 3), (tx, ty)]
    return pts


def _straight(src: Box, dst: Box):
    p0 = (src.x, src.y + src.h / 2)
    p1 = (dst.x, dst.y - dst.h / 2)
    dy = (p1[1] - p0[1]) / 3
    return [p0, (p0[0], p0[1] + dy), (p1[0], p1[1] - dy), p1]


# ---- layered fallback ------------------------------------------------------------------------


def _layered_layout(view, sizes, cancel, progress) -> Layout:
    ids = [n.id for n in view.nodes]
    index = {nid: i for i, nid in enumerate(ids)}
    n_real = len(ids)
    succ: list[list[int]] = [[] for _ in range(n_real)]
    pred: list[list[int]] = [[] for _ in range(n_real)]
    edge_pairs: list[tuple[int, int] | None] = []
    for e in view.edges:
        a, b = index.get(e.src), index.get(e.dst)
        if a is None or b is None or a == b:
            edge_pairs.append(None)
            continue
        edge_pairs.append((a, b))
        succ[a].append(b)
        pred[b].append(a)

    # 1. topological order (cycles broken by dropping back edges found by Kahn's leftovers)
    indeg = [len(p) for p in pred]
    order: list[int] = [i for i in range(n_real) if indeg[i] == 0]
    head = 0
    seen = [False] * n_real
    for i in order:
        seen[i] = True
    while True:
        while head < len(order):
            v = order[head]
            head += 1
            for s in succ[v]:
                indeg[s] -= 1
                if indeg[s] == 0 and not seen[s]:
                    seen[s] = True
                    order.append(s)
        if len(order) == n_real:
            break
        # a cycle: release the first unseen node (its remaining in-edges become back edges)
        v = next(i for i in range(n_real) if not seen[i])
        seen[v] = True
        order.append(v)
    pos_in_order = [0] * n_real
    for k, v in enumerate(order):
        pos_in_order[v] = k
    # 2. layering: longest path from the sources, then sources move down next to their first use
    layer = [0] * n_real
    for v in order:
        for p in pred[v]:
            if pos_in_order[p] < pos_in_order[v] and layer[p] + 1 > layer[v]:
                layer[v] = layer[p] + 1
    for v in reversed(order):
        fwd = [layer[s] for s in succ[v] if pos_in_order[s] > pos_in_order[v]]
        if fwd and not pred[v]:
            layer[v] = max(layer[v], min(fwd) - 1)
    if cancel():
        raise Cancelled("layout cancelled.")
    progress(0.15)

    # 3. dummy nodes for edges spanning several layers
    n_layers = (max(layer) + 1) if layer else 0
    up: list[list[int]] = [list() for _ in range(n_real)]  # neighbours one layer above
    down: list[list[int]] = [list() for _ in range(n_real)]  # neighbours one layer below
    node_layer = list(layer)
    chains: list[list[int]] = []  # per edge: the node sequence it passes through
    width_of = [sizes[nid][0] for nid in ids]
    height_of = [sizes[nid][1] for nid in ids]
    for pair in edge_pairs:
        if pair is None:
            chains.append([])
            continue
        a, b = pair
        la, lb = node_layer[a], node_layer[b]
        if lb < la:  # back edge of a broken cycle: route it as drawn, no dummies
            chains.append([a, b])
            continue
        chain = [a]
        prev = a
        for lyr in range(la + 1, lb):
            d = len(node_layer)
            node_layer.append(lyr)
            up.append([prev])
            down.append([])
            width_of.append(2.0)
            height_of.append(0.0)
            down[prev].append(d)
            chain.append(d)
            prev = d
        if lb > la:
            down[prev].append(b)
            up[b].append(prev)
        chain.append(b)
        chains.append(chain)
    total = len(node_layer)
    layers: list[list[int]] = [[] for _ in range(n_layers)]
    # initial order: depth-first from the sources keeps chains together
    placed = [False] * total
    stack = [v for v in reversed(order) if not up[v]]
    visit_order: list[int] = []
    while stack:
        v = stack.pop()
        if placed[v]:
            continue
        placed[v] = True
        visit_order.append(v)
        stack.extend(reversed(down[v]))
    visit_order.extend(v for v in range(total) if not placed[v])
    for v in visit_order:
        layers[node_layer[v]].append(v)
    progress(0.25)

    # 4. crossing reduction: barycentre sweeps
    rank = [0] * total
    for lyr in layers:
        for k, v in enumerate(lyr):
            rank[v] = k
    huge = total > 12000  # a 10,000-node model: fewer refinement passes keep it within seconds
    sweeps = 2 if huge else 4
    for it in range(sweeps):
        if cancel():
            raise Cancelled("layout cancelled.")
        for rng, nbrs in ((range(1, n_layers), up), (range(n_layers - 2, -1, -1), down)):
            for li in rng:
                lyr = layers[li]
                keyed = []
                for v in lyr:
                    nb = nbrs[v]
                    keyed.append((sum(rank[u] for u in nb) / len(nb) if nb else rank[v], rank[v], v))
                keyed.sort()
                lyr[:] = [v for _, _, v in keyed]
                for k, v in enumerate(lyr):
                    rank[v] = k
        progress(0.25 + 0.35 * (it + 1) / sweeps)

    # 5. x placement: rows pack left to right, then sweeps pull each box towards its neighbours
    x = [0.0] * total
    for lyr in layers:
        cur = 0.0
        for v in lyr:
            x[v] = cur + width_of[v] / 2
            cur += width_of[v] + NODE_SEP
    # centre each row on 0 so that the first sweeps do not drag everything to the left
    for lyr in layers:
        if lyr:
            mid = (x[lyr[0]] + x[lyr[-1]]) / 2
            for v in lyr:
                x[v] -= mid
    passes = [(range(1, n_layers), up), (range(n_layers - 2, -1, -1), down)] * (2 if huge else 3)
    passes.append((range(n_layers), None))
    for k, (rng, nbrs) in enumerate(passes):
        if cancel():
            raise Cancelled("layout cancelled.")
        for li in rng:
            lyr = layers[li]
            if not lyr:
                continue
            desired = []
            weights = []
            for v in lyr:
                nb = (up[v] + down[v]) if nbrs is None else nbrs[v]
                if v < n_real and len(nb) > 1:
                    # boxes follow boxes: bends of long edges move aside instead of dragging the
                    # main chain sideways (which makes deep residual nets drift diagonally)
                    real = [u for u in nb if u < n_real]
                    if real:
                        nb = real
                if nb:
                    xs = sorted(x[u] for u in nb)
                    m = len(xs)
                    med = xs[m // 2] if m % 2 else (xs[m // 2 - 1] + xs[m // 2]) / 2
                    desired.append(med)
                    # boxes weigh more than edge bends: when a box and a long edge compete for
                    # the same spot, the box keeps its column and the edge steps aside
                    weights.append((0.05 if v >= n_real else 1.0) * m ** 0.5)
                else:
                    desired.append(x[v])
                    weights.append(0.1)
            gaps = [0.0]
            for a, b in zip(lyr, lyr[1:]):
                gaps.append(gaps[-1] + (width_of[a] + width_of[b]) / 2 + (NODE_SEP if a < n_real or b < n_real else 6.0))
            placed_x = _isotonic([d - g for d, g in zip(desired, gaps)], weights)
            for v, px, g in zip(lyr, placed_x, gaps):
                x[v] = px + g
        progress(0.6 + 0.3 * (k + 1) / len(passes))

    # 5b. straighten long edges: a chain of bends moves to one x when no neighbour is in the way
    for chain in chains:
        inner = chain[1:-1]
        if len(inner) < 2:
            continue
        xs = [x[d] for d in inner]
        mid = (x[chain[0]] + x[chain[-1]]) / 2
        target = max(xs) if sum(xs) / len(xs) >= mid else min(xs)
        ok = True
        for d in inner:
            lyr = layers[node_layer[d]]
            k = rank[d]
            if k + 1 < len(lyr):
                r = lyr[k + 1]
                if target > x[r] - (width_of[r] + width_of[d]) / 2 - (NODE_SEP if r < n_real else 6.0):
                    ok = False
                    break
            if k > 0:
                left = lyr[k - 1]
                if target < x[left] + (width_of[left] + width_of[d]) / 2 + (NODE_SEP if left < n_real else 6.0):
                    ok = False
                    break
        if ok:
            for d in inner:
                x[d] = target

    # 6. y per layer and the final frame
    min_x = min((x[v] - width_of[v] / 2 for v in range(total)), default=0.0)
    max_x = max((x[v] + width_of[v] / 2 for v in range(total)), default=0.0)
    y_of_layer = []
    half_band = []
    cur = 0.0
    for lyr in layers:
        hmax = max((height_of[v] for v in lyr), default=0.0)
        y_of_layer.append(cur + hmax / 2)
        half_band.append(hmax / 2)
        cur += hmax + RANK_SEP
    margin = 8.0
    ox = -min_x + margin
    boxes = {ids[v]: Box(x[v] + ox, y_of_layer[node_layer[v]] + margin, width_of[v], height_of[v]) for v in range(n_real)}
    # ports: a box's outgoing edges leave its bottom side spread out in the order of where they
    # head (and incoming ones enter the top likewise), instead of all from one centre point
    def toward(chain, k):
        v = chain[k]
        return x[v] if v >= n_real else boxes[ids[v]].x - ox

    out_ports: dict[int, list[tuple[float, int]]] = {}
    in_ports: dict[int, list[tuple[float, int]]] = {}
    for k, chain in enumerate(chains):
        if len(chain) >= 2 and chain[0] != chain[-1]:
            out_ports.setdefault(chain[0], []).append((toward(chain, 1), k))
            in_ports.setdefault(chain[-1], []).append((toward(chain, -2), k))
    port_x: dict[tuple[str, int], float] = {}
    for side, table in (("out", out_ports), ("in", in_ports)):
        for v, lst in table.items():
            if len(lst) < 2:
                continue
            lst.sort()
            spread = min(width_of[v] * 0.6, 16.0 * (len(lst) - 1))
            for j, (_, k) in enumerate(lst):
                port_x[(side, k)] = -spread / 2 + spread * j / (len(lst) - 1)

    routes: list[list[tuple[float, float]]] = []
    for k, (e, chain) in enumerate(zip(view.edges, chains)):
        if not chain:
            routes.append([])
            continue
        a, b = chain[0], chain[-1]
        ba, bb = boxes[ids[a]], boxes[ids[b]]
        pts = [(ba.x + port_x.get(("out", k), 0.0), ba.y + ba.h / 2)]
        for d in chain[1:-1]:
            # a long edge runs straight down through each row it crosses and bends only in the
            # gaps between rows, so it never cuts through a box beside it
            lyr = node_layer[d]
            pts.append((x[d] + ox, y_of_layer[lyr] + margin - half_band[lyr]))
            pts.append((x[d] + ox, y_of_layer[lyr] + margin + half_band[lyr]))
        pts.append((bb.x + port_x.get(("in", k), 0.0), bb.y - bb.h / 2))
        routes.append(_smooth(pts))
    return Layout(boxes, routes, max_x - min_x + 2 * margin, cur - RANK_SEP + 2 * margin, "layered")


def _isotonic(targets: list[float], weights: list[float]) -> list[float]:
    """Weighted least-squares non-decreasing fit (pool adjacent violators), O(n)."""
    means: list[float] = []
    wsum: list[float] = []
    counts: list[int] = []
    for t, w in zip(targets, weights):
        means.append(t)
        wsum.append(w)
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            w2 = wsum[-2] + wsum[-1]
            m2 = (means[-2] * wsum[-2] + means[-1] * wsum[-1]) / w2
            c2 = counts[-2] + counts[-1]
            means[-2:] = [m2]
            wsum[-2:] = [w2]
            counts[-2:] = [c2]
    out: list[float] = []
    for m, c in zip(means, counts):
        out.extend([m] * c)
    return out


def _smooth(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A polyline through `pts` as a smooth cubic Bézier chain (vertical tangents at the ends and
    at each bend point, so edges leave and enter boxes vertically and flow like dot's splines)."""
    out = [pts[0]]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        dy = (y1 - y0) / 2
        out.extend([(x0, y0 + dy), (x1, y1 - dy), (x1, y1)])
    return out

