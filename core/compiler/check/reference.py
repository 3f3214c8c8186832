"""The reference side of every numerical check: seeded random inputs, onnxruntime runs, output comparison.

The tolerances and how an output is judged are core.tolerances' (RTOL, ATOL, SCALE_RTOL are
re-exported here for the compile's callers)."""
from __future__ import annotations

import logging
import re

import numpy as np

from ...errors import WorkbenchError
from ...tolerances import ATOL, RTOL, SCALE_RTOL, judge
from ..runtime.artifact import TensorSpec

__all__ = [
    "random_feeds",
    "compare_outputs",
    "ort_session",
    "ort_run",
    "reference_run",
    "ReferenceUnavailable",
    "ORT",
    "ONNX_REFERENCE",
    "RTOL",
    "ATOL",
    "SCALE_RTOL",
]

logger = logging.getLogger(__name__)


def random_feeds(
    specs: list[TensorSpec], seed: int = 0, dims: dict[str, int] | None = None, model=None
) -> dict[str, np.ndarray]:
    """Seeded random inputs for `specs`: normal floats, small non-negative integers, booleans;
    symbolic dims take their value from `dims` (default 1).

    With `model` (an onnx.ModelProto) an input that a node reads as indices, axes, a shape,
    split sizes or an integer divisor is drawn from the values that node can take
    (core.compiler.check.input_domains): random integers there are invalid input, not a check."""
    rng = np.random.default_rng(seed)
    shapes = {s.name: s.concrete_shape(dims) for s in specs}
    domains = {}
    if model is not None:
        from .input_domains import input_domains

        domains = input_domains(model, shapes)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        shape = shapes[s.name]
        dt = np.dtype(s.dtype)
        value = domains[s.name](rng, shape, dt) if s.name in domains else None
        if value is not None:
            feeds[s.name] = np.asarray(value, dtype=dt).reshape(shape)
        elif np.issubdtype(dt, np.floating):
            feeds[s.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[s.name] = rng.integers(0, 2, size=shape).astype(dt)
        else:
            feeds[s.name] = rng.integers(0, 4, size=shape).astype(dt)
    return feeds


def compare_outputs(
    ours: list[np.ndarray], reference: list[np.ndarray], rtol: float = RTOL, atol: float = ATOL, scale_rtol: float = SCALE_RTOL
) -> tuple[bool, float, int]:
    """(all match, max abs error, index of the first output that differs or -1), each output
    judged by core.tolerances.judge (the judgement the rewrite check, core.verify, uses too)."""
    if len(ours) != len(reference):
        return False, float("inf"), 0
    worst = 0.0
    first_bad = -1
    for i, (a, b) in enumerate(zip(ours, reference)):
        j = judge(a, b, rtol, atol, scale_rtol)
        worst = max(worst, j.max_abs)
        if not j.ok and first_bad < 0:
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


ORT = "onnxruntime"


ONNX_REFERENCE = "onnx reference evaluator"


class ReferenceUnavailable(WorkbenchError):
    """Neither onnxruntime nor onnx's reference evaluator can run the model on the check's inputs."""


def _ort_reason(e: BaseException) -> str:
    """onnxruntime's message cut to what a user needs: the op, the node, the reason."""
    text = str(e).strip()
    m = re.search(r"running (\w+) node\. Name:'([^']*)' Status Message: (.+)", text)
    if m:
        op, node, reason = m.groups()
        return f"{op} node{f' {node!r}' if node else ''}: {reason.strip().splitlines()[0].rstrip('.')}"
    m = re.search(r"Could not find an implementation for (\S+)", text)
    if m:
        return f"it has no implementation of {m.group(1).rstrip('.')}"
    first = text.splitlines()[0] if text else type(e).__name__
    return re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first).rstrip(".")


def _evaluator_run(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import warnings

    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    names = {i.name for i in model.graph.input}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        outs = ReferenceEvaluator(model).run(None, {k: v for k, v in feeds.items() if k in names})
    return [np.asarray(o) for o in outs]


def reference_run(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], str]:
    """(outputs, which reference computed them): onnxruntime where it can run the model, onnx's
    reference evaluator (`onnx.reference.ReferenceEvaluator`, slow but covering every opset
    and FLOAT8/INT4 types) where onnxruntime cannot; ReferenceUnavailable when neither can.

    The evaluator is the fallback, not the first choice: it is numpy, orders of magnitude
    slower on a real model, and a few of its kernels are written for the spec's examples."""
    try:
        sess = ort_session(model_bytes)
    except Exception as e:  # noqa: BLE001 - onnxruntime refuses the model (old opset, exotic type)
        why = _ort_reason(e)
        try:
            return _evaluator_run(model_bytes, feeds), ONNX_REFERENCE
        except Exception as e2:  # noqa: BLE001
            raise ReferenceUnavailable(
                f"no reference can run this model to check the compiled one: onnxruntime cannot load it ({why}) and onnx's "
                f"reference evaluator fails ({_short(e2)}); compile with verification off (--no-verify) at your own risk."
            ) from None
    names = {i.name for i in sess.get_inputs()}
    try:
        return sess.run(None, {k: v for k, v in feeds.items() if k in names}), ORT
    except Exception as e:  # noqa: BLE001 - onnxruntime refuses these inputs (or has no kernel for them)
        why = _ort_reason(e)
        try:
            return _evaluator_run(model_bytes, feeds), ONNX_REFERENCE
        except Exception:  # noqa: BLE001
            raise ReferenceUnavailable(
                f"onnxruntime refuses the check's inputs ({why}); give inputs valid for this model with "
                f"--verify-inputs IN.npz (compile_model(verify_inputs=...))."
            ) from None


def _short(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__).rstrip(".")[:200]
