"""Shape computations on static shapes, folded to constants before the model reaches TVM.

Exporters and ONNX's own function bodies compute sizes at run time even when every shape is
known: `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` for `x.view(b, t, n_head, d)`, the
head size as `Cast(Shape(Q)[3])` under a Sqrt, pads and expand targets from Shape slices
(opset-23 Attention's expansion writes all of these). TVM's frontend turns such a computed tensor
into a shape of fresh symbolic variables it cannot relate to anything (`reshape_dim0`, `x`), and
the module fails later, far from the cause: LegalizeOps inside FoldConstantTIR ("emit_te now only
supports Tensor that has ShapeExpr shape") or VMFinalize ("PrimExpr 1152 * x has not been
computed").

`fold_static_shapes` evaluates those computations before import, the way onnxsim would, with
ONNX's reference implementation of each op (`onnx.reference.ReferenceEvaluator`, the spec's
numbers): `Shape`/`Size` of a tensor whose inferred shape is static, then every node of a small,
deterministic op whose inputs are all known constants (initializers, Constant nodes, folded
results). A folded node becomes a `Constant` node with the same name and output **in place**, so
the graph keeps its node count and order and the import's lineage (node i of the proto is node i
of the user's graph) still holds.

Symbolic dims (`batch`, `sequence`) are left alone: their sizes are not constants, and the
import keeps them symbolic itself (core.compiler.frontend.onnx_import).

It runs before every import, so it costs nothing where there is nothing to fold: a first pass over
the nodes (no evaluation) tells whether any `Shape`/`Size` or any node with only constant inputs
exists, and without one the model is returned untouched; shape inference runs only for models
with `Shape`/`Size` (elsewhere the shapes the fold needs are those of the constants it holds);
ConstantOfShape and Unsqueeze are computed with numpy the way the reference does, and one
ReferenceEvaluator serves all nodes with the same op and attributes (building one is slow, and
onnx's light models have hundreds of such nodes; docs/performance.md: Shape folding evaluators).
"""
from __future__ import annotations

import functools
import logging
import math

__all__ = ["fold_static_shapes"]

logger = logging.getLogger(__name__)

# deterministic ops cheap to evaluate on small inputs: what shape arithmetic is written with
_FOLDABLE = frozenset({
    "Abs", "Add", "And", "Cast", "CastLike", "Ceil", "Clip", "Concat", "ConstantOfShape", "Div", "Equal", "Expand",
    "Flatten", "Floor", "Gather", "GatherElements", "Greater", "GreaterOrEqual", "Identity", "Less", "LessOrEqual",
    "Max", "Min", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "Range", "Reciprocal", "ReduceMax", "ReduceMin",
    "ReduceProd", "ReduceSum", "Reshape", "Sign", "Slice", "Sqrt", "Squeeze", "Sub", "Tile", "Transpose", "Trilu",
    "Unsqueeze", "Where", "Xor",
})

# no constant larger than this is made (folding is for sizes, not for weights or masks)
MAX_ELEMENTS = 1024

# ops whose output can be far larger than their inputs: evaluated only when inference says how large
_GENERATING = frozenset({"ConstantOfShape", "Expand", "Range", "Tile"})

# ops that only pick, move or join the entries of their data input: on a shape with some symbolic
# dims they still give the static ones (Shape(x)[2] of a [batch, sequence, 256] tensor is 256)
_SELECTING = frozenset({"Concat", "Gather", "Identity", "Slice", "Squeeze", "Unsqueeze"})

# stands for a symbolic dim in a partly known shape (sizes are never negative)
_UNKNOWN = -(1 << 40)

_PLAIN_DTYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                           "float16", "float32", "float64"})


def _plain(dtype) -> bool:
    """Whether a numpy dtype is one of _PLAIN_DTYPES (its name is built once per dtype: str() of a
    dtype costs more than the rest of folding a small node)."""
    plain = _PLAIN_SEEN.get(dtype)
    if plain is None:
        plain = _PLAIN_SEEN[dtype] = str(dtype) in _PLAIN_DTYPES
    return plain


_PLAIN_SEEN: dict = {}


def _light_copy(proto, shape_dict: dict | None):
    """The model without its large weights (they become typed graph inputs) for shape inference:
    the inference copies the whole model, and only the shapes of large weights matter."""
    import onnx
    from onnx import helper

    light = onnx.ModelProto()
    light.ir_version = max(proto.ir_version, 4)
    light.opset_import.extend(proto.opset_import)
    g = light.graph
    g.name = proto.graph.name
    g.node.extend(proto.graph.node)
    inputs = {vi.name for vi in proto.graph.input}
    for vi in proto.graph.input:
        new = g.input.add()
        new.CopyFrom(vi)
        dims = (shape_dict or {}).get(vi.name)
        if dims is not None and new.type.HasField("tensor_type"):
            shape = new.type.tensor_type.shape
            del shape.dim[:]
            for d in dims:
                if isinstance(d, int):
                    shape.dim.add().dim_value = d
                else:
                    shape.dim.add().dim_param = str(d)
    g.output.extend(proto.graph.output)
    for t in proto.graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n <= 64:
            g.initializer.append(t)
        elif t.name not in inputs:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return light


def _static_shapes(proto, shape_dict: dict | None) -> dict[str, list[int | None]]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(_light_copy(proto, shape_dict), data_prop=True)
    except Exception as e:  # noqa: BLE001 - inference refuses some valid models; then nothing is folded
        logger.debug("shape inference failed, no shape folding: %s", e)
        return {}
    shapes: dict[str, list[int | None]] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    for t in proto.graph.initializer:
        shapes[t.name] = list(t.dims)
    return shapes


def _shape_value(node, dims: list[int | None] | None):
    """Shape/Size of a tensor with these dims (a symbolic dim as _UNKNOWN - k), or None when
    Size needs a dim that is not static."""
    import numpy as np

    if dims is None:
        return None
    if node.op_type == "Size":
        return np.array(int(np.prod(dims)), np.int64) if all(d is not None for d in dims) else None
    attrs = {a.name: a.i for a in node.attribute}
    rank = len(dims)
    start, end = attrs.get("start", 0), attrs.get("end", rank)
    start, end = (max(0, min(rank, v + rank if v < 0 else v)) for v in (start, end))
    return np.array([_UNKNOWN - k if d is None else d for k, d in enumerate(dims[start:end])], np.int64)


def _controls(node) -> list[str]:
    """The inputs that must be fully known for `node` to fold: all of them, except the data a
    selecting op picks from (a symbolic dim there only moves; as an index or a Slice bound it
    would decide the result)."""
    if node.op_type not in _SELECTING:
        return list(node.input)
    return [] if node.op_type == "Concat" else list(node.input[1:])


def _small(node, shapes: dict, known: dict) -> bool:
    """Whether the node's outputs hold at most MAX_ELEMENTS values, told before evaluating (so
    a weight written as ConstantOfShape of its shape, as in onnx's light models, is never
    materialised): from the inferred shapes, else for the ops whose output can outgrow their
    inputs from the input values; the others only rearrange inputs that are small already."""
    for out in node.output:
        dims = shapes.get(out)
        if dims is not None and all(d is not None for d in dims):
            if math.prod(dims) > MAX_ELEMENTS:
                return False
        elif node.op_type in _GENERATING and _generated_size(node, shapes, known) > MAX_ELEMENTS:
            return False
    return True


def _generated_size(node, shapes: dict, known: dict) -> int:
    """The number of values ConstantOfShape / Expand / Range / Tile would make from these inputs
    (MAX_ELEMENTS + 1 when it cannot be told)."""
    import numpy as np

    too_many = MAX_ELEMENTS + 1
    values = [known.get(i) for i in node.input]
    try:
        if node.op_type == "ConstantOfShape":
            return math.prod(int(d) for d in values[0].reshape(-1))
        if node.op_type == "Range":
            start, limit, delta = (float(v.reshape(-1)[0]) for v in values[:3])
            return max(0, int(np.ceil((limit - start) / delta))) if delta else too_many
        dims = shapes.get(node.input[0])
        if dims is None or any(d is None for d in dims):
            return too_many
        if node.op_type == "Tile":
            return int(np.prod(dims, dtype=np.int64) * np.prod(values[1], dtype=np.int64))
        return int(np.prod(np.broadcast_shapes(tuple(dims), tuple(int(v) for v in values[1])), dtype=np.int64))  # Expand
    except (TypeError, ValueError, AttributeError, IndexError):
        return too_many


def _constant_of_shape(node, shape):
    """ConstantOfShape's output, as the spec defines it: `shape` filled with the one value of the
    `value` attribute (float32 0 without one). Not a ReferenceEvaluator per node: the light models'
    batch-norm weights are hundreds of these (docs/performance.md: Shape folding evaluators)."""
    import numpy as np

    value = next((a.t for a in node.attribute if a.name == "value"), None)
    fill = _fill_value(value.SerializeToString()) if value is not None else np.zeros(1, np.float32)
    return np.full(tuple(int(d) for d in np.asarray(shape).reshape(-1)), fill[0], dtype=fill.dtype)


@functools.lru_cache(maxsize=64)
def _fill_value(tensor: bytes):
    """The values of a serialized TensorProto, flattened (a model's ConstantOfShape nodes share a
    handful of fill values: each converted once)."""
    from onnx import TensorProto, numpy_helper

    value = TensorProto()
    value.ParseFromString(tensor)
    fill = numpy_helper.to_array(value).reshape(-1)
    fill.flags.writeable = False  # shared between calls
    return fill


def _unsqueeze(node, data, axes):
    """Unsqueeze's output as onnx's reference evaluator computes it for a lone node: it runs the
    latest opset's kernel whatever the model's opset (it ignores `opsets` for a NodeProto), so the
    axes come from the input and a node with opset 11's `axes` attribute is refused (None: the
    evaluator is asked, and refuses it, as before)."""
    import numpy as np

    if node.attribute or axes is None:
        return None
    return np.expand_dims(data, axis=tuple(axes) if axes.ndim else axes)


class _Evaluators:
    """One onnx ReferenceEvaluator per distinct node (op, attributes, which inputs are given), run
    on every node like it: building one is slow (docs/performance.md: Shape folding evaluators),
    and exporters repeat the same few shape nodes (the light models' hundreds of Unsqueeze of
    batch-norm weights all have the same axes)."""

    def __init__(self, opset: int):
        self.opset = opset
        self.built: dict = {}

    def run(self, node, feeds: dict) -> list:
        from onnx import NodeProto
        from onnx.reference import ReferenceEvaluator

        key = (node.op_type, tuple(a.SerializeToString() for a in node.attribute), tuple(bool(i) for i in node.input), len(node.output))
        evaluator = self.built.get(key)
        if evaluator is None:
            # its own copy, with inputs and outputs named by position: the evaluator reads its node
            # when run, a folded node is rewritten in place, and a node may read one value twice
            own = NodeProto()
            own.CopyFrom(node)
            own.input[:] = [f"i{k}" if name else "" for k, name in enumerate(node.input)]
            own.output[:] = [f"o{k}" for k in range(len(node.output))]
            evaluator = self.built[key] = ReferenceEvaluator(own, opsets={"": self.opset})
        return evaluator.run(None, {f"i{k}": feeds[name] for k, name in enumerate(node.input) if name})


def _could_fold(proto) -> tuple[bool, bool]:
    """(whether any node could fold, whether the model has Shape/Size nodes), from the graph alone:
    a foldable node whose inputs all are, or could become, constants small enough to fold. No
    evaluation, so a model with nothing to fold costs one pass over its nodes."""
    possible = {t.name for t in proto.graph.initializer if math.prod(t.dims) <= MAX_ELEMENTS and t.data_location != 1}
    foldable = shape_nodes = False
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None and math.prod(value.dims) <= MAX_ELEMENTS:
                possible.add(node.output[0])
        elif node.op_type in ("Shape", "Size"):
            shape_nodes = True
            possible.update(node.output)
        elif node.op_type in _FOLDABLE and node.input and all(not i or i in possible for i in node.input):
            foldable = True
            possible.update(node.output)
    return foldable or shape_nodes, shape_nodes


def fold_static_shapes(proto, shape_dict: dict | None = None) -> list[str]:
    """Fold, in place, the nodes of `proto`'s main graph whose outputs are constants (see the
    module's docstring); returns the names of the folded nodes' outputs."""
    import warnings

    import numpy as np
    from onnx import helper, numpy_helper

    could, shape_nodes = _could_fold(proto)
    if not could:
        return []
    if shape_nodes:
        shapes = _static_shapes(proto, shape_dict)
        if not shapes:
            return []
    else:
        # only the constants' own shapes are read (_small, _generated_size): kept as they become known
        shapes = {}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
    evaluators = _Evaluators(opset)
    known: dict[str, np.ndarray] = {}
    pending = {}  # small initializers, converted to arrays when a node reads them
    partial: set[str] = set()  # known values that hold symbolic dims (_UNKNOWN - k)
    for t in proto.graph.initializer:
        if math.prod(t.dims) <= MAX_ELEMENTS and t.data_location != 1:
            pending[t.name] = t
    if not shape_nodes:
        shapes.update((name, list(t.dims)) for name, t in pending.items())

    def value_of(name: str) -> np.ndarray:
        if name not in known:
            known[name] = numpy_helper.to_array(pending.pop(name))
        return known[name]

    folded: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for node in proto.graph.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            if node.op_type == "Constant":
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                if value is not None and math.prod(value.dims) <= MAX_ELEMENTS:
                    known[node.output[0]] = numpy_helper.to_array(value)
                    if not shape_nodes:
                        shapes[node.output[0]] = list(value.dims)
                continue
            outs: list | None = None
            if node.op_type in ("Shape", "Size"):
                value = _shape_value(node, shapes.get(node.input[0]))
                outs = None if value is None else [value]
            elif node.op_type in _FOLDABLE and node.input and all(not i or i in known or i in pending for i in node.input) and (
                    not any(i in partial for i in _controls(node))):
                feeds = {i: value_of(i) for i in node.input if i}
                if not _small(node, shapes, feeds):
                    continue
                try:
                    if node.op_type == "ConstantOfShape":  # onnx's light models have hundreds: no evaluator each
                        outs = [_constant_of_shape(node, feeds[node.input[0]])]
                    elif node.op_type == "Unsqueeze" and (out := _unsqueeze(node, feeds[node.input[0]], feeds.get(node.input[1]) if len(node.input) > 1 else None)) is not None:
                        outs = [out]
                    else:
                        outs = evaluators.run(node, feeds)
                except Exception as e:  # noqa: BLE001 - the reference refuses what it does not implement
                    logger.debug("not folding %s (%s): %s", node.name, node.op_type, e)
                    outs = None
            if outs is None:
                continue
            outs = [np.asarray(o) for o in outs]
            if any(o.size > MAX_ELEMENTS or not _plain(o.dtype) for o in outs):
                continue
            for name, value in zip(node.output, outs):
                if name:
                    known[name] = value
                    if not shape_nodes:
                        shapes[name] = list(value.shape)
            if any(o.dtype == np.int64 and (o < _UNKNOWN + (1 << 20)).any() for o in outs):
                partial.update(name for name in node.output if name)
                continue  # holds a symbolic dim: only picking ops read it
            if len(node.output) != 1 or outs[0].size == 0:
                continue  # known to the nodes after it; TVM takes no empty constants, Constant has one output
            value = numpy_helper.from_array(outs[0], node.output[0])
            node.op_type = "Constant"
            del node.input[:]
            del node.attribute[:]
            node.attribute.append(helper.make_attribute("value", value))
            folded.append(node.output[0])
    if folded:
        logger.debug("folded %d shape computations to constants", len(folded))
    return folded
