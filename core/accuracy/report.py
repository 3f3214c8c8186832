"""What a debug run found: each compared tensor's error, and the first divergence.

A tensor's error is judged as every other check of the workbench judges an output
(core.tolerances.judge: shapes and dtypes, then numpy.isclose with rtol / atol, with the allowance
for long float reductions). `tol_units` says how far past the tolerance it is: the largest
|ours - reference| / (atol + rtol * |reference|) over its elements (≤ 1 passes outright).
Where a quantization scale applies to the tensor (it is read by a QuantizeLinear or written by a
DequantizeLinear on either side), `steps` is the error in quantization steps: |difference| / scale,
per channel for per-axis scales.

The first divergence is the earliest node, in the reference model's topological order, with an
output beyond tolerance while every input it reads from another node agrees: where a bug or a lossy
step is, as opposed to the nodes after it that only inherit its error. A tensor that was not
compared (unmatched, or not a float where only floats can be read) passes on whatever its inputs
carry.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..tolerances import ATOL, RTOL, SCALE_RTOL, judge
from ..tolerances import quantization_steps as steps  # shared with the compile's check (core.compiler.check)

__all__ = ["TensorError", "DebugReport", "measure", "first_divergence", "steps"]


@dataclass
class TensorError:
    """One compared tensor. `node` is the reference model's node label (its name, or `Op#id`),
    `output` its tensor; `other` the tensor it was compared with when that has another name (the
    other model's); `kernel` the compiled kernel that computes it (compiled programs)."""

    node: str
    node_id: int
    op: str
    output: str
    ok: bool
    max_abs: float
    max_rel: float
    tol_units: float
    range: tuple[float, float] | None
    steps: float | None = None
    other: str | None = None
    kernel: str | None = None
    problem: str = ""

    def to_json(self) -> dict:
        obj = {"node": self.node, "op": self.op, "output": self.output, "ok": self.ok, "max_abs": _num(self.max_abs),
               "max_rel": _num(self.max_rel), "tol_units": _num(self.tol_units),
               "range": [_num(self.range[0]), _num(self.range[1])] if self.range else None}
        if self.steps is not None:
            obj["steps"] = _num(self.steps)
        if self.other is not None:
            obj["other_output"] = self.other
        if self.kernel is not None:
            obj["kernel"] = self.kernel
        if self.problem:
            obj["problem"] = self.problem
        return obj

    @property
    def severity(self) -> float:
        """What the ranking sorts by: quantization steps where known, else tolerance units."""
        return self.steps if self.steps is not None else self.tol_units


def _num(x: float | None):
    """A float for JSON: non-finite values as the strings 'inf', '-inf', 'nan' (JSON has no such numbers)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


@dataclass
class DebugReport:
    """A whole debug run: `mode` ('compiled' or 'models'), what was compared with what, the inputs,
    the tensors in topological order, the first divergence (None when none), and counts."""

    mode: str
    reference: str  # the reference side: 'onnxruntime' (compiled programs) or model A's path
    subject: str  # what was checked against it ('compiled cpu program', model B's path)
    inputs: str  # 'seeded random' or 'user-supplied'
    runtime: str = ""  # what ran the ONNX side(s): 'onnxruntime', 'onnx reference evaluator'
    tensors: list[TensorError] = field(default_factory=list)
    first: TensorError | None = None
    not_compared: int = 0  # node outputs that could not be compared (unmatched, not float)
    chunks: int = 1
    seconds: float = 0.0
    rtol: float = RTOL
    atol: float = ATOL
    notes: list[str] = field(default_factory=list)
    kept: dict = field(default_factory=dict, repr=False)  # tensor -> (ours, reference) values kept for viewing
    refetch: object = field(default=None, repr=False)  # tensor -> (ours, reference), computed again

    def pair(self, tensor: str) -> tuple[np.ndarray, np.ndarray]:
        """(ours, reference) values of a compared tensor: kept ones at once, others computed again."""
        if tensor in self.kept:
            return self.kept[tensor]
        if self.refetch is None:
            raise KeyError(tensor)
        return self.refetch(tensor)

    def tensor(self, name: str) -> TensorError | None:
        return next((t for t in self.tensors if t.output == name), None)

    @property
    def beyond(self) -> list[TensorError]:
        return [t for t in self.tensors if not t.ok]

    def node_errors(self, cap: float = 1e9) -> dict[int, float]:
        """Node id -> the severity of its worst compared output (an infinite or NaN error counts as `cap`):
        what the canvas colours each node by."""
        out: dict[int, float] = {}
        for t in self.tensors:
            v = t.severity if math.isfinite(t.severity) else cap
            out[t.node_id] = max(out.get(t.node_id, 0.0), v)
        return out

    def ranked(self) -> list[TensorError]:
        """The tensors, worst first."""
        return sorted(self.tensors, key=lambda t: (-(t.severity if math.isfinite(t.severity) else math.inf), t.node_id))

    def to_json(self) -> dict:
        return {"mode": self.mode, "reference": self.reference, "subject": self.subject, "inputs": self.inputs, "runtime": self.runtime,
                "rtol": self.rtol, "atol": self.atol, "compared": len(self.tensors), "beyond_tolerance": len(self.beyond),
                "not_compared": self.not_compared, "chunks": self.chunks, "seconds": round(self.seconds, 3),
                "tensors": [t.to_json() for t in self.tensors],
                "first_divergence": self.first.to_json() if self.first is not None else None, "notes": list(self.notes)}

    def summary(self) -> str:
        head = f"{len(self.tensors)} tensors compared ({self.subject} against {self.reference}, {self.inputs} inputs)"
        if self.first is None:
            more = f"; {len(self.beyond)} beyond tolerance, none where its inputs agree" if self.beyond else "; all agree"
            return head + more + "."
        f = self.first
        where = f" (kernel {f.kernel})" if f.kernel else ""
        return (f"{head}; {len(self.beyond)} beyond tolerance; the first divergence is {f.op} node '{f.node}'{where}, "
                f"output '{f.output}': {describe(f)}.")


def describe(t: TensorError) -> str:
    """The figures of one tensor, in one clause."""
    if t.problem:
        return t.problem
    text = f"max abs error {t.max_abs:.3g}, {t.tol_units:.3g}× the tolerance"
    if t.steps is not None:
        text += f", {t.steps:.3g} quantization steps"
    if t.range is not None:
        text += f", values in {t.range[0]:.3g}..{t.range[1]:.3g}"
    return text


def measure(probe, ours, ref, rtol: float, atol: float, scale: tuple[np.ndarray, int] | None = None) -> TensorError:
    """A TensorError for one tensor: `ours` against the reference `ref`."""
    j = judge(ours, ref, rtol, atol, SCALE_RTOL)
    rng = None
    b = np.asarray(ref)
    if b.size and (np.issubdtype(b.dtype, np.number) or b.dtype == np.bool_) and not j.problem:
        finite = b[np.isfinite(b)] if np.issubdtype(b.dtype, np.floating) else b
        if finite.size:
            rng = (float(finite.min()), float(finite.max()))
    units = math.inf if j.problem else _tol_units(ours, ref, rtol, atol)
    st = steps(ours, ref, *scale) if scale is not None and not j.problem else None
    return TensorError(node=probe.node, node_id=probe.node_id, op=probe.op, output=probe.tensor, ok=j.ok,
                       max_abs=j.max_abs, max_rel=j.max_rel, tol_units=units, range=rng, steps=st, problem=j.problem)


def _tol_units(ours, ref, rtol: float, atol: float) -> float:
    a, b = np.asarray(ours), np.asarray(ref)
    if a.size == 0:
        return 0.0
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        return 0.0 if np.array_equal(a, b) else math.inf
    af, bf = a.astype(np.float64), b.astype(np.float64)
    both_nan = np.isnan(af) & np.isnan(bf)
    same_inf = np.isinf(af) & (af == bf)
    with np.errstate(invalid="ignore", over="ignore"):
        units = np.abs(af - bf) / (atol + rtol * np.abs(bf))
    units = np.where(both_nan | same_inf, 0.0, units)
    units = np.where(np.isnan(units), math.inf, units)
    return float(units.max())


def first_divergence(order: list[tuple[int, list[str], list[str]]], results: dict[str, TensorError]) -> TensorError | None:
    """The first divergence (module docstring) given the reference model's nodes in topological order,
    each as (node id, input tensors, output tensors), and the compared tensors by name."""
    produced = {t for _, _, outs in order for t in outs}
    tainted: dict[str, bool] = {}
    for _, ins, outs in order:
        carried = any(tainted.get(t, False) for t in ins if t in produced)
        for t in outs:
            r = results.get(t)
            if r is None:
                tainted[t] = carried
                continue
            tainted[t] = not r.ok
            if not r.ok and not carried:
                return r
    return None
