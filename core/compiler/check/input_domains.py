"""Random check inputs an op can take: indices in range, axes valid and distinct, no zero divisors.

The compile check runs the model on seeded random inputs. Plain random integers are wrong for an
input an op reads as indices (Gather's idx=3 into a dimension of 3), axes (Slice's, Squeeze's,
ReduceSum's), a shape (Reshape, Expand), split sizes or an integer divisor: onnxruntime refuses
them, or the result is undefined and any two implementations "disagree". So the valid domain of
each model input is derived from the nodes that consume it, here, and `random_feeds` draws from
it. An input whose consumers set no rule gets the plain random values; a user can always give
their own (compile_model(..., verify_inputs=...), `compile --verify-inputs IN.npz`).
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

__all__ = ["input_domains", "Domain"]

logger = logging.getLogger(__name__)

# draws an array of `shape`/`dtype` with `rng`
Domain = Callable[[np.random.Generator, tuple[int, ...], np.dtype], np.ndarray]


def _attr(node, name: str, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _int_range(lo: int, hi: int) -> Domain:
    """Integers in [lo, hi) (hi > lo)."""
    return lambda rng, shape, dt: rng.integers(lo, max(hi, lo + 1), size=shape).astype(dt)


def _const(values) -> Domain:
    values = np.asarray(values)

    def draw(rng, shape, dt):
        if int(np.prod(shape)) != values.size:
            return None
        return values.reshape(shape).astype(dt)

    return draw


def _first_k(values) -> Domain:
    """The first n of `values` for an input of n elements (1-D)."""
    values = list(values)

    def draw(rng, shape, dt):
        n = int(np.prod(shape))
        if n > len(values):
            return None
        return np.asarray(values[:n]).reshape(shape).astype(dt)

    return draw


def _distinct_along(axis: int, dim: int) -> Domain:
    """ScatterElements indices: distinct along `axis` (a repeated target is undefined)."""

    def draw(rng, shape, dt):
        if not shape or shape[axis] > dim:
            return None
        moved = (*shape[:axis], *shape[axis + 1:])
        rows = [rng.permutation(dim)[: shape[axis]] for _ in range(int(np.prod(moved)))]
        out = np.array(rows).reshape(*moved, shape[axis])
        return np.moveaxis(out, -1, axis).astype(dt)

    return draw


def _distinct_rows(dims: tuple[int, ...]) -> Domain:
    """ScatterND indices: distinct index tuples into the first len(dims) dims of the data."""

    def draw(rng, shape, dt):
        if not shape or shape[-1] != len(dims):
            return None
        n = int(np.prod(shape[:-1]))
        total = int(np.prod(dims))
        if n > total:
            return None
        flat = rng.choice(total, size=n, replace=False)
        return np.stack(np.unravel_index(flat, dims), axis=-1).reshape(shape).astype(dt)

    return draw


def _gather_nd(dims: tuple[int, ...]) -> Domain:
    def draw(rng, shape, dt):
        if not shape or shape[-1] > len(dims):
            return None
        cols = [rng.integers(0, max(dims[j], 1), size=shape[:-1]) for j in range(shape[-1])]
        return np.stack(cols, axis=-1).astype(dt)

    return draw


def _split_sizes(dim: int) -> Domain:
    def draw(rng, shape, dt):
        n = int(np.prod(shape))
        if n == 0:
            return None
        sizes = [dim // n] * n
        sizes[-1] += dim - sum(sizes)
        return np.asarray(sizes).reshape(shape).astype(dt)

    return draw


def _positive_float(lo: float = 0.5, hi: float = 1.5) -> Domain:
    return lambda rng, shape, dt: rng.uniform(lo, hi, size=shape).astype(dt)


def input_domains(proto, shapes: dict[str, tuple[int, ...]]) -> dict[str, Domain]:
    """Model input name -> how to draw valid values for it, for the inputs some consumer constrains.

    `shapes` holds the concrete shapes of the model's inputs (and whatever else is known); the
    shapes of initializers and of inferred intermediate values are added here."""
    from onnx import numpy_helper

    shapes = dict(shapes)
    consts: dict[str, np.ndarray] = {}
    for t in proto.graph.initializer:
        try:
            consts[t.name] = numpy_helper.to_array(t)
            shapes.setdefault(t.name, tuple(t.dims))
        except Exception:  # noqa: BLE001 - exotic dtypes: no value, no rule
            shapes.setdefault(t.name, tuple(t.dims))
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.output:
            v = _attr(node, "value")
            if v is not None and hasattr(v, "dims"):
                try:
                    consts[node.output[0]] = numpy_helper.to_array(v)
                    shapes.setdefault(node.output[0], tuple(v.dims))
                except Exception:  # noqa: BLE001
                    pass
    try:
        import onnx

        inferred = onnx.shape_inference.infer_shapes(proto)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            dims = vi.type.tensor_type.shape.dim
            if vi.type.HasField("tensor_type") and dims and all(d.HasField("dim_value") for d in dims):
                shapes.setdefault(vi.name, tuple(int(d.dim_value) for d in dims))
    except Exception:  # noqa: BLE001 - shape inference is a help, not a requirement
        pass
    names = {vi.name for vi in proto.graph.input} - {t.name for t in proto.graph.initializer}
    out: dict[str, Domain] = {}
    for node in proto.graph.node:
        for pos, name in enumerate(node.input):
            if name in names and name not in out:
                try:
                    rule = _rule(node, pos, shapes, consts)
                except Exception:  # noqa: BLE001 - a rule that cannot decide leaves plain random values
                    logger.debug("no input domain for %s of %s", name, node.op_type, exc_info=True)
                    rule = None
                if rule is not None:
                    out[name] = rule
    integer = {vi.name for vi in proto.graph.input if vi.type.tensor_type.elem_type in _INT_TYPES}
    for name in sorted((names & integer) - set(out)):
        if _cast_to_float(proto, name):
            out[name] = _int_range(0, 2)
    return out


# ops that pass an input's values on unchanged (only their shape changes)
_PASS_THROUGH = {"Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Identity", "Transpose"}
_FLOAT_TYPES = {1, 10, 11, 16}  # onnx.TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16
_INT_TYPES = {2, 3, 4, 5, 6, 7, 12, 13}  # UINT8, INT8, UINT16, INT16, INT32, INT64, UINT32, UINT64


def _cast_to_float(proto, name: str) -> bool:
    """Whether the graph casts the input `name` (directly or after reshaping ops) to a float type.

    In exported transformers that is an attention mask, `(1.0 - float(mask)) * -10000.0` added to
    the scores: a 0/1 input. Other integers (the plain random 0..3) make that term +20000 and
    softmax's inputs so large that two correct implementations differ by their float rounding
    (BERT's first attention MatMul differed by 5e-4 on 0..3 masks, by 4e-6 on 0/1 ones)."""
    consumers: dict[str, list] = {}
    for node in proto.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    todo, seen = [name], {name}
    while todo:
        for node in consumers.get(todo.pop(), []):
            if node.op_type == "Cast" and _attr(node, "to") in _FLOAT_TYPES:
                return True
            if node.op_type in _PASS_THROUGH and node.output and node.output[0] not in seen:
                seen.add(node.output[0])
                todo.append(node.output[0])
    return False


def _rule(node, pos: int, shapes: dict, consts: dict) -> Domain | None:
    """The domain of input `pos` of `node`, or None when any value will do (or nothing is known)."""
    op = node.op_type
    ins = list(node.input)

    def shape_of(i: int):
        return shapes.get(ins[i]) if i < len(ins) and ins[i] else None

    data = shape_of(0)
    rank = len(data) if data is not None else None
    if op in ("Gather", "GatherElements") and pos == 1 and data:
        dim = data[_norm_axis(int(_attr(node, "axis", 0)), rank)]
        return _int_range(0, dim)
    if op in ("ScatterElements", "Scatter") and pos == 1 and data:
        axis = _norm_axis(int(_attr(node, "axis", 0)), rank)
        return _distinct_along(axis, data[axis])
    if op == "GatherND" and pos == 1 and data:
        b = int(_attr(node, "batch_dims", 0))
        return _gather_nd(tuple(data[b:]))
    if op == "ScatterND" and pos == 1 and data:
        idx = shape_of(1)
        return _distinct_rows(tuple(data[: idx[-1]])) if idx else None
    if op == "OneHot" and pos == 0:
        depth = consts.get(ins[1]) if len(ins) > 1 else None
        return _int_range(0, int(np.asarray(depth).reshape(-1)[0]) if depth is not None else 2)
    if op == "OneHot" and pos == 1:
        return _int_range(2, 5)
    if op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss") and pos == 1 and data and rank >= 2:
        return _int_range(0, data[1])
    if op == "RoiAlign" and pos == 2 and data:
        return _int_range(0, data[0])
    if op == "ReverseSequence" and pos == 1 and data:
        return _int_range(1, data[int(_attr(node, "time_axis", 0))] + 1)
    if op in ("Div", "Mod") and pos == 1:
        return _nonzero_for_ints()
    if op == "Slice" and data:
        return _slice_rule(node, pos, data, shape_of, consts)
    if op == "Squeeze" and pos == 1 and data:
        return _first_k([i for i, d in enumerate(data) if d == 1])
    if op == "Unsqueeze" and pos == 1:
        return _first_k(range(64))
    if op.startswith("Reduce") and pos == 1 and rank is not None:
        return _first_k(range(rank))
    if op == "Pad" and pos == 3 and rank is not None:
        return _first_k(range(rank))
    if op == "Pad" and pos == 1:
        return _int_range(0, 2)
    if op == "Expand" and pos == 1:
        return lambda rng, shape, dt: np.ones(shape, dtype=dt)
    if op == "Reshape" and pos == 1 and data:
        def reshape(rng, shape, dt, data=data):
            k = int(np.prod(shape))
            return np.asarray(data if k == len(data) else [1] * (k - 1) + [-1]).reshape(shape).astype(dt)
        return reshape
    if op == "Tile" and pos == 1:
        return _int_range(1, 3)
    if op == "ConstantOfShape" and pos == 0:
        return _int_range(1, 4)
    if op == "CumSum" and pos == 1 and rank:
        return _int_range(0, rank)
    if op == "TopK" and pos == 1 and data:
        return _int_range(1, data[_norm_axis(int(_attr(node, "axis", -1)), rank)] + 1)
    if op == "Split" and pos == 1 and data:
        return _split_sizes(data[_norm_axis(int(_attr(node, "axis", 0)), rank)])
    if op == "Range" and pos == 2:
        return lambda rng, shape, dt: (rng.integers(1, 3, size=shape) if np.issubdtype(dt, np.integer) else rng.uniform(0.5, 1.5, size=shape)).astype(dt)
    if op == "Range" and pos in (0, 1):
        return lambda rng, shape, dt: (rng.integers(0, 6, size=shape) * (1 if pos else 0)).astype(dt)
    if op == "Resize" and pos == 1 and rank:
        return _const([0.0] * rank + [1.0] * rank)
    if op in ("Resize", "Upsample") and pos == (2 if op == "Resize" else 1):
        return lambda rng, shape, dt: np.ones(shape, dtype=dt)
    if op == "Resize" and pos == 3 and data:
        return _first_k(data)
    if op == "CenterCropPad" and pos == 1 and data:
        return _first_k(data)
    if op == "Dropout" and pos == 1:
        return _positive_float(0.1, 0.9)
    if op == "Dropout" and pos == 2:
        return lambda rng, shape, dt: np.zeros(shape, dtype=dt)  # inference mode: training is random
    if op == "BatchNormalization" and pos == 4:
        return _positive_float()
    if op == "NonMaxSuppression" and pos == 2:
        return _int_range(1, 4)  # 0 boxes per class selects nothing: a check of nothing
    if op == "NonMaxSuppression" and pos == 3:
        return _positive_float(0.3, 0.7)
    if op == "NonMaxSuppression" and pos == 4:
        return lambda rng, shape, dt: np.full(shape, -1.0, dtype=dt)
    if op == "QuantizeLinear" and pos == 1:
        return _positive_float(0.01, 0.1)
    return None


def _nonzero_for_ints() -> Domain:
    def draw(rng, shape, dt):
        if np.issubdtype(dt, np.integer):
            return rng.integers(1, 5, size=shape).astype(dt)
        return None

    return draw


def _slice_rule(node, pos: int, data: tuple, shape_of, consts) -> Domain | None:
    """Slice's starts/ends/axes/steps (opset >= 10): axes distinct and in range, steps 1, starts
    inside each sliced dim, ends at its end."""
    ins = list(node.input)
    axes_name = ins[3] if len(ins) > 3 and ins[3] else None
    axes_shape = shape_of(1)
    k = int(np.prod(axes_shape)) if axes_shape is not None else None
    if axes_name in consts:
        axes = [int(a) for a in np.asarray(consts[axes_name]).reshape(-1)]
    elif k is not None:
        axes = list(range(k))
    else:
        return None
    axes = [_norm_axis(a, len(data)) for a in axes]
    if any(not 0 <= a < len(data) for a in axes):
        return None
    if pos == 3:
        return _first_k(axes)
    if pos == 4:
        return lambda rng, shape, dt: np.ones(shape, dtype=dt)
    if pos == 1:
        def starts(rng, shape, dt):
            if int(np.prod(shape)) != len(axes):
                return None
            return np.array([rng.integers(0, max(data[a], 1)) for a in axes]).reshape(shape).astype(dt)
        return starts
    if pos == 2:
        return _first_k([data[a] for a in axes])
    return None
