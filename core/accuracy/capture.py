"""Intermediate tensors of an ONNX model, read a chunk of the graph at a time.

A runtime returns only a model's outputs, so every tensor to be compared is made an output of a
copy of the model (the model's own outputs replaced by the chunk's tensors) and the copy is run.
Tensors are taken in the model's topological order and grouped into chunks whose values fit a
memory budget (`chunk_budget`): each chunk is run, compared and dropped before the next, so a debug
run holds one chunk of activations per side, not all of them. Sizes come from ONNX shape inference
at the shapes of the inputs given; a tensor of unknown size counts as the largest known one.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx

__all__ = ["Probe", "probes", "chunks", "exposed_bytes", "chunk_budget", "FLOAT_TYPES"]

logger = logging.getLogger(__name__)

FLOAT_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16})

_SMALL = 4096  # initializers up to this many elements keep their values for shape inference (shape tensors)


@dataclass(frozen=True)
class Probe:
    """One node output to compare: its tensor name, the node (id, label, op), which output of the
    node it is, its ONNX element type (0 unknown) and its size in bytes at the given inputs."""

    tensor: str
    node_id: int
    node: str
    op: str
    index: int
    elem_type: int
    nbytes: int


def _skeleton(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The model without its large weights' values, inputs fixed to the feeds' shapes: what shape
    inference needs, at a fraction of a big model's memory."""
    m = onnx.ModelProto()
    m.ir_version = proto.ir_version
    m.opset_import.extend(proto.opset_import)
    m.functions.extend(proto.functions)
    g = m.graph
    g.node.extend(proto.graph.node)
    g.output.extend(proto.graph.output)
    g.value_info.extend(proto.graph.value_info)
    for t in proto.graph.initializer:
        size = int(np.prod(t.dims)) if len(t.dims) else 1
        if size <= _SMALL:
            g.initializer.append(t)
        else:  # a large weight is an input of its type and shape: shape inference reads no more
            g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits and vi.name not in feeds:
            continue
        fixed = onnx.ValueInfoProto()
        fixed.CopyFrom(vi)
        if vi.name in feeds and vi.type.HasField("tensor_type"):
            shape = fixed.type.tensor_type.shape
            shape.ClearField("dim")
            for n in np.shape(feeds[vi.name]):
                shape.dim.add().dim_value = int(n)
        g.input.append(fixed)
    return m


def _inferred(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, onnx.ValueInfoProto]:
    skeleton = _skeleton(proto, feeds)
    try:
        skeleton = onnx.shape_inference.infer_shapes(skeleton, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - sizes are then unknown; the comparison itself does not need them
        logger.debug("shape inference failed; tensor sizes unknown", exc_info=True)
    return {vi.name: vi for vi in [*skeleton.graph.value_info, *skeleton.graph.output]}


def _nbytes(vi: onnx.ValueInfoProto | None) -> int:
    if vi is None or not vi.type.HasField("tensor_type"):
        return 0
    tt = vi.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
    if any(d < 0 for d in dims) or not tt.elem_type:
        return 0
    try:
        item = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).itemsize
    except Exception:  # noqa: BLE001 - a type numpy has no dtype for
        item = 1
    return int(np.prod(dims, dtype=np.int64)) * item


def probes(graph, proto: onnx.ModelProto, feeds: dict[str, np.ndarray], *, floats_only: bool = False) -> tuple[list[Probe], dict[str, onnx.ValueInfoProto]]:
    """Every node output of `graph` (a core.model Graph; `proto` its ModelProto) in topological
    order, with what shape inference knows of it at the feeds' shapes; `floats_only` keeps the
    float tensors (what a compiled program can return). Also returns the inferred value infos."""
    known = _inferred(proto, feeds)
    out: list[Probe] = []
    for n in graph.nodes:
        for i, v in enumerate(n.output_values):
            if not v.name:
                continue
            vi = known.get(v.name)
            elem = vi.type.tensor_type.elem_type if vi is not None and vi.type.HasField("tensor_type") else 0
            if floats_only and elem not in FLOAT_TYPES:
                continue
            out.append(Probe(v.name, n.id, n.label, n.op_type, i, elem, _nbytes(vi)))
    return out, known


def chunk_budget() -> int:
    """Bytes of tensors one chunk may hold per side: a quarter of the memory available, at most 512 MiB."""
    from ..compiler.runtime.artifact_check import available_bytes

    avail = available_bytes() or 0
    cap = 512 << 20
    return max(16 << 20, min(cap, avail // 4)) if avail else cap


def chunks(items: list[Probe], budget: int) -> Iterator[list[Probe]]:
    """`items` in order, in runs whose bytes stay within `budget` (at least one tensor per run)."""
    largest = max((p.nbytes for p in items), default=0)
    run: list[Probe] = []
    used = 0
    for p in items:
        size = p.nbytes or largest
        if run and used + size > budget:
            yield run
            run, used = [], 0
        run.append(p)
        used += size
    if run:
        yield run


def exposed_bytes(proto: onnx.ModelProto, tensors: list[str], known: dict[str, onnx.ValueInfoProto]) -> bytes:
    """The model serialized with `tensors` as its outputs (in place of its own: the proto is put
    back as it was before returning, so a big model is not copied)."""
    saved = list(proto.graph.output)
    del proto.graph.output[:]
    try:
        for name in tensors:
            vi = known.get(name)
            if vi is not None and vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                out = onnx.ValueInfoProto()
                out.CopyFrom(vi)
                proto.graph.output.append(out)
            else:
                proto.graph.output.append(onnx.ValueInfoProto(name=name))
        return proto.SerializeToString()
    finally:
        del proto.graph.output[:]
        proto.graph.output.extend(saved)
