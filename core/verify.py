"""Numerical verification: run two models on the same seeded random inputs and compare outputs.

A rewrite is only worth applying if the model computes the same thing afterwards, so the rewrite
engine (and the compile engineer's checks against onnxruntime) run both models here:

    feeds = random_inputs(graph, seed=0, dims={"batch": 2})
    result = compare(run_model(before, feeds), run_model(after, feeds))
    if not result.ok: print(result.explain())

`verify(before, after)` does all three. Models may be a `core.Graph`, an `onnx.ModelProto`, bytes
or a path. Inputs respect each input's dtype and shape; symbolic or unknown dims take their size
from `dims` (by name), else `default_dim`. Integer inputs are drawn from a small range [0, 4) so
they stay valid as indices or token ids for small tables.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from .errors import WorkbenchError
from .model.graph import INFERRED
from .tolerances import ATOL, RTOL, judge

__all__ = [
    "VerificationError",
    "Comparison",
    "OutputDiff",
    "random_inputs",
    "run_model",
    "compare",
    "verify",
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "with_random_weights",
]

logger = logging.getLogger(__name__)

DEFAULT_ATOL = ATOL  # the tolerances and the judgement are core.tolerances', shared with the compile's check
DEFAULT_RTOL = RTOL


class VerificationError(WorkbenchError):
    """A model could not be run for verification, or two models' outputs differ."""


def _to_proto(model: Any) -> onnx.ModelProto:
    from .model.graph import Graph

    if isinstance(model, Graph):
        from .model.external_data import self_contained_proto

        return self_contained_proto(model)  # onnxruntime would look for external files in the cwd
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"cannot verify a {type(model).__name__}; pass a Graph, ModelProto, bytes or path")


def _input_specs(model: Any) -> list[tuple[str, np.dtype, list[Any]]]:
    """(name, numpy dtype, dims with str/None for unknown) for each real input."""
    from .model.graph import Graph

    if isinstance(model, Graph):
        out = []
        for v in model.inputs:
            dt = v.ir.dtype or v.ir.meta.get(INFERRED, (None, None))[0]
            npdt = np.dtype(dt.numpy()) if dt is not None else np.dtype(np.float32)
            out.append((v.name, npdt, list(v.shape) if v.shape is not None else []))
        return out
    proto = _to_proto(model)
    inits = {t.name for t in proto.graph.initializer}
    out = []
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
        out.append((vi.name, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), dims))
    return out


def random_inputs(model: Any, seed: int = 0, dims: dict[str, int] | None = None, default_dim: int = 2) -> dict[str, np.ndarray]:
    """Seeded random feeds for a model's real inputs (initializer-backed inputs are left out).

    Floats are standard normal, integers uniform in [0, 4), booleans fair coins. A symbolic dim
    takes `dims[name]` when given, else `default_dim`; an unnamed unknown dim takes `default_dim`.
    """
    rng = np.random.default_rng(seed)
    dims = dims or {}
    feeds: dict[str, np.ndarray] = {}
    for name, dtype, shape in _input_specs(model):
        concrete = [d if isinstance(d, int) and d >= 0 else int(dims.get(d, default_dim)) if isinstance(d, str) else default_dim for d in shape]
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(concrete).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, size=concrete).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 4, size=concrete).astype(dtype)
        else:
            raise VerificationError(f"input '{name}' has dtype {dtype}, which random inputs cannot be made for.")
    return feeds


def run_model(model: Any, feeds: dict[str, np.ndarray], what: str = "the model") -> dict[str, np.ndarray]:
    """Run a model with onnxruntime (CPU, graph optimizations off: we test the model as written)."""
    import onnxruntime as ort

    proto = _to_proto(model)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    try:
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise VerificationError(f"onnxruntime cannot run {what}: {first.strip()}") from None
    return dict(zip(names, outs))


@dataclass(frozen=True)
class OutputDiff:
    """How one output differs: max absolute error, max relative error (|a-b| / (|b| + atol))."""

    name: str
    max_abs: float
    max_rel: float
    ok: bool
    problem: str = ""


@dataclass(frozen=True)
class Comparison:
    """The result of comparing two runs; `ok`: every output matches (core.tolerances.judge)."""

    outputs: tuple[OutputDiff, ...]
    atol: float
    rtol: float
    seed: int = 0
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def max_abs(self) -> float:
        return max((o.max_abs for o in self.outputs), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((o.max_rel for o in self.outputs), default=0.0)

    def explain(self) -> str:
        """One sentence: what matched, or which output differs and by how much."""
        if self.ok:
            return (
                f"outputs agree on seeded random inputs (seed {self.seed}): max abs error {self.max_abs:.3g}, "
                f"max rel error {self.max_rel:.3g} (tolerance atol {self.atol:g}, rtol {self.rtol:g})."
            )
        bad = next(o for o in self.outputs if not o.ok)
        if bad.problem:
            return f"output '{bad.name}' differs: {bad.problem}."
        return (
            f"output '{bad.name}' differs beyond tolerance: max abs error {bad.max_abs:.3g}, max rel error "
            f"{bad.max_rel:.3g} (atol {self.atol:g}, rtol {self.rtol:g}, seed {self.seed})."
        )

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else (x if math.isfinite(x) else None)

        return {
            "ok": self.ok,
            "max_abs": num(self.max_abs),
            "max_rel": num(self.max_rel),
            "atol": self.atol,
            "rtol": self.rtol,
            "seed": self.seed,
            "outputs": [{"name": o.name, "max_abs": num(o.max_abs), "max_rel": num(o.max_rel), "ok": o.ok, "problem": o.problem} for o in self.outputs],
            "message": self.explain(),
        }


def _diff(name: str, reference: np.ndarray, ours: np.ndarray, atol: float, rtol: float) -> OutputDiff:
    j = judge(ours, reference, rtol=rtol, atol=atol)
    return OutputDiff(name, j.max_abs, j.max_rel, j.ok, j.problem)


def compare(
    outputs_a: dict[str, np.ndarray] | list[np.ndarray],
    outputs_b: dict[str, np.ndarray] | list[np.ndarray],
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    seed: int = 0,
) -> Comparison:
    """Compare two runs output by output (by name for dicts, by position for lists); `outputs_a` is
    the reference (the model before a rewrite), whose values scale the judgement."""
    if isinstance(outputs_a, dict) and isinstance(outputs_b, dict):
        names = list(outputs_a)
        diffs = []
        for n in names:
            if n not in outputs_b:
                diffs.append(OutputDiff(n, math.inf, math.inf, False, "missing from the second run"))
            else:
                diffs.append(_diff(n, outputs_a[n], outputs_b[n], atol, rtol))
        for n in outputs_b:
            if n not in outputs_a:
                diffs.append(OutputDiff(n, math.inf, math.inf, False, "missing from the first run"))
    else:
        la, lb = list(outputs_a.values() if isinstance(outputs_a, dict) else outputs_a), list(
            outputs_b.values() if isinstance(outputs_b, dict) else outputs_b
        )
        diffs = [_diff(f"output {i}", x, y, atol, rtol) for i, (x, y) in enumerate(zip(la, lb))]
        if len(la) != len(lb):
            diffs.append(OutputDiff("output count", math.inf, math.inf, False, f"{len(la)} outputs versus {len(lb)}"))
    return Comparison(tuple(diffs), atol, rtol, seed)


def verify(
    before: Any,
    after: Any,
    seed: int = 0,
    dims: dict[str, int] | None = None,
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
) -> Comparison:
    """Run `before` and `after` on the same seeded random inputs and compare every output.

    Raises VerificationError when either model cannot run (the message names which one).
    """
    feeds = random_inputs(before, seed=seed, dims=dims)
    a = run_model(before, feeds, "the original model")
    b = run_model(after, feeds, "the rewritten model")
    c = compare(a, b, atol=atol, rtol=rtol, seed=seed)
    return Comparison(c.outputs, atol, rtol, seed, {k: tuple(v.shape) for k, v in feeds.items()})


def with_random_weights(graph: Any, seed: int = 0, scale: float = 0.1) -> Any:  # noqa: C901
    """A copy of `graph` whose float weights are seeded random numbers (integer constants such as
    shapes and axes are kept).

    The onnx wheel's light models fill every weight with one constant (ConstantOfShape), which
    makes their outputs nearly input-independent and a numerical check weak; this gives them
    "real" random weights. Each constant value that feeds computation becomes an initializer;
    variances and scales of BatchNormalization stay positive, so the model stays well-defined.
    """
    import onnx_ir as ir

    from .model.graph import Graph
    from .model.constants import ConstantEvaluator

    g: Graph = graph.clone()
    model = g.model
    ev = ConstantEvaluator(model)
    rng = np.random.default_rng(seed)
    positive: set[int] = set()
    for n in model.graph:
        if n.op_type == "BatchNormalization":
            for i in (1, 4):
                if len(n.inputs) > i and n.inputs[i] is not None:
                    positive.add(id(n.inputs[i]))
    old_ir = (model.ir_version or 0) < 4
    frontier = []
    for n in model.graph:
        if ev.is_constant(n.outputs[0] if n.outputs else None):
            continue
        for v in n.inputs:
            if v is not None and ev.is_constant(v) and v not in frontier:
                frontier.append(v)
    for v in frontier:
        arr = ev.value(v)
        if arr is None or arr.dtype.kind != "f" or arr.size <= 1:
            continue
        # He-style scale for weight tensors (fan-in = all but the first dim), so activations
        # neither vanish nor explode through deep nets; `scale` for vectors (biases, BN shifts)
        std = float(np.sqrt(2.0 / max(int(np.prod(arr.shape[1:])), 1))) if arr.ndim >= 2 else scale
        new = (rng.standard_normal(arr.shape) * std).astype(arr.dtype)
        if id(v) in positive:
            new = (np.abs(new) + 0.5).astype(arr.dtype)
        name = v.name
        init = ir.Value(name=f"{name}__random", shape=ir.Shape(arr.shape), type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)), const_value=ir.tensor(new))
        model.graph.register_initializer(init)
        if old_ir:
            model.graph.inputs.append(init)
        ir.convenience.replace_all_uses_with(v, init)
    # drop the constant nodes nothing reads any more
    changed = True
    while changed:
        changed = False
        for n in reversed(list(model.graph)):
            if n.outputs and all(not o.uses() and not o.is_graph_output() for o in n.outputs) and all(ev.is_constant(o) for o in n.outputs):
                model.graph.remove(n, safe=True)
                changed = True
    for name, v in list(model.graph.initializers.items()):
        if not v.uses() and not v.is_graph_output():
            if v.is_graph_input():
                if not old_ir:
                    continue
                model.graph.inputs.remove(v)
            del model.graph.initializers[name]
    g.changed()
    g.infer_shapes()
    return g
