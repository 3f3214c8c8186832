"""Fusions: several ops into one (MatMul+Add -> Gemm, linear+relu, GELU, LayerNorm, Transpose+MatMul).

Each rule's docstring lists its conditions, in the words "why not?" uses when one fails.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from core.rewrite import PatternRule, current, fail, node_label, rank, static_shape
from core.rewrite.rule import dtype_of

from rewrites._util import WB_DOMAIN, describe_shape, local_function, require_constant, require_not_dequantized, scalar_near

__all__ = ["FuseMatMulAdd", "FuseLinearRelu", "FuseGelu", "FuseLayerNorm", "FuseTransposeMatMul"]

logger = logging.getLogger(__name__)

_FLOATS = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


def _unidirectional_to(c_shape, m, n) -> bool:
    """Can a tensor of c_shape broadcast to [m, n] (Gemm's C)?"""
    if len(c_shape) > 2:
        return False
    target = [m, n][2 - len(c_shape):]
    return all(d == 1 or d == t or (not isinstance(d, int) and d == t) for d, t in zip(c_shape, target))


class FuseMatMulAdd(PatternRule):
    """MatMul + Add -> Gemm.

    Conditions:
    1. both MatMul inputs are 2-D (Gemm is a 2-D op);
    2. the added tensor broadcasts to the product's [M, N] shape (Gemm's C is unidirectional);
    3. the element type is a float type;
    4. the MatMul result is used only by the Add.
    """

    id = "fuse-matmul-add"
    family = "fusion"
    description = "MatMul followed by Add of a bias into one Gemm (2-D operands, broadcastable bias)"
    conditions = ("both MatMul inputs are 2-D", "the bias broadcasts to [M, N]", "float element type", "the MatMul result feeds only the Add")
    root_ops = frozenset({"Add"})
    pattern_ops = frozenset({"MatMul", "Add"})
    produces = frozenset({"Gemm"})
    span = 2
    pattern_text = "Add(MatMul(a, b), c)"
    commute = True

    def pattern(self, op, a, b, c):
        return op.Add(op.MatMul(a, b, _outputs=["mm"]), c)

    def check(self, context, a, b, c, mm, **_):
        for v, role in ((a, "first MatMul input"), (b, "second MatMul input")):
            r = rank(v)
            if r is None:
                fail(f"the rank of {role} '{v.name}' is unknown; Gemm needs 2-D inputs.")
            if r != 2:
                fail(f"{role} '{v.name}' has shape {describe_shape(v)} (rank {r}); Gemm needs 2-D inputs.")
        dt = dtype_of(mm)
        if dt is not None and dt not in _FLOATS:
            fail(f"MatMul result '{mm.name}' is {dt.name.lower()}; this fusion handles float types.")
        cs = static_shape(c)
        if cs is None:
            fail(f"the shape of the added tensor '{c.name}' is unknown, so its broadcast to Gemm's [M, N] cannot be checked.")
        m = static_shape(a)[0]
        n = static_shape(b)[1]
        if not _unidirectional_to(cs, m, n):
            fail(f"the added tensor '{c.name}' has shape {describe_shape(c)}, which does not broadcast to the product's [{m}, {n}].")

    def rewrite(self, op, a, b, c, **_):
        return op.Gemm(a, b, c)


_LINEAR_RELU = """LinearRelu (x, w, b) => (y) {
  t = MatMul(x, w)
  s = Add(t, b)
  y = Relu(s)
}"""
_GEMM_RELU = """GemmRelu <alpha, beta, transA, transB> (a, b, c) => (y) {
  t = Gemm <alpha: float = @alpha, beta: float = @beta, transA: int = @transA, transB: int = @transB> (a, b, c)
  y = Relu(t)
}"""


class FuseLinearRelu(PatternRule):
    """linear + relu -> one fused node (the MLC course's example), a model-local function.

    The fused op is `mlc.workbench.LinearRelu(x, w, b)` (MatMul, Add, Relu) or
    `mlc.workbench.GemmRelu(a, b, c)` (Gemm with its attributes, Relu), defined in the model as
    a local function, so the model stays valid ONNX that onnxruntime runs.

    Conditions:
    1. the Relu's input is Add(MatMul(x, w), b) or a Gemm;
    2. the intermediate results are used only inside the pattern.
    """

    id = "fuse-linear-relu"
    family = "fusion"
    description = "linear (MatMul+Add or Gemm) followed by Relu into one fused node (a local function)"
    conditions = ("the Relu's input is MatMul+Add or Gemm", "intermediate results feed only the pattern")
    root_ops = frozenset({"Relu"})
    pattern_ops = frozenset({"MatMul", "Add", "Gemm", "Relu"})
    produces = frozenset({"LinearRelu", "GemmRelu"})
    span = 3
    pattern_text = "Relu(Add(MatMul(x, w), b)) or Relu(Gemm(a, b, c))"
    commute = True

    def pattern(self, op, x, w, b):
        return op.Relu(op.Add(op.MatMul(x, w), b))

    def pattern_gemm(self, op, x, w, b):
        return op.Relu(op.Gemm(x, w, b, _outputs=["gemm"]))

    def patterns(self):
        return [self.pattern, self.pattern_gemm]

    def rewrite(self, op, x, w, b, gemm=None, **_):
        if gemm is None:
            return op.LinearRelu(x, w, b, _domain=WB_DOMAIN)
        g = gemm.producer()
        attrs = {
            "alpha": float(g.attributes.get_float("alpha", 1.0)),
            "beta": float(g.attributes.get_float("beta", 1.0)),
            "transA": int(g.attributes.get_int("transA", 0)),
            "transB": int(g.attributes.get_int("transB", 0)),
        }
        return op.GemmRelu(x, w, b, _domain=WB_DOMAIN, **attrs)

    def functions(self, ctx):
        return [local_function(_LINEAR_RELU, ctx.opset), local_function(_GEMM_RELU, ctx.opset)]


_GELU = """Gelu (x) => (y) {
  sqrt2 = Constant <value_float: float = 1.4142135623730951> ()
  one = Constant <value_float: float = 1.0> ()
  half = Constant <value_float: float = 0.5> ()
  s = CastLike(sqrt2, x)
  o = CastLike(one, x)
  h = CastLike(half, x)
  d = Div(x, s)
  e = Erf(d)
  p = Add(e, o)
  m = Mul(x, p)
  y = Mul(m, h)
}"""


class FuseGelu(PatternRule):
    """The Erf form of GELU, 0.5 * x * (1 + erf(x / sqrt(2))), -> Gelu.

    On opset >= 20 the result is ONNX's own Gelu; below, a model-local function
    `mlc.workbench.Gelu` with the same formula (needs CastLike, opset >= 15).

    Conditions:
    1. the divisor is sqrt(2) (or the multiplier 1/sqrt(2)), the added one is 1, the factor 0.5;
    2. all three are constants;
    3. the intermediate results are used only inside the pattern;
    4. the model imports opset >= 15 (for the local function) when it is below 20.
    """

    id = "fuse-gelu"
    family = "fusion"
    description = "Erf-based GELU subgraph into Gelu (opset >= 20) or a local Gelu function below"
    conditions = ("x / sqrt(2) (or x * 1/sqrt(2)) feeds Erf", "1 is added, 0.5 multiplies", "constants are constant", "opset >= 15")
    root_ops = frozenset({"Mul"})
    pattern_ops = frozenset({"Div", "Erf", "Add", "Mul"})
    produces = frozenset({"Gelu"})
    span = 5
    pattern_text = "Mul(Mul(x, Add(Erf(Div(x, sqrt2)), 1)), 0.5)"
    commute = True
    anchor_ops = frozenset({"Erf"})
    anchor_depth = 3

    def p1(self, op, x, s, one, half):
        return op.Mul(op.Mul(x, op.Add(op.Erf(op.Div(x, s)), one)), half)

    def p2(self, op, x, s, one, half):
        return op.Mul(op.Mul(x, half), op.Add(op.Erf(op.Div(x, s)), one))

    def p3(self, op, x, s, one, half):
        return op.Mul(x, op.Mul(op.Add(op.Erf(op.Div(x, s)), one), half))

    def q1(self, op, x, r, one, half):
        return op.Mul(op.Mul(x, op.Add(op.Erf(op.Mul(x, r)), one)), half)

    def q2(self, op, x, r, one, half):
        return op.Mul(op.Mul(x, half), op.Add(op.Erf(op.Mul(x, r)), one))

    def q3(self, op, x, r, one, half):
        return op.Mul(x, op.Mul(op.Add(op.Erf(op.Mul(x, r)), one), half))

    pattern = p1

    def patterns(self):
        return [self.p1, self.p2, self.p3, self.q1, self.q2, self.q3]

    def check(self, context, x, one, half, s=None, r=None, **_):
        if s is not None:
            scalar_near(s, float(np.sqrt(2.0)), "the divisor", "sqrt(2) ≈ 1.41421")
        if r is not None:
            scalar_near(r, float(1 / np.sqrt(2.0)), "the multiplier inside Erf", "1/sqrt(2) ≈ 0.707107")
        scalar_near(one, 1.0, "the number added to erf(...)", "1")
        scalar_near(half, 0.5, "the final factor", "0.5")
        ctx = current()
        if ctx.opset < 20 and ctx.opset < 15:
            fail(f"the model imports opset {ctx.opset}: ONNX's Gelu needs 20 and the local Gelu function needs CastLike (opset 15).")

    def rewrite(self, op, x, **_):
        if current().opset >= 20:
            return op.Gelu(x)
        return op.Gelu(x, _domain=WB_DOMAIN)

    def functions(self, ctx):
        return [] if ctx.opset >= 20 else [local_function(_GELU, ctx.opset)]


class FuseLayerNorm(PatternRule):
    """The decomposed layer norm, (x - mean) / sqrt(var + eps) * gamma + beta -> LayerNormalization.

    Conditions:
    1. the model imports opset >= 17 (LayerNormalization's first version);
    2. both ReduceMeans reduce the same trailing axes, with keepdims;
    3. the exponent is 2, eps a constant scalar;
    4. gamma and beta are constants shaped like the normalized dims (and, where they must be
       reshaped, not dequantized from integers: the reshaped copy would be floats);
    5. the intermediate results are used only inside the pattern.
    """

    id = "fuse-layernorm"
    family = "fusion"
    description = "decomposed mean/variance normalization into LayerNormalization (opset >= 17)"
    conditions = ("opset >= 17", "same trailing axes, keepdims", "exponent 2, constant eps", "constant gamma/beta of the normalized shape")
    root_ops = frozenset({"Add"})
    pattern_ops = frozenset({"ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Div", "Mul"})
    produces = frozenset({"LayerNormalization"})
    span = 8
    pattern_text = "Add(Mul(Div(x - mean(x), Sqrt(mean((x - mean)^2) + eps)), gamma), beta)"
    commute = True
    anchor_ops = frozenset({"Sqrt"})
    anchor_depth = 3

    def pattern(self, op, x, two, eps, gamma, beta):
        mean = op.ReduceMean(x, _allow_other_inputs=True, _outputs=["mean"])
        d = op.Sub(x, mean)
        var = op.ReduceMean(op.Pow(d, two), _allow_other_inputs=True, _outputs=["var"])
        n = op.Div(d, op.Sqrt(op.Add(var, eps)))
        return op.Add(op.Mul(n, gamma), beta)

    @staticmethod
    def _axes(node: ir.Node) -> list[int] | None:
        a = node.attributes.get("axes")
        if a is not None:
            return [int(x) for x in a.value]
        if len(node.inputs) > 1 and node.inputs[1] is not None:
            arr = current().const(node.inputs[1])
            return None if arr is None else [int(x) for x in np.asarray(arr).reshape(-1)]
        return []

    def _axis(self, x, mean, var) -> int:
        ctx = current()
        if ctx.opset < 17:
            fail(f"the model imports opset {ctx.opset}; LayerNormalization needs opset 17.")
        nodes = [mean.producer(), var.producer()]
        axes = []
        for n in nodes:
            if n.attributes.get_int("keepdims", 1) != 1:
                fail(f"{node_label(n)} has keepdims=0; the pattern needs the mean kept as a broadcastable dim.")
            ax = self._axes(n)
            if ax is None:
                fail(f"the axes of {node_label(n)} are not constant.")
            if not ax:
                fail(f"{node_label(n)} reduces over all axes; layer norm reduces trailing axes only.")
            axes.append(ax)
        r = rank(x)
        if r is None:
            fail(f"the rank of '{x.name}' is unknown, so the reduced axes cannot be checked.")
        norm = [sorted(a % r for a in ax) for ax in axes]
        if norm[0] != norm[1]:
            fail(f"the two ReduceMeans reduce different axes ({axes[0]} and {axes[1]}).")
        want = list(range(r - len(norm[0]), r))
        if norm[0] != want:
            fail(f"the ReduceMeans reduce axes {axes[0]}, which are not the trailing axes of '{x.name}' (rank {r}).")
        return want[0]

    def check(self, context, x, two, eps, gamma, beta, mean, var, **_):
        axis = self._axis(x, mean, var)
        scalar_near(two, 2.0, "the exponent", "2")
        e = require_constant(eps, "eps")
        if e.size != 1:
            fail(f"eps '{eps.name}' has {e.size} elements; it should be one number.")
        xs = static_shape(x)
        normalized = tuple(xs[axis:])
        for v, role in ((gamma, "gamma (the scale)"), (beta, "beta (the shift)")):
            arr = require_constant(v, role)
            shape = tuple(arr.shape)
            # leading 1s broadcast away; what remains must be the normalized shape
            while len(shape) > len(normalized) and shape[0] == 1:
                shape = shape[1:]
            if shape != normalized:
                fail(f"{role} '{v.name}' has shape {list(arr.shape)}, not the normalized shape {list(normalized)}.")
            if tuple(arr.shape) != normalized:  # the rewrite stores it reshaped, as floats
                require_not_dequantized(v, role)

    def rewrite(self, op, x, eps, gamma, beta, mean, var, **_):
        axis = self._axis(x, mean, var)
        ctx = current()
        xs = static_shape(x)
        normalized = tuple(xs[axis:])
        g = require_constant(gamma, "gamma").reshape(normalized)
        b = require_constant(beta, "beta").reshape(normalized)
        e = float(require_constant(eps, "eps").reshape(-1)[0])
        base = (mean.producer().name or "layernorm").rsplit(".", 1)[0]
        gv = gamma if tuple(require_constant(gamma, "gamma").shape) == normalized else op.initializer(ir.tensor(g, name=ctx.unique_name(f"{base}.scale")))
        bv = beta if tuple(require_constant(beta, "beta").shape) == normalized else op.initializer(ir.tensor(b, name=ctx.unique_name(f"{base}.bias")))
        # axis counted from the end (-1 for the last), as exporters write it and the later fusions
        # (onnxruntime's SkipLayerNormalization) look for it
        return op.LayerNormalization(x, gv, bv, axis=axis - len(xs), epsilon=e)


class FuseTransposeMatMul(PatternRule):
    """Transpose into MatMul: Gemm(transA/transB) for 2-D operands, Einsum for batched ones.

    Conditions:
    1. the Transpose swaps exactly the last two axes (2-D: perm [1, 0]);
    2. the operands' ranks are known;
    3. for 2-D, the model imports opset >= 11 (Gemm without C); for batched, opset >= 12 (Einsum);
    4. the Transpose result is used only by the MatMul.
    """

    id = "fuse-transpose-matmul"
    family = "fusion"
    description = "a Transpose feeding MatMul into Gemm transA/transB (2-D) or one Einsum (batched)"
    conditions = ("perm swaps the last two axes", "known ranks", "opset >= 11 (Gemm) / 12 (Einsum)", "the Transpose feeds only the MatMul")
    root_ops = frozenset({"MatMul"})
    pattern_ops = frozenset({"Transpose", "MatMul"})
    span = 2
    pattern_text = "MatMul(Transpose(a), b) or MatMul(a, Transpose(b))"

    def pattern_a(self, op, a, b):
        return op.MatMul(op.Transpose(a, _outputs=["ta"]), b)

    def pattern_b(self, op, a, b):
        return op.MatMul(a, op.Transpose(b, _outputs=["tb"]))

    pattern = pattern_a

    def patterns(self):
        return [self.pattern_a, self.pattern_b]

    @staticmethod
    def _check_perm(t: ir.Value) -> int:
        node = t.producer()
        r = rank(node.inputs[0])
        perm_attr = node.attributes.get("perm")
        if r is None:
            fail(f"the rank of the input of {node_label(node)} is unknown.")
        perm = list(perm_attr.value) if perm_attr is not None else list(reversed(range(r)))
        want = list(range(r - 2)) + [r - 1, r - 2] if r >= 2 else None
        if want is None or perm != want:
            fail(f"{node_label(node)} has perm {perm}; only a swap of the last two axes ({want}) folds into MatMul.")
        return r

    def check(self, context, a, b, ta=None, tb=None, **_):
        t = ta if ta is not None else tb
        r = self._check_perm(t)
        other = b if ta is not None else a
        ro = rank(other)
        if ro is None:
            fail(f"the rank of MatMul's other input '{other.name}' is unknown.")
        ctx = current()
        if r == 2 and ro == 2:
            if ctx.opset < 11:
                fail(f"the model imports opset {ctx.opset}; Gemm without a bias needs opset 11.")
        elif ctx.opset < 12:
            fail(f"the model imports opset {ctx.opset}; the batched form (Einsum) needs opset 12.")
        if r < 2 or ro < 2:
            fail("a 1-D MatMul operand has no transposed form to fold.")

    def rewrite(self, op, a, b, ta=None, tb=None, **_):
        ra, rb = rank(a), rank(b)
        if ra == 2 and rb == 2:
            return op.Gemm(a, b, transA=1 if ta is not None else 0, transB=1 if tb is not None else 0)

        # Einsum over the untransposed operand: swap its last two letters.
        def term(r: int, last: str) -> str:
            return ("..." if r > 2 else "") + last

        lhs = term(ra, "km" if ta is not None else "mk")
        rhs = term(rb, "nk" if tb is not None else "kn")
        out = ("..." if max(ra, rb) > 2 else "") + "mn"
        return op.Einsum(a, b, equation=f"{lhs},{rhs}->{out}")
