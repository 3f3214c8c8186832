"""Scaled dot-product attention, softmax(Q Kᵀ · scale + mask) V, into ONNX's Attention (opset 23).

Exporters write attention as pieces: torch.onnx's dynamo exporter writes SDPA as
MatMul(Q·√s, Kᵀ·√s) + Where(mask, 0, -FLT_MAX) -> Softmax -> Where(IsNaN(p), 0, p) -> MatMul(·, V),
its Kᵀ a Reshape/Transpose/Reshape over K's computed shape, and transformers' `repeat_kv` gives
grouped-query attention's K and V to every query head by Unsqueeze/Expand/Reshape. Opset 23's
Attention takes K and V with fewer heads than Q, so the rule feeds them un-repeated.
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass, field
from itertools import product

import numpy as np
import onnx_ir as ir

from core.rewrite import Attempt, PatternRule, RuleContext, current, fail, node_label, static_shape

from rewrites._util import describe_shape

__all__ = ["FuseAttention"]

logger = logging.getLogger(__name__)

_MIN_OPSET = 23
_ABSORBED = -1e30  # a fill this negative swallows any float32 score it is added to: Where == Add
_CAUSAL_FILL = -1e9  # above the diagonal: exp(score - 1e9 - max) is 0 in float32 for any score gap < 1e9
_LOWEST = float(np.finfo(np.float32).min) * 0.99  # torch's fill for masked scores: float32's lowest
_SCALES = ("qk", "mul", "div", "none")  # √s on Q and K (dynamo); s or /s after Q Kᵀ; none
_MASKS = ("add", "where", "none")


@dataclass
class _Plan:
    """What a match becomes: the un-transposed K, the K/V to feed (un-repeated where they can be),
    the mask to pass (or causal), and the nodes that die with the match."""

    k: ir.Value
    v: ir.Value
    scale: float
    mask: ir.Value | None = None
    fill: float | None = None  # Where(cond, scores, fill): pass Where(cond, 0, fill) as the mask
    causal: bool = False
    nodes: list[ir.Node] = field(default_factory=list)


def _pattern(scale: str, mask: str, guard: bool):
    """One variant of the pattern, as a function of exactly the variables it uses (onnxscript
    reads the variables from the signature)."""
    names = ["q", "kt", "v"] + {"qk": ["sq", "sk"], "mul": ["s"], "div": ["d"], "none": []}[scale]
    names += {"add": ["mask"], "where": ["cond", "fill"], "none": []}[mask] + (["zero"] if guard else [])

    def build(op, *args):
        b = dict(zip(names, args))
        if scale == "qk":
            scores = op.MatMul(op.Mul(b["q"], b["sq"]), op.Mul(b["kt"], b["sk"]))
        else:
            scores = op.MatMul(b["q"], b["kt"])
            if scale == "mul":
                scores = op.Mul(scores, b["s"])
            elif scale == "div":
                scores = op.Div(scores, b["d"])
        if mask == "add":
            scores = op.Add(scores, b["mask"])
        elif mask == "where":
            scores = op.Where(b["cond"], scores, b["fill"])
        p = op.Softmax(scores, _outputs=["probs"])
        if guard:
            p = op.Where(op.IsNaN(p), b["zero"], p)
        return op.MatMul(p, b["v"])

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in ["op", *names]]
    build.__signature__ = inspect.Signature(params)
    build.__name__ = f"attention_{scale}_{mask}{'_guarded' if guard else ''}"
    return build


def _scalar(v: ir.Value, role: str) -> float:
    a = current().const(v)
    if a is None or a.size != 1:
        fail(f"{role} '{v.name}' is not a constant scalar.")
    return float(a.reshape(()))


def _ints(v: ir.Value | None) -> list[int] | None:
    a = current().const(v) if v is not None else None
    return None if a is None else [int(x) for x in a.reshape(-1)]


def _same(a, b) -> bool:
    return a is not None and b is not None and a == b


def _producer(v: ir.Value | None, op_type: str) -> ir.Node | None:
    p = v.producer() if v is not None else None
    return p if p is not None and p.op_type == op_type and p.domain in ("", "ai.onnx") else None


def _perm(n: ir.Node) -> list[int] | None:
    a = n.attributes.get("perm")
    return None if a is None else list(a.as_ints())


def _shape_slice(v: ir.Value, of: ir.Value) -> tuple[int, int] | None:
    """(start, end) when v = Slice(Shape(of), start, end) along axis 0, steps 1."""
    s = _producer(v, "Slice")
    if s is None:
        return None
    sh = _producer(s.inputs[0], "Shape")
    if sh is None or sh.inputs[0] is not of or sh.attributes.get_int("start", 0) != 0 or sh.attributes.get("end") is not None:
        return None
    starts, ends = _ints(s.inputs[1]), _ints(s.inputs[2])
    axes = _ints(s.inputs[3]) if len(s.inputs) > 3 and s.inputs[3] is not None else [0]
    steps = _ints(s.inputs[4]) if len(s.inputs) > 4 and s.inputs[4] is not None else [1]
    if not starts or not ends or len(starts) != 1 or axes not in ([0], [-1]) or steps != [1]:
        return None
    return starts[0], ends[0]


def _key_behind(kt: ir.Value) -> tuple[ir.Value, list[ir.Node]]:
    """K, and the nodes making Kᵀ from it: Transpose(perm=[0,1,3,2]), or dynamo's
    Reshape(Transpose(Reshape(K, [-1, S, D]), [0,2,1]), [*lead, D, S]) over Shape(K) (or over
    constant shapes that K's static shape confirms)."""
    t = _producer(kt, "Transpose")
    if t is not None:
        if _perm(t) != [0, 1, 3, 2]:
            fail(f"{node_label(t)} has perm {_perm(t)}; Kᵀ must swap the last two axes of a 4-D K ([0, 1, 3, 2]).")
        return t.inputs[0], [t]
    outer = _producer(kt, "Reshape")
    t = _producer(outer.inputs[0], "Transpose") if outer is not None else None
    inner = _producer(t.inputs[0], "Reshape") if t is not None else None
    if inner is None or _perm(t) != [0, 2, 1]:
        fail(f"Kᵀ '{kt.name}' is neither a Transpose of K's last two axes nor torch's Reshape/Transpose/Reshape of them.")
    k = inner.inputs[0]
    c3, c4 = _producer(inner.inputs[1], "Concat"), _producer(outer.inputs[1], "Concat")
    ok = c3 is not None and c4 is not None and len(c3.inputs) == 3 and len(c4.inputs) == 3
    if ok:
        ok = (_ints(c3.inputs[0]) == [-1] and _shape_slice(c3.inputs[1], k) == (-2, -1)
              and (_shape_slice(c3.inputs[2], k) or (0, 0))[0] == -1
              and (_shape_slice(c4.inputs[0], k) or (0, 0))[1] == -2
              and (_shape_slice(c4.inputs[1], k) or (0, 0))[0] == -1 and _shape_slice(c4.inputs[2], k) == (-2, -1))
    if not ok:  # a static export (or one folded): the two shapes as constants, checked against K's
        shape, s3, s4 = static_shape(k), _ints(inner.inputs[1]), _ints(outer.inputs[1])
        ok = shape is not None and len(shape) >= 3 and all(isinstance(d, int) for d in shape) and s3 is not None \
            and s4 is not None and s3[1:] == list(shape[-2:]) and len(s3) == 3 and s3[0] in (-1, int(np.prod(shape[:-2]))) \
            and s4 == list(shape[:-2]) + [shape[-1], shape[-2]]
    if not ok:
        fail(f"the Reshape/Transpose/Reshape making Kᵀ '{kt.name}' does not reshape by K's own shape "
             "([-1, S, D], then [*lead, D, S] from Shape(K)): it is not provably a transpose of K's last two axes.")
    return k, [outer, t, inner]


def _unrepeated(x: ir.Value) -> tuple[ir.Value, int, list[ir.Node]] | None:
    """(kv, repeats, nodes) when x = Reshape(Expand(Unsqueeze(kv, [2]), [B, H, r, S, D]), [B, H*r, S, D])
    (transformers' repeat_kv), else None."""
    r = _producer(x, "Reshape")
    e = _producer(r.inputs[0], "Expand") if r is not None else None
    u = _producer(e.inputs[0], "Unsqueeze") if e is not None else None
    if u is None:
        return None
    axes = _ints(u.inputs[1]) if len(u.inputs) > 1 else list(u.attributes.get("axes").as_ints()) if u.attributes.get("axes") else None
    kv = u.inputs[0]
    src, big, out = static_shape(kv), static_shape(e.outputs[0]), static_shape(x)
    if axes != [2] or src is None or big is None or out is None or (len(src), len(big), len(out)) != (4, 5, 4):
        return None
    heads, reps = src[1], big[2]
    if not (isinstance(heads, int) and isinstance(reps, int) and big[1] == heads and out[1] == heads * reps):
        return None
    if not all(_same(a, b) for a, b in ((src[0], out[0]), (src[2], out[2]), (src[3], out[3]), (big[3], src[2]), (big[4], src[3]))):
        return None
    return kv, reps, [r, e, u]


def _causal_triangle(m: np.ndarray, allowed_is_true: bool) -> bool:
    """A square mask that lets query i see keys j <= i only, the same for every batch and head."""
    if m.ndim < 2 or m.shape[-1] != m.shape[-2] or any(d != 1 for d in m.shape[:-2]):
        return False
    m = m.reshape(m.shape[-2:])
    lower = np.tril(np.ones(m.shape, dtype=bool))
    if allowed_is_true:
        return m.dtype == np.bool_ and bool(np.array_equal(m, lower))
    return bool(np.all(m[lower] == 0) and np.all(m[~lower] <= _CAUSAL_FILL))


def _finite_where_mask(mask: ir.Value) -> bool:
    """mask = Where(cond, 0, fill) with a finite fill: no row of scores can become all -inf."""
    w = _producer(mask, "Where")
    if w is None:
        return False
    a, b = current().const(w.inputs[1]), current().const(w.inputs[2])
    return a is not None and b is not None and bool(np.all(np.isfinite(a)) and np.all(np.isfinite(b)))


def _plan(q: ir.Value, kt: ir.Value, v: ir.Value, probs: ir.Value, sq=None, sk=None, s=None, d=None, mask=None, cond=None,
          fill=None, zero=None) -> _Plan:
    """Check every condition of one match (each `fail`s with its reason) and say what it becomes."""
    ctx = current()
    if ctx.opset < _MIN_OPSET:
        fail(f"the model imports opset {ctx.opset}; Attention is an opset-{_MIN_OPSET} op: apply upgrade-opset first.")
    sm = probs.producer()
    axis = sm.attributes.get_int("axis", -1)
    if axis not in (-1, 3):
        fail(f"{node_label(sm)} normalizes axis {axis}; attention's softmax runs over the keys (the last axis).")
    k, nodes = _key_behind(kt)
    for role, x in (("Q", q), ("K", k), ("V", v)):
        shape = static_shape(x)
        if shape is None or len(shape) != 4:
            fail(f"{role} '{x.name}' has shape {describe_shape(x)}; the fusion writes Attention on 4-D (batch, heads, sequence, head size) inputs.")
    if sq is not None:
        scale = _scalar(sq, "the factor on Q") * _scalar(sk, "the factor on Kᵀ")
    elif s is not None:
        scale = _scalar(s, "the scale")
    elif d is not None:
        divisor = _scalar(d, "the divisor")
        if divisor == 0:
            fail("the scores are divided by 0.")
        scale = 1.0 / divisor
    else:
        scale = 1.0
    plan = _Plan(k, v, scale, nodes=nodes)
    # GQA: feed K and V un-repeated when both are transformers' repeat_kv of the same factor
    rk, rv = _unrepeated(k), _unrepeated(v)
    if rk is not None and rv is not None and rk[1] == rv[1]:
        plan.k, plan.v = rk[0], rv[0]
        plan.nodes += rk[2] + rv[2]
    # the mask: an additive one as it is, Where(cond, scores, fill) as Where(cond, 0, fill),
    # a constant causal triangle as is_causal
    if mask is not None:
        m = ctx.const(mask)
        plan.causal = m is not None and _causal_triangle(m, allowed_is_true=False)
        plan.mask = None if plan.causal else mask
        w = _producer(mask, "Where")
        zero_, lowest = (ctx.const(w.inputs[1]), ctx.const(w.inputs[2])) if w is not None else (None, None)
        if not plan.causal and zero_ is not None and lowest is not None and zero_.size == lowest.size == 1 \
                and float(zero_.reshape(())) == 0.0 and np.isfinite(lowest).all() and float(lowest.reshape(())) <= _LOWEST:
            # torch fills with the lowest float32, which onnxruntime's Attention reads as -inf (a row
            # masked entirely gives zeros, not the exported model's uniform row): -1e30 means the same
            plan.mask, plan.fill = w.inputs[0], _ABSORBED
    elif cond is not None:
        f = _scalar(fill, "the fill of masked scores")
        if f > _ABSORBED:
            fail(f"masked scores are set to {f:g}; only a fill of -1e30 or less (or -inf) is the same as adding it, as Attention does.")
        c = ctx.const(cond)
        plan.causal = c is not None and _causal_triangle(c, allowed_is_true=True)
        plan.mask, plan.fill = (None, None) if plan.causal else (cond, f)
    # Where(IsNaN(p), 0, p) only acts on rows the mask removes entirely (-inf everywhere)
    if zero is not None:
        if _scalar(zero, "the value that replaces NaN") != 0.0:
            fail("NaNs after the Softmax are replaced by a non-zero value.")
        finite = mask is None and cond is None or plan.causal or plan.fill is not None and np.isfinite(plan.fill) \
            or mask is not None and _finite_where_mask(mask)
        if not finite:
            fail("the Softmax's NaNs are zeroed and the mask is not provably finite: a row masked to -inf everywhere "
                 "would differ (Attention gives no NaN guard of its own).")
    return plan


def _dead_ancestors(nodes: list[ir.Node], keep: set[int]) -> list[ir.Node]:
    """Nodes feeding `nodes` that nothing else reads (the shape arithmetic of Kᵀ and repeat_kv):
    they die with the match. `keep`: ids of values the replacement still reads."""
    graph = nodes[0].graph
    dead = {id(n) for n in nodes}
    out = list(nodes)
    changed = True
    while changed:
        changed = False
        for n in list(out):
            for i in n.inputs:
                p = i.producer() if i is not None else None
                if p is None or id(p) in dead or p.graph is not graph or any(id(o) in keep or o.is_graph_output() for o in p.outputs):
                    continue
                if all(id(c) in dead for o in p.outputs for c in o.consumers()):
                    dead.add(id(p))
                    out.append(p)
                    changed = True
    return out


class FuseAttention(PatternRule):
    """softmax(Q Kᵀ · scale + mask) V -> Attention(Q, K, V, mask, scale) (ONNX opset 23).

    Conditions:
    1. the model imports opset >= 23 (else apply upgrade-opset first);
    2. the scale is constant: √s on Q and on Kᵀ (torch's dynamo SDPA), s or 1/s after Q Kᵀ, or none (1);
    3. Kᵀ is a Transpose of K's last two axes, or torch's Reshape/Transpose/Reshape over Shape(K);
    4. Q, K and V are 4-D (batch, heads, sequence, head size);
    5. Softmax over the last axis;
    6. the mask is added (passed as attn_mask), or a Where filling -1e30 or less; a constant
       square lower triangle (-1e9 or less above the diagonal) becomes is_causal; torch's fill of
       float32's lowest becomes -1e30 (onnxruntime's Attention reads the lowest as -inf);
    7. a NaN guard after the Softmax (Where(IsNaN(p), 0, p)) is dropped only when the mask is
       provably finite (no row can be all -inf);
    8. K and V repeated to the query heads (transformers' repeat_kv: Unsqueeze/Expand/Reshape)
       are fed un-repeated (Attention's kv heads < q heads);
    9. the intermediate results are used only inside the pattern.
    """

    id = "fuse-attention"
    family = "transformer"
    description = "MatMul/scale/mask/Softmax/MatMul attention into Attention (opset 23), GQA's K/V un-repeated"
    conditions = ("opset >= 23", "constant scale", "Kᵀ a transpose of K's last two axes", "4-D Q, K, V",
                  "Softmax over the last axis", "additive mask, or Where with fill <= -1e30",
                  "a NaN guard only with a finite mask", "intermediates feed only the pattern")
    root_ops = frozenset({"MatMul"})
    pattern_ops = frozenset({"MatMul", "Mul", "Div", "Add", "Where", "Softmax", "IsNaN", "Transpose", "Reshape"})
    produces = frozenset({"Attention"})
    span = 6
    pattern_text = "MatMul(Softmax(MatMul(Q·√s, Kᵀ·√s) + mask), V)"
    anchor_ops = frozenset({"Softmax"})
    anchor_depth = 3

    # 'qk' first: MatMul(Q, Kᵀ) with no scale would also match MatMul(Mul(Q, √s), Mul(Kᵀ, √s))
    _variants = [(s, m, g) for s, m, g in product(_SCALES, _MASKS, (True, False))]

    def pattern(self, op, q, kt, v):
        return _pattern("none", "none", False)(op, q, kt, v)

    def patterns(self):
        return [_pattern(*variant) for variant in self._variants]

    def _plan_of(self, bindings) -> _Plan:
        names = ("q", "kt", "v", "probs", "sq", "sk", "s", "d", "mask", "cond", "fill", "zero")
        return _plan(**{n: bindings.get(n) for n in names})

    def check(self, context, **bindings):
        self._plan_of(bindings)

    def match_at(self, ctx: RuleContext, node: ir.Node) -> Attempt:
        attempt = super().match_at(ctx, node)
        if not attempt.ok:
            return attempt
        _, m = attempt.payload
        plan = self._plan_of(dict(m.bindings))
        keep = {id(x) for x in (m.bindings["q"], plan.k, plan.v, plan.mask) if x is not None}
        extra = [n for n in _dead_ancestors(attempt.nodes + plan.nodes, keep) if n not in attempt.nodes]
        return Attempt(True, attempt.nodes + extra, attempt.reason, attempt.stage, attempt.payload)

    def rewrite(self, op, q, **bindings):
        plan = self._plan_of({"q": q, **bindings})
        mask = plan.mask
        if plan.fill is not None:
            mask = op.Where(mask, op.Constant(value_float=0.0), op.Constant(value_float=plan.fill))
            mask = op.CastLike(mask, q)
        attrs = {"scale": float(plan.scale)}
        if plan.causal:
            attrs["is_causal"] = 1
        inputs = [q, plan.k, plan.v] + ([mask] if mask is not None else [])
        return op.Attention(*inputs, **attrs)
