"""Keys of the workbench's own entries in onnx_ir `meta` (never written to a file): one constant
per key, imported wherever a key is read or written; and the rules of constant analysis that the
loaded Graph and the protobuf-only summary share."""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

__all__ = ["NODE_ID", "INFERRED", "REWRITES_KEY", "NONDETERMINISTIC_OPS", "CONSTANT_SOURCE_OPS", "unconnected_required_inputs"]

NODE_ID = "wb.id"  # a node's id: stable across edits, undo and clone (what the canvas selects)
INFERRED = "wb.inferred"  # (dtype, shape) shape inference found for a value the file leaves untyped

# key of the model's metadata_props (saved with the file) listing the rewrites applied to it, as
# a JSON list of their descriptions: the artifact manifest of a later compile lists them, from
# the GUI or the command line alike
REWRITES_KEY = "mlc_workbench.rewrites"

# Constant analysis (Graph.constant_values and inspect's summary of the protobuf, which must agree):
# ops whose outputs are constant when all their inputs are, except random generators, which never
# are; and the ops whose outputs are constant with no inputs at all.
NONDETERMINISTIC_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"})
CONSTANT_SOURCE_OPS = {"Constant"}


@functools.lru_cache(maxsize=4096)
def _required_slots(op_type: str, domain: str, opset: int | None) -> tuple[int, ...]:
    import onnx.defs

    try:
        s = onnx.defs.get_schema(op_type, opset, domain) if opset is not None else onnx.defs.get_schema(op_type, domain)
    except onnx.defs.SchemaError:
        return ()  # an op ONNX does not know: nothing to say about its inputs
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    return tuple(k for k, p in enumerate(s.inputs) if p.option == single)


def unconnected_required_inputs(op_type: str, domain: str, opsets: Mapping[str, int], connected: Sequence[bool]) -> list[int]:
    """The inputs a node's op requires (its schema as of the model's `opsets`) that the node leaves
    unconnected; `connected[k]` says whether input k is. Such a node computes nothing: it is not a
    constant, even when every input it has is one (a Conv cut off from its data keeps its weights)."""
    domain = "" if domain == "ai.onnx" else (domain or "")
    version = opsets.get(domain, opsets.get("ai.onnx") if domain == "" else None)
    slots = _required_slots(op_type, domain, int(version) if version is not None else None)
    return [k for k in slots if k >= len(connected) or not connected[k]]
