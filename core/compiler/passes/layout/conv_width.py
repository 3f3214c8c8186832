"""WidenConvRows: a channel-blocked conv whose output rows have no register tile computes one
more column, and its rows are cut back after its elementwise tail.

Why: the channel-blocked conv schedule (schedules.cpu_conv_nchwc) tiles an output row by a
divisor of its width (`cpu_conv.choose_conv_tile`). zfnet512's 7x7 stride-2 stem writes 109 x
109 pixels, both prime: its tile is one pixel, one accumulator, every FMA waiting on the one
before it. Computed 110 wide (the input padded by the stride on the right, which the conv's own
padding copy does), the tile is 10 columns, several times faster (docs/performance.md:
WidenConvRows).

The extra column is cut off after the conv's elementwise tail (bias, batch-norm scale, ReLU:
what FuseOps folds into the conv's write-back) by a copy kernel of its own, `cut_columns`, opaque
to FuseOps: a strided_slice fused into the conv's kernel is inlined into its write-back
(cpu_common.inline_epilogue), which then stores all 18 columns of a 17-wide result, the last
into the next row (and past the buffer at the last row). The copy costs a pass over the output, so
only convs that gain far more are widened:

1. relax.nn.conv2d in NCHW{b}c / OIHW{i}i{b}o (after ConvertLayoutNCHWc), groups 1, static shapes;
2. its default tile holds one pixel (`choose_conv_tile`: columns x rows = 1) and one more column
   gives a tile of at least MIN_WIDENED_TILE pixels;
3. not a 3x3 stride-1 conv (Winograd's, core.compiler.passes.layout.winograd, which tiles its own way);
4. the tail: the ops using the conv's result (and then each other's) alone, elementwise with a
   constant that does not vary along the row (a bias, a scale) or a ReLU / maximum / minimum.

Results are the same numbers: the extra column is computed from zero padding and dropped.

zfnet512 is the only light model it changes (docs/performance.md: WidenConvRows).
"""
from __future__ import annotations

import logging

from .nchwc import BLOCKED_LAYOUT
from ..lrn import OPAQUE_PATTERN
from ..relax_rewrite import is_const, static_shape

__all__ = ["MIN_WIDENED_TILE", "cut_columns", "widen_conv_rows", "widen_conv_rows_pass", "widened_width"]

logger = logging.getLogger(__name__)

# Pixels a widened conv's register tile must hold (the schedule's own tiles hold 6-12)
MIN_WIDENED_TILE = 6

_TAIL_BINARY = {"relax.add", "relax.multiply", "relax.subtract", "relax.maximum", "relax.minimum"}
_TAIL_UNARY = {"relax.nn.relu"}


def widened_width(call, lanes: int) -> int | None:
    """The output width to compute a conv2d call at (its own + 1), or None to leave it."""
    from ...schedules.cpu_conv import choose_conv_tile

    attrs = call.attrs
    out_match = BLOCKED_LAYOUT.match(str(attrs.out_layout) or str(attrs.data_layout))
    if int(attrs.groups) != 1 or not BLOCKED_LAYOUT.match(str(attrs.data_layout)) or out_match is None:
        return None
    out, weight = static_shape(call), static_shape(call.args[1])
    if out is None or weight is None or len(out) != 5 or len(weight) != 6:
        return None
    kh, kw = weight[2], weight[3]
    if kh == kw == 3 and [int(s) for s in attrs.strides] == [1, 1]:
        return None
    block, out_h, out_w = int(out_match.group(1)), out[2], out[3]

    def pixels(width: int) -> int:
        tile = choose_conv_tile(block, width, lanes, out_h)
        return 0 if tile is None or tile[0] != block else tile[1] * tile[2]

    if pixels(out_w) != 1 or pixels(out_w + 1) < MIN_WIDENED_TILE:
        return None
    return out_w + 1


def _is_tail(value, var) -> bool:
    """Whether binding value `value` is elementwise in `var` with nothing varying along rows."""
    from tvm import relax

    if not isinstance(value, relax.Call):
        return False
    name = getattr(value.op, "name", None)
    if name in _TAIL_UNARY:
        return len(value.args) == 1 and value.args[0].same_as(var)
    if name not in _TAIL_BINARY or len(value.args) != 2:
        return False
    others = [a for a in value.args if not a.same_as(var)]
    if len(others) != 1:
        return False
    shape = static_shape(others[0])
    # a scalar, or a constant of the conv's rank that is 1 along the row (axis 3)
    return is_const(others[0]) and shape is not None and (len(shape) == 0 or (len(shape) == 5 and shape[3] == 1))


def cut_columns(data, width: int):
    """The first `width` columns of an NCHW{b}c tensor, as a TE compute (block "cut_columns")."""
    from tvm import te

    n, chunks, height, _, block = data.shape
    return te.compute((n, chunks, height, width, block), lambda i, c, y, x, b: data[i, c, y, x, b], name="cut_columns")


def _plan(func, lanes: int):
    """({conv var: widened width}, {tail var}, {last var of each tail: the conv's width})."""
    from tvm import relax

    users: dict = {}
    values: dict = {}

    def note_uses(owner, expr):
        def visit(e):
            if isinstance(e, relax.Var):
                users.setdefault(e, []).append(owner)

        relax.analysis.post_order_visit(expr, visit)

    for block in func.body.blocks:
        for binding in block.bindings:
            values[binding.var] = binding.value
            note_uses(binding.var, binding.value)
    note_uses(None, func.body.body)  # the function's result: a use no tail may swallow

    convs, tails, ends = {}, set(), {}
    for var, value in values.items():
        if not (isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.nn.conv2d"):
            continue
        width = widened_width(value, lanes)
        if width is None:
            continue
        convs[var] = width
        end = var
        while len(users.get(end, [])) == 1 and users[end][0] is not None and _is_tail(values[users[end][0]], end):
            end = users[end][0]
            tails.add(end)
        ends[end] = width - 1
    return convs, tails, ends


def widen_conv_rows(mod, lanes: int):
    """`mod` with every conv that qualifies (see the module docstring) computed one column wider,
    its rows cut back after its tail; `mod` itself when none does."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Widen(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.convs, self.tails, self.ends = {}, set(), {}

        def visit_var_binding_(self, binding):
            var = binding.var
            if var not in self.convs and var not in self.tails:
                return super().visit_var_binding_(binding)
            if var in self.convs:
                call = self.visit_expr(binding.value)
                a = call.attrs
                top, left, bottom, right = (int(p) for p in a.padding)
                value = relax.op.nn.conv2d(call.args[0], call.args[1], a.strides, [top, left, bottom, right + int(a.strides[1])],
                                           a.dilation, int(a.groups), str(a.data_layout), str(a.kernel_layout),
                                           str(a.out_layout), a.out_dtype)
            else:
                value = self.visit_expr(binding.value)  # reads the widened tensor: widened too
            wide = self.builder_.emit(value, name_hint=var.name)  # its name: lineage maps the ONNX node by it
            if var in self.ends:
                cut = self.builder_.call_te(cut_columns, wide, self.ends[var], primfunc_name_hint="cut_columns",
                                            primfunc_attrs={"op_pattern": OPAQUE_PATTERN})
                self.builder_.emit_normalized(relax.VarBinding(var, self.builder_.normalize(cut)))
            else:
                self.set_var_remap(var, wide)

    mutator = Widen(mod)
    widened = 0
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        mutator.convs, mutator.tails, mutator.ends = _plan(func, lanes)
        if mutator.convs:
            widened += len(mutator.convs)
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    if not widened:
        return mod
    logger.debug("WidenConvRows: %d convs one column wider", widened)
    return mutator.builder_.get()


def widen_conv_rows_pass(target):
    """WidenConvRows for `target` (a no-op on GPU targets)."""
    import tvm

    from ...target import vector_lanes

    lanes = 0 if "gpu" in target.keys else vector_lanes(target)

    @tvm.transform.module_pass(opt_level=0, name="WidenConvRows")
    def _pass(mod, _ctx):
        return widen_conv_rows(mod, lanes) if lanes else mod

    return _pass
