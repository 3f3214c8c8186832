"""Channel padding for the NCHW{b}c layout: a conv whose output channels the block does not divide.

Why: relax converts between NCHW and one block size only, so a conv with, say, 1000 output
channels under 16-channel blocks (SqueezeNet's classifier) used to stay NCHW: its input left the
blocked region through a transform, and the conv ran in the slower NCHW form (docs/performance.md:
Channel padding). Here, before ConvertLayout, such a conv gets its weight (and every per-channel
constant after it) zero-padded at compile time to the next multiple of the block (1000 -> 1008),
and its result is sliced back to the model's channel count:

    y = conv(x, W[1000])          ->   y' = conv(x, W'[1008]);  y = strided_slice(y', axis 1, 0:1000)

The slice then sinks through every following op that treats channels independently (unary
elementwise ops, an elementwise op with a per-channel or scalar constant, pooling, a mean or max
over the spatial axes), so the padded channels are carried through ReLU and the global average
pool in blocked layout, and the slice lands where the tensor leaves the blocked region (before a
flatten, a softmax over channels, a matmul...). A conv that reads the sliced tensor reads the padded
one instead, its weight zero-padded along the input channels. The padded channels never reach
any other op that mixes channels, so the outputs are exactly the model's.

A conv is padded when (1) it is an ungrouped float32 NCHW / OIHW conv2d with static shapes and a
constant weight, (2) conv_layouts would leave it NCHW for its output channels, and (3) it
has at least 8 blocks of outputs, so that the padding adds less than an eighth (1000 -> 1008),
or the padding adds at most a fifth (MAX_PADDING_FRACTION: the mobile models' 40 / 72 / 88 /
120 channels with 16-channel blocks; not 20 -> 32 or 24 -> 32, where most lanes of the last
block would be wasted). A depthwise conv that reads a padded tensor is padded too (its weight
with zeros, `_pad_depthwise`), so in an inverted-residual block the slice sinks through the
expand conv's activation, the depthwise conv, the squeeze-excitation (global pool, the excite
conv padded in turn, the gating multiply of two slices) down to the project conv, which reads
the padded tensor: the block stays blocked. (Before, the slice landed before the depthwise
conv, which stayed NCHW, and efficientnet_b0 was no faster.) (docs/performance.md: Channel padding)

With AVX2 code (8-channel blocks), whose conv tiles take two channel blocks (two 256-bit FMA
units, schedules.cpu_conv_nchwc.AVX2_TWO_BLOCKS), a conv blocked as it is with an odd count of 16
or more blocks is padded by one block the same way (`paired_channels`): SqueezeNet's classifier,
1000 = 125 x 8 channels, took one-block tiles (docs/performance.md: Channel padding).
"""
from __future__ import annotations

import logging

from ..relax_rewrite import is_const as _is_const
from ..relax_rewrite import static_shape

__all__ = ["MAX_PADDING_FRACTION", "MIN_PAIRED_BLOCKS", "pad_output_channels", "padded_channels", "paired_channels"]

logger = logging.getLogger(__name__)

# ops that work on each channel independently and keep the channel axis at 1
_UNARY = {
    "relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh",
    "relax.nn.leakyrelu", "relax.exp", "relax.negative", "relax.abs", "relax.square", "relax.clip",
}
_BINARY = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum"}
_POOLS = {"relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d"}
_SPATIAL_REDUCTIONS = {"relax.mean", "relax.max", "relax.sum", "relax.min"}


# Padding of fewer than 8 blocks of channels that is still taken: at most a fifth more channels
# (40 -> 48, 72 -> 80, 88 -> 96, 120 -> 128 with 16-channel blocks; not 24 -> 32), the mobile
# models' expand / project convs, whose padded channels now run on through the depthwise conv
# and the squeeze-excitation after them (`_pad_depthwise`) instead of leaving the blocked region.
MAX_PADDING_FRACTION = 0.2


# Blocks of channels from which an odd count is padded by one more block where the target's conv
# tiles take channel blocks in pairs (AVX2 code, `pad_output_channels(pairs=True)`): at most one
# block in 17 more work, against a one-block tile on every pixel. (SqueezeNet's classifier, 1000
# channels = 125 blocks of 8: 1008 channels take two-block tiles of 5 pixels of the flat 13x13
# plane, cpu_conv_nchwc.FLAT_PAIR_COLUMNS.)
MIN_PAIRED_BLOCKS = 16


def paired_channels(channels: int, block: int) -> int | None:
    """`channels` padded by one block when `block` divides them into an odd count of at least
    MIN_PAIRED_BLOCKS blocks, else None."""
    chunks, rest = divmod(channels, block)
    return channels + block if rest == 0 and chunks % 2 and chunks >= MIN_PAIRED_BLOCKS else None


def padded_channels(channels: int, block: int) -> int | None:
    """`channels` rounded up to a multiple of `block`, or None when that is no padding, or it
    adds more than MAX_PADDING_FRACTION to fewer than 8 blocks (from 8 blocks it adds less
    than an eighth)."""
    padded = -(-channels // block) * block
    if padded == channels or (channels < 8 * block and padded - channels > MAX_PADDING_FRACTION * channels):
        return None
    return padded


def _const_value(expr):
    value = getattr(expr, "value", None)
    return (value if value is not None else expr.data).numpy()


def _pad_axis1(value, padded: int):
    """`value` (numpy, channel axis 1) padded to `padded` channels by repeating its last channel
    (finite values whatever the op: a divisor padded with zeros would put inf in the lanes)."""
    import numpy as np

    extra = padded - value.shape[1]
    widths = [(0, 0)] * value.ndim
    widths[1] = (0, extra)
    return np.ascontiguousarray(np.pad(value, widths, mode="edge"))


def pad_output_channels(mod, block: int, blocked_as_is, pairs: bool = False):
    """`mod` with every conv2d that fits (see module docstring) padded to a multiple of `block`
    output channels and sliced back after the channel-wise ops that follow it. `blocked_as_is(call)`
    says whether a conv2d call is blocked without padding (layout_nchwc.conv_layouts). With `pairs`
    (conv tiles of two channel blocks), a conv blocked as it is with an odd count of blocks is
    padded by one block (`paired_channels`)."""
    import numpy as np
    from tvm import relax

    padded_convs = []

    def channel_slice(mutator, expr):
        """(source, channels) when `expr` is a var bound to x[:, :channels] of a 4-D x, else None."""
        if not isinstance(expr, relax.Var):
            return None
        value = mutator.lookup_binding(expr)
        if not isinstance(value, relax.Call) or getattr(value.op, "name", None) != "relax.strided_slice":
            return None
        try:
            axes, begin, end = ([int(v) for v in value.args[i]] for i in (1, 2, 3))
            strides = [int(v) for v in value.args[4]] if len(value.args) > 4 else [1]
        except (TypeError, ValueError, IndexError):  # symbolic bounds
            return None
        shape = static_shape(value.args[0])
        if axes != [1] or begin != [0] or strides != [1] or len(end) != 1 or shape is None or len(shape) != 4:
            return None
        return value.args[0], end[0]

    @relax.expr_functor.mutator
    class PadChannels(relax.PyExprMutator):
        binding_name = ""

        def visit_var_binding_(self, binding):
            self.binding_name = binding.var.name
            super().visit_var_binding_(binding)

        def slice_back(self, call, channels):
            """call[:, :channels], the padded call bound under the name of the binding being
            rewritten (core.compiler.pipeline.lineage follows names: the conv, ReLU, pool keep their ONNX
            nodes), the slice rebound to the binding's own variable."""
            padded = self.builder_.emit(call, name_hint=self.binding_name)
            return relax.op.strided_slice(padded, [1], [0], [channels])

        def visit_call_(self, call):
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            if name == "relax.nn.conv2d":
                return self._pad_conv(call)
            if name in _UNARY or name in _POOLS:
                return self._sink(call, [0])
            if name in _SPATIAL_REDUCTIONS:
                axes = getattr(call.attrs, "axis", None)
                if axes is not None and {int(a) for a in axes} <= {2, 3}:
                    return self._sink(call, [0])
                return call
            if name in _BINARY and len(call.args) == 2:
                return self._sink(call, [0, 1])
            return call

        def _pad_conv(self, call):
            if int(call.attrs.groups) != 1:
                return self._pad_depthwise(call)
            call = self._read_padded_input(call)
            as_is = blocked_as_is(call)
            if as_is and not pairs:
                return call
            attrs = call.attrs
            if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW" or str(attrs.out_layout) not in ("NCHW", ""):
                return call
            weight, data = call.args[1], call.args[0]
            w_shape, d_shape = static_shape(weight), static_shape(data)
            if not _is_const(weight) or w_shape is None or d_shape is None or len(w_shape) != 4:
                return call
            if str(getattr(data.ty, "dtype", "")) != "float32":
                return call
            channels = w_shape[0]
            padded = paired_channels(channels, block) if as_is else padded_channels(channels, block)
            if padded is None:
                return call
            w = _const_value(weight)
            w_padded = np.zeros((padded, *w.shape[1:]), w.dtype)
            w_padded[:channels] = w
            padded_convs.append((channels, padded))
            conv = relax.Call(call.op, [data, relax.const(w_padded, str(w.dtype))], call.attrs, call.ty_args, call.span)
            return self.slice_back(conv, channels)

        def _pad_depthwise(self, call):
            """dwconv(x[:, :C], W[C]) as dwconv(x, W'[P], groups P)[:, :C], W' zero-padded: a
            depthwise conv treats channels independently, so the slice sinks through it too."""
            hit = channel_slice(self, call.args[0])
            weight, attrs = call.args[1], call.attrs
            if hit is None or not _is_const(weight) or str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
                return call
            source, channels = hit
            w = _const_value(weight)
            if w.ndim != 4 or w.shape[0] != channels or w.shape[1] != 1 or int(attrs.groups) != channels:
                return call
            padded = static_shape(source)[1]
            w_padded = np.zeros((padded, *w.shape[1:]), w.dtype)
            w_padded[:channels] = w
            out_dtype = str(attrs.out_dtype) if str(attrs.out_dtype) not in ("", "void", "None") else None
            conv = relax.op.nn.conv2d(
                source, relax.const(w_padded, str(w.dtype)), strides=[int(v) for v in attrs.strides],
                padding=[int(v) for v in attrs.padding], dilation=[int(v) for v in attrs.dilation], groups=padded,
                data_layout="NCHW", kernel_layout="OIHW", out_layout=str(attrs.out_layout) or "NCHW", out_dtype=out_dtype,
            )
            return self.slice_back(conv, channels)

        def _read_padded_input(self, call):
            """conv(x[:, :C], W) as conv(x, W') with W' zero-padded to x's channels: the padded
            channels meet zero weights, and x stays in the blocked layout."""
            hit = channel_slice(self, call.args[0])
            weight = call.args[1]
            if hit is None or not _is_const(weight) or str(call.attrs.data_layout) != "NCHW" or str(call.attrs.kernel_layout) != "OIHW":
                return call
            source, channels = hit
            w = _const_value(weight)
            if w.ndim != 4 or w.shape[1] != channels:
                return call
            w_padded = np.zeros((w.shape[0], static_shape(source)[1], *w.shape[2:]), w.dtype)
            w_padded[:, :channels] = w
            return relax.Call(call.op, [source, relax.const(w_padded, str(w.dtype))], call.attrs, call.ty_args, call.span)

        def _sink(self, call, positions):
            """op(x[:, :C], ...) as op(x, ...)[:, :C] when every other operand broadcasts per channel."""
            args = list(call.args)
            found = None
            for i in positions:
                hit = channel_slice(self, args[i])
                if hit is not None:
                    if found is not None and found[1] != hit[1]:
                        return call
                    found = hit
            if found is None:
                return call
            source, channels = found
            padded = static_shape(source)[1]
            new_args = []
            for i, arg in enumerate(args):
                hit = channel_slice(self, arg) if i in positions else None
                if hit is not None:
                    if static_shape(hit[0])[1] != padded:
                        return call
                    new_args.append(hit[0])
                    continue
                if i not in positions:
                    new_args.append(arg)  # attributes-like operands (PrimValues of clip)
                    continue
                shape = static_shape(arg)
                if shape is None:
                    return call
                if len(shape) < 3 or shape[-3] == 1:
                    new_args.append(arg)  # a scalar or a constant the same for every channel
                elif len(shape) == 4 and shape[1] == channels and _is_const(arg):
                    value = _const_value(arg)
                    new_args.append(relax.const(_pad_axis1(value, padded), str(value.dtype)))
                else:
                    return call  # another activation, or a constant laid out otherwise
            return self.slice_back(relax.Call(call.op, new_args, call.attrs, call.ty_args, call.span), channels)

    mutator = PadChannels(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    if not padded_convs:
        return mod
    logger.debug("NCHW%dc: output channels of %d conv2d padded (%s)", block, len(padded_convs),
                 ", ".join(f"{c} -> {p}" for c, p in padded_convs))
    return relax.transform.DeadCodeElimination()(mutator.builder_.get())
