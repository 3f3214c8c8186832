"""FuseLayerNorm: a layer norm written out op by op, as older exporters write it, back into one
`relax.nn.layer_norm`.

BERT-style exports (torch.onnx before opset 17, TF converters) spell a layer norm as
ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div -> Mul gamma -> Add beta.
FuseOps cuts that chain into three kernels (mean + subtract, the power, mean + sqrt + divide +
affine): three passes over the activation and three kernel calls where the op is one row kernel
(cpu_rows.RowReduction) reading each row once. In bert_encoder that is 27 calls a run instead of 9.

The rewrite keeps the arithmetic: relax's layer_norm legalizes to the same two-pass variance,
mean((x - mean)^2), not E[x^2] - E[x]^2 (checked against onnxruntime in
tests/core/compiler/passes/test_fuse_layer_norm.py, on inputs with a large mean).

Conditions, each checked on the match:

1. both means reduce over the last axis only, with keepdims;
2. the power's exponent is the constant 2;
3. epsilon is a scalar constant (any shape of one element);
4. gamma and beta are constants of shape (hidden,) or broadcast to it from leading ones
   ((1, 1, hidden)); the multiply and the add may take them on either side;
5. float32 / float16 input with a static last axis.

Anything else is left as it is. The layer norm's binding keeps the final Add's variable, so
lineage (by variable name) and the bindings after it are unchanged; the intermediate bindings
become dead and are removed.
"""
from __future__ import annotations

import logging

from .relax_rewrite import array_const, rewrite_functions

__all__ = ["fuse_layer_norm", "fuse_layer_norm_pass"]

logger = logging.getLogger(__name__)


def _patterns():
    from tvm.relax.dpl import is_const, is_op, wildcard

    x = wildcard()
    mean = is_op("relax.mean")(x)
    centred = is_op("relax.subtract")(x, mean)
    power = is_op("relax.power")(centred, is_const())
    var = is_op("relax.mean")(power)
    eps = is_const()
    std = is_op("relax.sqrt")(is_op("relax.add")(var, eps) | is_op("relax.add")(eps, var))
    normed = is_op("relax.divide")(centred, std)
    gamma, beta = is_const(), is_const()
    scaled = is_op("relax.multiply")(normed, gamma) | is_op("relax.multiply")(gamma, normed)
    out = is_op("relax.add")(scaled, beta) | is_op("relax.add")(beta, scaled)
    return out, {"x": x, "mean": mean, "var": var, "eps": eps, "gamma": gamma, "beta": beta, "power": power}


def _scalar(const) -> float | None:
    value = const.value.numpy()
    return float(value.reshape(-1)[0]) if value.size == 1 else None


def _last_axis_mean(call, ndim: int) -> bool:
    axes = call.attrs.axis
    if axes is None or len(axes) != 1 or not bool(call.attrs.keepdims):
        return False
    axis = int(axes[0])
    return axis in (-1, ndim - 1)


def _affine_vector(const, hidden: int):
    """`const` as a (hidden,) constant, or None when it varies along another axis."""
    from tvm import relax

    value = const.value.numpy()
    if value.size != hidden or (value.ndim and value.shape[-1] != hidden):
        return None
    return array_const(value.reshape(hidden))


def _rewrite(expr, matches, parts):
    from tvm import relax

    x = matches[parts["x"]]
    shape = getattr(x.ty, "shape", None)
    dtype = str(getattr(x.ty, "dtype", ""))
    if dtype not in ("float32", "float16") or shape is None:
        return expr
    dims = list(shape.values)
    hidden = getattr(dims[-1], "value", None) if dims else None
    if not isinstance(hidden, int):
        return expr
    ndim = len(dims)
    mean, var = matches[parts["mean"]], matches[parts["var"]]
    if not (_last_axis_mean(mean, ndim) and _last_axis_mean(var, ndim)):
        return expr
    exponent = matches[parts["power"]].args[1]
    if getattr(exponent, "value", None) is None or _scalar(exponent) != 2.0:
        return expr
    eps = _scalar(matches[parts["eps"]])
    gamma = _affine_vector(matches[parts["gamma"]], hidden)
    beta = _affine_vector(matches[parts["beta"]], hidden)
    if eps is None or gamma is None or beta is None:
        return expr
    if str(gamma.value.dtype) != dtype or str(beta.value.dtype) != dtype:
        return expr
    return relax.op.nn.layer_norm(x, gamma, beta, axes=[-1], epsilon=eps)


def fuse_layer_norm(mod):
    """`mod` with every decomposed layer norm (see the module docstring) as one layer_norm."""
    pattern, parts = _patterns()
    return rewrite_functions(mod, pattern, lambda expr, matches: _rewrite(expr, matches, parts))


def fuse_layer_norm_pass(target=None):
    """FuseLayerNorm as a tvm module pass (the pipeline's factory signature)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="FuseLayerNorm")
    def _pass(mod, _ctx):
        return fuse_layer_norm(mod)

    return _pass
