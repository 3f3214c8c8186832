"""The reference side of every numerical check: seeded random inputs, onnxruntime runs, output comparison."""
from __future__ import annotations

import logging

import numpy as np

from .artifact import TensorSpec

__all__ = [
    "random_feeds",
    "compare_outputs",
    "ort_session",
    "ort_run",
    "RTOL",
    "ATOL",
    "SCALE_RTOL",
]

logger = logging.getLogger(__name__)


RTOL = 1e-3


ATOL = 1e-4


SCALE_RTOL = 1e-4  # see compare_outputs


def random_feeds(specs: list[TensorSpec], seed: int = 0, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs for `specs`: normal floats, small non-negative integers (valid as
    indices for most gathers), booleans; symbolic dims take their value from `dims` (default 1)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        shape = s.concrete_shape(dims)
        dt = np.dtype(s.dtype)
        if np.issubdtype(dt, np.floating):
            feeds[s.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[s.name] = rng.integers(0, 2, size=shape).astype(dt)
        else:
            feeds[s.name] = rng.integers(0, 4, size=shape).astype(dt)
    return feeds


def compare_outputs(
    ours: list[np.ndarray], reference: list[np.ndarray], rtol: float = RTOL, atol: float = ATOL, scale_rtol: float = SCALE_RTOL
) -> tuple[bool, float, int]:
    """(all close, max abs error, index of the first output that differs or -1).

    An output matches when every element is close (rtol, atol), or when its largest error is
    below `scale_rtol` of the output's own magnitude (max |reference|): long float32 reductions
    (VGG-19's 25088-wide Gemm with random weights: outputs up to ~4000) summed in another order
    differ by ~1e-2 on elements that happen to be near zero, which is float32 rounding, not a
    wrong conversion; a wrong conversion errs on the scale of the values themselves."""
    worst = 0.0
    first_bad = -1
    if len(ours) != len(reference):
        return False, float("inf"), 0
    for i, (a, b) in enumerate(zip(ours, reference)):
        a = np.asarray(a)
        b = np.asarray(b)
        if a.shape != b.shape:
            return False, float("inf"), i
        if a.size == 0:
            continue
        if a.dtype == np.bool_ or b.dtype == np.bool_:
            err = float(np.count_nonzero(a != b))
            close = err == 0
        else:
            af = a.astype(np.float64)
            bf = b.astype(np.float64)
            both_nan = np.isnan(af) & np.isnan(bf)
            diff = np.where(both_nan, 0.0, np.abs(af - bf))
            err = float(np.nanmax(diff)) if diff.size else 0.0
            if np.isnan(diff).any():
                err = float("inf")
            close = bool(np.all(both_nan | np.isclose(af, bf, rtol=rtol, atol=atol)))
            if not close and np.isfinite(err):
                finite = bf[np.isfinite(bf)]
                scale = float(np.abs(finite).max()) if finite.size else 0.0
                close = err <= atol + scale_rtol * scale
        worst = max(worst, err)
        if not close and first_bad < 0:
            first_bad = i
    return first_bad < 0, worst, first_bad


def ort_session(model_bytes: bytes, threads: int | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def ort_run(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort_session(model_bytes)
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})
