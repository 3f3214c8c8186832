"""CombineParallelMatmul: the linear layers that read one activation (an attention layer's Q, K
and V projections) computed as one matmul over their weights side by side, each layer's output
then a slice of its columns.

Why: an attention layer multiplies the same normalized input by three weight matrices, three
kernels that each read the input and each pay a parallel launch. One matmul over the
concatenated weight [K, N1 + N2 + N3] (and bias) reads the input once; the column slices are
injective, so FuseOps puts each into the head reshape/transpose that follows (a copy that was
there already): per attention layer two kernels fewer, nothing added.

A model that already has one matmul for the three (GPT-2's c_attn) cuts its output with a split:
a kernel of its own that copies the whole activation with a tuple of outputs. Where every part is
read only by reshapes, each part becomes a strided_slice as above, which fuses into the heads'
transpose: one kernel fewer per layer.

TVM's own relax.transform.CombineParallelMatmul (TVM 0.27) changed nothing in vit_encoder, whose
weights are constants (nor with each weight bound to a variable first), and would emit a split,
the kernel GPT-2 shows FuseOps keeps apart; this pass does its rewrite for constant weights, with
slices.

Conditions, per group of `matmul(x, W_i)` (optionally `+ b_i`) on the same variable x:
1. W_i a constant [K, N_i] of x's dtype (float32), x a static shape of rank >= 2 ending in K;
2. b_i, where present, a constant [N_i] added to that matmul alone (all of a group or none);
3. every branch's result read only by reshapes (the heads' split): anything else (an MLP's
   parallel matmuls feeding elementwise ops) would read a strided slice in a kernel of its own;
4. at least two branches, and the combined weight at most COMBINED_WEIGHT_MAX_BYTES.

What it saves is parallel launches at 2 threads (and kernels a run), not time at 1 thread; a
combined weight past L2 runs slower, hence the size limit (docs/performance.md:
CombineParallelMatmul and COMBINED_WEIGHT_MAX_BYTES).
"""
from __future__ import annotations

import logging

from .relax_rewrite import array_const, is_const, static_shape

__all__ = ["combine_parallel_matmul", "combine_parallel_matmul_pass"]

logger = logging.getLogger(__name__)

# The matmul schedule (schedules.cpu_matmul) streams the whole packed weight once per row tile, from
# L2 (1 MB a core): a combined weight beyond this ran slower than its parts (docs/performance.md:
# CombineParallelMatmul and COMBINED_WEIGHT_MAX_BYTES).
COMBINED_WEIGHT_MAX_BYTES = 512 << 10


def _branches(block):
    """{x var: [(matmul binding, bias add binding or None), ...]} for the block's groups."""
    from tvm import relax

    users: dict = {}
    for b in block.bindings:
        v = b.value
        args = v.args if isinstance(v, relax.Call) else (v.fields if isinstance(v, relax.Tuple) else [v])
        for a in args:
            if isinstance(a, relax.Var):
                users.setdefault(a, []).append(b)
    groups: dict = {}
    for b in block.bindings:
        v = b.value
        if not (isinstance(v, relax.Call) and getattr(v.op, "name", None) == "relax.matmul"):
            continue
        x, w = v.args
        xs = static_shape(x)
        if not isinstance(x, relax.Var) or not is_const(w) or xs is None or len(xs) < 2:
            continue
        ws = list(w.value.shape)
        if len(ws) != 2 or ws[0] != xs[-1] or str(w.value.dtype) != "float32" or str(x.ty.dtype) != "float32":
            continue
        out, bias = b, None
        use = users.get(b.var, [])
        if len(use) == 1 and isinstance(use[0].value, relax.Call) and use[0].value.op.name == "relax.add":
            other = [a for a in use[0].value.args if not a.same_as(b.var)]
            if len(other) == 1 and is_const(other[0]) and list(other[0].value.shape) == [ws[1]]:
                out, bias = use[0], other[0]
        readers = users.get(out.var, [])
        if not readers or any(not (isinstance(r.value, relax.Call) and r.value.op.name == "relax.reshape") for r in readers):
            continue
        groups.setdefault(x, []).append((b, out if bias is not None else None, bias))
    result = {}
    for x, branches in groups.items():
        with_bias = [br for br in branches if br[2] is not None]
        chosen = with_bias if len(with_bias) >= 2 else [br for br in branches if br[2] is None]
        size = sum(int(w.value.numpy().nbytes) for w in (mm.value.args[1] for mm, _, _ in chosen))
        if len(chosen) >= 2 and size <= COMBINED_WEIGHT_MAX_BYTES:
            result[x] = chosen
    return result


def combine_parallel_matmul(mod):
    """`mod` with each group of parallel linear layers as one matmul (module docstring)."""
    import numpy as np
    from tvm import relax

    @relax.expr_functor.mutator
    class Combine(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.first: dict = {}  # first matmul binding's var -> its group
            self.skip: set = set()  # bindings replaced by the group's slices
            self.count = 0

        def visit_dataflow_block_(self, block):
            for x, branches in _branches(block).items():
                self.first[branches[0][0].var] = (x, branches)
                for mm, add, _ in branches:
                    self.skip.add(mm.var)
                    if add is not None:
                        self.skip.add(add.var)
            return super().visit_dataflow_block_(block)

        def visit_var_binding_(self, binding):
            group = self.first.get(binding.var)
            if group is not None:
                self._emit_group(*group)
            if binding.var in self.skip:
                return
            super().visit_var_binding_(binding)

        def _emit_group(self, x, branches):
            weights = [mm.value.args[1].value.numpy() for mm, _, _ in branches]
            y = self.builder_.emit(relax.op.matmul(self.visit_expr(x), array_const(np.concatenate(weights, axis=1))))
            if branches[0][2] is not None:
                bias = np.concatenate([b.value.numpy() for _, _, b in branches])
                y = self.builder_.emit(relax.op.add(y, array_const(bias)))
            axis = len(static_shape(x)) - 1
            start = 0
            for (mm, add, _), w in zip(branches, weights):
                out = (add or mm).var
                part = self.builder_.emit(relax.op.strided_slice(y, [axis], [start], [start + w.shape[1]]), out.name)
                self.set_var_remap(out, part)
                start += w.shape[1]
            self.count += 1

    combiner = Combine(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            combiner.builder_.update_func(gv, combiner.visit_expr(func))
    out = _splits_as_slices(combiner.builder_.get() if combiner.count else mod)
    if out is mod:
        return mod
    logger.debug("CombineParallelMatmul: %d groups combined", combiner.count)
    return relax.transform.DeadCodeElimination()(out)


def _splits_as_slices(mod):
    """`mod` with each `split` whose parts are read only by reshapes (GPT-2's c_attn output cut
    into Q, K and V before the heads' reshape/transpose) written as one strided_slice per part: a
    split is a kernel of its own with a tuple of outputs (a copy of the whole activation), a slice
    fuses into the heads' transpose that copies it anyway."""
    from tvm import relax

    parts: dict = {}  # split's tuple var -> {item var: index}
    readers: dict = {}
    for func in mod.functions.values():
        if not (isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr)):
            continue
        for block in func.body.blocks:
            for b in block.bindings:
                v = b.value
                if isinstance(v, relax.TupleGetItem) and isinstance(v.tuple_value, relax.Var):
                    parts.setdefault(v.tuple_value, {})[b.var] = int(v.index)
                    continue
                for a in (v.args if isinstance(v, relax.Call) else [v]):
                    if isinstance(a, relax.Var):
                        readers.setdefault(a, []).append(getattr(v.op, "name", None) if isinstance(v, relax.Call) else None)

    @relax.expr_functor.mutator
    class AsSlices(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.slices: dict = {}  # item var -> its strided_slice

        def visit_var_binding_(self, binding):
            v = binding.value
            hit = self.slices.get(binding.var) if isinstance(v, relax.TupleGetItem) else None
            if hit is not None:
                self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(hit)))
                return
            if isinstance(v, relax.Call) and getattr(v.op, "name", None) == "relax.split":
                self._slices(binding.var, v)
            super().visit_var_binding_(binding)

        def _slices(self, var, split):
            items, shape = parts.get(var, {}), static_shape(split.args[0])
            if var in readers or not items or shape is None:
                return
            if any(set(readers.get(i, [None])) != {"relax.reshape"} for i in items):
                return
            sections = split.attrs.indices_or_sections
            if not isinstance(sections, (list, tuple)) and type(sections).__name__ != "Array":
                return  # a count of equal parts: not emitted by the importer for GPT-2's split
            axis = int(split.attrs.axis) % len(shape)
            bounds = [0, *(int(i) for i in sections), shape[axis]]
            x = self.visit_expr(split.args[0])
            for item, index in items.items():
                self.slices[item] = relax.op.strided_slice(x, [axis], [bounds[index]], [bounds[index + 1]])

    mutator = AsSlices(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get() if mutator.slices else mod


def combine_parallel_matmul_pass(target=None):
    """CombineParallelMatmul as a tvm module pass (the pipeline's factory signature)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="CombineParallelMatmul")
    def _pass(mod, _ctx):
        return combine_parallel_matmul(mod)

    return _pass
