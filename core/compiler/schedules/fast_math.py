"""A vectorizable float32 exp for LLVM CPU code (and so sigmoid, SiLU, softmax, tanh-free GELUs).

TVM lowers `exp` on LLVM targets to the `llvm.exp` intrinsic, which LLVM turns into one call to
libm's expf per lane: a vectorized `x * sigmoid(x)` over a 112-wide row becomes 112 scalar calls.
In EfficientNet-B0 (SiLU after every conv) that was two thirds of the depthwise convs' time.

`install()` registers, for the `llvm` target, a lowering of `tirx.exp` (float32, scalar or
vector) to plain arithmetic that LLVM vectorizes: Cephes' range reduction x = n ln2 + f, a
degree-7 polynomial for e^f and 2^n built in the exponent bits, as TOPI's `fast_exp` does
(relative error ~1e-7, below float32's rounding of the libm result in the tests). Unlike
`fast_exp` it keeps the edge cases: NaN stays NaN, exp(x) = inf above 88.376 (float32 overflows at 88.723) and 0 below
-87.337 (where float32 results turn denormal).
Other dtypes keep the libm call. The registration is process-wide and idempotent.
"""
from __future__ import annotations

import logging

__all__ = ["LEVEL", "fast_exp_expr", "install"]

logger = logging.getLogger(__name__)

LEVEL = 20  # above TVM's own llvm rule (10): the lowering in effect for every LLVM build
_installed = False

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375  # ln 2 in two parts (Cephes): n * hi is exact for |n| < 2^9
_LN2_LO = -2.12194440e-4
_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_X_HI = 88.3762626647950  # the largest x whose 2^n still has a float32 exponent (n <= 127)
_X_LO = -87.3365478515625  # below: exp(x) is a float32 denormal; 0


def _lanes(dtype) -> int | None:
    """Lanes of a float32 / float32xN dtype, None for any other dtype."""
    text = str(dtype)
    if text == "float32":
        return 1
    if text.startswith("float32x") and text[8:].isdigit():
        return int(text[8:])
    return None


def _const(value: float, dtype):
    from tvm import tirx

    lanes = _lanes(dtype)
    scalar = tirx.const(value, "float32")
    return tirx.Broadcast(scalar, lanes) if lanes > 1 else scalar


def fast_exp_expr(x, dtype=None):
    """exp(x) for a float32 (or float32xN, `dtype`) expression `x`, as vectorizable arithmetic."""
    from tvm import tirx

    dtype = dtype if dtype is not None else str(x.ty)
    lanes = _lanes(dtype)
    int_type = "int32" if lanes == 1 else f"int32x{lanes}"
    float_type = "float32" if lanes == 1 else f"float32x{lanes}"

    def c(v):
        return _const(v, dtype)

    clamped = tirx.max(tirx.min(x, c(_X_HI)), c(_X_LO))
    n = tirx.floor(clamped * c(_LOG2E) + c(0.5))
    f = clamped - n * c(_LN2_HI) - n * c(_LN2_LO)
    p = c(_POLY[0])
    for coefficient in _POLY[1:]:
        p = p * f + c(coefficient)
    y = p * f * f + f + c(1.0)
    bias = tirx.const(127, "int32") if lanes == 1 else tirx.Broadcast(tirx.const(127, "int32"), lanes)
    shift = tirx.const(23, "int32") if lanes == 1 else tirx.Broadcast(tirx.const(23, "int32"), lanes)
    two_n = tirx.reinterpret(float_type, tirx.shift_left(tirx.Cast(int_type, n) + bias, shift))
    result = two_n * y
    inf = tirx.Cast(float_type, tirx.infinity("float32")) if lanes == 1 else tirx.Broadcast(tirx.infinity("float32"), lanes)
    zero = c(0.0)
    result = tirx.Select(x > c(_X_HI), inf, result)
    result = tirx.Select(x < c(_X_LO), zero, result)
    return tirx.Select(tirx.isnan(x), x, result)  # NaN in, NaN out


def _lower_exp(op):
    dtype = str(op.ty)  # the call's type: float32 or float32xN (TVM 0.27 exprs have no .dtype)
    if _lanes(dtype) is None:  # float32 only
        return op
    try:
        return fast_exp_expr(op.args[0], dtype)
    except Exception:  # noqa: BLE001 - keep libm's exp rather than fail a build
        logger.warning("fast exp lowering failed for %s; using libm", dtype, exc_info=True)
        return op


def install() -> None:
    """Register the fast exp lowering for LLVM targets in this process (once)."""
    global _installed
    if _installed:
        return
    from tvm.tirx.op import register_intrin_lowering

    try:
        register_intrin_lowering("tirx.exp", "llvm", f=_lower_exp, level=LEVEL)
    except Exception:  # noqa: BLE001 - already registered at this level (a reloaded module)
        logger.debug("fast exp lowering already registered", exc_info=True)
    _installed = True
