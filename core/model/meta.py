"""Keys of the workbench's own entries in onnx_ir `meta` (never written to a file): one constant
per key, imported wherever a key is read or written."""
from __future__ import annotations

__all__ = ["NODE_ID", "INFERRED", "REWRITES_KEY", "NONDETERMINISTIC_OPS", "CONSTANT_SOURCE_OPS"]

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
