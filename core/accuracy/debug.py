"""Find where numbers go wrong: compare two computations of one model tensor by tensor.

Two kinds of run, on the same inputs (the user's, or seeded random ones valid for the model's ops,
as the compile's check draws them):

* `debug_compiled`: the compiled program against the reference (onnxruntime; onnx's reference
  evaluator where onnxruntime cannot run the model). The program is compiled with the tensors of a
  chunk made outputs (core.accuracy.capture), so each value read is what the compiled kernels
  compute for that ONNX tensor; the kernel that computes it is named from the compile's lineage.
  Only float tensors are read (shape computations become no kernel).
* `debug_models`: model A (the reference) against model B: a tensor pairs with the tensor of the
  same name (quantizers, rewrites and most edits keep names), then through B's quantization steps,
  then through the nodes that core.views.diff matches (by name, then by structure), output by output. This covers a model before
  and after an edit or rewrite, an fp32 model against its quantized version (errors also in
  quantization steps), a model at two opsets.

Both return a core.accuracy.report.DebugReport: every compared tensor in topological order, and
the first divergence. Small tensors' values are kept for viewing (`DebugReport.pair`); the others
are computed again when asked for.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import onnx

from ..errors import Cancelled, WorkbenchError
from ..tolerances import ATOL, RTOL
from .capture import Probe, chunk_budget, chunks, exposed_bytes, probes
from .report import DebugReport, TensorError, describe, first_divergence, measure

__all__ = ["debug_compiled", "debug_models", "debug_feeds", "KEEP_BYTES"]

logger = logging.getLogger(__name__)

KEEP_BYTES = 64 << 20  # values kept for the viewer, both sides together


def _proto(graph) -> onnx.ModelProto:
    from ..model.external_data import self_contained_proto

    return self_contained_proto(graph)


def debug_feeds(graph, proto: onnx.ModelProto, inputs: dict[str, np.ndarray] | None, seed: int = 0,
                dims: dict[str, int] | None = None, label: str = "the inputs") -> tuple[dict[str, np.ndarray], str]:
    """(feeds, 'user-supplied' or 'seeded random'): the user's arrays checked against the model's
    inputs, or seeded random ones valid for its ops."""
    if inputs is not None:
        from ..compiler.check.user_inputs import fit_check_inputs

        return fit_check_inputs(dict(inputs), graph.inputs, label), "user-supplied"
    from ..compiler.check.reference import random_feeds
    from ..compiler.runtime.artifact import specs_from_proto

    specs, _ = specs_from_proto(proto)
    return random_feeds(specs, seed=seed, dims=dims, model=proto), "seeded random"


def _order(graph) -> list[tuple[int, list[str], list[str]]]:
    return [(n.id, [t for t in n.inputs if t], [t for t in n.outputs if t]) for n in graph.nodes]


def _quant_scales(proto: onnx.ModelProto) -> dict[str, tuple[np.ndarray, int]]:
    """tensor -> (scale, axis) for tensors read by a QuantizeLinear or written by a DequantizeLinear
    whose scale is a constant."""
    consts = {t.name: t for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type == "Constant" and n.output and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = n.attribute[0].t
    out: dict[str, tuple[np.ndarray, int]] = {}
    for n in proto.graph.node:
        if n.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(n.input) < 2 or n.input[1] not in consts:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 1)
        try:
            scale = onnx.numpy_helper.to_array(consts[n.input[1]]).astype(np.float64)
        except Exception:  # noqa: BLE001 - a scale in a type numpy cannot read
            continue
        tensor = n.input[0] if n.op_type == "QuantizeLinear" else n.output[0]
        out.setdefault(tensor, (scale, axis))
    return out


class _Keeper:
    """Values kept for the viewer until their bytes reach KEEP_BYTES."""

    def __init__(self, limit: int):
        self.limit, self.used, self.kept = limit, 0, {}

    def offer(self, name: str, ours, ref) -> None:
        size = np.asarray(ours).nbytes + np.asarray(ref).nbytes
        if self.used + size <= self.limit:
            self.kept[name] = (np.asarray(ours), np.asarray(ref))
            self.used += size


def _check(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled("debug cancelled.")


def debug_compiled(graph, target: str = "cpu", *, inputs: dict[str, np.ndarray] | None = None, seed: int = 0,
                   dims: dict[str, int] | None = None, rtol: float = RTOL, atol: float = ATOL, pipeline=None,
                   cpu: str | None = None, tune_db=None, per_node: bool = False, budget: int | None = None, keep_bytes: int = KEEP_BYTES,
                   progress: Callable[[float, str], None] | None = None, cancel: Callable[[], bool] | None = None) -> DebugReport:
    """The compiled program (for `target`) against the reference, tensor by tensor.

    The model is compiled as it is, and its kernels' lineage names the ONNX tensors each fused
    kernel writes out (the outputs of its nodes read outside it, and the graph's outputs); those are
    read, which leaves the fusion as it was. Tensors inside a kernel are not materialized, so they
    are not compared; when the first divergence is a kernel of several nodes, that kernel's nodes are
    read one by one in a build where they are outputs (which splits the kernel), and the report's
    notes say which node differs first, or that none does apart (the fusion is at fault).
    With `per_node` every float tensor is read that way from the start. `tune_db`: a tuning database
    whose records the builds apply (a tuned program against the reference)."""
    from ..compiler.compile import compile_model
    from ..compiler.target import TargetKind, gpu_present

    if str(target) == TargetKind.CUDA and not gpu_present():
        raise WorkbenchError("debugging a CUDA build runs it, and this machine has no GPU; debug it for the CPU (--target cpu) here.")
    t0 = time.perf_counter()
    proto = _proto(graph)
    feeds, kind = debug_feeds(graph, proto, inputs, seed, dims)
    every, known = probes(graph, proto, feeds, floats_only=True)
    if progress:
        progress(0.0, "compiling the model as it is, for its kernels")
    build = {"pipeline": pipeline, "cpu": cpu, "tune_db": tune_db}  # every build of this run is made alike
    art = compile_model(graph, target, verify=False, cancel=cancel, **build)
    group_of = _groups(graph, art.kernel_lineage or {})
    del art
    found = every if per_node else _boundaries(graph, every, group_of)
    report = DebugReport(mode="compiled", reference="onnxruntime", subject=f"compiled {target} program", inputs=kind, rtol=rtol, atol=atol)
    report.not_compared = sum(1 for n in graph.nodes for t in n.outputs if t) - len(found)
    keeper = _Keeper(keep_bytes)
    results = _read_compiled(proto, known, found, feeds, target, build, budget, rtol, atol, keeper, group_of,
                             report, progress, cancel)
    report.tensors = [results[p.tensor] for p in found]
    report.first = first_divergence(_order(graph), results)
    first = report.first
    if first is not None and not per_node and first.kernel and len(group_of.get(first.node_id, (None, ()))[1]) > 1:
        report.notes.append(_split(graph, every, group_of, first, proto, known, feeds, target, build, rtol, atol, cancel))
    report.seconds = time.perf_counter() - t0
    report.kept = keeper.kept
    report.refetch = lambda tensor: _refetch_compiled(proto, known, every, tensor, feeds, target, build)
    if progress:
        progress(1.0, report.summary())
    return report


def _groups(graph, lineage: dict[str, list[str]]) -> dict[int, tuple[str, frozenset[int]]]:
    """node id -> (its kernel, the ids of that kernel's nodes): the kernel with most nodes where a
    node is in several (a layout change or weight repacking besides its own)."""
    by_label = {n.label: n.id for n in graph.nodes}
    out: dict[int, tuple[str, frozenset[int]]] = {}
    for kernel, labels in sorted(lineage.items()):
        ids = frozenset(by_label[label] for label in labels if label in by_label)
        for i in ids:
            if i not in out or len(out[i][1]) < len(ids):
                out[i] = (kernel, ids)
    return out


def _boundaries(graph, every: list[Probe], group_of) -> list[Probe]:
    """The tensors the compiled program writes out: outputs of a kernel's nodes read by a node of
    another kernel (or of none), and the graph's outputs."""
    returned = {v.name for v in graph.outputs}
    readers: dict[str, list[int]] = {}
    for n in graph.nodes:
        for t in n.inputs:
            if t:
                readers.setdefault(t, []).append(n.id)
    keep = []
    for p in every:
        group = group_of.get(p.node_id)
        outside = group is not None and any(r not in group[1] for r in readers.get(p.tensor, ()))
        if p.tensor in returned or outside:
            keep.append(p)
    return keep


def _read_compiled(proto, known, found, feeds, target, build: dict, budget, rtol, atol, keeper, group_of, report, progress, cancel):
    results: dict[str, TensorError] = {}
    runs = list(chunks(found, budget or chunk_budget()))
    if report is not None:
        report.chunks = len(runs)
    for k, run in enumerate(runs):
        _check(cancel)
        if progress:
            progress((k + 0.5) / (len(runs) + 0.5), f"chunk {k + 1} of {len(runs)}: compiling with {len(run)} tensors as outputs")
        ours, (ref, which) = _compiled_chunk(proto, known, run, feeds, target, build, cancel)
        if report is not None:
            report.reference = report.runtime = which
        for p, a, b in zip(run, ours, ref):
            r = measure(p, a, b, rtol, atol)
            r.kernel = group_of.get(p.node_id, (None,))[0]
            results[p.tensor] = r
            if keeper is not None:
                keeper.offer(p.tensor, a, b)
        del ours, ref
    return results


def _split(graph, every, group_of, first: TensorError, proto, known, feeds, target, build: dict, rtol, atol, cancel) -> str:
    """The first divergent kernel's nodes read one by one: which differs first, or none."""
    kernel, ids = group_of[first.node_id]
    inside = [p for p in every if p.node_id in ids]
    try:
        results = _read_compiled(proto, known, inside, feeds, target, build, None, rtol, atol, None, group_of, None, None, cancel)
    except WorkbenchError as e:
        return f"kernel {kernel} could not be split into its nodes to look inside it ({e})"
    bad = next((r for p in inside if not (r := results[p.tensor]).ok), None)
    if bad is None:
        return (f"split into its {len(ids)} nodes, kernel {kernel} agrees with the reference at every node: the difference "
                f"comes from fusing them")
    return (f"split into its {len(ids)} nodes, the first of kernel {kernel} to differ is {bad.op} node '{bad.node}' "
            f"({describe(bad)})")


class _Runner:
    """One onnxruntime session over a model with every tensor to compare an output; each chunk asks
    for its own tensors (onnxruntime computes what they need and frees the rest), so a debug run
    makes one session per side, not one per chunk (each held on to the model's weights). Where
    onnxruntime cannot run the model, each chunk goes to reference_run (onnx's reference evaluator)."""

    def __init__(self, proto: onnx.ModelProto, tensors: list[str], known, feeds: dict[str, np.ndarray]):
        from ..compiler.check.reference import ORT, ort_session

        self.proto, self.known, self.feeds, self.which, self.session = proto, known, feeds, ORT, None
        try:
            self.session = ort_session(exposed_bytes(proto, tensors, known))
            names = {i.name for i in self.session.get_inputs()}
            self.session_feeds = {k: v for k, v in feeds.items() if k in names}
        except Exception:  # noqa: BLE001 - onnxruntime refuses the model: the reference evaluator, chunk by chunk
            logger.debug("onnxruntime cannot load the model; chunks go to reference_run", exc_info=True)
            self.session = None

    def run(self, names: list[str]) -> list[np.ndarray]:
        from ..compiler.check.reference import reference_run

        if self.session is not None:
            try:
                return self.session.run(names, self.session_feeds)
            except Exception:  # noqa: BLE001 - onnxruntime refuses these inputs: as reference_run would decide
                logger.debug("onnxruntime failed on a chunk; reference_run decides", exc_info=True)
                self.session = None
        outs, self.which = reference_run(exposed_bytes(self.proto, names, self.known), self.feeds)
        return outs


def _compiled_chunk(proto, known, run: list[Probe], feeds, target, build: dict, cancel):
    from ..compiler.check.reference import reference_run
    from ..compiler.compile import compile_model
    from ..model.onnx_io import load_model_bytes

    data = exposed_bytes(proto, [p.tensor for p in run], known)
    ref = reference_run(data, feeds)
    _check(cancel)
    exposed = load_model_bytes(data, "debug.onnx")
    art = compile_model(exposed, target, verify=False, cancel=cancel, **build)
    return art.run(feeds), ref


def _refetch_compiled(proto, known, found, tensor, feeds, target, build: dict):
    p = next((p for p in found if p.tensor == tensor), None)
    if p is None:
        raise WorkbenchError(f"'{tensor}' was not compared in this debug run.")
    ours, (ref, _) = _compiled_chunk(proto, known, [p], feeds, target, build, None)
    return np.asarray(ours[0]), np.asarray(ref[0])


def debug_models(a, b, *, inputs: dict[str, np.ndarray] | None = None, seed: int = 0, dims: dict[str, int] | None = None,
                 rtol: float = RTOL, atol: float = ATOL, budget: int | None = None, keep_bytes: int = KEEP_BYTES,
                 reference: str = "model A", subject: str = "model B", progress: Callable[[float, str], None] | None = None,
                 cancel: Callable[[], bool] | None = None) -> DebugReport:
    """Model B (`b`, a core.model Graph) against model A (`a`, the reference) tensor by tensor,
    through the nodes the diff matches (module docstring)."""
    from ..views.diff import diff_graphs

    t0 = time.perf_counter()
    pa, pb = _proto(a), _proto(b)
    a_inputs = [v.name for v in a.inputs]
    missing = [v.name for v in b.inputs if v.name not in a_inputs]
    if missing:
        raise WorkbenchError(f"{subject} takes an input '{missing[0]}' that the model it is compared with has not "
                             f"(its inputs: {', '.join(a_inputs) or 'none'}); both must take the same inputs.")
    feeds, kind = debug_feeds(a, pa, inputs, seed, dims)
    d = diff_graphs(a, b)
    b_nodes = {n.id: n for n in b.nodes}
    found, known_a = probes(a, pa, feeds)
    _, known_b = probes(b, pb, {k: v for k, v in feeds.items() if k in {v.name for v in b.inputs}})
    # a tensor of the same name is the same tensor (quantizers, rewrites and most edits keep names: a
    # folded Conv takes over its BatchNormalization's output), except where a quantizer folded a Relu
    # or Clip into the range of its QuantizeLinear and gave the name to the unclamped value before it;
    # the others pair through quantization steps, then the diff's node matching, output by output
    b_op = {t: n.op_type for n in b.nodes for t in n.outputs if t}
    quantized = {t for n in b.nodes if n.op_type == "QuantizeLinear" for t in n.inputs[:1]}
    pairs: list[tuple[Probe, str]] = []
    taken: set[str] = set()
    folded: list[Probe] = []
    for p in found:
        op = b_op.get(p.tensor)
        if op is not None and p.op in ("Relu", "Clip") and op != p.op and p.tensor in quantized:
            folded.append(p)
        elif op is not None:
            pairs.append((p, p.tensor))
            taken.add(p.tensor)
    # B's unclamped value named after A's Relu / Clip is what that Relu reads in A
    a_prod = {t: n for n in a.nodes for t in n.outputs if t}
    by_tensor = {p.tensor: p for p in found}
    paired = {q.tensor for q, _ in pairs}
    for p in folded:
        before = a_prod[p.tensor].inputs[0] if a_prod[p.tensor].inputs else ""
        q = by_tensor.get(before)
        if q is not None and q.tensor not in paired and p.tensor not in taken:
            pairs.append((q, p.tensor))
            paired.add(q.tensor)
            taken.add(p.tensor)
    _through_qdq(a, b, found, pairs, taken)
    named = {p.tensor for p, _ in pairs}
    for p in found:
        bid = d.matched.get(p.node_id)
        outs = b_nodes[bid].outputs if bid is not None else []
        if p.tensor not in named and p.index < len(outs) and outs[p.index] and outs[p.index] not in taken:
            pairs.append((p, outs[p.index]))
            taken.add(outs[p.index])
    position = {p.tensor: i for i, p in enumerate(found)}
    pairs.sort(key=lambda pair: position[pair[0].tensor])
    report = DebugReport(mode="models", reference=reference, subject=subject, inputs=kind, rtol=rtol, atol=atol)
    report.not_compared = len(found) - len(pairs)
    scales = {**_quant_scales(pa), **_quant_scales(pb)}
    scale_b = _quant_scales(pb)
    results: dict[str, TensorError] = {}
    keeper = _Keeper(keep_bytes)
    b_feeds = {v.name: feeds[v.name] for v in b.inputs}
    runs = list(chunks([p for p, _ in pairs], budget or chunk_budget()))
    other = dict((p.tensor, t) for p, t in pairs)
    report.chunks = len(runs)
    side_a = _Runner(pa, [p.tensor for p, _ in pairs], known_a, feeds)
    side_b = _Runner(pb, [t for _, t in pairs], known_b, b_feeds)
    for k, run in enumerate(runs):
        _check(cancel)
        if progress:
            progress(k / len(runs), f"chunk {k + 1} of {len(runs)}: {len(run)} tensors")
        ref = side_a.run([p.tensor for p in run])
        _check(cancel)
        ours = side_b.run([other[p.tensor] for p in run])
        report.runtime = side_a.which if side_a.which == side_b.which else f"{side_a.which} (A), {side_b.which} (B)"
        for p, x, y in zip(run, ours, ref):
            scale = scale_b.get(other[p.tensor]) or scales.get(p.tensor)
            r = measure(p, x, y, rtol, atol, scale)
            if other[p.tensor] != p.tensor:
                r.other = other[p.tensor]
            results[p.tensor] = r
            keeper.offer(p.tensor, x, y)
        del ours, ref
    del side_a, side_b
    report.tensors = [results[p.tensor] for p, _ in pairs]
    report.first = first_divergence(_order(a), results)
    if report.first is not None:
        report.notes += _added_before(b, report.first, other[report.first.output], taken)
    report.seconds = time.perf_counter() - t0
    report.kept = keeper.kept
    report.refetch = lambda tensor: _refetch_models(pa, pb, known_a, known_b, other, tensor, feeds, b_feeds)
    if progress:
        progress(1.0, report.summary())
    return report


def _through_qdq(a, b, found: list[Probe], pairs: list[tuple[Probe, str]], taken: set[str]) -> None:
    """Pair more tensors forwards from the inputs, seeing through quantization: a node of B pairs with
    the node of A of the same op whose computed inputs are paired (or the same graph input) once B's
    QuantizeLinear -> DequantizeLinear steps are skipped (and A's Relu or Clip that B lacks, which
    quantizers fold into the range of their Q); constants (weights, quantized or not) are
    not compared. Adds to `pairs` and `taken` in place."""
    b_prod = {t: n for n in b.nodes for t in n.outputs if t}
    consts_b = b.constant_values()

    def resolve(t: str) -> str:
        for _ in range(64):
            dq = b_prod.get(t)
            if dq is None or dq.op_type != "DequantizeLinear" or not dq.inputs:
                return t
            q = b_prod.get(dq.inputs[0])
            if q is None or q.op_type != "QuantizeLinear" or not q.inputs:
                return t
            t = q.inputs[0]
        return t

    a_prod = {t: n for n in a.nodes for t in n.outputs if t}
    consts_a = a.constant_values()

    def a_side(t: str) -> str:  # a Relu or Clip of A that B does not have: quantizers fold them into Q's range
        for _ in range(8):
            n = a_prod.get(t)
            if t in to_b or n is None or n.op_type not in ("Relu", "Clip") or not n.inputs or n.inputs[0] not in to_b:
                return t
            t = n.inputs[0]
        return t
    to_b = {p.tensor: t for p, t in pairs}
    free: dict[tuple, list] = {}
    for n in b.nodes:
        if any(t in taken for t in n.outputs if t):
            continue
        key = tuple(resolve(t) for t in n.inputs if t and t not in consts_b and not _weight_dq(b_prod.get(t), consts_b))
        free.setdefault((n.op_type, key), []).append(n)
    for n in a.nodes:
        if any(t in to_b for t in n.outputs if t):
            continue
        ins = [a_side(t) for t in n.inputs if t and t not in consts_a]
        if any(t in a_prod and t not in to_b for t in ins):
            continue
        key = tuple(to_b.get(t, t) for t in ins)
        match = free.get((n.op_type, key), [])
        if len(match) != 1:
            continue
        m = match.pop()
        for p in (p for p in found if p.node_id == n.id):
            if p.index < len(m.outputs) and m.outputs[p.index] and m.outputs[p.index] not in taken:
                pairs.append((p, m.outputs[p.index]))
                taken.add(m.outputs[p.index])
                to_b[p.tensor] = m.outputs[p.index]


def _weight_dq(node, consts) -> bool:
    """A DequantizeLinear of a constant: a quantized weight, not a computed value."""
    return node is not None and node.op_type == "DequantizeLinear" and bool(node.inputs) and node.inputs[0] in consts


def _added_before(b, first: TensorError, b_tensor: str, taken: set[str]) -> list[str]:
    """Nodes of B with no counterpart in A that feed the B node computing the first divergence's
    tensor: the divergence may be theirs (a quantization step, an inserted node)."""
    producers = {t: n for n in b.nodes for t in n.outputs if t}
    node = producers.get(b_tensor)
    if node is None:
        return []
    feeding = [producers[t] for t in node.inputs if t in producers and not any(o in taken for o in producers[t].outputs)]
    if not feeding:
        return []
    names = ", ".join(f"{n.op_type} '{n.label}'" for n in feeding)
    which = "a node" if len(feeding) == 1 else f"{len(feeding)} nodes"
    return [f"'{first.node}' in the other model reads {which} this model has not ({names}): the difference may come from "
            f"{'it' if len(feeding) == 1 else 'them'}."]


def _refetch_models(pa, pb, known_a, known_b, other, tensor, feeds, b_feeds):
    from ..compiler.check.reference import reference_run

    if tensor not in other:
        raise WorkbenchError(f"'{tensor}' was not compared in this debug run.")
    ref, _ = reference_run(exposed_bytes(pa, [tensor], known_a), feeds)
    ours, _ = reference_run(exposed_bytes(pb, [other[tensor]], known_b), b_feeds)
    return np.asarray(ours[0]), np.asarray(ref[0])
