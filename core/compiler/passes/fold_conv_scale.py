"""FoldScaleIntoConv: per-channel scales and shifts after a convolution folded into its weights.

Why: inference-mode batch norm, as DecomposeOpsForInference writes it, is four elementwise ops
after the conv - (y - mean) / sqrt(var + eps) * gamma + beta - with a divide among them, run on
every output element in the conv's write-back. With a constant weight they are one scale S and
one shift B per output channel: conv(x, W) * S + B == conv(x, W * S) + B. The scale goes into the
weight once, at compile time, and a single add (a bias) is left. ONNX models from other exporters
write the same thing as Mul/Add chains (inception's BN followed by a Mul and an Add), handled alike.

The chain is followed from a conv2d whose weight is a constant (FoldWeights has run), through
add / subtract / multiply / divide with a constant that holds one value per output channel or one
value in all, each intermediate used only by the next; `c - y` and `c / y` end it (not affine in
y per channel). NCHW convs only (the pass runs before ConvertLayoutNCHWc).
"""
from __future__ import annotations

import logging

from .relax_rewrite import array_const
from .relax_rewrite import is_const as _is_const

__all__ = ["fold_conv_scale", "fold_conv_scale_pass"]

logger = logging.getLogger(__name__)

_AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


def _same_shape(a, b) -> bool:
    """Both tensor types have the same shape (symbolic dimensions compared structurally)."""
    import tvm_ffi  # TVM 0.27 keeps structural_equal in tvm_ffi

    sa, sb = getattr(a, "shape", None), getattr(b, "shape", None)
    if sa is None or sb is None or len(sa) != len(sb):
        return False
    return all(tvm_ffi.structural_equal(x, y) for x, y in zip(sa, sb))


def _per_channel(value, channels: int, out_rank: int):
    """`value` as a (channels,) vector when it broadcasts per output channel of an NC... tensor, else None."""
    import numpy as np

    if value.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - value.ndim) + tuple(value.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(shape[1]), (channels,)).astype(np.float64)


def fold_conv_scale(mod):
    """`mod` with every conv2d -> per-channel scale/shift chain folded (see module docstring)."""
    import numpy as np
    from tvm import relax

    if "main" not in [g.name_hint for g in mod.get_global_vars()] or not isinstance(mod["main"], relax.Function):
        return mod
    # tuple accesses of known tuples resolved and unused values dropped first (BatchNormalization's
    # (y, mean, var) tuple, read as lv[0] by the next op, would end a chain)
    mod = relax.transform.DeadCodeElimination()(relax.transform.CanonicalizeBindings()(mod))
    func = mod["main"]
    uses: dict = {}

    def count(expr):
        if isinstance(expr, relax.Var):
            uses[expr] = uses.get(expr, 0) + 1

    relax.analysis.post_order_visit(func.body, count)
    bindings = {}
    users: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b, relax.VarBinding):
                bindings[b.var] = b
                if isinstance(b.value, relax.Call):
                    for a in b.value.args:
                        if isinstance(a, relax.Var):
                            users.setdefault(a, []).append(b)

    plans = {}  # conv var -> (new weight, shift, last var of the chain, dropped vars)
    for var, b in bindings.items():
        call = b.value
        if not (isinstance(call, relax.Call) and getattr(call.op, "name", None) == "relax.nn.conv2d"):
            continue
        if str(call.attrs.data_layout) != "NCHW" or str(call.attrs.kernel_layout) != "OIHW" or not _is_const(call.args[1]):
            continue
        weight = call.args[1].value.numpy()
        if weight.dtype != np.float32:
            continue
        channels = weight.shape[0]
        scale, shift = np.ones(channels), np.zeros(channels)
        chain, current, scaled = [], var, False
        while uses.get(current, 0) == 1 and len(users.get(current, [])) == 1:
            nxt = users[current][0]
            op = getattr(nxt.value.op, "name", None)
            if op not in _AFFINE or len(nxt.value.args) != 2 or not isinstance(nxt.var, relax.DataflowVar):
                break
            lhs, rhs = nxt.value.args
            const = rhs if lhs.same_as(current) else lhs if rhs.same_as(current) else None
            if const is None or not _is_const(const) or (op in ("relax.subtract", "relax.divide") and const is lhs):
                break
            c = _per_channel(const.value.numpy(), channels, len(weight.shape))
            if c is None or str(nxt.var.ty.dtype) != "float32" or not _same_shape(nxt.var.ty, var.ty):
                break
            if op == "relax.add":
                shift = shift + c
            elif op == "relax.subtract":
                shift = shift - c
            elif op == "relax.multiply":
                scale, shift, scaled = scale * c, shift * c, True
            else:
                if np.any(c == 0):
                    break
                scale, shift, scaled = scale / c, shift / c, True
            chain.append(nxt.var)
            current = nxt.var
        if scaled and chain:
            new_weight = (weight.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.ndim - 1))).astype(np.float32)
            plans[var] = (new_weight, shift.astype(np.float32).reshape((1, channels) + (1,) * (weight.ndim - 2)), chain[-1], set(chain[:-1]))
    if not plans:
        return mod
    last = {p[2]: conv for conv, p in plans.items()}
    dropped = set().union(*(p[3] for p in plans.values()))

    @relax.expr_functor.mutator
    class Fold(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            var = binding.var
            if var in dropped:
                return
            if var in plans:
                call = binding.value
                new = relax.Call(call.op, [self.visit_expr(call.args[0]), array_const(plans[var][0])], call.attrs, call.ty_args, call.span)
                self.builder_.emit_normalized(relax.VarBinding(var, self.builder_.normalize(new)))
                return
            if var in last:
                conv = last[var]
                self.builder_.emit_normalized(relax.VarBinding(var, self.builder_.normalize(relax.op.add(conv, array_const(plans[conv][1])))))
                return
            super().visit_var_binding_(binding)

    folder = Fold(mod)
    folder.builder_.update_func(mod.get_global_var("main"), folder.visit_expr(func))
    logger.debug("FoldScaleIntoConv: %d convolutions", len(plans))
    return folder.builder_.get()


def fold_conv_scale_pass(target=None):
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="FoldScaleIntoConv")
    def _pass(mod, _ctx):
        return fold_conv_scale(mod)

    return _pass
