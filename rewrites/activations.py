"""Gated activations of Llama-style MLPs: SiLU (x * sigmoid(x)) and SwiGLU (silu(x W1) * (x W3)).

Neither onnxscript nor ONNX below opset 24 has them as one op, so the workbench's own rules name
them: ONNX's Swish from opset 24, a model-local function below it (the model stays valid ONNX that
onnxruntime runs), and onnxruntime's QuickGelu(alpha=1) for the "for onnxruntime" family.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from core.rewrite import PatternRule, current, fail, node_label, rank

from rewrites._util import WB_DOMAIN, describe_shape, local_function, require_constant

__all__ = ["FuseSiLU", "FuseSiLUForOrt", "FuseSwiGLU"]

logger = logging.getLogger(__name__)

_SILU = """SiLU (x) => (y) {
  s = Sigmoid(x)
  y = Mul(x, s)
}"""
_SWIGLU = """SwiGLU (x, w) => (y) {
  h = MatMul(x, w)
  a, b = Split <axis: int = -1, num_outputs: int = 2> (h)
  s = Sigmoid(a)
  g = Mul(a, s)
  y = Mul(g, b)
}"""


class FuseSiLU(PatternRule):
    """x * sigmoid(x) -> Swish (opset >= 24) or the local function mlc.workbench.SiLU below.

    Conditions:
    1. the Mul multiplies the Sigmoid's own input;
    2. the Sigmoid's result is used only by the Mul.
    """

    id = "fuse-silu"
    family = "transformer"
    description = "x * sigmoid(x) into Swish (opset >= 24) or a local SiLU function below"
    conditions = ("the Mul multiplies the Sigmoid's own input", "the Sigmoid feeds only the Mul")
    root_ops = frozenset({"Mul"})
    pattern_ops = frozenset({"Sigmoid", "Mul"})
    produces = frozenset({"Swish", "SiLU"})
    span = 2
    pattern_text = "Mul(x, Sigmoid(x))"
    commute = True
    anchor_ops = frozenset({"Sigmoid"})
    anchor_depth = 1

    def pattern(self, op, x):
        return op.Mul(x, op.Sigmoid(x))

    def rewrite(self, op, x, **_):
        if current().opset >= 24:
            return op.Swish(x)
        return op.SiLU(x, _domain=WB_DOMAIN)

    def functions(self, ctx):
        return [] if ctx.opset >= 24 else [local_function(_SILU, ctx.opset)]


class FuseSiLUForOrt(FuseSiLU):
    """x * sigmoid(x) -> onnxruntime's QuickGelu(x, alpha=1) (com.microsoft), which is SiLU.

    Conditions: those of fuse-silu.
    """

    id = "ort-silu"
    family = "onnxruntime"
    description = "x * sigmoid(x) into onnxruntime's QuickGelu with alpha 1 (com.microsoft)"
    produces = frozenset({"QuickGelu"})

    def rewrite(self, op, x, **_):
        return op.QuickGelu(x, alpha=1.0, _domain="com.microsoft")

    def functions(self, ctx):
        return []


class FuseSwiGLU(PatternRule):
    """silu(x @ W1) * (x @ W3) -> mlc.workbench.SwiGLU(x, [W1 | W3]): one MatMul of both
    projections (their weights side by side), split, gated.

    Conditions:
    1. the model imports opset >= 18 (Split with num_outputs);
    2. both MatMuls read the same x and constant 2-D weights of one shape;
    3. the SiLU is Sigmoid+Mul, the local SiLU function or Swish (alpha 1);
    4. the intermediate results are used only inside the pattern.
    """

    id = "fuse-swiglu"
    family = "transformer"
    description = "silu(x W1) * (x W3) into one SwiGLU function over the concatenated weights"
    conditions = ("opset >= 18", "both MatMuls read the same x", "constant 2-D weights of one shape", "intermediates feed only the pattern")
    root_ops = frozenset({"Mul"})
    pattern_ops = frozenset({"MatMul", "Sigmoid", "Mul", "SiLU", "Swish"})
    produces = frozenset({"SwiGLU"})
    span = 4
    pattern_text = "Mul(SiLU(MatMul(x, W1)), MatMul(x, W3))"
    commute = True

    def pattern(self, op, x, w1, w3):
        a = op.MatMul(x, w1, _outputs=["gate"])
        return op.Mul(op.Mul(a, op.Sigmoid(a)), op.MatMul(x, w3))

    def pattern_function(self, op, x, w1, w3):
        a = op.MatMul(x, w1, _outputs=["gate"])
        return op.Mul(op.SiLU(a, _domain=WB_DOMAIN), op.MatMul(x, w3))

    def pattern_swish(self, op, x, w1, w3):
        a = op.MatMul(x, w1, _outputs=["gate"])
        return op.Mul(op.Swish(a, _allow_other_attributes=True, _outputs=["swish"]), op.MatMul(x, w3))

    def patterns(self):
        return [self.pattern, self.pattern_function, self.pattern_swish]

    def check(self, context, x, w1, w3, swish=None, **_):
        ctx = current()
        if ctx.opset < 18:
            fail(f"the model imports opset {ctx.opset}; the SwiGLU function splits with num_outputs (opset 18).")
        if swish is not None:
            alpha = swish.producer().attributes.get_float("alpha", 1.0)
            if alpha != 1.0:
                fail(f"{node_label(swish.producer())} has alpha {alpha:g}; SiLU is Swish with alpha 1.")
        a = require_constant(w1, "the gate weight W1")
        b = require_constant(w3, "the up weight W3")
        if a.ndim != 2 or b.ndim != 2:
            fail(f"the weights have shapes {list(a.shape)} and {list(b.shape)}; the fusion needs 2-D weights.")
        if a.shape != b.shape:
            fail(f"the gate weight '{w1.name}' is {list(a.shape)} and the up weight '{w3.name}' {list(b.shape)}; they must match.")
        if a.dtype != b.dtype:
            fail(f"the weights have different element types ({a.dtype} and {b.dtype}).")
        r = rank(x)
        if r is not None and r < 2:
            fail(f"the input '{x.name}' has shape {describe_shape(x)}; the fusion needs rank >= 2.")

    def rewrite(self, op, x, w1, w3, gate, **_):
        both = np.concatenate([require_constant(w1, "W1"), require_constant(w3, "W3")], axis=1)
        name = gate.producer().name or ""
        prefix = name.rsplit(".", 1)[0] if "." in name else "swiglu"  # 'layers.0.mlp.gate_proj' -> 'layers.0.mlp'
        w = op.initializer(ir.tensor(both, name=f"{prefix}.gate_up_proj.weight"))  # splice makes it unique
        return op.SwiGLU(x, w, _domain=WB_DOMAIN)

    def functions(self, ctx):
        return [local_function(_SWIGLU, ctx.opset)]
