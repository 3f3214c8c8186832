"""The numerical tolerances of every check, and how one output is judged against its reference.

Two checks compare outputs: core.verify (a rewritten model against the model before the rewrite)
and core.compiler.check (a compiled model against onnxruntime). They must mean the same thing by
"the same result", so both judge with `judge` and these defaults. The module sits at the top of
core/, beside errors, and imports nothing of the workbench: core.rewrite (through core.verify) may
not import core.compiler (tests/test_architecture.py), and both may import this.

An output matches when (1) shapes and dtypes agree, and (2) every element is close
(numpy.isclose with `rtol`, `atol`; NaN equals NaN), or (3) for float outputs, the largest error
is at most `atol + scale_rtol * scale`, scale being the largest finite |reference|: long float32
reductions (VGG-19's 25088-wide Gemm on random weights: outputs up to ~4000) summed in another
order differ by ~1e-2 on elements that happen to be near zero, which is rounding, not a wrong
result; a wrong result errs on the scale of the values themselves. Integers and booleans get no
such allowance.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["RTOL", "ATOL", "SCALE_RTOL", "Judgement", "judge"]

logger = logging.getLogger(__name__)

RTOL = 1e-3

ATOL = 1e-4

SCALE_RTOL = 1e-4  # (3) in the module docstring


@dataclass(frozen=True)
class Judgement:
    """One output against its reference: whether it matches, its largest absolute error, its
    largest error relative to the reference (|a - b| / (|b| + atol)), the reference's largest
    finite |value|, and why the values could not be compared at all ("" when they could)."""

    ok: bool
    max_abs: float
    max_rel: float
    scale: float
    problem: str = ""


def judge(ours, reference, rtol: float = RTOL, atol: float = ATOL, scale_rtol: float = SCALE_RTOL) -> Judgement:
    """Judge `ours` against `reference` (arrays) as the module docstring says."""
    a, b = np.asarray(ours), np.asarray(reference)
    if a.shape != b.shape:
        return Judgement(False, math.inf, math.inf, 0.0, f"shape {list(a.shape)} versus {list(b.shape)}")
    if a.dtype != b.dtype:
        return Judgement(False, math.inf, math.inf, 0.0, f"dtype {a.dtype} versus {b.dtype}")
    if a.size == 0:
        return Judgement(True, 0.0, 0.0, 0.0)
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        same = bool(np.array_equal(a, b))
        return Judgement(same, 0.0 if same else math.inf, 0.0 if same else math.inf, 0.0, "" if same else "values differ")
    af, bf = a.astype(np.float64), b.astype(np.float64)
    close = np.isclose(af, bf, rtol=rtol, atol=atol, equal_nan=True)
    finite = np.isfinite(af) & np.isfinite(bf)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: those elements are judged by `close`
        err = np.where(finite, np.abs(af - bf), np.where(close, 0.0, np.inf))  # NaN against a number: inf
    max_abs = float(err.max())
    max_rel = float((err / (np.abs(bf) + atol)).max())
    ref_finite = np.abs(bf[np.isfinite(bf)])
    scale = float(ref_finite.max()) if ref_finite.size else 0.0
    ok = bool(close.all())
    if not ok and math.isfinite(max_abs) and np.issubdtype(a.dtype, np.floating):
        ok = max_abs <= atol + scale_rtol * scale
    return Judgement(ok, max_abs, max_rel, scale)
