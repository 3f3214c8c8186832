"""What the canvas draws: a plain, display-oriented graph, independent of where it came from.

The canvas never reads an ONNX Graph or a TVM IRModule directly. Producers turn what they have
into a `ViewGraph`:

* `core.viewgraph.from_graph(graph)` for an ONNX model (constants/initializers folded into
  their consumers as badges, not laid out as separate nodes);
* the lowering stages (core.lowering) for Relax / TIR / target code, with `origin` pointing back
  to the ONNX node ids each binding or kernel came from (lineage).

Node ids are unique within one ViewGraph. For views of an ONNX Graph they are the Graph's node
ids (ints), so a selection on the canvas is a selection in the model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

__all__ = ["ViewNode", "ViewEdge", "ViewGraph", "CATEGORIES"]

# Op categories the canvas colours by.
CATEGORIES = (
    "convolution",
    "matmul",
    "elementwise",
    "activation",
    "normalization",
    "pooling",
    "shape",
    "io",
    "other",
)


@dataclass
class ViewNode:
    id: Hashable
    label: str  # main text: op type, Relax op, kernel name
    detail: str = ""  # second line: key attribute or output shape
    category: str = "other"  # one of CATEGORIES
    badges: list[str] = field(default_factory=list)  # folded constants, e.g. "W 64×3×7×7"
    tooltip: str = ""
    origin: list[int] = field(default_factory=list)  # lineage: ONNX node ids this came from
    data: dict = field(default_factory=dict)  # producer-specific extras (IR line span, ...)


@dataclass
class ViewEdge:
    src: Hashable
    dst: Hashable
    label: str = ""  # tensor name
    detail: str = ""  # shape/dtype text, shown on hover or when zoomed in
    data: dict = field(default_factory=dict)


@dataclass
class ViewGraph:
    title: str
    nodes: list[ViewNode]
    edges: list[ViewEdge]
    data: dict = field(default_factory=dict)

    def node(self, node_id: Hashable) -> ViewNode:
        index = self.__dict__.setdefault("_index", {n.id: n for n in self.nodes})
        return index[node_id]
