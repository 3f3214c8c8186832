"""Graph-level NCHW[x]c: convolutions and everything between them in channel-blocked layout.

Why: in NCHW a convolution's inner loop broadcasts one input pixel per input channel, one
channel plane (H x W floats) apart, and writes each output channel's row separately; every
conv also needs its own weight packing. In NCHW{b}c (b = the target's float32 vector width:
16 with AVX-512, 8 with AVX2) the b channels of a pixel are one vector, so a conv reads its input
a cache line at a time, keeps `b` output channels in one register and stores whole vectors; the
bias, batch-norm arithmetic, residual adds, ReLUs, pooling and concatenation in between work on
the same blocked tensors, so the layout is converted once where the blocked region starts and
once where it ends, not around every conv.

Three pieces, all used by the default CPU pipeline (core.compiler.pipeline):

* `convert_layout_pass(target)` - the graph pass "ConvertLayoutNCHWc": relax's ConvertLayout asks
  every ungrouped float32 conv2d whose output channels b divides for NCHW{i}c data, OIHW{i}i{b}o
  weights and NCHW{b}c output, i = b or, where b does not divide the input channels, the widest
  block that does (3 for an image); the rest stay NCHW (grouped and depthwise convs, outputs of
  24 or 1000 channels with b = 16: relax cannot convert between two block sizes); relax's layout inference carries the blocked
  layout through elementwise ops, pooling and concat, and inserts `layout_transform` where an op
  needs NCHW (flatten, reshape, softmax over channels...). Weight and bias transforms are
  constants, folded by FoldWeights (`layout_transform_numpy`).
* `legalize_conv2d(bb, call)` - LegalizeOps for conv2d: the blocked form as TOPI's
  `conv2d_NCHWc` (block "conv2d_NCHWc"), which relax's own legalization refuses; any other
  layout goes to relax's default.
* core.compiler.schedules.cpu_conv.Conv2dNCHWc - the schedule for that block.
"""
from __future__ import annotations

import logging
import re

__all__ = [
    "BLOCKED_LAYOUT",
    "channel_block",
    "conv_layouts",
    "convert_layout_pass",
    "layout_transform_numpy",
    "legalize_conv2d",
]

logger = logging.getLogger(__name__)

BLOCKED_LAYOUT = re.compile(r"^NCHW(\d+)c$")


def channel_block(target) -> int:
    """Channels per block for `target`: its float32 vector width (16 AVX-512, 8 AVX2, 4 else)."""
    from .schedules.cpu_common import vector_lanes

    return vector_lanes(target)


def _static_shape(expr) -> list[int] | None:
    shape = getattr(getattr(expr, "ty", None), "shape", None)
    if shape is None:
        return None
    try:
        return [int(v) for v in shape]
    except (TypeError, ValueError):
        return None


def conv_layouts(call, block: int) -> dict | None:
    """The layouts ConvertLayout should give this conv2d call, or None to leave it NCHW."""
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return None
    if str(attrs.out_layout) not in ("NCHW", ""):
        return None
    if int(attrs.groups) != 1:
        return None  # grouped / depthwise: the NCHW rule's row-vectorized form
    data, weight = _static_shape(call.args[0]), _static_shape(call.args[1])
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:
        return None
    if str(getattr(call.args[0].ty, "dtype", "")) != "float32":
        return None
    out_channels, in_channels = weight[0], weight[1]
    if out_channels % block:
        return None  # (relax cannot convert between block sizes: one size per model)
    # input channels: the widest block dividing them (3 for an image, 12 for 24 channels): such
    # an input is never blocked by `block` itself, so it is converted from NCHW
    in_block = max(b for b in range(1, block + 1) if in_channels % b == 0)
    return {"relax.nn.conv2d": [f"NCHW{in_block}c", f"OIHW{in_block}i{block}o", f"NCHW{block}c"]}


def _convert(mod, block: int):
    from tvm import relax

    convs = {"blocked": 0, "kept": 0}

    def layout_cb(call):
        if getattr(call.op, "name", None) != "relax.nn.conv2d":
            return {}
        layouts = conv_layouts(call, block)
        convs["blocked" if layouts else "kept"] += 1
        # a conv left out says NCHW explicitly (with no wish it would take its input's blocked layout)
        return layouts or {"relax.nn.conv2d": ["NCHW", "OIHW"]}

    if not _has_blockable_conv(mod, block):
        return mod  # nothing would be blocked: no transforms at all
    # unused values first (Dropout's mask): the layout inference has no rule for some of them
    mod = relax.transform.DeadCodeElimination()(mod)
    mod = _constants_to_full_rank(mod)
    try:
        out = relax.transform.ConvertLayout({}, layout_cb)(mod)
    except Exception as exc:  # noqa: BLE001 - an op relax cannot infer a layout for: stay NCHW
        logger.warning("NCHW%dc layout not applied (%s); the model stays NCHW", block, str(exc).splitlines()[-1][:200])
        return mod
    logger.debug("NCHW%dc: %d conv2d blocked, %d kept in NCHW", block, convs["blocked"], convs["kept"])
    # a value two consumers want blocked is transformed once (ConvertLayout emits one per use)
    out = relax.transform.EliminateCommonSubexpr()(out)
    # Some ops take a blocked layout relax's layout inference accepts but TOPI cannot legalize (a
    # mean over the channel axis, PRelu's per-channel select): tried here, so that such a model
    # compiles in NCHW as it did before instead of failing later in LegalizeOps.
    try:
        from .legalize_cache import legalize_pass

        legalize_pass(overrides={"relax.nn.conv2d": legalize_conv2d})(out)
    except Exception as exc:  # noqa: BLE001
        logger.warning("NCHW%dc layout not applied: an op cannot be built blocked (%s); the model stays NCHW",
                       block, str(exc).strip().splitlines()[-1][:200])
        return mod
    return out


_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum", "relax.power"}


def _constants_to_full_rank(mod):
    """Expand_dims and squeeze as reshapes (see below), and a constant operand of an elementwise op with fewer dimensions than the other operand
    (a batch-norm scale of shape C x 1 x 1 beside N x C x H x W) reshaped to the same rank
    (1 x C x 1 x 1): relax's layout inference blocks only operands of equal rank and would
    convert the activation back to NCHW around the op."""
    import numpy as np
    from tvm import relax

    def is_const(e):
        return type(e).__name__ in ("GenericConst", "Constant")

    @relax.expr_functor.mutator
    class FullRank(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name in ("relax.expand_dims", "relax.squeeze"):
                # as the reshape it is: relax's layout inference would carry a blocked layout
                # into the new rank and fail (LRN's expand_dims + avg_pool3d); a reshape takes NCHW
                shape = _static_shape(call)
                if shape is not None and _static_shape(call.args[0]) is not None:
                    return relax.op.reshape(call.args[0], shape)
                return call
            if name not in _BINARY or len(call.args) != 2:
                return call
            a, b = call.args
            ra, rb = _static_shape(a), _static_shape(b)
            if ra is None or rb is None or len(ra) == len(rb):
                return call
            args = []
            for e, shape, other in ((a, ra, rb), (b, rb, ra)):
                if is_const(e) and len(shape) < len(other):
                    value = e.value.numpy()
                    e = relax.const(np.ascontiguousarray(value.reshape((1,) * (len(other) - len(shape)) + tuple(shape))), str(value.dtype))
                args.append(e)
            return relax.Call(call.op, args, call.attrs, call.ty_args, call.span)

    mutator = FullRank(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def _has_blockable_conv(mod, block: int) -> bool:
    from tvm import relax

    found = False

    def visit(expr):
        nonlocal found
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d" and conv_layouts(expr, block) is not None:
            found = True

    for _gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def convert_layout_pass(target):
    """ConvertLayoutNCHWc for `target` (a no-op on GPU targets and for models without a conv
    that fits the blocked layout)."""
    import tvm

    gpu = "gpu" in target.keys
    block = 0 if gpu else channel_block(target)

    @tvm.transform.module_pass(opt_level=0, name="ConvertLayoutNCHWc")
    def _pass(mod, _ctx):
        if not block:
            return mod
        return _convert(mod, block)

    return _pass


def legalize_conv2d(bb, call):
    """LegalizeOps for relax.nn.conv2d: NCHW{b}c / OIHW{b}i{b}o as TOPI's conv2d_NCHWc, else relax's own."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    attrs = call.attrs
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    out_layout = str(attrs.out_layout) or data_layout
    if not (BLOCKED_LAYOUT.match(data_layout) and BLOCKED_LAYOUT.match(out_layout) and re.match(r"^OIHW\d+i\d+o$", kernel_layout)):
        return _nn_conv2d(bb, call)
    out_dtype = str(attrs.out_dtype) if str(attrs.out_dtype) not in ("", "void", "None") else None
    return bb.call_te(
        topi.nn.conv2d_NCHWc,
        call.args[0],
        call.args[1],
        [int(s) for s in attrs.strides],
        [int(p) for p in attrs.padding],
        [int(d) for d in attrs.dilation],
        data_layout,
        out_layout,
        out_dtype or str(call.args[0].ty.dtype),
        primfunc_name_hint="conv2d_NCHWc",
    )


def _eval_index(expr, env):
    """numpy value of an index expression (Var, IntImm, +, -, *, floordiv, floormod) over `env`."""
    import numpy as np
    from tvm import tirx

    if isinstance(expr, tirx.Var):
        return env[expr.name]
    if isinstance(expr, tirx.IntImm):
        return np.int64(expr.value)
    kind = type(expr).__name__
    if kind in ("Add", "Sub", "Mul", "FloorDiv", "FloorMod"):
        a, b = _eval_index(expr.a, env), _eval_index(expr.b, env)
        return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide, "FloorMod": np.mod}[kind](a, b)
    if kind == "Cast":
        return _eval_index(expr.value, env)
    raise ValueError(f"index expression {kind} not supported")


def layout_transform_numpy(value, index_map, pad_value=None):
    """`value` (numpy) laid out by `index_map` as relax.layout_transform does, or None when the
    map pads (a size that does not divide) or is not a plain index arithmetic."""
    import numpy as np

    if pad_value is not None:
        return None
    try:
        new_shape = [int(v) for v in index_map.map_shape(list(value.shape))]
    except Exception:  # noqa: BLE001 - symbolic or odd map
        return None
    if int(np.prod(new_shape)) != value.size:
        return None  # padding implied
    grids = np.indices(value.shape, dtype=np.int64) if value.ndim else np.zeros((0,), np.int64)
    env = {str(v.name): grids[i] for i, v in enumerate(index_map.initial_indices)}
    try:
        index = tuple(np.broadcast_to(_eval_index(e, env), value.shape) for e in index_map.final_indices)
    except (ValueError, KeyError):
        return None
    out = np.empty(new_shape, dtype=value.dtype)
    out[index] = value
    return out
