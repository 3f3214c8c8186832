"""Depthwise convs that the NCHW{b}c layout would make an island: blocked between ops that stay NCHW.

ConvertLayoutNCHWc (core.compiler.passes.layout.nchwc) blocks every depthwise conv whose channels the
block divides, as soon as the model has one dense conv to block. In a model whose depthwise convs
sit between convs that stay NCHW, that costs two layout transforms a conv: ShuffleNet's are read
from a channel shuffle (reshape, transpose, reshape) and read by grouped 1x1 convs of 34 or 68
channels a group (NCHW, core.compiler.schedules.cpu_conv), and its stem (3 -> 24 channels) is
blocked only with AVX2's 8-channel blocks. There the blocked depthwise conv + its two transforms
took far longer than the NCHW depthwise rule (cpu_depthwise, which blocks channels inside the
kernel) in one kernel (docs/performance.md: Depthwise islands stay NCHW).

`isolated_depthwise_weights(mod, block)` finds those convs: a depthwise conv is an island when the
first op before its input and every first op after its output, looking through ops that keep the
layout of their input (elementwise ops, pooling), stays NCHW: a conv that conv_layouts leaves NCHW,
a reshape or transpose, the model's input or output. Any other op (a blocked conv, another
depthwise conv, a concat, anything unknown) counts as blocked, so a conv is left NCHW only where
both sides are known to be NCHW. The pass identifies them by their weight (a constant), which the
ConvertLayout callback sees (a weight shared with a conv that is no island is left out).
"""
from __future__ import annotations

__all__ = ["isolated_depthwise_weights"]

# ops that keep the layout of their tensor inputs (relax's layout inference carries NCHW{b}c through them)
_LAYOUT_FOLLOWING = {
    "relax.nn.relu", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh",
    "relax.nn.leakyrelu", "relax.exp", "relax.negative", "relax.abs", "relax.square", "relax.clip",
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
    "relax.nn.max_pool2d", "relax.nn.avg_pool2d",
}
# ops whose NCHW input or output no blocked layout reaches (relax inserts a transform there)
_NCHW_OPS = {"relax.reshape", "relax.permute_dims", "relax.flatten"}


def _is_depthwise(call) -> bool:
    from ..relax_rewrite import static_shape

    weight, data = static_shape(call.args[1]), static_shape(call.args[0])
    if weight is None or data is None or len(weight) != 4 or len(data) != 4:
        return False
    groups = int(call.attrs.groups)
    return groups > 1 and weight[1] == 1 and groups == data[1] == weight[0]


def isolated_depthwise_weights(mod, block: int, conv_layouts) -> list:
    """The weight constants of the depthwise convs of `mod` that `conv_layouts(call, block)` would
    block and whose both sides stay NCHW (module docstring)."""
    from tvm import relax

    from ..relax_rewrite import is_const

    values: dict = {}  # var -> the call bound to it
    readers: dict = {}  # var -> [calls reading it, with the var each is bound to]
    outputs: list = []
    for func in mod.functions.values():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        for blk in func.body.blocks:
            for b in blk.bindings:
                values[b.var] = b.value
                args = b.value.args if isinstance(b.value, relax.Call) else b.value.fields if isinstance(b.value, relax.Tuple) else [b.value]
                for a in args:
                    if isinstance(a, relax.Var):
                        readers.setdefault(a, []).append((b.var, b.value))
        body = func.body.body
        outputs += [body] if isinstance(body, relax.Var) else list(getattr(body, "fields", []))

    def stays_nchw(call) -> bool:
        name = getattr(getattr(call, "op", None), "name", None)
        if name == "relax.nn.conv2d":
            return conv_layouts(call, block) is None
        return name in _NCHW_OPS

    def before_is_nchw(expr, depth: int = 0) -> bool:
        if not isinstance(expr, relax.Var) or depth > 16:
            return False
        value = values.get(expr)
        if value is None:
            return True  # a function parameter: the model's input, NCHW
        name = getattr(getattr(value, "op", None), "name", None)
        if name in _LAYOUT_FOLLOWING:
            tensors = [a for a in value.args if isinstance(a, relax.Var)]
            return bool(tensors) and all(before_is_nchw(a, depth + 1) for a in tensors)
        return isinstance(value, relax.Call) and stays_nchw(value)

    def after_is_nchw(var, depth: int = 0) -> bool:
        if depth > 16:
            return False
        uses = readers.get(var, [])
        if not uses:
            return any(var.same_as(o) for o in outputs)
        for bound, value in uses:
            name = getattr(getattr(value, "op", None), "name", None)
            if name in _LAYOUT_FOLLOWING:
                others = [a for a in value.args if isinstance(a, relax.Var) and not a.same_as(var)]
                if not all(before_is_nchw(a, depth + 1) for a in others) or not after_is_nchw(bound, depth + 1):
                    return False  # e.g. a residual add with a blocked tensor
            elif not (isinstance(value, relax.Call) and stays_nchw(value)):
                return False
        return True

    isolated, kept = [], []
    for var, value in values.items():
        if not (isinstance(value, relax.Call) and getattr(value.op, "name", None) == "relax.nn.conv2d" and _is_depthwise(value)):
            continue
        if not is_const(value.args[1]) or conv_layouts(value, block) is None:
            continue
        island = before_is_nchw(value.args[0]) and after_is_nchw(var)
        (isolated if island else kept).append(value.args[1])
    # a weight shared by an island and a blocked conv names both: neither is left NCHW
    return [w for w in isolated if not any(w.same_as(k) for k in kept)]
