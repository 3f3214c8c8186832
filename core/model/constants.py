"""Evaluate constant values of an IR graph, however they are made.

Real exports keep weights in initializers; the onnx wheel's light models make theirs with
`ConstantOfShape` nodes, and exporters like `Constant` + `Unsqueeze`/`Reshape`/`Cast` chains. A
rule that folds weights (conv + batchnorm) or checks a constant (GELU's √2) needs the numbers
either way, so it asks `ConstantEvaluator.value(v)`, which walks the value's producers.

Common weight-making ops are evaluated with numpy directly (fast: DenseNet-121 has ~800
`ConstantOfShape` nodes); anything else goes to onnx's reference evaluator, one node at a time
under the model's own opset imports (old and new `Unsqueeze` differ). Results are memoized per
evaluator, which lives for one match or one apply, so the graph cannot change under it.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx_ir as ir

from .meta import NONDETERMINISTIC_OPS, unconnected_required_inputs

__all__ = ["ConstantEvaluator", "is_constant_value", "lazy_tensor", "NONDETERMINISTIC_OPS"]

logger = logging.getLogger(__name__)

# Larger results are not worth materializing as initializers (and would bloat the file).
MAX_ELEMENTS = 64 * 1024 * 1024


def lazy_tensor(compute, dtype: np.dtype, shape, name: str | None = None) -> ir.LazyTensor:
    """An initializer tensor whose numbers are computed on first use (saving, verifying, a later
    rule reading them) and then kept: a preview that folds DenseNet's weights only rearranges
    the graph, it does not multiply 8 M numbers the user may never apply."""

    def materialize() -> ir.Tensor:
        return ir.tensor(np.asarray(compute(), order="C"), name=name)

    return ir.LazyTensor(materialize, dtype=ir.DataType.from_numpy(np.dtype(dtype)), shape=ir.Shape(list(shape)), cache=True, name=name)


class TooLarge(Exception):
    """A constant too big to materialize (its value reads as None)."""


def _node_is_foldable(n: ir.Node) -> bool:
    if n.op_type in NONDETERMINISTIC_OPS or n.domain not in ("", "ai.onnx"):
        return False
    return not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in n.attributes.values())


def _cut_off(n: ir.Node) -> bool:
    """A required input left unconnected (a Delete upstream): the node computes nothing."""
    opsets = n.graph.opset_imports if n.graph is not None else {}
    return bool(unconnected_required_inputs(n.op_type, n.domain, opsets, [v is not None for v in n.inputs]))


def is_constant_value(v: ir.Value | None, _memo: dict[int, bool] | None = None) -> bool:
    """True when `v` can be computed without any graph input (initializer, Constant, or a
    deterministic node of the default domain whose inputs are all constant and whose required
    inputs are all connected)."""
    if v is None:
        return False
    memo = _memo if _memo is not None else {}
    stack = [v]
    while stack:
        cur = stack[-1]
        key = id(cur)
        if key in memo:
            stack.pop()
            continue
        if cur.const_value is not None:
            memo[key] = True
            stack.pop()
            continue
        if cur.is_graph_input():
            memo[key] = False
            stack.pop()
            continue
        p = cur.producer()
        if p is None or not _node_is_foldable(p):
            memo[key] = False
            stack.pop()
            continue
        ins = [i for i in p.inputs if i is not None]
        pending = [i for i in ins if id(i) not in memo]
        if pending:
            stack.extend(pending)
            continue
        memo[key] = (p.op_type == "Constant" or bool(ins)) and all(memo[id(i)] for i in ins) and not _cut_off(p)
        stack.pop()
    return memo[id(v)]


class ConstantEvaluator:
    """Computes constant values of one graph (memoized); `value(v)` is None for non-constants."""

    def __init__(self, model: ir.Model):
        self.model = model
        self._memo: dict[int, np.ndarray | None] = {}
        self._const_memo: dict[int, bool] = {}

    def is_constant(self, v: ir.Value | None) -> bool:
        return is_constant_value(v, self._const_memo)

    def value(self, v: ir.Value | None) -> np.ndarray | None:
        if v is None or not self.is_constant(v):
            return None
        if id(v) in self._memo:
            return self._memo[id(v)]
        # Evaluate producers bottom-up without recursion (weight chains can be long).
        order: list[ir.Value] = []
        stack = [(v, False)]
        seen: set[int] = set()
        while stack:
            cur, expanded = stack.pop()
            if id(cur) in self._memo:
                continue
            if expanded:
                order.append(cur)
                continue
            if id(cur) in seen:
                continue
            seen.add(id(cur))
            stack.append((cur, True))
            if cur.const_value is None:
                p = cur.producer()
                for i in p.inputs:
                    if i is not None and id(i) not in self._memo:
                        stack.append((i, False))
        for cur in order:
            if id(cur) in self._memo:
                continue
            if cur.const_value is not None:
                self._memo[id(cur)] = cur.const_value.numpy()
                continue
            node = cur.producer()
            results = self._eval_node(node, [None if i is None else self._memo[id(i)] for i in node.inputs])
            for out, arr in zip(node.outputs, results):
                self._memo[id(out)] = arr
        return self._memo.get(id(v))

    # ---- one node --------------------------------------------------------------------------
    def _opset(self) -> int:
        oi = self.model.opset_imports
        return int(oi.get("", oi.get("ai.onnx", 1)))

    def _eval_node(self, node: ir.Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        fast = _FAST.get(node.op_type)
        if fast is not None:
            try:
                out = fast(node, inputs, self._opset())
                if out is not None:
                    return out
            except TooLarge:
                return [None] * len(node.outputs)
            except Exception:  # noqa: BLE001 - fall back to the reference evaluator
                logger.debug("numpy fast path failed for %s", node.op_type, exc_info=True)
        if any(i is None for i, v in zip(inputs, node.inputs) if v is not None):
            return [None] * len(node.outputs)  # an input was too large to compute
        return self._reference(node, inputs)

    def _reference(self, node: ir.Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        from onnx.reference import ReferenceEvaluator

        proto = ir.serde.serialize_node(node)
        in_names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
        out_names = [f"out{i}" for i in range(len(node.outputs))]
        del proto.input[:]
        proto.input.extend(in_names)
        del proto.output[:]
        proto.output.extend(out_names)
        g = onnx.helper.make_graph(
            [proto],
            "const_eval",
            [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(x.dtype), x.shape) for n, x in zip(in_names, inputs) if x is not None],
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in out_names],
        )
        opsets = [onnx.helper.make_opsetid(d or "", int(v)) for d, v in self.model.opset_imports.items() if d in ("", "ai.onnx")]
        m = onnx.helper.make_model(g, opset_imports=opsets or [onnx.helper.make_opsetid("", self._opset())])
        feeds = {n: x for n, x in zip(in_names, inputs) if x is not None}
        res = ReferenceEvaluator(m).run(None, feeds)
        return [np.asarray(r) for r in res]


def _attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    if a is None:
        return default
    if a.type == ir.AttributeType.TENSOR:
        return a.value.numpy()
    if a.type in (ir.AttributeType.INTS, ir.AttributeType.FLOATS):
        return list(a.value)
    return a.value


def _constant(node, inputs, opset):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = _attr(node, key)
        if v is None:
            continue
        if key == "value":
            return [np.asarray(v)]
        dtype = np.float32 if "float" in key else np.int64
        return [np.asarray(v, dtype=dtype)]
    return None


def _constant_of_shape(node, inputs, opset):
    shape = [int(d) for d in np.asarray(inputs[0]).reshape(-1)]
    if int(np.prod(shape, dtype=np.int64)) > MAX_ELEMENTS:
        raise TooLarge()
    fill = _attr(node, "value")
    fill = np.zeros(1, dtype=np.float32) if fill is None else np.asarray(fill).reshape(-1)
    # a read-only broadcast view: no memory until someone computes with it (weights of the
    # light models are all ConstantOfShape; folding reads them once)
    return [np.broadcast_to(fill[:1].reshape(()), shape)]


def _unsqueeze(node, inputs, opset):
    axes = _attr(node, "axes") if opset < 13 else [int(a) for a in np.asarray(inputs[1]).reshape(-1)]
    x = inputs[0]
    rank = x.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        x = np.expand_dims(x, a)
    return [x]


def _squeeze(node, inputs, opset):
    axes = _attr(node, "axes") if opset < 13 else (None if len(inputs) < 2 or inputs[1] is None else [int(a) for a in np.asarray(inputs[1]).reshape(-1)])
    x = inputs[0]
    return [np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _reshape(node, inputs, opset):
    x, shape = inputs[0], [int(d) for d in np.asarray(inputs[1]).reshape(-1)]
    if _attr(node, "allowzero", 0):
        return [x.reshape(shape)]
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


def _identity(node, inputs, opset):
    return [inputs[0]]


def _cast(node, inputs, opset):
    to = _attr(node, "to")
    return [inputs[0].astype(onnx.helper.tensor_dtype_to_np_dtype(int(to)))]


_FAST = {
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Reshape": _reshape,
    "Identity": _identity,
    "Cast": _cast,
}
