"""FoldLinearReshape: `Reshape -> Gemm -> Reshape` around a linear layer (HF GPT-2's Conv1D as
torch.onnx exports it) becomes one batched matmul on the 3-D activation.

Why: Conv1D flattens [B, T, C] to [B*T, C], runs Gemm (matmul + bias) and restores
[B, T, N]. FuseOps does not fuse a reshape after a matmul, so the matmul's kernel ends at the bias
and whatever follows the second reshape - GPT-2's tanh GELU, the residual add after the
attention and MLP projections - is a pass of its own over the output. As one matmul on
[B, T, C] (what nn.Linear exports to in BERT and ViT) those fold into the matmul's write-back
like BERT's GELU does.

Matched: reshape(add(matmul(reshape(x, [B*T, C]), W), b), [B, T, N]) (or the add with its
operands swapped, or no add), where

1. x has a static shape [..., C] whose leading dimensions multiply to the rows of the flattened
   operand, and the outer reshape restores those leading dimensions with N columns;
2. W is a 2-D constant [C, N]; b (when present) a constant of N elements or a scalar.

Nothing else is rewritten; the final reshape's variable binds the new matmul, so names (and
lineage) after it are unchanged.
"""
from __future__ import annotations

import logging

from .relax_rewrite import rewrite_functions

__all__ = ["fold_linear_reshape", "fold_linear_reshape_pass"]

logger = logging.getLogger(__name__)


def _static(expr) -> list[int] | None:
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    dims = [getattr(d, "value", None) for d in shape.values]
    return dims if all(isinstance(d, int) for d in dims) else None


def fold_linear_reshape(mod):
    """`mod` with every Reshape -> Gemm -> Reshape linear layer as one matmul (module docstring)."""
    from tvm import relax
    from tvm.relax.dpl import is_const, is_op, wildcard

    x, w, b = wildcard(), is_const(), is_const()
    flat = is_op("relax.reshape")(x, wildcard())
    mm = is_op("relax.matmul")(flat, w)
    biased = is_op("relax.add")(mm, b) | is_op("relax.add")(b, mm)
    pattern = is_op("relax.reshape")(biased | mm, wildcard())

    def rewrite(expr, matches):
        x_e, w_e = matches[x], matches[w]
        x_shape, flat_shape, out_shape = _static(x_e), _static(matches[flat]), _static(expr)
        w_shape = list(w_e.value.shape)
        if x_shape is None or flat_shape is None or out_shape is None or len(x_shape) < 3:
            return expr
        if len(flat_shape) != 2 or len(w_shape) != 2 or flat_shape[1] != x_shape[-1] or w_shape[0] != x_shape[-1]:
            return expr
        rows = 1
        for d in x_shape[:-1]:
            rows *= d
        if flat_shape[0] != rows or out_shape != [*x_shape[:-1], w_shape[1]]:
            return expr
        y = relax.op.matmul(x_e, w_e)
        b_e = matches.get(b)
        if b_e is not None:
            size = b_e.value.numpy().size
            if size not in (1, w_shape[1]) or (size != 1 and b_e.value.shape[-1] != w_shape[1]):
                return expr
            y = relax.op.add(y, b_e)
        return y

    return rewrite_functions(mod, pattern, rewrite)


def fold_linear_reshape_pass(target=None):
    """FoldLinearReshape as a tvm module pass (the pipeline's factory signature)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="FoldLinearReshape")
    def _pass(mod, _ctx):
        return fold_linear_reshape(mod)

    return _pass
