"""Edits of the model's boundary and data: tensor names, graph outputs, input shapes, weights.

Part of core.model.edits (which re-exports every class here); the same contract applies: the
constructor resolves names, `do` refuses before touching the graph, `undo` restores the same
objects at the same places.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from ..errors import EditError
from .edit_support import _IDENTIFIER, _find_value, _taken_value_names
from .graph import INFERRED as _INFERRED
from .graph import Dim, Graph, dtype_name
from .history import Edit

__all__ = ["RenameTensor", "AddGraphOutput", "RemoveGraphOutput", "SetInputShape", "ReplaceInitializer"]

logger = logging.getLogger(__name__)


class RenameTensor(Edit):
    """Rename a tensor everywhere: producers, consumers (subgraphs included, they share the
    IR value), graph inputs/outputs, initializers and the file's value_info."""

    def __init__(self, graph: Graph, old: str, new: str):
        self.old, self.new = old, new
        _find_value(graph, old)
        self.description = f"Rename tensor '{old}' to '{new}'"
        self._value: ir.Value | None = None
        self._init_order: list[ir.Value] | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        v = _find_value(graph, self.old)
        new = self.new
        if not new or not new.strip():
            raise EditError(f"Cannot rename tensor '{self.old}': a tensor name cannot be empty.")
        if new in _taken_value_names(g):
            raise EditError(f"Cannot rename tensor '{self.old}' to '{new}': that name is already used.")
        self._value = v
        self._init_order = list(g.initializers.values()) if v.is_initializer() else None
        v.name = new
        if self._init_order is not None:
            g.initializers.data = {x.name: x for x in self._init_order}  # keep the file's order
        if graph.value_info_names is not None and self.old in graph.value_info_names:
            graph.value_info_names.discard(self.old)
            graph.value_info_names.add(new)

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        v = self._value
        assert v is not None
        v.name = self.old
        if self._init_order is not None:
            g.initializers.data = {x.name: x for x in self._init_order}
        if graph.value_info_names is not None and self.new in graph.value_info_names:
            graph.value_info_names.discard(self.new)
            graph.value_info_names.add(self.old)


class AddGraphOutput(Edit):
    """Make a tensor a graph output (its inferred type is written down, as outputs need one)."""

    def __init__(self, graph: Graph, tensor: str):
        self.tensor = tensor
        _find_value(graph, tensor)
        self.description = f"Add graph output '{tensor}'"
        self._plan: tuple | None = None
        self._value: ir.Value | None = None
        self._old_type = None
        self._old_shape = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        v = _find_value(graph, self.tensor)
        if v.is_graph_output():
            raise EditError(f"'{self.tensor}' is already a graph output.")
        if self._plan is None:
            dtype = v.dtype or v.meta.get(_INFERRED, (None, None))[0]
            if dtype is None:
                raise EditError(f"Cannot make '{self.tensor}' a graph output: its type is unknown (shape inference could not tell).")
            inferred = v.meta.get(_INFERRED, (None, None))[1]
            new_type = ir.TensorType(dtype) if v.type is None else v.type
            new_shape = ir.Shape(list(inferred)) if v.shape is None and v.type is None and inferred is not None else v.shape
            self._plan = (new_type, new_shape)
        self._value, self._old_type, self._old_shape = v, v.type, v.shape
        v.type, v.shape = self._plan
        g.outputs.append(v)

    def undo(self, graph: Graph) -> None:
        g = graph.model.graph
        v = self._value
        assert v is not None and g.outputs[-1] is v
        g.outputs.pop()
        v.type, v.shape = self._old_type, self._old_shape


class RemoveGraphOutput(Edit):
    """Stop exposing a tensor as a graph output (the model keeps at least one output)."""

    def __init__(self, graph: Graph, tensor: str):
        self.tensor = tensor
        self.description = f"Remove graph output '{tensor}'"
        self._index = -1
        self._value: ir.Value | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        idx = next((i for i, v in enumerate(g.outputs) if v.name == self.tensor), None)
        if idx is None:
            raise EditError(f"'{self.tensor}' is not a graph output.")
        if len(g.outputs) == 1:
            raise EditError(f"Cannot remove '{self.tensor}': it is the model's only output.")
        self._index, self._value = idx, g.outputs[idx]
        g.outputs.pop(idx)

    def undo(self, graph: Graph) -> None:
        assert self._value is not None
        graph.model.graph.outputs.insert(self._index, self._value)


class SetInputShape(Edit):
    """Change a graph input's shape (sizes, symbolic names such as 'batch', '?' for unknown).

    With `refresh` (the default), shapes the file declares further down (value_info, graph
    outputs) are re-inferred from the new input shape, so the saved model does not carry stale
    declarations (a batch of 1 written on the outputs of a model whose batch is now 'N').
    """

    def __init__(self, graph: Graph, input_name: str, dims: Sequence[Dim], refresh: bool = True):
        self.input_name, self.dims, self.refresh = input_name, list(dims), refresh
        shown = ", ".join("?" if d is None else str(d) for d in self.dims)
        self.description = f"Set shape of input '{input_name}' to [{shown}]"
        self._changed: list[tuple[ir.Value, ir.Shape | None]] = []
        self._updates: list[tuple[ir.Value, ir.Shape | None]] | None = None

    def do(self, graph: Graph) -> None:
        g = graph.model.graph
        v = next((x for x in g.inputs if x.name == self.input_name and not x.is_initializer()), None)
        if v is None:
            raise EditError(f"The model has no graph input named '{self.input_name}'.")
        for d in self.dims:
            if isinstance(d, bool) or not (d is None or (isinstance(d, (int, np.integer)) and d >= 0) or (isinstance(d, str) and _IDENTIFIER.match(d))):
                raise EditError(f"Cannot set the shape of '{self.input_name}': {d!r} is not a size, a name or '?'.")
        new_shape = ir.Shape([int(d) if isinstance(d, (int, np.integer)) else (ir.SymbolicDim(d)) for d in self.dims])
        if v.shape is not None and _dims_of(v.shape) == tuple(self.dims):
            raise EditError(f"Input '{self.input_name}' already has the shape {list(self.dims)}.")
        if self._updates is None:
            updates: list[tuple[ir.Value, ir.Shape | None]] = [(v, new_shape)]
            if self.refresh:
                updates += _reinferred_declared_shapes(graph, v, new_shape)
            self._updates = updates
        updates = self._updates
        self._changed = [(x, x.shape) for x, _ in updates]
        for x, s in updates:
            x.shape = s

    def undo(self, graph: Graph) -> None:
        for x, s in reversed(self._changed):
            x.shape = s


def _dims_of(shape: ir.Shape) -> tuple[Dim, ...]:
    return tuple(d if isinstance(d, int) else getattr(d, "value", None) for d in shape)


def _reinferred_declared_shapes(graph: Graph, changed: ir.Value, new_shape: ir.Shape) -> list[tuple[ir.Value, ir.Shape | None]]:
    """Declared shapes of node outputs, re-inferred as they would be with `changed` at `new_shape`."""
    g = graph.model.graph
    declared = [o for n in g for o in n.outputs if o.name and o.shape is not None]
    if not declared:
        return []
    proto = graph.to_proto()
    for vi in proto.graph.input:
        if vi.name == changed.name:
            vi.type.tensor_type.ClearField("shape")
            shp = vi.type.tensor_type.shape
            for d in new_shape:
                dim = shp.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif getattr(d, "value", None) is not None:
                    dim.dim_param = str(d.value)
    names = {o.name for o in declared}
    for vi in list(proto.graph.value_info) + list(proto.graph.output):
        if vi.name in names:
            vi.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001 - the edit still applies; validation reports the failure
        logger.info("re-inferring shapes after an input shape change failed: %s", e)
        return []
    found: dict[str, ir.Shape | None] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            found[vi.name] = None
            continue
        dims: list[int | ir.SymbolicDim] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            else:
                dims.append(ir.SymbolicDim(d.dim_param if d.HasField("dim_param") else None))
        found[vi.name] = ir.Shape(dims)
    out = []
    for o in declared:
        s = found.get(o.name)
        if o.name in found and (s is None or _dims_of(s) != _dims_of(o.shape)):
            out.append((o, s))
    return out


def _load_npy(path: str | os.PathLike) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise EditError(f"{p}: no such file.")
    try:
        arr = np.load(p, allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e).lower():
            raise EditError(f"{p} holds Python objects (pickled data), which the workbench never loads; save a plain numeric array.") from None
        raise EditError(f"{p} is not a .npy array file ({e}).") from None
    except Exception as e:  # noqa: BLE001 - numpy raises several types on malformed headers
        raise EditError(f"{p} is not a .npy array file ({e.__class__.__name__}: {e}).") from None
    if not isinstance(arr, np.ndarray):
        raise EditError(f"{p} is an .npz archive, not a single .npy array.")
    return arr


class ReplaceInitializer(Edit):
    """Replace a weight's data from a `.npy` file (read with allow_pickle=False) or an array.

    The dtype must match (a float64 array for a float32 weight is refused: cast it first); a
    different shape is allowed, and shape inference flags the consumers it breaks.
    """

    def __init__(self, graph: Graph, name: str, source: str | os.PathLike | np.ndarray):
        self.name = name
        v = _find_value(graph, name, "initializer")
        if not v.is_initializer():
            raise EditError(f"Tensor '{name}' is not an initializer (it is computed by a node), so its data cannot be replaced.")
        if isinstance(source, (np.ndarray, np.generic)):
            self.array, origin = np.asarray(source), "an array"
        else:
            self.array, origin = _load_npy(source), Path(source).name
        self.description = f"Replace initializer '{name}' from {origin}"
        self._value: ir.Value | None = None
        self._old_tensor = None
        self._old_shape: ir.Shape | None = None

    def do(self, graph: Graph) -> None:
        v = _find_value(graph, self.name, "initializer")
        old = v.const_value
        want = v.dtype or (old.dtype if old is not None else None)
        arr = self.array
        try:
            have = ir.DataType.from_numpy(arr.dtype)
        except Exception:  # noqa: BLE001
            raise EditError(f"Cannot replace '{self.name}': arrays of dtype {arr.dtype} have no ONNX type.") from None
        if want is not None and have != want:
            raise EditError(f"Cannot replace '{self.name}': it holds {dtype_name(want)} and the array is {arr.dtype.name}; cast it first.")
        self._value, self._old_tensor, self._old_shape = v, old, v.shape
        v.const_value = ir.Tensor(np.asarray(arr, order="C"), name=self.name)
        if v.shape is not None or v.is_graph_input():
            v.shape = ir.Shape(list(arr.shape))

    def undo(self, graph: Graph) -> None:
        v = self._value
        assert v is not None
        v.const_value = self._old_tensor
        v.shape = self._old_shape
