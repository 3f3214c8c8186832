"""What the canvas draws: a plain, display-oriented graph, independent of where it came from.

The canvas never reads an ONNX Graph or a TVM IRModule directly. Producers turn what they have
into a `ViewGraph`:

* `core.views.viewgraph.from_graph(graph)` for an ONNX model (constants/initializers folded into
  their consumers as badges, not laid out as separate nodes);
* the lowering stages (core.compiler.lowering) for Relax / TIR / target code, with `origin` pointing back
  to the ONNX node ids each binding or kernel came from (lineage).

Node ids are unique within one ViewGraph. For views of an ONNX Graph they are the Graph's node
ids (ints), so a selection on the canvas is a selection in the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable

__all__ = ["ViewNode", "ViewEdge", "ViewGraph", "CATEGORIES", "from_graph", "op_category", "input_node_id", "output_node_id", "find_nodes", "node_facts", "tensor_facts", "constant_array"]

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
    "group",  # a collapsed name scope (core.views.scopes)
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
        """The node with id `node_id` (KeyError if none). The id index is built on first use and
        kept: views are not changed once made (setdefault would rebuild it on every call)."""
        index = self.__dict__.get("_index")
        if index is None or len(index) != len(self.nodes):
            index = self.__dict__["_index"] = {n.id: n for n in self.nodes}
        return index[node_id]


# ---- ONNX Graph -> ViewGraph ---------------------------------------------------------------------

_CATEGORY_OF_OP: dict[str, str] = {}
for _cat, _ops in {
    "convolution": "Conv ConvTranspose ConvInteger QLinearConv DeformConv",
    "matmul": "MatMul Gemm MatMulInteger QLinearMatMul Einsum FusedMatMul Attention MultiHeadAttention",
    "elementwise": (
        "Add Sub Mul Div Pow Sqrt Reciprocal Neg Abs Exp Log Min Max Mean Sum Equal Less Greater LessOrEqual "
        "GreaterOrEqual And Or Xor Not Where Floor Ceil Round Sign Mod Erf Cos Sin Tan Clip Cast CastLike BitShift "
        "IsNaN IsInf Acos Asin Atan Sinh Cosh Asinh Acosh Atanh"
    ),
    "activation": (
        "Relu LeakyRelu PRelu Sigmoid HardSigmoid Tanh Softmax LogSoftmax Elu Selu Celu Gelu FastGelu BiasGelu "
        "HardSwish Mish Softplus Softsign ThresholdedRelu Hardmax QuickGelu"
    ),
    "normalization": (
        "BatchNormalization LayerNormalization InstanceNormalization GroupNormalization LRN "
        "LpNormalization MeanVarianceNormalization SkipLayerNormalization SimplifiedLayerNormalization RMSNormalization"
    ),
    "pooling": "MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool MaxRoiPool RoiAlign MaxUnpool",
    "shape": (
        "Reshape Transpose Flatten Squeeze Unsqueeze Concat Split Slice Gather GatherElements GatherND Scatter "
        "ScatterElements ScatterND Expand Tile Pad Shape Size Identity DepthToSpace SpaceToDepth Resize Upsample "
        "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL2 ReduceL1 ReduceLogSumExp ReduceSumSquare "
        "ArgMax ArgMin TopK NonZero Range ConstantOfShape Compress OneHot Trilu CumSum"
    ),
}.items():
    for _op in _ops.split():
        _CATEGORY_OF_OP[_op] = _cat


def op_category(op_type: str) -> str:
    """The canvas colour group of an ONNX op type ('other' for anything unlisted)."""
    return _CATEGORY_OF_OP.get(op_type, "other")


def _dims_text(shape) -> str:
    if shape is None:
        return "?"
    if len(shape) == 0:
        return "scalar"
    return "×".join("?" if d is None else str(d) for d in shape)


def _ints_text(v) -> str:
    try:
        return "×".join(str(int(x)) for x in v)
    except TypeError:
        return str(v)


def _key_detail(op: str, out_shape: str, facts) -> str:
    """The second label line: the attribute that tells this node apart, else its output shape.
    `facts()` (read only for ops whose line comes from an attribute, _DETAIL_OPS and Reduce*):
    (plain attribute values by name, the first output's dims or None, a callable giving the
    second input's constant data or None: a Reduce's axes)."""
    out_shape = out_shape if out_shape != "?" else ""
    if op not in _DETAIL_OPS and not op.startswith("Reduce"):
        return out_shape
    attrs, out_dims, second_input = facts()
    if op in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        parts = []
        if "kernel_shape" in attrs:
            parts.append(_ints_text(attrs["kernel_shape"]))
        strides = attrs.get("strides")
        if strides and any(int(s) != 1 for s in strides):
            parts.append("/" + _ints_text(strides) if len(set(strides)) > 1 else f"/{int(strides[0])}")
        group = attrs.get("group", 1)
        if group and int(group) != 1:
            parts.append(f"g{int(group)}")
        text = " ".join(parts)
        if out_dims is not None and len(out_dims) >= 2 and isinstance(out_dims[1], int):
            text = f"{text} → {out_dims[1]}ch" if text else f"{out_dims[1]}ch"
        return text or out_shape
    if op in ("MaxPool", "AveragePool", "LpPool"):
        parts = [_ints_text(attrs["kernel_shape"])] if "kernel_shape" in attrs else []
        strides = attrs.get("strides")
        if strides and any(int(s) != 1 for s in strides):
            parts.append(f"/{int(strides[0])}" if len(set(strides)) == 1 else "/" + _ints_text(strides))
        return " ".join(parts) or out_shape
    if op in ("Concat", "Softmax", "LogSoftmax", "Gather", "Split", "Flatten", "ArgMax", "ArgMin", "CumSum"):
        if "axis" in attrs:
            return f"axis {attrs['axis']}"
    if op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
        axes = attrs.get("axes")
        if axes is None:
            data = second_input()
            axes = None if data is None else data.reshape(-1).tolist()
        if axes is not None:
            return "axes " + ",".join(str(int(a)) for a in axes) + ("" if attrs.get("keepdims", 1) else " drop")
    if op == "Transpose" and "perm" in attrs:
        return "perm " + ",".join(str(int(x)) for x in attrs["perm"])
    if op == "Cast" and "to" in attrs:
        try:
            import onnx

            return "→ " + onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])).name
        except Exception:  # noqa: BLE001 - exotic target types
            return f"to {attrs['to']}"
    if op in ("LeakyRelu", "Elu") and "alpha" in attrs:
        return f"α {float(attrs['alpha']):g}"
    return out_shape


def _node_facts(node) -> tuple:
    """What `_key_detail` reads of a Graph node."""
    second = node.input_values[1:2]
    return (node.attributes, node.output_values[0].shape if node.output_values else None,
            lambda: second[0].numpy() if second and second[0] is not None and second[0].is_initializer else None)


_FORMAL_INPUTS: dict[tuple[str, str, int], list[str]] = {}


def _formal_input_names(op_type: str, domain: str, opset: int) -> list[str]:
    """The schema's names for an op's inputs (W, B, scale...), for badges; [] when unknown."""
    key = (op_type, domain, opset)
    if key not in _FORMAL_INPUTS:
        try:
            import onnx

            schema = onnx.defs.get_schema(op_type, opset, domain)
            names = [p.name for p in schema.inputs]
            if schema.inputs and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
                names[-1] += "*"
            _FORMAL_INPUTS[key] = names
        except Exception:  # noqa: BLE001 - custom ops have no schema
            _FORMAL_INPUTS[key] = []
    return _FORMAL_INPUTS[key]


def _formal_name(formal: list[str], i: int) -> str:
    """Input i's schema name; a variadic last input (marked '*') gets an index: inputs[2]."""
    if formal and formal[-1].endswith("*") and i >= len(formal) - 1:
        return f"{formal[-1][:-1]}[{i - len(formal) + 1}]"
    if i < len(formal):
        return formal[i]
    return f"in{i}"


def _unconnected(op_type: str, domain: str, opset_imports: dict, present: list[bool], opset: int) -> list[str]:
    """Schema names of the required inputs a node leaves unconnected (X, B); `present`: which
    of its inputs are connected."""
    from ..model.meta import unconnected_required_inputs

    missing = unconnected_required_inputs(op_type, domain, opset_imports, present)
    formal = _formal_input_names(op_type, domain or "", opset)
    return [_formal_name(formal, k) for k in missing]


def _badge(formal: str, shape, data) -> str:
    """A constant input's badge: its schema name and shape, or a scalar's value (`data`: the
    initializer's array, None when not an initializer)."""
    if shape is not None and len(shape) == 0:
        if data is not None and data.size == 1:
            return f"{formal} = {data.reshape(-1)[0]:g}" if data.dtype.kind == "f" else f"{formal} = {data.reshape(-1)[0]}"
    return f"{formal} {_dims_text(shape)}"


_DTYPE_TEXT: dict = {}


def _dtype_text(d) -> str:
    """The text of an ONNX dtype (`Value.dtype`), memoised (numpy's name lookup costs ~40 µs a call)."""
    text = _DTYPE_TEXT.get(d)
    if text is None:
        from ..model.graph import dtype_name

        text = _DTYPE_TEXT[d] = dtype_name(d)
    return text


def _op_node(node_id: int, op_type: str, domain: str, name: str, detail: str, badges: list[str], out_text: str,
             bodies: list[str], unconnected, tensors: dict) -> ViewNode:
    """An op's box; `tensors`: its inputs', outputs' and badges' tensor names (data fields)."""
    more = f"\nDouble-click to open its {' / '.join(bodies)}." if bodies else ""
    # cut off (a Delete upstream): the box says which input waits, so it can be reconnected
    if unconnected:
        detail = f"{', '.join(unconnected)} not connected"
        more += (f"\nInput {' and '.join(unconnected)} {'is' if len(unconnected) == 1 else 'are'} not connected, so this computes "
                 "nothing: drag from an output's lower edge onto this box to connect it.")
    return ViewNode(node_id, op_type if not domain or domain == "ai.onnx" else f"{domain}.{op_type}", detail, op_category(op_type), badges,
                    f"{name or op_type} ({op_type})\n→ {out_text}{more}", [node_id],
                    {"kind": "node", "name": name, **tensors, "subgraphs": bodies, "unconnected": unconnected})


def input_node_id(name: str) -> str:
    """View id of the graph-input pseudo-node for tensor `name`."""
    return f"input:{name}"


def output_node_id(name: str) -> str:
    """View id of the graph-output pseudo-node for tensor `name`."""
    return f"output:{name}"


_DETAIL_OPS = frozenset((
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool", "Concat", "Softmax",
    "LogSoftmax", "Gather", "Split", "Flatten", "ArgMax", "ArgMin", "CumSum", "Transpose", "Cast", "LeakyRelu", "Elu",
))  # ops whose second label line comes from an attribute (_key_detail); the rest show their output shape


def from_graph(graph) -> ViewGraph:
    """The display view of an ONNX `core.model.graph.Graph`.

    Nodes that only compute weights (initializers, Constant, the light models' ConstantOfShape
    chains) are not laid out: each constant input becomes a badge on its consumer, so a ResNet
    reads as its ~180 compute ops instead of ~500 boxes. Graph inputs and outputs get pseudo-nodes
    (category "io", ids `input:NAME` / `output:NAME`) so the graph has visible ends. Node ids are the
    Graph's node ids, so selecting on the canvas selects in the model. Each edge is one tensor use;
    `detail` carries its shape and dtype.

    Linear in the graph size and on the path of every open (a 10,000-node model: ~0.15 s): it walks
    the IR nodes directly, makes each tensor's texts once (shapes and dtypes repeat, so texts are
    shared per (shape, dtype)), and builds a `Node` wrapper only for the ops whose label reads an
    attribute.
    """
    import onnx_ir as ir

    from ..model.graph import _INFERRED, Node, Value, _dims
    from ..model.meta import NODE_ID

    no_inference = (None, None)

    consts = graph.constant_values()
    opset = graph.opset
    nodes: list[ViewNode] = []
    edges: list[ViewEdge] = []
    producer_of: dict[str, object] = {}
    # id(ir value) -> (dims text, dtype, "[a, b]", "dims dtype", "dtype [a, b]")
    texts: dict[int, tuple[str, str, str, str, str]] = {}
    by_type: dict[tuple, tuple[str, str, str, str, str]] = {}
    badge_text: dict[tuple, str] = {}  # (formal name, shape) -> "W 64×3×7×7"

    def text_of(irv) -> tuple[str, str, str, str, str]:
        t = texts.get(id(irv))
        if t is None:
            # Value.shape and Value.dtype, read off the IR value directly (10,000 values: no wrapper each)
            shape, d = irv.shape, irv.dtype
            if shape is None or d is None:
                inferred = irv.meta.get(_INFERRED, no_inference)
                shape = inferred[1] if shape is None else _dims(shape)
                d = inferred[0] if d is None else d
            else:
                shape = _dims(shape)
            dtype = _dtype_text(d)
            t = by_type.get((shape, dtype))  # big graphs repeat a few shapes thousands of times
            if t is None:
                shape_text = "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
                dims = _dims_text(shape)
                t = by_type[(shape, dtype)] = (dims, dtype, shape_text, f"{dims} {dtype}", f"{dtype} {shape_text}")
            texts[id(irv)] = t
        return t

    for v in graph.inputs:
        if v.name in consts:
            continue
        vid = input_node_id(v.name)
        producer_of[v.name] = vid
        dims, dtype, shape_text, _, _ = text_of(v.ir)
        nodes.append(
            ViewNode(
                id=vid,
                label=v.name,
                detail=f"{dims} {dtype}",
                category="io",
                tooltip=f"graph input {v.name}: {dtype} {shape_text}",
                data={"kind": "input", "tensor": v.name},
            )
        )

    graph_attr = ir.AttributeType.GRAPH
    for n in graph.model.graph:
        outs = n.outputs
        out_names = [o.name or "" for o in outs]
        if out_names and all(name in consts for name in out_names):
            continue  # computes weights only: folded into its consumers as badges
        node_id = n.meta[NODE_ID]
        op_type = n.op_type
        domain = n.domain
        badges: list[str] = []
        badge_tensors: list[str] = []
        input_names: list[str] = []
        for i, v in enumerate(n.inputs):
            if v is None:
                input_names.append("")
                continue
            name = v.name or ""
            input_names.append(name)
            if name in consts:
                formal = _formal_name(_formal_input_names(op_type, domain, opset), i)
                value = Value(graph, v)
                shape = value.shape
                if shape is not None and len(shape) == 0:
                    badges.append(_badge(formal, shape, value.numpy() if value.is_initializer else None))  # a scalar shows its value
                else:
                    key = (formal, shape)
                    text = badge_text.get(key)
                    if text is None:
                        text = badge_text[key] = f"{formal} {_dims_text(shape)}"
                    badges.append(text)
                badge_tensors.append(name)
                continue
            src = producer_of.get(name)
            if src is not None:
                edges.append(ViewEdge(src, node_id, name, text_of(v)[3], {"index": i}))
        if len(outs) == 1:
            out_text = f"{out_names[0]}: {text_of(outs[0])[4]}"
        else:
            out_text = ", ".join(f"{name}: {text_of(o)[4]}" for name, o in zip(out_names[:4], outs))
        # control flow (If, Loop, Scan): the graphs in its attributes, opened by a double-click
        bodies = [k for k, a in n.attributes.items() if a.type is graph_attr] if n.attributes else []
        out_shape = text_of(outs[0])[0] if outs else ""
        detail = _key_detail(op_type, out_shape, lambda n=n: _node_facts(Node(graph, n)))
        unconnected = _unconnected(op_type, domain, graph.opset_imports, [v is not None for v in n.inputs], opset) if "" in input_names else ()
        nodes.append(_op_node(node_id, op_type, domain, n.name or "", detail, badges, out_text, bodies, unconnected,
                              {"inputs": input_names, "outputs": out_names, "badge_tensors": badge_tensors}))
        for name in out_names:
            if name:
                producer_of[name] = node_id

    for v in graph.outputs:
        vid = output_node_id(v.name)
        dims, dtype, shape_text, dims_dtype, _ = text_of(v.ir)
        nodes.append(
            ViewNode(
                id=vid,
                label=v.name,
                detail=dims_dtype,
                category="io",
                tooltip=f"graph output {v.name}: {dtype} {shape_text}",
                data={"kind": "output", "tensor": v.name},
            )
        )
        src = producer_of.get(v.name)
        if src is not None:
            edges.append(ViewEdge(src=src, dst=vid, label=v.name, detail=dims_dtype))

    return ViewGraph(
        title=graph.path.name if graph.path is not None else (graph.name or "model"),
        nodes=nodes,
        edges=edges,
        data={"source": "onnx", "revision": graph.revision},
    )


def find_nodes(view: ViewGraph, query: str) -> list:
    """Ids of the view's nodes matching `query` (case-insensitive substring of the op type /
    label, the node name, or any tensor it reads or writes), exact matches first, each group in
    view order. The canvas's Ctrl+F and scripts use the same rule."""
    q = query.strip().lower()
    if not q:
        return []
    exact: list = []
    partial: list = []
    for n in view.nodes:
        fields = [n.label, str(n.data.get("name", "")), str(n.data.get("tensor", ""))]
        fields += [t for t in n.data.get("inputs", ()) if t] + [t for t in n.data.get("outputs", ()) if t]
        low = [f.lower() for f in fields if f]
        if q in low:
            exact.append(n.id)
        elif any(q in f for f in low):
            partial.append(n.id)
    return exact + partial


# ---- what the inspector shows ---------------------------------------------------------------------

STATS_LIMIT = 20_000_000  # elements: larger tensors get statistics over their first STATS_LIMIT values


def _attr_text(v) -> str:
    import numpy as np

    if isinstance(v, np.ndarray):
        if v.size <= 8:
            return f"tensor {v.dtype.name} {list(v.shape)} = {v.reshape(-1).tolist()}"
        return f"tensor {v.dtype.name} {list(v.shape)}"
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        if len(v) > 16:
            return "[" + ", ".join(map(str, v[:16])) + f", … ({len(v)} values)]"
        return "[" + ", ".join(str(x.decode("utf-8", "replace") if isinstance(x, bytes) else x) for x in v) + "]"
    if isinstance(v, float):
        return f"{v:g}"
    if hasattr(v, "name") and hasattr(v, "__iter__") and not isinstance(v, str):  # a subgraph
        return f"graph '{getattr(v, 'name', '')}' ({len(list(v))} nodes)"
    return str(v)


def node_facts(graph, node_id: int) -> list[tuple[str, str, str]]:
    """(section, key, value) rows describing one ONNX node: op, name, domain, attributes, inputs
    and outputs with shape and dtype (constant inputs marked), and for a quantized op its inputs'
    and output's quantization (core.views.quantization_rows)."""
    n = graph.node(node_id)
    consts = graph.constant_values()
    rows = [
        ("Node", "op", n.op_type),
        ("Node", "name", n.name or "(unnamed)"),
        ("Node", "domain", n.domain or "ai.onnx"),
        ("Node", "id", str(n.id)),
    ]
    if n.doc_string:
        rows.append(("Node", "doc", n.doc_string))
    for k, v in n.attributes.items():
        rows.append(("Attributes", k, _attr_text(v)))
    formal = _formal_input_names(n.op_type, n.domain, graph.opset)
    for i, v in enumerate(n.input_values):
        role = _formal_name(formal, i)
        if v is None:
            rows.append(("Inputs", role, "(omitted)"))
            continue
        kind = " · constant" if v.name in consts else ""
        rows.append(("Inputs", role, f"{v.name}: {v.dtype} {v.shape_text}{kind}"))
    for v in n.output_values:
        rows.append(("Outputs", str(len([r for r in rows if r[0] == "Outputs"])), f"{v.name}: {v.dtype} {v.shape_text}"))
    from .quantization_rows import quantization_rows

    return rows + quantization_rows(graph, node_id)


def _constant_data(graph, value):
    """The tensor's data when cheaply known: an initializer, a Constant, or a ConstantOfShape fill."""
    import numpy as np

    data = value.numpy()
    if data is not None:
        return data
    p = value.producer
    if p is None:
        return None
    attrs = p.attributes
    if p.op_type == "Constant":
        for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
            if key in attrs:
                return np.asarray(attrs[key])
    if p.op_type == "ConstantOfShape" and value.shape is not None and all(isinstance(d, int) for d in value.shape):
        fill = attrs.get("value")
        fill = np.asarray(fill).reshape(-1)[:1] if fill is not None else np.zeros(1, np.float32)
        size = math.prod(value.shape)
        if size <= STATS_LIMIT:
            return np.full(value.shape, fill[0], dtype=fill.dtype)
    return None


def constant_array(graph, name: str):
    """All values of the constant tensor `name` (an initializer, a Constant's value, a small
    ConstantOfShape fill), or None when it is not a constant with data at hand (the tensor viewer)."""
    if not graph.has_value(name) or name not in graph.constant_values():
        return None
    return _constant_data(graph, graph.value(name))


def tensor_facts(graph, name: str) -> list[tuple[str, str, str]]:
    """(section, key, value) rows for one tensor: shape, dtype, what it is, producer, consumers,
    and for constants with data at hand min/max/mean and the first values."""
    import numpy as np

    v = graph.value(name)
    consts = graph.constant_values()
    if v.is_initializer:
        kind = "initializer"
    elif v.is_graph_input:
        kind = "graph input"
    elif name in consts:
        kind = "constant (computed from constants)"
    else:
        kind = "activation"
    if v.is_graph_output:
        kind += " · graph output"
    rows = [
        ("Tensor", "name", name),
        ("Tensor", "kind", kind),
        ("Tensor", "dtype", v.dtype),
        ("Tensor", "shape", v.shape_text),
    ]
    if v.size is not None:
        rows.append(("Tensor", "elements", f"{v.size:,}"))
    p = v.producer
    rows.append(("Tensor", "producer", f"{p.label} ({p.op_type})" if p is not None else "—"))
    for c in v.consumers:
        rows.append(("Consumers", c.label, c.op_type))
    if name in consts:
        try:
            data = _constant_data(graph, v)
        except Exception as e:  # noqa: BLE001 - unreadable external data: say so, keep inspecting
            rows.append(("Values", "error", str(e).splitlines()[0] if str(e) else type(e).__name__))
            data = None
        if data is not None:
            flat = np.asarray(data).reshape(-1)
            sample = flat[:STATS_LIMIT]
            note = "" if flat.size <= STATS_LIMIT else f" (first {STATS_LIMIT:,})"
            if sample.size and sample.dtype.kind in "fiub":
                sf = sample.astype(np.float64)
                rows.append(("Values", "min" + note, f"{sf.min():.6g}"))
                rows.append(("Values", "max" + note, f"{sf.max():.6g}"))
                rows.append(("Values", "mean" + note, f"{sf.mean():.6g}"))
            first = flat[:10].tolist()
            text = ", ".join(f"{x:.5g}" if isinstance(x, float) else str(x) for x in first)
            rows.append(("Values", "first values", "[" + text + (", …]" if flat.size > 10 else "]")))
    return rows
