"""Folding: compute at rewrite time what does not depend on the model's inputs.

`fold-constants` turns constant subgraphs (ConstantOfShape-made weights, Shape/Reshape chains on
initializers, ...) into initializers; `fold-conv-bn` folds an inference BatchNormalization into
the Conv before it. Both read constant numbers through core.rewrite's ConstantEvaluator, so they
work whether weights are initializers or computed by constant nodes (the light models).
"""
from __future__ import annotations

import logging
import math

import numpy as np
import onnx_ir as ir

from core.rewrite import Attempt, PatternRule, RewriteRule, RuleContext, current, fail, node_label, static_shape
from core.model.constants import MAX_ELEMENTS, NONDETERMINISTIC_OPS, lazy_tensor
from core.rewrite.rule import add_initializer, dtype_of

from rewrites._util import dequantized_integer, not_constant_reason, quantized_type_name, require_constant, require_is_constant, require_not_dequantized

__all__ = ["FoldConstants", "FoldConvBatchNorm"]

logger = logging.getLogger(__name__)


class FoldConstants(RewriteRule):
    """Evaluate a constant subgraph and store its result as an initializer.

    A match is a node whose inputs are all constant and at least one of whose outputs feeds a
    non-constant node or is a graph output (the frontier of a constant subgraph); the nodes that
    only fed it go away with it.

    Conditions:
    1. every input of the node is constant (an initializer or computed from initializers only), and
       every input its op requires is connected;
    2. the op is deterministic, of the default domain, and has no subgraph;
    3. it is not a Constant node already;
    4. the result has at most 64 Mi elements;
    5. no DequantizeLinear of an integer tensor is among the nodes folded: a quantized model's int8
       weights stay int8 behind their DequantizeLinear (docs/quantization.md).
    """

    id = "fold-constants"
    family = "folding"
    description = "evaluate constant subgraphs (incl. ConstantOfShape-made weights) into initializers"
    conditions = ("all inputs constant and connected", "deterministic default-domain op", "not already a Constant", "result <= 64 Mi elements",
                  "no DequantizeLinear of integers folded")
    span = 1

    def candidates(self, graph):
        from core.rewrite import is_constant_value

        memo: dict[int, bool] = {}  # not graph.constant_values(): matching may run on a worker thread

        def const(v):
            return is_constant_value(v, memo)

        outs = {id(v) for v in graph.model.graph.outputs}
        for n in reversed(list(graph.model.graph)):
            if n.op_type == "Constant" or not n.outputs or not all(const(o) for o in n.outputs):
                continue
            if any(id(o) in outs or any(not all(const(x) for x in c.outputs) for c in o.consumers()) for o in n.outputs):
                yield n

    def _cone(self, node: ir.Node) -> list[ir.Node]:
        """The node and the constant nodes it reads, root first."""
        cone, stack, seen = [], [node], {id(node)}
        while stack:
            n = stack.pop()
            cone.append(n)
            for i in n.inputs:
                p = i.producer() if i is not None else None
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    stack.append(p)
        return cone

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        label = node_label(node)
        if node.op_type == "Constant":
            return Attempt(False, [node], f"{label} already is a constant; there is nothing to fold.", 0)
        if node.op_type in NONDETERMINISTIC_OPS:
            return Attempt(False, [node], f"{label} draws random numbers, so its result is not a constant.", 0)
        if node.domain not in ("", "ai.onnx"):
            return Attempt(False, [node], f"{label} is in domain '{node.domain}', which the evaluator does not run.", 0)
        if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()):
            return Attempt(False, [node], f"{label} has a subgraph; control flow is not folded.", 0)
        for i, v in enumerate(node.inputs):
            if v is not None and not ctx.is_const(v):
                return Attempt(False, [node], f"{label} cannot be folded: {not_constant_reason(v, f'input {i}')}.", 1)
        if not any(v is not None for v in node.inputs):
            return Attempt(False, [node], f"{label} has no inputs to evaluate from.", 1)
        if not all(ctx.is_const(o) for o in node.outputs):  # its inputs are, so one it requires is missing
            return Attempt(False, [node], f"{label} has nothing connected to a required input, so it computes nothing to fold.", 1)
        outs = {id(v) for v in ctx.graph.model.graph.outputs}
        if not any(id(o) in outs or any(not all(ctx.is_const(x) for x in c.outputs) for c in o.consumers()) for o in node.outputs):
            return Attempt(False, [node], f"{label} only feeds other constant nodes; the fold happens where the constant subgraph ends.", 1)
        for o in node.outputs:
            s = static_shape(o)
            if s is not None and all(isinstance(d, int) for d in s) and math.prod(s) > MAX_ELEMENTS:
                return Attempt(False, [node], f"{label} makes {math.prod(s)} elements; results over {MAX_ELEMENTS} stay computed (they would bloat the file).", 2)
        cone = self._cone(node)
        dq = next((n for n in cone if dequantized_integer(n)), None)
        if dq is not None:
            src = dq.inputs[0]
            via = "" if dq is node else f" (through {node_label(dq)})"
            return Attempt(False, [node], f"{label} would dequantize the {quantized_type_name(src)} tensor '{src.name}' into floats{via}; "
                                          "a quantized model keeps its integers behind their DequantizeLinear.", 2)
        return Attempt(True, cone, "", 3)

    def claimed(self, attempt: Attempt) -> list[ir.Node]:
        return attempt.nodes[:1]

    def summary(self, attempt: Attempt) -> str:
        n = attempt.nodes[0]
        extra = f" (with {len(attempt.nodes) - 1} constant node{'s' if len(attempt.nodes) != 2 else ''} behind it)" if len(attempt.nodes) > 1 else ""
        return f"fold {node_label(n)}{extra}"

    def rewrite_at(self, ctx: RuleContext, attempt: Attempt) -> list[ir.Node]:
        node = attempt.nodes[0]
        g = ctx.graph.model.graph
        arrays = []
        for o in node.outputs:
            arr = ctx.const(o)
            if arr is None:
                fail(f"{node_label(node)} could not be evaluated (a result over {MAX_ELEMENTS} elements stays computed).")
            if arr.size > MAX_ELEMENTS:
                fail(f"{node_label(node)} makes {arr.size} elements; results over {MAX_ELEMENTS} stay computed.")
            arrays.append(arr)
        news = []
        for o, arr in zip(node.outputs, arrays):
            name = o.name
            tmp_name = ctx.unique_name(f"{name}_folded")
            tensor = lazy_tensor(lambda a=arr: a, arr.dtype, arr.shape, tmp_name)  # ConstantOfShape results are views
            tmp = ir.Value(name=tmp_name, shape=ir.Shape(arr.shape), type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)), const_value=tensor)
            add_initializer(ctx, tmp)
            ir.convenience.replace_all_uses_with(o, tmp, replace_graph_outputs=True)
            news.append((tmp, name))
        g.remove(node, safe=True)
        for tmp, name in news:
            # keep the tensor's name: downstream text, value_info and outputs still read it
            tmp.name = name  # onnx_ir re-keys the initializer
        return []


class FoldConvBatchNorm(PatternRule):
    """Conv + BatchNormalization (inference) -> Conv with folded weights and bias.

    W' = W * s and B' = (B - mean) * s + beta, with s = scale / sqrt(var + epsilon) per output
    channel. Weights may be initializers or computed by constant nodes (ConstantOfShape).

    Conditions:
    1. the BatchNormalization is in inference mode (one output, training_mode 0);
    2. the Conv weight and bias and the BN's scale, bias, mean and variance are all constants;
    3. the element type is float;
    4. the Conv result feeds only the BatchNormalization;
    5. none of those constants is dequantized from integers (the folded weights would be floats).
    """

    id = "fold-conv-bn"
    family = "folding"
    description = "fold an inference BatchNormalization into the preceding Conv's weights and bias"
    conditions = ("BN in inference mode", "constant weights, bias, scale, shift, mean, variance", "float type", "Conv feeds only the BN",
                  "no dequantized weights")
    root_ops = frozenset({"BatchNormalization"})
    pattern_ops = frozenset({"Conv", "BatchNormalization"})
    span = 2
    pattern_text = "BatchNormalization(Conv(x, W, B), scale, bias, mean, var)"

    def pattern(self, op, x, w, scale, bias, mean, var):
        y = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.BatchNormalization(y, scale, bias, mean, var, _outputs=["bn_out"])

    def check(self, context, x, w, scale, bias, mean, var, conv_out, bn_out, **_):
        bn = bn_out.producer()
        if bn.attributes.get_int("training_mode", 0) != 0:
            fail(f"{node_label(bn)} has training_mode=1; only inference batch norms fold.")
        conv = conv_out.producer()
        dt = dtype_of(conv_out)
        if dt is not None and dt not in (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16):
            fail(f"{node_label(conv)} computes {dt.name.lower()}; only float convolutions fold.")
        params = [(w, "the Conv weight")]
        if len(conv.inputs) > 2 and conv.inputs[2] is not None:
            params.append((conv.inputs[2], "the Conv bias"))
        params += [(scale, "the BN scale"), (bias, "the BN bias"), (mean, "the BN mean"), (var, "the BN variance")]
        for v, role in params:
            require_is_constant(v, role)
        for v, role in params:
            require_not_dequantized(v, role)

    def rewrite(self, op, x, w, scale, bias, mean, var, conv_out, bn_out, **_):
        ctx = current()
        conv, bn = conv_out.producer(), bn_out.producer()
        W = require_constant(w, "the Conv weight")
        cout = W.shape[0]
        B = require_constant(conv.inputs[2], "the Conv bias") if len(conv.inputs) > 2 and conv.inputs[2] is not None else np.zeros(cout, W.dtype)
        eps = bn.attributes.get_float("epsilon", 1e-5)
        # the per-channel factor in float64; the big multiply (lazy: done when the numbers are
        # first needed) in the weight's own type
        s = require_constant(scale, "the BN scale").astype(np.float64) / np.sqrt(require_constant(var, "the BN variance").astype(np.float64) + eps)
        factor = s.astype(W.dtype).reshape((cout,) + (1,) * (W.ndim - 1))
        B2 = ((B.astype(np.float64) - require_constant(mean, "the BN mean")) * s + require_constant(bias, "the BN bias")).astype(W.dtype)
        base = conv.name or w.name or "conv"
        wname = ctx.unique_name(f"{base}.weight_folded")
        wv = op.initializer(lazy_tensor(lambda: W * factor, W.dtype, W.shape, wname), wname)
        bv = op.initializer(ir.tensor(B2, name=ctx.unique_name(f"{base}.bias_folded")))
        return op.Conv(x, wv, bv, **{k: a for k, a in conv.attributes.items()})
