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

Quantized (QDQ) models are judged in quantization steps instead (docs/quantization.md): a float
computed in another order (a conv's sum, onnxruntime's fused integer kernels) lands on the other side
of a rounding boundary now and then, and the QuantizeLinear after it then differs by one step, which
every later layer carries on. `quantization_steps` measures an error in steps (the accuracy debugger
uses it too) and `output_step_scales` finds the scale that defines a step for each graph output.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["RTOL", "ATOL", "SCALE_RTOL", "QDQ_STEPS", "Judgement", "judge", "quantization_steps", "output_step_scales"]

logger = logging.getLogger(__name__)

RTOL = 1e-3

ATOL = 1e-4

SCALE_RTOL = 1e-4  # (3) in the module docstring

QDQ_STEPS = 1  # quantization steps a QDQ model's output may differ by at least (module docstring)

# ops that move or reshape values without changing them: a per-tensor step passes through them
_VALUE_PRESERVING = {"Identity", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose"}


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


def quantization_steps(ours, ref, scale: np.ndarray, axis: int) -> float | None:
    """The largest |ours - ref| in quantization steps: divided by `scale` (one per tensor, or one per
    slice along `axis`); None when the scale does not fit the tensor."""
    a, b = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    s = np.asarray(scale, dtype=np.float64)
    if a.shape != b.shape or a.size == 0 or not np.all(s > 0):
        return None
    if s.size == 1:
        div = s.reshape(())
    else:
        ax = axis if axis >= 0 else axis + a.ndim
        if not (0 <= ax < a.ndim) or a.shape[ax] != s.size:
            return None
        shape = [1] * a.ndim
        shape[ax] = s.size
        div = s.reshape(shape)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - b) / div
    finite = err[np.isfinite(err)]
    if finite.size < err.size:
        return math.inf
    return float(finite.max())


def output_step_scales(model) -> dict[str, tuple[np.ndarray, int]]:
    """Graph output -> (scale, axis) of the quantization that defines its step, for an
    onnx.ModelProto: the constant scale of the DequantizeLinear that writes it (through ops that
    only move values, for a per-tensor scale), or 1 for an integer output a QuantizeLinear writes
    (its error is counted in steps already). Outputs with neither are left out."""
    from onnx import numpy_helper

    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.output and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = n.attribute[0].t
    producer = {o: n for n in graph.node for o in n.output if o}
    out: dict[str, tuple[np.ndarray, int]] = {}
    for o in graph.output:
        name, moved = o.name, False
        node = producer.get(name)
        while node is not None and node.op_type in _VALUE_PRESERVING and node.input:
            node, moved = producer.get(node.input[0]), True
        if node is None or node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        if node.op_type == "QuantizeLinear":
            if not moved:
                out[name] = (np.ones(1), axis)
            continue
        if len(node.input) < 2 or node.input[1] not in consts:
            continue
        try:
            scale = numpy_helper.to_array(consts[node.input[1]]).astype(np.float64)
        except Exception:  # noqa: BLE001 - a scale in a type numpy cannot read
            continue
        if moved and scale.size != 1:
            continue  # a per-axis scale's axis may have moved
        out[name] = (scale, axis)
    return out
