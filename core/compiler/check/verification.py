"""Check a compiled model against a reference on seeded random inputs (or the user's), and find the first node that differs.

The reference is onnxruntime, or onnx's reference evaluator where onnxruntime cannot run the model
(core.compiler.check.reference.reference_run); the manifest's verification and every message say which.
Random inputs respect what each op can take (core.compiler.check.input_domains).

Never a silent wrong answer: TVM's ONNX frontend computes wrong results for some ops without any
warning, so every compile is checked and refused (naming the op and node that first goes wrong)
when the outputs disagree.

The refusal says what was measured and no more: where the first difference appears, its absolute
error and its error relative to the magnitude of that node's values, and which inputs it was seen
on. Only an error on the scale of the values (RELATIVE_WRONG) is called a wrong conversion: a small
relative error on large values is also what float32 rounding gives on random inputs outside a
model's real range (BERT's mask drawn 0..3 once put +20000 into its attention scores), so then the
message says how to check on real inputs or accept the error instead.

A quantized (QDQ) model is judged in quantization steps (docs/quantization.md): where its outputs
miss the float tolerance, each output whose step is known (core.tolerances.output_step_scales) may
differ by QDQ_STEPS steps more than onnxruntime's own output moves under changes of float-rounding
size: its unoptimized run (no DequantizeLinear -> Conv -> QuantizeLinear fused into integer kernels)
and runs with every value about to be quantized nudged by a relative NUDGE. A float that lands on a
rounding boundary flips a step, and deep models carry such flips on and multiply them, in
onnxruntime's runs as in ours. The manifest records the tolerance applied as atol, and the sentence
says it in steps.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ...errors import Cancelled, WorkbenchError
from ..runtime.artifact import Artifact
from ..runtime.manifest import Verification
from ..target import TargetKind
from ...tolerances import ATOL, QDQ_STEPS, RTOL, SCALE_RTOL, output_step_scales, quantization_steps
from .reference import ORT, compare_outputs, random_feeds, reference_run

__all__ = [
    "CompiledMismatchError",
    "Mismatch",
    "verify_artifact",
    "locate_mismatch",
    "check_verify_inputs",
    "RELATIVE_WRONG",
    "StepCheck",
    "step_check",
]

logger = logging.getLogger(__name__)

# How far the reference is nudged to see how its output moves under float rounding (module docstring):
# a relative 2^-21, the size of the differences a conv summed in another order shows (docs/quantization.md)
NUDGE = 2.0**-21
NUDGE_DRAWS = 2

# A node whose largest error reaches this fraction of its largest |value| computes something
# else; below it the difference may be rounding amplified by the inputs, and is not called wrong.
RELATIVE_WRONG = 1e-2


class CompiledMismatchError(WorkbenchError):
    """The compiled model computes something different from onnxruntime.

    `relative_err` is the first differing node's max abs error over the largest |value| of that
    node's reference output (of the output, where no node was located); `wrong_conversion` says
    whether the message blames TVM's conversion (relative_err >= RELATIVE_WRONG); `accepting_atol`
    is the atol the message names as accepting the error (None when it names none)."""

    def __init__(self, message: str, op_type: str = "", node_name: str = "", max_abs_err: float = float("nan"),
                 relative_err: float = float("nan"), wrong_conversion: bool = False, accepting_atol: float | None = None):
        super().__init__(message)
        self.accepting_atol = accepting_atol
        self.op_type = op_type
        self.node_name = node_name
        self.max_abs_err = max_abs_err
        self.relative_err = relative_err
        self.wrong_conversion = wrong_conversion


class Mismatch(NamedTuple):
    """The first node whose output differs: its op, name, max abs error and the largest |value|
    of its reference output."""

    op_type: str
    node_name: str
    max_abs_err: float
    scale: float


def verify_artifact(
    art: Artifact,
    *,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    rtol: float = RTOL,
    atol: float = ATOL,
    cancel: Callable[[], bool] | None = None,
    inputs: dict[str, np.ndarray] | None = None,
    function: str | None = None,
) -> Verification:
    """Run ours and the reference on the same inputs (`inputs`, or seeded random ones valid for
    the model's ops); raise CompiledMismatchError naming the first op that differs when they
    disagree. Returns the check's record for the manifest. `function`: the library's function to
    check (a shape bucket's, or "main" for the general kernels; default: the one a run picks)."""
    import onnx

    proto = onnx.ModelProto()
    proto.ParseFromString(art.model_bytes)
    if inputs is not None:
        feeds = check_verify_inputs(art, inputs)
        kind = "user-supplied"
    else:
        feeds = random_feeds(art.inputs, seed=seed, dims=dims, model=proto)
        kind = "seeded random"

    def check() -> None:  # between the runs: each one runs to its end
        if cancel is not None and cancel():
            raise Cancelled("compile cancelled.")

    ref, reference = reference_run(art.model_bytes, feeds)
    check()
    ours = art.run(feeds, function=function)
    check()
    ok, err, bad = compare_outputs(ours, ref, rtol, atol)
    scale = max((float(np.abs(r).max()) for r in ref if r.size and np.issubdtype(r.dtype, np.number)), default=0.0)
    result = Verification(checked=True, inputs=kind, reference=reference, dims=dict(dims or {}), rtol=rtol, atol=atol,
                          scale_rtol=SCALE_RTOL, max_abs_err=err, output_scale=scale)
    if ok:
        return result
    if cancel is not None and cancel():
        raise Cancelled("compile cancelled.")
    steps = step_check(proto, art.outputs, feeds, ours, ref, reference)
    if steps is not None and steps.ok:
        logger.info("the compiled model is %s", steps.sentence)
        result.atol = steps.atol
        return result
    out_name = art.outputs[bad].name if 0 <= bad < len(art.outputs) else "?"
    if 0 <= bad < min(len(ours), len(ref)) and np.shape(ours[bad]) != np.shape(ref[bad]):
        raise CompiledMismatchError(
            f"the compiled model returns output '{out_name}' with shape {list(np.shape(ours[bad]))} where {reference} gives "
            f"{list(np.shape(ref[bad]))}; refusing to hand back a wrong result.",
            max_abs_err=err,
        )
    if 0 <= bad < min(len(ours), len(ref)) and np.asarray(ours[bad]).dtype != np.asarray(ref[bad]).dtype:
        raise CompiledMismatchError(
            f"the compiled model returns output '{out_name}' as {np.asarray(ours[bad]).dtype} where {reference} gives "
            f"{np.asarray(ref[bad]).dtype}; refusing to hand back a wrong type."
        )
    out_scale = _scale(ref[bad]) if 0 <= bad < len(ref) else float("nan")
    head = (f"the compiled model disagrees with {reference} on output '{out_name}' (max abs error {err:.3g} where its values "
            f"reach {out_scale:.3g}) on {_inputs_text(feeds, user=inputs is not None)}")
    culprit = locate_mismatch(art.model_bytes, art.target, feeds, rtol, atol, art.pipeline) if art.target == TargetKind.CPU else None
    if culprit is not None:
        rel = _relative(culprit.max_abs_err, culprit.scale)
        where = (f"the first difference appears at {culprit.op_type} node '{culprit.node_name}', off by up to "
                 f"{culprit.max_abs_err:.3g} where its values reach {culprit.scale:.3g} (relative error {rel:.2g})")
    else:
        rel = _relative(err, out_scale)
        where = f"no single node was located (relative error {rel:.2g})"
    wrong = not rel < RELATIVE_WRONG  # NaN and inf count as wrong
    accept = None if wrong else _accepting_atol(err)
    if steps is not None:
        blame = f" (TVM's conversion of {culprit.op_type} computes a wrong result here)" if wrong and culprit is not None else ""
        verdict = f"{steps.sentence}{blame}, so the workbench refuses this compile."
    elif wrong and culprit is not None:
        verdict = f"an error on the scale of the values: TVM's conversion of {culprit.op_type} computes a wrong result here, so the workbench refuses this compile."
    elif wrong:
        verdict = "an error on the scale of the values, so the workbench refuses to hand back this result."
    else:
        cause = "float rounding" if inputs is not None else "float rounding on random inputs outside the model's real range"
        verdict = (f"small against the values (possibly {cause}), not necessarily a wrong conversion; "
                   f"the workbench refuses this compile, so {_advice(err, accept, user=inputs is not None)}.")
    raise CompiledMismatchError(
        f"{head}; {where}: {verdict}",
        op_type=culprit.op_type if culprit is not None else "",
        node_name=culprit.node_name if culprit is not None else "",
        max_abs_err=err,
        relative_err=rel,
        wrong_conversion=wrong,
        accepting_atol=accept,
    )


def _scale(values) -> float:
    """The largest finite |value| of a reference output (0.0 when it has none)."""
    a = np.asarray(values)
    if a.size == 0 or not np.issubdtype(a.dtype, np.number):
        return 0.0
    finite = np.abs(a.astype(np.float64))[np.isfinite(a)]
    return float(finite.max()) if finite.size else 0.0


def _relative(err: float, scale: float) -> float:
    if not np.isfinite(err):
        return float("inf")
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def _inputs_text(feeds: dict[str, np.ndarray], user: bool, limit: int = 3) -> str:
    """Which inputs the check ran on: the user's, or seeded random ones with the range each was
    drawn in (core.compiler.check.input_domains chooses it per consuming op)."""
    if user:
        return "the given check inputs"
    parts = []
    for name, value in feeds.items():
        a = np.asarray(value)
        if a.dtype == np.bool_ or a.size == 0:
            parts.append(f"{name} {a.dtype}")
        elif np.issubdtype(a.dtype, np.integer):
            parts.append(f"{name} {a.dtype} in {a.min()}..{a.max()}")
        else:
            parts.append(f"{name} {a.dtype} in {float(a.min()):.2g}..{float(a.max()):.2g}")
    if len(parts) > limit:
        parts = [*parts[:limit], f"{len(parts) - limit} more"]
    return f"seeded random inputs ({', '.join(parts)})"


def _accepting_atol(err: float) -> float:
    """The atol, rounded up to 2 digits, that accepts every element of an output whose max abs
    error is `err` (compare_outputs: any atol of at least it)."""
    accept = float(f"{err:.2g}")
    if accept < err:  # rounded down: the next 2-digit value up
        accept = float(f"{accept + 10 ** (math.floor(math.log10(err)) - 1):.2g}")
    return accept


def _advice(err: float, accept: float, user: bool) -> str:
    """What to do about a small relative error: real inputs, or the atol that accepts it."""
    if user:
        return f"accept an error of {err:.3g} with --atol {accept:g} if this model can take it"
    return f"check it on real inputs (compile --verify-inputs IN.npz) or accept an error of {err:.3g} with --atol {accept:g}"


def check_verify_inputs(art: Artifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The user's check inputs, as arrays, after checking they name the model's inputs."""
    names = [s.name for s in art.inputs]
    extra = sorted(set(inputs) - set(names))
    if extra:
        raise WorkbenchError(f"the check inputs name '{extra[0]}', which is not an input of the model (its inputs: {', '.join(names) or 'none'}).")
    missing = [n for n in names if n not in inputs]
    if missing:
        raise WorkbenchError(f"the check inputs lack the model input '{missing[0]}' (give all of {', '.join(names)}).")
    return {n: np.asarray(inputs[n]) for n in names}


def locate_mismatch(model_bytes: bytes, target: str, feeds: dict[str, np.ndarray], rtol: float, atol: float, pipeline=None) -> Mismatch | None:
    """The Mismatch of the first node, in topological order, whose output differs between TVM
    and onnxruntime; None when none is found.

    Works by exposing every float node output as a graph output and compiling once more."""
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001
        inferred = model
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    existing = {o.name for o in model.graph.output}
    order: list[tuple[str, str, str]] = []  # (tensor, op, node)
    for node in model.graph.node:
        for out in node.output:
            if out and out in known and known[out].type.tensor_type.elem_type in (1, 10, 11, 16):
                order.append((out, node.op_type, node.name or f"{node.op_type}({out})"))
                if out not in existing:
                    model.graph.output.append(known[out])
    try:
        from ...model.onnx_io import load_model_bytes
        from ..runtime.artifact import specs_from_proto
        from ..pipeline.runner import Pipeline

        data = model.SerializeToString()
        # the same pipeline run as the compile being checked, with every float tensor an output
        ex = Pipeline(target, pipeline).build(load_model_bytes(data, "probe.onnx"))
        inputs, outputs = specs_from_proto(model)
        ours = Artifact(library=ex, target=target, inputs=inputs, outputs=outputs).run(feeds)
        ref, _ = reference_run(data, feeds)
    except Exception:  # noqa: BLE001 - localisation is best effort; the refusal stands without it
        logger.exception("mismatch localisation failed")
        return None
    by_name = {o.name: i for i, o in enumerate(model.graph.output)}
    for tensor, op, node in order:
        i = by_name[tensor]
        if i >= len(ours):
            continue
        ok, err, _ = compare_outputs([ours[i]], [ref[i]], rtol, atol)
        if not ok:
            return Mismatch(op, node, err, _scale(ref[i]))
    return None


class StepCheck(NamedTuple):
    """A QDQ model's outputs against the reference in quantization steps: whether every output is
    within `allowed` steps, the worst output's name, its error in steps and its step (scale), how far
    the reference's optimized run is from its unoptimized one (None where not measured), the
    absolute tolerance that amounts to, and the sentence that says so."""

    ok: bool
    output: str
    steps: float
    scale: float
    allowed: int
    reference_spread: float | None
    atol: float
    sentence: str


def step_check(model, outputs, feeds, ours, ref, reference: str) -> StepCheck | None:
    """Judge a quantized model's outputs in quantization steps (module docstring); None when the
    model has no Q/DQ node or an output's step is unknown (then the float check's verdict stands)."""
    if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        return None
    scales = output_step_scales(model)
    names = [o.name for o in outputs]
    if len(names) != len(ours) or len(ours) != len(ref) or any(n not in scales for n in names):
        return None
    if any(np.asarray(o).dtype != np.asarray(r).dtype for o, r in zip(ours, ref)):
        return None  # a wrong type is refused as such
    measured = [quantization_steps(o, r, *scales[n]) for n, o, r in zip(names, ours, ref)]
    if any(m is None for m in measured):
        return None
    spread = _reference_spread(model, feeds, ref, names, scales) if reference == ORT else None
    # ours is one more order of the same float sums: QDQ_STEPS beyond what moves the reference's own output
    allowed = QDQ_STEPS + (round(spread) if spread is not None and math.isfinite(spread) else 0)
    worst = max(range(len(names)), key=lambda i: measured[i])
    scale = float(np.max(scales[names[worst]][0]))
    ok = measured[worst] <= allowed + 1e-3  # a dequantized step times the scale rounds in float32
    kernels = f"{reference}'s int8 kernels" if reference == ORT else reference
    own = f"{reference}'s own output moves by {spread:.3g} under float-rounding-sized changes" if spread else ""
    unit = "step" if allowed == 1 else "steps"
    if ok:
        detail = f"{measured[worst]:.3g} at most" + (f"; {own}" if own else "")
        sentence = f"within {allowed} quantization {unit} (scale {scale:.3g}) of {kernels} ({detail})"
    else:
        sentence = (f"{measured[worst]:.3g} quantization steps (scale {scale:.3g}) away from {kernels} on output '{names[worst]}', "
                    f"more than the {allowed} {unit} a quantized model may differ by" + (f" ({own})" if own else ""))
    atol = max(float(np.max(s[0])) for s in scales.values()) * (allowed + 1e-3)
    return StepCheck(ok, names[worst], measured[worst], scale, allowed, spread, atol, sentence)


def _reference_spread(model, feeds, ref, names, scales) -> float | None:
    """How many steps onnxruntime's own outputs move, from `ref` (its optimized run), under changes of
    float-rounding size: its unoptimized run (no fused integer kernels), and runs with every float32
    QuantizeLinear input nudged by a factor 1 +- NUDGE (seeded signs); None when no run succeeds."""
    import onnxruntime as ort

    def run(proto, optimize: bool):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        if not optimize:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in sess.get_inputs()}
        return sess.run(names, {k: v for k, v in feeds.items() if k in wanted})

    variants = [(model, False)] + [(_nudged(model, seed), True) for seed in range(NUDGE_DRAWS)]
    spreads = []
    for proto, optimize in variants:
        try:
            outs = run(proto, optimize)
        except Exception:  # noqa: BLE001 - the allowance then rests on the runs that worked
            logger.exception("a spread run of onnxruntime failed")
            continue
        steps = [quantization_steps(p, r, *scales[n]) for n, p, r in zip(names, outs, ref)]
        if all(st is not None for st in steps):
            spreads.append(max(steps))
    return max(spreads) if spreads else None


def _nudged(model, seed: int):
    """A copy of `model` whose float32 QuantizeLinear inputs are multiplied by 1 +- NUDGE (sign per
    node, seeded): what a float sum in another order does to the values about to be rounded."""
    import onnx
    from onnx import helper, numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    floats = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=len(graph.node))
    nodes = []
    for i, node in enumerate(graph.node):
        if node.op_type == "QuantizeLinear" and len(node.input) > 1 and node.input[1] in floats:
            factor = f"_wb_nudge_{i}"
            graph.initializer.append(numpy_helper.from_array(np.array(1.0 + signs[i] * NUDGE, np.float32), factor))
            nodes.append(helper.make_node("Mul", [node.input[0], factor], [f"{factor}_out"], name=f"{factor}_mul"))
            node.input[0] = f"{factor}_out"
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return out
