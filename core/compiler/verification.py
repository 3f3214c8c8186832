"""Check a compiled model against a reference on seeded random inputs (or the user's), and find the first node that differs.

The reference is onnxruntime, or onnx's reference evaluator where onnxruntime cannot run the model
(core.compiler.reference.reference_run); the manifest's verification and every message say which.
Random inputs respect what each op can take (core.compiler.input_domains).

Never a silent wrong answer: TVM's ONNX frontend computes wrong results for some ops without any
warning, so every compile is checked and refused (naming the op and node that first goes wrong)
when the outputs disagree.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..errors import Cancelled, WorkbenchError
from .artifact import Artifact
from .reference import ATOL, RTOL, SCALE_RTOL, compare_outputs, random_feeds, reference_run

__all__ = [
    "CompiledMismatchError",
    "verify_artifact",
    "locate_mismatch",
    "check_verify_inputs",
]

logger = logging.getLogger(__name__)


class CompiledMismatchError(WorkbenchError):
    """The compiled model computes something different from onnxruntime."""

    def __init__(self, message: str, op_type: str = "", node_name: str = "", max_abs_err: float = float("nan")):
        super().__init__(message)
        self.op_type = op_type
        self.node_name = node_name
        self.max_abs_err = max_abs_err


def verify_artifact(
    art: Artifact,
    *,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    rtol: float = RTOL,
    atol: float = ATOL,
    cancel: Callable[[], bool] | None = None,
    inputs: dict[str, np.ndarray] | None = None,
) -> dict:
    """Run ours and the reference on the same inputs (`inputs`, or seeded random ones valid for
    the model's ops); raise CompiledMismatchError naming the first op that differs when they
    disagree. Returns the check's figures for the manifest."""
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
    ours = art.run(feeds)
    check()
    ok, err, bad = compare_outputs(ours, ref, rtol, atol)
    if ok:
        bad_dtype = next((i for i, (a, b) in enumerate(zip(ours, ref)) if np.asarray(a).dtype != np.asarray(b).dtype), -1)
        if bad_dtype >= 0:
            name = art.outputs[bad_dtype].name if bad_dtype < len(art.outputs) else "?"
            raise CompiledMismatchError(
                f"the compiled model returns output '{name}' as {np.asarray(ours[bad_dtype]).dtype} where {reference} gives "
                f"{np.asarray(ref[bad_dtype]).dtype}; refusing to hand back a wrong type."
            )
    scale = max((float(np.abs(r).max()) for r in ref if r.size and np.issubdtype(r.dtype, np.number)), default=0.0)
    result = {
        "checked": True, "inputs": kind, "reference": reference, "dims": dims or {}, "rtol": rtol, "atol": atol,
        "scale_rtol": SCALE_RTOL, "max_abs_err": err, "output_scale": scale,
    }
    if ok:
        return result
    if cancel is not None and cancel():
        raise Cancelled("compile cancelled.")
    out_name = art.outputs[bad].name if 0 <= bad < len(art.outputs) else "?"
    if 0 <= bad < min(len(ours), len(ref)) and np.shape(ours[bad]) != np.shape(ref[bad]):
        raise CompiledMismatchError(
            f"the compiled model returns output '{out_name}' with shape {list(np.shape(ours[bad]))} where {reference} gives "
            f"{list(np.shape(ref[bad]))}; refusing to hand back a wrong result.",
            max_abs_err=err,
        )
    culprit = locate_mismatch(art.model_bytes, art.target, feeds, rtol, atol, art.pipeline) if art.target == "cpu" else None
    if culprit is not None:
        op, node, node_err = culprit
        raise CompiledMismatchError(
            f"the compiled model disagrees with {reference} (output '{out_name}', max abs error {err:.3g}); "
            f"the first difference appears at {op} node '{node}' (max abs error {node_err:.3g}): "
            f"TVM's conversion of {op} computes a wrong result here, so the workbench refuses this compile.",
            op_type=op,
            node_name=node,
            max_abs_err=err,
        )
    raise CompiledMismatchError(
        f"the compiled model disagrees with {reference} on output '{out_name}' (max abs error {err:.3g}); refusing to hand back a wrong result.",
        max_abs_err=err,
    )


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


def locate_mismatch(model_bytes: bytes, target: str, feeds: dict[str, np.ndarray], rtol: float, atol: float, pipeline=None):
    """(op_type, node name, error) of the first node, in topological order, whose output differs
    between TVM and onnxruntime while everything before it agrees; None when none is found.

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
        from ..model.onnx_io import load_model_bytes
        from .artifact import specs_from_proto
        from .runner import Pipeline

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
            return op, node, err
    return None
