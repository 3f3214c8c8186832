"""Vectorizable float32 exp, erf, tanh, sigmoid and constant powers for LLVM CPU code (softmax, GELU
in both forms, SiLU and squeeze-excitation gates, decomposed layer norms).

TVM lowers `tirx.exp` to LLVM's `llvm.exp` intrinsic and `tirx.erf` to a call of libm's `erff`;
`tirx.tanh` becomes a formula over `exp`. LLVM has no vector form of any of them on x86: a
vectorized loop computes each lane with a scalar libm call (16 `expf` / `erff` calls per AVX-512
vector, seen in the assembly). In a ViT's MLP the GELU's `erff` took longer than the matmul it
follows; softmax's `expf` made the attention softmax slower than the attention matmuls.

`install()` registers, for the "llvm" target kind, lowering rules (LowerIntrin's
`llvm.FLowerIntrinsic`) that expand float32 calls into straight-line arithmetic LLVM vectorizes
like any other: range reduction and a polynomial (exp, Cephes' expf: ~1 ulp), rational
approximations (erf, tanh: Eigen's, max error 4e-7 absolute over the whole line, checked in
tests/core/compiler/schedules/test_schedules_transformer.py; sigmoid: Eigen's logistic, the one onnxruntime's
MLAS computes, 2.2e-7 absolute, 0 below -16.6, checked in the same test file,
instead of TVM's 1 / (1 + exp(-x)) over the exp above: no division by a sum of an exp, 10 FMAs and
one division: docs/performance.md, Fast sigmoid); `pow(x, 2)`, `pow(x, 3)` (what exporters write
for x^2 and x^3) become multiplications instead of libm's `powf`. Special values keep their meaning: NaN in, NaN
out; exp(+inf) = inf, exp(-inf) = 0, erf/tanh(+-inf) = +-1. Other dtypes keep TVM's rules. The
rules are process-wide for LLVM code (GPU kernels are untouched); `schedule_pass` installs them
before any CPU build, and installing twice is a no-op.
"""
from __future__ import annotations

import logging

__all__ = ["fast_erf", "fast_exp", "fast_pow", "fast_sigmoid", "fast_tanh", "install", "installed"]

logger = logging.getLogger(__name__)

_PREVIOUS: dict[str, object] = {}
_LEVEL = 11  # above TVM's own registrations (level 10), so ours is the one LowerIntrin finds

# Cephes expf: exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln(2)/2
_EXP_HI, _EXP_LO = 88.72283172607421875, -87.0  # beyond: inf, and 0 (true value < 1.7e-38)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# Eigen's float erf: x * P(x^2) / Q(x^2) on [-4, 4] (erf is +-1 in float32 beyond)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)
# Eigen's float tanh: x * P(x^2) / Q(x^2) on [-7.9053, 7.9053] (+-1 beyond), x itself near 0
_TANH_CLAMP, _TANH_TINY = 7.90531110763549805, 0.0004
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _horner(x, coefficients, const):
    acc = const(coefficients[0])
    for c in coefficients[1:]:
        acc = acc * x + const(c)
    return acc


def _keep_nan(x, value):
    from tvm import tirx

    return tirx.Select(x == x, value, x)  # noqa: PLR0124 - NaN is the one value unequal to itself


def fast_exp(x, dt: str = "float32"):
    """exp(x) for a float32 (scalar or vector: `dt` float32xN) PrimExpr, as arithmetic only."""
    from tvm import tirx

    lanes = "" if "x" not in str(dt) else "x" + str(dt).split("x")[1]

    def c(v):
        return tirx.const(v, dt)

    xc = tirx.max(tirx.min(x, c(_EXP_HI)), c(_EXP_LO))
    n = tirx.floor(xc * c(1.44269504088896341) + c(0.5))
    r = xc - n * c(_LN2_HI) - n * c(_LN2_LO)
    p = _horner(r, _EXP_P, c) * (r * r) + r + c(1.0)
    # 2^n in two halves (n reaches 128 just below the overflow threshold): exponent bits of
    # 2^(n - 1), times 2
    ni = tirx.Cast("int32" + lanes, n) + tirx.const(126, "int32" + lanes)
    pow2 = tirx.reinterpret(dt, tirx.shift_left(ni, tirx.const(23, "int32" + lanes)))
    y = p * pow2 * c(2.0)
    y = tirx.Select(x > c(_EXP_HI), c(float("inf")), y)
    y = tirx.Select(x < c(_EXP_LO), c(0.0), y)
    return _keep_nan(x, y)


def _rational_odd(x, dt, clamp, numerator, denominator):
    from tvm import tirx

    def c(v):
        return tirx.const(v, dt)

    xc = tirx.max(tirx.min(x, c(clamp)), c(-clamp))
    x2 = xc * xc
    return xc * _horner(x2, numerator, c) / _horner(x2, denominator, c)


def fast_erf(x, dt: str = "float32"):
    """erf(x) for a float32 (or float32xN) PrimExpr, as arithmetic only."""
    return _keep_nan(x, _rational_odd(x, dt, 4.0, _ERF_P, _ERF_Q))


def fast_tanh(x, dt: str = "float32"):
    """tanh(x) for a float32 (or float32xN) PrimExpr, as arithmetic only."""
    from tvm import tirx

    y = _rational_odd(x, dt, _TANH_CLAMP, _TANH_P, _TANH_Q)
    y = tirx.Select(tirx.abs(x) < tirx.const(_TANH_TINY, dt), x, y)
    return _keep_nan(x, y)


# Eigen's float logistic (as onnxruntime's MLAS computes Sigmoid): 0.5 + x * P(x^2) / Q(x^2) on
# [-18, 18], clamped to [0, 1]
_LOGISTIC_CLAMP = 18.0
_LOGISTIC_P = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05, 8.51377133304701e-03, 2.48287947061529e-01)
_LOGISTIC_Q = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06, 1.70198817374094e-03, 1.16817656904453e-01,
               9.93151921023180e-01)


def fast_sigmoid(x, dt: str = "float32"):
    """sigmoid(x) = 1 / (1 + exp(-x)) for a float32 (or float32xN) PrimExpr, as arithmetic only:
    Eigen's rational logistic over x clamped to [-18, 18], the result clamped to [0, 1], NaN kept."""
    from tvm import tirx

    def c(v):
        return tirx.const(v, dt)

    y = _rational_odd(x, dt, _LOGISTIC_CLAMP, _LOGISTIC_P, _LOGISTIC_Q) + c(0.5)
    y = tirx.max(tirx.min(y, c(1.0)), c(0.0))
    return _keep_nan(x, y)


def _constant(expr) -> float | None:
    """The value of a float constant or of a broadcast one (a vectorized constant), else None."""
    value = getattr(expr, "value", None)
    if isinstance(value, (int, float)):
        return float(value)
    inner = getattr(value, "value", None)
    return float(inner) if isinstance(inner, (int, float)) else None


def fast_pow(call, dt: str = "float32"):
    """x ** c for the exponents exporters write as constants (Pow(x, 2) in a decomposed layer
    norm, Pow(x, 3) in GPT-2's GELU): multiplications instead of a libm powf per lane, the same
    for every input, inf and NaN included. None for any other exponent."""
    x, exponent = call.args[0], _constant(call.args[1])
    if exponent == 1.0:
        return x
    if exponent == 2.0:
        return x * x
    if exponent == 3.0:
        return x * x * x
    # (not 0.5 as sqrt: pow(-inf, 0.5) is +inf, sqrt(-inf) NaN)
    return None


def _rule(op_name: str, fast):
    previous = _PREVIOUS.get(op_name)

    def lower(call):
        # the call's dtype is its argument's (some argument nodes do not expose one to Python)
        dtype = str(call.ty.dtype)
        if dtype.split("x")[0] == "float32":
            result = fast(call, dtype) if fast is fast_pow else fast(call.args[0], dtype)
            if result is not None:
                return result
        return previous(call) if previous is not None else call

    return lower


def installed() -> bool:
    return bool(_PREVIOUS)


def install() -> None:
    """Register the float32 rules for LLVM targets (once per process)."""
    import tvm

    if _PREVIOUS:
        return
    table = [("tirx.exp", fast_exp), ("tirx.erf", fast_erf), ("tirx.tanh", fast_tanh), ("tirx.sigmoid", fast_sigmoid), ("tirx.pow", fast_pow)]
    for op_name, fast in table:
        op = tvm.ir.Op.get(op_name)
        _PREVIOUS[op_name] = op.get_attr("llvm.FLowerIntrinsic")
        tvm.ir.register_op_attr(op_name, "llvm.FLowerIntrinsic", _rule(op_name, fast), level=_LEVEL)
    logger.debug("vectorizable float32 exp/erf/tanh/sigmoid installed for LLVM targets")
