"""Graph-level NCHW[x]c: convolutions and everything between them in channel-blocked layout.

Why: in NCHW a convolution's inner loop broadcasts one input pixel per input channel, one
channel plane (H x W floats) apart, and writes each output channel's row separately; every
conv also needs its own weight packing. In NCHW{b}c (b = the target's float32 vector width:
16 with AVX-512, 8 with AVX2) the b channels of a pixel are one vector, so a conv reads its input
a cache line at a time, keeps `b` output channels in one register and stores whole vectors; the
bias, batch-norm arithmetic, residual adds, ReLUs, pooling and concatenation in between work on
the same blocked tensors, so the layout is converted once where the blocked region starts and
once where it ends, not around every conv.

Three pieces, all used by the default CPU pipeline (core.compiler.pipeline.pass_list):

* `convert_layout_pass(target)` - the graph pass "ConvertLayoutNCHWc": relax's ConvertLayout asks
  every ungrouped float32 conv2d whose output channels b divides for NCHW{i}c data, OIHW{i}i{b}o
  weights and NCHW{b}c output, i = b or, where b does not divide the input channels, the widest
  block that does (3 for an image); every depthwise conv whose channels b divides for NCHW{b}c
  and OIHW1i{b}o; a squeeze-excitation's squeeze (a conv to fewer channels on a 1x1 map) for
  the widest block dividing its outputs (12 of 48), the block its excite conv asks for. A conv
  with 8 blocks of outputs or more that b does not divide is padded to a multiple of b first
  (1000 -> 1008 with b = 16; core.compiler.passes.layout.channel_padding), and so are the mobile models'
  40 / 72 / 88 / 120 channels; a conv down to 24 channels writes NCHW12c (`_narrow_projection`),
  the block the convs reading it ask for. The rest stay NCHW (other grouped convs; relax cannot
  convert between two block sizes).
  Relax's layout inference carries the blocked layout
  through elementwise ops, pooling, means and concat, and inserts `layout_transform` where an op
  needs NCHW (flatten, reshape, softmax over channels...). So that it can, ReLU6 / Clip (which
  the importer writes as call_tir of TOPI's maximum / minimum) becomes relax.maximum / minimum,
  and scalar constants stay scalars. Weight and bias transforms are constants, folded by
  FoldWeights (`layout_transform_numpy`). A model with no dense conv to block (depthwise convs
  alone) stays NCHW.
* `legalize_conv2d(bb, call)` - LegalizeOps for conv2d: the blocked form as TOPI's
  `conv2d_NCHWc` (block "conv2d_NCHWc"), which relax's own legalization refuses, and a blocked
  depthwise conv as `depthwise_conv2d_nchwc` (block "depthwise_conv2d_NCHWc"); any other
  layout goes to relax's default.
* core.compiler.schedules.cpu_conv_nchwc.Conv2dNCHWc and cpu_depthwise_nchwc.DepthwiseConv2dNCHWc -
  the schedules for those blocks (cpu_depthwise_nchwc.GlobalPoolNCHWc for the blocked pools).

One block size per model, the vector width: with 8 on an AVX-512 host (256-bit vectors, more
layers blocked: all of mobilenet_v3_small's instead of all but its 24/40/72/88/120-channel parts)
the mobile models were no faster, some slower (docs/performance.md: One block size per model, the
vector width).
"""
from __future__ import annotations

import logging
import re

from .channel_padding import pad_output_channels
from .islands import isolated_depthwise_weights
from ..relax_rewrite import is_const
from ..relax_rewrite import static_shape as _static_shape

__all__ = [
    "BLOCKED_LAYOUT",
    "channel_block",
    "conv_layouts",
    "convert_layout_pass",
    "depthwise_conv2d_nchwc",
    "is_reshape_map",
    "layout_transform_numpy",
    "legalize_conv2d",
    "legalize_conv2d_direct",
    "transforms_as_reshapes",
    "widest_block",
]

logger = logging.getLogger(__name__)

BLOCKED_LAYOUT = re.compile(r"^NCHW(\d+)c$")


def channel_block(target) -> int:
    """Channels per block for `target`: its float32 vector width (16 AVX-512, 8 AVX2, 4 else)."""
    from ...target import vector_lanes

    return vector_lanes(target)


def conv_layouts(call, block: int) -> dict | None:
    """The layouts ConvertLayout should give this conv2d call, or None to leave it NCHW."""
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return None
    if str(attrs.out_layout) not in ("NCHW", ""):
        return None
    data, weight = _static_shape(call.args[0]), _static_shape(call.args[1])
    if data is None or weight is None or len(data) != 4 or len(weight) != 4:
        return None
    if str(getattr(call.args[0].ty, "dtype", "")) != "float32":
        return None
    out_channels, in_channels = weight[0], weight[1]
    if int(attrs.groups) != 1:
        # depthwise (one input channel per output channel): the blocked form with its own
        # kernel (legalize_conv2d); other grouped convs stay NCHW (cpu_conv's NCHW rule)
        if int(attrs.groups) == data[1] == out_channels and in_channels == 1 and out_channels % block == 0:
            return {"relax.nn.conv2d": [f"NCHW{block}c", f"OIHW1i{block}o", f"NCHW{block}c"]}
        return None
    # input channels: the widest block dividing them (3 for an image, 12 for 24 channels): such
    # an input is never blocked by `block` itself, so it is converted from NCHW (an image stem
    # reads NCHW3c; docs/performance.md: Image stems take an NCHW3c input).
    in_block = widest_block(in_channels, block)
    out_block = block
    if out_channels % block:
        # (relax cannot convert between block sizes: one size per model) except a squeeze on a
        # 1x1 map (a squeeze-excitation's conv to 12 or 20 channels): its output blocked by the
        # widest divisor, the block the excite conv after it asks for its input, so the SE
        # block stays in the blocked region at a cost of a few scalar lanes. (Not an expanding
        # conv: its output gates a full-size tensor, which would have to follow its odd block.)
        out = _static_shape(call)
        squeeze = out is not None and len(out) == 4 and out[2] * out[3] == 1 and widest_block(out_channels, block) >= 2
        if not (out_channels < in_channels and (squeeze or _narrow_projection(out_channels, block, out))):
            return None
        out_block = widest_block(out_channels, block)
    return {"relax.nn.conv2d": [f"NCHW{in_block}c", f"OIHW{in_block}i{out_block}o", f"NCHW{out_block}c"]}


def _narrow_projection(out_channels: int, block: int, out_shape) -> bool:
    """A conv to fewer channels whose widest block is at least 3/4 of `block` (24 -> 12 of 16)
    and that channel padding leaves alone: blocked by that block, as the convs that read it ask
    for their input (`widest_block`), so a mobile model's 24-channel stage has no layout
    transform at all. Its output rows must divide into register tiles of 4-12 columns (the
    channel-blocked rule's tile for such a block): with one column a tile Inception v1's 512 -> 24
    conv at 13x13 was slower than its NCHW form and two transforms. (docs/performance.md: Narrow
    projections stay blocked)"""
    from .channel_padding import padded_channels

    if out_shape is None or len(out_shape) != 4 or not any(out_shape[3] % d == 0 for d in range(4, 13)):
        return False
    return 4 * widest_block(out_channels, block) >= 3 * block and padded_channels(out_channels, block) is None


def widest_block(channels: int, block: int) -> int:
    """The widest channel block of at most `block` that divides `channels` (3 for 3, 12 for 24 under 16)."""
    return max(b for b in range(1, block + 1) if channels % b == 0)


def _convert(mod, block: int):
    from tvm import relax

    convs = {"blocked": 0, "kept": 0}
    islands: list = []  # weights of depthwise convs kept NCHW between NCHW ops (layout_islands)

    def layout_cb(call):
        if getattr(call.op, "name", None) != "relax.nn.conv2d":
            return {}
        layouts = None if any(call.args[1].same_as(w) for w in islands) else conv_layouts(call, block)
        convs["blocked" if layouts else "kept"] += 1
        # a conv left out says NCHW explicitly (with no wish it would take its input's blocked layout)
        return layouts or {"relax.nn.conv2d": ["NCHW", "OIHW"]}

    if not _has_blockable_conv(mod, block):
        return mod  # nothing would be blocked: no transforms at all
    # unused values first (Dropout's mask): the layout inference has no rule for some of them
    mod = relax.transform.DeadCodeElimination()(mod)
    mod = _constants_to_full_rank(mod)

    def convert(mod):
        # convs with output channels the block does not divide (1000 of 16): padded to a multiple
        # of it; and with AVX2's two-block conv tiles, an odd count of 8-channel blocks (125) to an even one
        from ...schedules import cpu_conv_nchwc

        pairs = block == 8 and cpu_conv_nchwc.AVX2_TWO_BLOCKS
        padded = pad_output_channels(mod, block, lambda c: conv_layouts(c, block) is not None, pairs=pairs)
        islands[:] = isolated_depthwise_weights(padded, block, conv_layouts)
        return relax.transform.ConvertLayout({}, layout_cb)(padded)

    try:
        try:
            out = convert(mod)
        except Exception:  # noqa: BLE001 - once more with image-shaped constants repeated over the channels
            per_channel = _constants_to_full_rank(mod, per_image=True)
            if per_channel is mod:
                raise
            convs.update(blocked=0, kept=0)
            out = convert(per_channel)
    except Exception as exc:  # noqa: BLE001 - an op relax cannot infer a layout for: stay NCHW
        logger.warning("NCHW%dc layout not applied (%s); the model stays NCHW", block, str(exc).splitlines()[-1][:200])
        return mod
    logger.debug("NCHW%dc: %d conv2d blocked, %d kept in NCHW", block, convs["blocked"], convs["kept"])
    # a value two consumers want blocked is transformed once (ConvertLayout emits one per use)
    out = relax.transform.EliminateCommonSubexpr()(out)
    out = transforms_as_reshapes(out)
    # Some ops take a blocked layout relax's layout inference accepts but TOPI cannot legalize (a
    # mean over the channel axis, PRelu's per-channel select): tried here, so that such a model
    # compiles in NCHW as it did before instead of failing later in LegalizeOps.
    try:
        from ..legalize_cache import legalize_pass

        legalize_pass(overrides={"relax.nn.conv2d": legalize_conv2d})(out)
    except Exception as exc:  # noqa: BLE001
        logger.warning("NCHW%dc layout not applied: an op cannot be built blocked (%s); the model stays NCHW",
                       block, str(exc).strip().splitlines()[-1][:200])
        return mod
    return out


# The check below moves an index array through the transform, which is costly for large maps
# (docs/performance.md: MAX_RESHAPE_CHECK_ELEMENTS). The transforms that are reshapes
# are an image (3x224x224: 150 k) and 1x1 maps, so larger tensors are not checked.
MAX_RESHAPE_CHECK_ELEMENTS = 1 << 18


def is_reshape_map(shape, index_map, pad_value=None) -> bool:
    """Whether relax.layout_transform by `index_map` of a tensor of static `shape` keeps every
    element at its row-major offset (so it is a reshape): NCHW -> NCHW1c (an image stem's input),
    NCHW{b}c <-> NCHW on a 1 x 1 map (a global pool's result before a flatten, a squeeze-
    excitation's squeezed vector between two blocks). False when the map pads, or for a tensor
    over MAX_RESHAPE_CHECK_ELEMENTS."""
    import numpy as np

    size = int(np.prod(shape)) if shape else 1
    if pad_value is not None or size > MAX_RESHAPE_CHECK_ELEMENTS:
        return False
    moved = layout_transform_numpy(np.arange(size, dtype=np.int64).reshape(shape), index_map)
    return moved is not None and bool((moved.reshape(-1) == np.arange(size)).all())


def transforms_as_reshapes(mod):
    """`mod` with every layout_transform that moves no element (`is_reshape_map`) written as
    relax.reshape, which the VM runs as a view of the same memory (RewriteDataflowReshape)
    instead of a copy kernel: mobilenet_v3_small's 224x224 image to NCHW1c was a kernel call of
    its own, and its 1 x 1 pools and squeezes each one more kernel call (docs/performance.md:
    Transforms as reshapes and unblocking as permutes)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class AsReshape(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if getattr(call.op, "name", None) != "relax.layout_transform":
                return call
            shape, out_shape = _static_shape(call.args[0]), _static_shape(call)
            if shape is None or out_shape is None or not is_reshape_map(shape, call.attrs.index_map, call.attrs.pad_value):
                return call
            return relax.op.reshape(call.args[0], out_shape)

    mutator = AsReshape(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return _unblocking_as_permutes(mutator.builder_.get())


def _is_unblocking(shape, out_shape, index_map, pad_value) -> bool:
    """Whether a layout_transform of `shape` is NCHW{b}c -> NCHW with no padding."""
    import numpy as np

    if pad_value is not None or len(shape) != 5 or len(out_shape) != 4 or int(np.prod(shape)) > MAX_RESHAPE_CHECK_ELEMENTS:
        return False
    n, c1, h, w, b = shape
    if out_shape != [n, c1 * b, h, w]:
        return False
    index = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    moved = layout_transform_numpy(index, index_map)
    return moved is not None and bool((moved == index.transpose(0, 1, 4, 2, 3).reshape(out_shape)).all())


def _unblocking_as_permutes(mod):
    """`mod` with each NCHW{b}c -> NCHW layout_transform read only by reshapes that are read only
    by transposes (a ViT's patch embedding flattened into tokens) written as permute_dims + reshape. LegalizeOps makes
    layout_transform an opaque kernel that FuseOps keeps apart; permute_dims and reshape are
    injective, so the copy fuses with the reshape/transpose into tokens that follows: one copy of
    the activation where there were two (docs/performance.md: Transforms as reshapes and
    unblocking as permutes). A CNN's flatten before its classifier (a
    reshape read by a matmul) keeps its layout_transform and that kernel's own schedule."""
    from tvm import relax

    readers: dict = {}  # var -> [(op name, var bound to that call)]
    for func in mod.functions.values():
        if isinstance(func, relax.Function) and isinstance(func.body, relax.SeqExpr):
            for block in func.body.blocks:
                for b in block.bindings:
                    if isinstance(b.value, relax.Call):
                        for a in b.value.args:
                            if isinstance(a, relax.Var):
                                readers.setdefault(a, []).append((getattr(b.value.op, "name", None), b.var))

    def into_tokens(var) -> bool:  # read only by reshapes that are read only by transposes
        uses = readers.get(var, [])
        return bool(uses) and all(op == "relax.reshape" and readers.get(r) and all(o == "relax.permute_dims" for o, _ in readers[r])
                                  for op, r in uses)

    @relax.expr_functor.mutator
    class AsPermute(relax.PyExprMutator):
        def visit_var_binding_(self, binding):
            call = binding.value
            if (isinstance(call, relax.Call) and getattr(call.op, "name", None) == "relax.layout_transform"
                    and into_tokens(binding.var)):
                shape, out_shape = _static_shape(call.args[0]), _static_shape(call)
                if shape is not None and out_shape is not None and _is_unblocking(shape, out_shape, call.attrs.index_map, call.attrs.pad_value):
                    x = self.builder_.emit(relax.op.permute_dims(self.visit_expr(call.args[0]), [0, 1, 4, 2, 3]))
                    self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(relax.op.reshape(x, out_shape))))
                    return
            super().visit_var_binding_(binding)

    mutator = AsPermute(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum", "relax.power"}


def _constants_to_full_rank(mod, per_image: bool = False):
    """Expand_dims and squeeze as reshapes (see below), and a constant operand of an elementwise op with fewer dimensions than the other operand
    (a batch-norm scale of shape C x 1 x 1 beside N x C x H x W) reshaped to the same rank
    (1 x C x 1 x 1): relax's layout inference blocks only operands of equal rank and would
    convert the activation back to NCHW around the op. With `per_image`, also a constant of one
    channel that varies over H or W repeated over the channels (see MAX_CHANNEL_BROADCAST_ELEMENTS):
    only where ConvertLayout failed without it, as a 1 x 1 x S x S attention mask beside 12 heads
    would be read 12 times over for nothing."""
    import numpy as np
    from tvm import relax

    @relax.expr_functor.mutator
    class FullRank(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name == "relax.clip":
                return _clip_as_min_max(call)
            if name == "relax.call_tir":
                return _te_min_max_as_op(mod, call)
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
            if ra is None or rb is None:
                return call
            args, changed = [], False
            for e, shape, other in ((a, ra, rb), (b, rb, ra)):
                # (a scalar broadcasts in any layout as it is; made 1 x 1 x 1 x 1, relax's layout
                # inference would pair it with the blocked 5-D operand and fail: HardSwish's / 6)
                if is_const(e) and 0 < len(shape) <= len(other):
                    value = e.value.numpy()
                    full = value.reshape((1,) * (len(other) - len(shape)) + tuple(shape))
                    if per_image and _spatial_per_image(full.shape, other):
                        full = np.broadcast_to(full, (full.shape[0], other[1], *full.shape[2:]))
                        repeated.append(call)
                    if full.shape != value.shape:
                        e, changed = relax.const(np.ascontiguousarray(full), str(value.dtype)), True
                args.append(e)
            return relax.Call(call.op, args, call.attrs, call.ty_args, call.span) if changed else call

    repeated: list = []
    mutator = FullRank(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    if per_image and not repeated:
        return mod  # nothing to repeat: the caller's retry would fail the same way
    return mutator.builder_.get()


# A constant that varies over the image but not over the channels (a positional bias of 1 x 1 x H x W,
# a row scale of W values) broadcasts from one channel, which relax's layout inference cannot block:
# ConvertLayout fails ("Cannot broadcast from 5 to 4") and the whole model stays NCHW. Repeated over
# the channels it blocks like an activation; up to this many elements (4 MiB of float32).
MAX_CHANNEL_BROADCAST_ELEMENTS = 1 << 20


def _spatial_per_image(shape, other) -> bool:
    """Whether a constant of `shape` (already at `other`'s rank 4) beside an NCHW operand of shape
    `other` has one channel but varies over H or W, and is small enough to repeat over the channels."""
    if len(shape) != 4 or len(other) != 4 or shape[1] != 1 or not isinstance(other[1], int) or other[1] <= 1:
        return False
    if shape[2] == 1 and shape[3] == 1:
        return False
    return shape[0] * other[1] * shape[2] * shape[3] <= MAX_CHANNEL_BROADCAST_ELEMENTS


def _clip_as_min_max(call):
    """clip(x, lo, hi) as minimum(maximum(x, lo), hi) with scalar constants: relax's layout
    inference has no rule for clip and would convert every ReLU6 / HardSwish in a blocked region
    to NCHW and back; maximum and minimum with a scalar keep the blocked layout (same values)."""
    from tvm import relax

    x = call.args[0]
    dtype = str(getattr(x.ty, "dtype", ""))
    values = []
    for arg in call.args[1:3]:  # IntImm / FloatImm, or a PrimValue holding one
        value = getattr(arg, "value", None)
        values.append(getattr(value, "value", value))
    if not dtype.startswith("float") or any(not isinstance(v, (int, float)) for v in values):
        return call
    lo, hi = values
    return relax.op.minimum(relax.op.maximum(x, relax.const(float(lo), dtype)), relax.const(float(hi), dtype))


_TE_MIN_MAX = {"T_maximum": "maximum", "T_minimum": "minimum"}


def _te_min_max_as_op(mod, call):
    """call_tir of TOPI's maximum / minimum with a scalar bound (ONNX Clip, ReLU6, as the importer
    writes it) as relax.maximum / minimum: a call_tir is opaque to relax's layout inference and
    every ReLU6 would leave the blocked region and come back."""
    from tvm import relax, tirx

    args = call.args[1]
    if not isinstance(args, relax.Tuple) or len(args.fields) != 2:
        return call
    x, bound = args.fields
    x_shape, bound_shape, out_shape = _static_shape(x), _static_shape(bound), _static_shape(call)
    if x_shape is None or bound_shape != [] or out_shape != x_shape:
        return call
    callee = mod[call.args[0]] if call.args[0] in mod.get_global_vars() else None
    if not isinstance(callee, tirx.PrimFunc):
        return call
    try:
        from tvm import s_tir

        sch = s_tir.Schedule(callee)
        names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    except Exception:  # noqa: BLE001 - no root block: not TOPI's elementwise kernel
        return call
    if len(names) != 1 or names[0] not in _TE_MIN_MAX:
        return call
    dtype = str(getattr(x.ty, "dtype", ""))
    if dtype != str(getattr(bound.ty, "dtype", "")):
        return call
    return getattr(relax.op, _TE_MIN_MAX[names[0]])(x, bound)


def _has_blockable_conv(mod, block: int) -> bool:
    from tvm import relax

    found = False

    def visit(expr):
        nonlocal found
        # a dense conv anchors a blocked region; a model of depthwise convs alone stays NCHW
        # (cpu_depthwise blocks channels inside each kernel, with no transforms between them)
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d" and int(expr.attrs.groups) == 1:
            found = found or conv_layouts(expr, block) is not None

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
    """LegalizeOps for relax.nn.conv2d: NCHW{b}c / OIHW{b}i{b}o as TOPI's conv2d_NCHWc, or, for a
    3x3 stride-1 conv core.compiler.passes.layout.winograd's rule takes, by Winograd; else relax's own."""
    import tvm

    attrs = call.attrs
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    out_layout = str(attrs.out_layout) or data_layout
    if not (BLOCKED_LAYOUT.match(data_layout) and BLOCKED_LAYOUT.match(out_layout) and re.match(r"^OIHW\d+i\d+o$", kernel_layout)):
        return tvm.ir.Op.get("relax.nn.conv2d").get_attr("FLegalize")(bb, call)  # relax's own, as registered
    out_dtype = str(attrs.out_dtype) if str(attrs.out_dtype) not in ("", "void", "None") else None
    if int(attrs.groups) != 1:
        return bb.call_te(
            depthwise_conv2d_nchwc,
            call.args[0],
            call.args[1],
            [int(s) for s in attrs.strides],
            [int(p) for p in attrs.padding],
            [int(d) for d in attrs.dilation],
            out_dtype or str(call.args[0].ty.dtype),
            primfunc_name_hint="depthwise_conv2d_NCHWc",
        )
    from .winograd import legalize_winograd, winograd_tile

    tile = winograd_tile(call, int(BLOCKED_LAYOUT.match(out_layout).group(1)))
    if tile is not None:  # a 3x3 stride-1 conv with channels enough: Winograd (core.compiler.passes.layout.winograd)
        return legalize_winograd(bb, call, tile)
    return legalize_conv2d_direct(bb, call)


def legalize_conv2d_direct(bb, call):
    """The call_tir of TOPI's conv2d_NCHWc for a channel-blocked (groups 1) relax conv2d call."""
    from tvm import topi

    attrs = call.attrs
    data_layout = str(attrs.data_layout)
    out_layout = str(attrs.out_layout) or data_layout
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


def depthwise_conv2d_nchwc(data, kernel, strides, padding, dilation, out_dtype):
    """Depthwise conv2d in NCHW{b}c as a TE compute (TOPI declares `depthwise_conv2d_NCHWc` but
    registers no implementation): data [n, C/b, h, w, b], kernel [C/b, 1, kh, kw, 1, b] (relax's
    OIHW1i{b}o), padding [top, left, bottom, right]; a zero-padded copy ("pad_temp") and the
    block "depthwise_conv2d_NCHWc" [n, C/b, oh, ow, b] summing over kh, kw, which
    core.compiler.schedules.cpu_depthwise_nchwc schedules."""
    from tvm import te, topi

    batch, chunks, height, width, block = data.shape
    _, _, kh, kw, _, _ = kernel.shape
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    if top or left or bottom or right:
        padded = topi.nn.pad(data, [0, 0, top, left, 0], [0, 0, bottom, right, 0], name="pad_temp")
    else:
        padded = data
    out_h = (height + top + bottom - (kh - 1) * dh - 1) // sh + 1
    out_w = (width + left + right - (kw - 1) * dw - 1) // sw + 1
    rh = te.reduce_axis((0, kh), name="rh")
    rw = te.reduce_axis((0, kw), name="rw")
    return te.compute(
        (batch, chunks, out_h, out_w, block),
        lambda n, c, y, x, b: te.sum(
            padded[n, c, y * sh + rh * dh, x * sw + rw * dw, b].astype(out_dtype) * kernel[c, 0, rh, rw, 0, b].astype(out_dtype),
            axis=[rh, rw],
        ),
        name="depthwise_conv2d_NCHWc",
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
