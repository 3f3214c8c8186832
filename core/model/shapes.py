"""ONNX shape inference on a protobuf model, read back cheaply.

ONNX's own inference (C++) is fast: ~0.2 s for a 60,000-node chain. Reading its answer back was
not: one TypeProto per value, each taken apart field by field in Python (~10 us a value). Here
each value's type is kept as its serialized bytes, and each distinct type is decoded once: big
graphs repeat a few types over and over. Used by Graph.infer_shapes (the GUI's and every
command's load) and by `inspect`'s summary of the protobuf (core.model.summary.summarize_file).

No onnx_ir import here (see core.model.onnx_checks).
"""
from __future__ import annotations

import itertools
import logging

import onnx

__all__ = ["Dim", "InferredTypes", "decode_type", "infer_types"]

logger = logging.getLogger(__name__)

Dim = int | str | None


class InferredTypes:
    """name -> (ONNX elem_type or None, shape tuple or None) for every value ONNX shape inference
    typed (graph inputs, outputs and value_info of the inferred model); decoded on lookup and
    memoized per distinct type."""

    def __init__(self, infos: dict[str, onnx.ValueInfoProto]):
        self._infos = infos  # serialized on first lookup: `inspect` looks up a handful of names
        self._raw: dict[str, bytes] = {}
        self._decoded: dict[bytes, tuple[int | None, tuple[Dim, ...] | None] | None] = {}

    def __len__(self) -> int:
        return len(self._infos)

    def raw(self, name: str) -> bytes | None:
        """The serialized TypeProto inferred for `name` (a key for memoizing by type)."""
        b = self._raw.get(name)
        if b is None:
            vi = self._infos.get(name)
            if vi is None:
                return None
            b = self._raw[name] = vi.type.SerializeToString()
        return b

    def get(self, name: str) -> tuple[int | None, tuple[Dim, ...] | None] | None:
        """(elem_type, shape) inferred for `name`; None when inference left it untyped or it is
        not a tensor."""
        b = self.raw(name)
        if b is None:
            return None
        if b not in self._decoded:
            self._decoded[b] = decode_type(b)
        return self._decoded[b]


def decode_type(raw: bytes) -> tuple[int | None, tuple[Dim, ...] | None] | None:
    """(elem_type or None, shape or None) of a serialized TypeProto; None when not a tensor.
    A dimension is its value, its symbolic name, or None when unknown."""
    tp = onnx.TypeProto.FromString(raw)
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    shape: tuple[Dim, ...] | None = None
    if tt.HasField("shape"):
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None) for d in tt.shape.dim
        )
    return (tt.elem_type or None, shape)


def infer_types(proto: onnx.ModelProto, data: bytes | None = None) -> tuple[InferredTypes, list[str]]:
    """Run ONNX shape inference on `proto` (not modified) and return what it found, with the
    problems (inference is advisory: a model with unknown shapes still opens). `data`: the bytes
    `proto` was parsed from, given to the C++ side as they are instead of serializing `proto`."""
    try:
        inferred = onnx.shape_inference.infer_shapes(data if data is not None else proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001 - inference is advisory; keep the model open
        return InferredTypes({}), [f"shape inference failed: {str(e).strip().splitlines()[0]}"]
    g = inferred.graph
    return InferredTypes({vi.name: vi for vi in itertools.chain(g.value_info, g.output, g.input)}), []
