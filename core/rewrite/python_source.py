"""Python source for the pieces of an onnx-ir model: attributes, types, shapes, tensors.

Used by core.rewrite.as_python, which writes the edit history as a script. Every function returns
an expression that rebuilds the value *exactly* (the script's result is compared byte for byte with
the workbench's model before it is handed out), or raises `NotExpressible` naming what it cannot
write. Arrays are written three ways, by size:

* up to `INLINE_ELEMENTS` elements: a numpy literal (`np.array([0.5, -1.0], dtype=np.float32)`);
* up to `EMBED_BYTES` (as a `.npy` file): embedded as base64 text, so a script on the clipboard
  needs nothing beside it;
* larger: a `.npy` file named by its content hash, read from the script's folder (the caller
  writes `ArrayStore.files` there); with `files=False` (the clipboard) such an array is refused.
"""
from __future__ import annotations

import base64
import hashlib
import io
import logging
import math

import numpy as np
import onnx_ir as ir

from ..errors import WorkbenchError

__all__ = ["HELPERS", "SAVE", "NotExpressible", "ArrayStore", "INLINE_ELEMENTS", "EMBED_BYTES", "attr_source", "type_source", "shape_source", "literal"]

logger = logging.getLogger(__name__)

INLINE_ELEMENTS = 16
EMBED_BYTES = 4 << 20  # 4 MiB of .npy data (5.6 MB of text): past that, a clipboard is the wrong carrier

_PLAIN_DTYPES = {np.dtype(t) for t in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                                       "uint8", "uint16", "uint32", "uint64", "bool")}


class NotExpressible(WorkbenchError):
    """Something in the edit history that the script cannot write exactly (one sentence, naming it)."""


def literal(x) -> str:
    """A plain Python value (int, float, str, bool, None, list/tuple of them) as source."""
    if isinstance(x, float):
        if math.isnan(x):
            return 'float("nan")'
        if math.isinf(x):
            return 'float("inf")' if x > 0 else 'float("-inf")'
        return repr(x)
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in x) + "]"
    if x is None or isinstance(x, (bool, int, str)):
        return repr(x)
    raise NotExpressible(f"a value of type {type(x).__name__} cannot be written as Python")


class ArrayStore:
    """Decides how each array of the script is written (see the module docstring); `files` are
    the `.npy` files a written script reads beside it (name -> array)."""

    def __init__(self, files: bool = True, embed_bytes: int = EMBED_BYTES):
        self.allow_files = files
        self.embed_bytes = embed_bytes
        self.files: dict[str, np.ndarray] = {}
        self.uses_embedded = False

    def source(self, array: np.ndarray, what: str) -> str:
        a = np.asarray(array)
        if a.dtype not in _PLAIN_DTYPES:
            raise NotExpressible(f"{what} holds {a.dtype} data, which the script does not write")
        dt = f"np.{a.dtype.name}" if a.dtype != np.bool_ else "np.bool_"
        if a.size <= INLINE_ELEMENTS:
            items = literal([v.item() for v in a.reshape(-1)])
            if a.ndim == 1:
                return f"np.array({items}, dtype={dt})"
            if a.ndim == 0:
                return f"np.array({literal(a.item())}, dtype={dt})"
            return f"np.array({items}, dtype={dt}).reshape({literal(list(a.shape))})"
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
        data = buf.getvalue()
        if len(data) <= self.embed_bytes:
            self.uses_embedded = True
            text = base64.b64encode(data).decode("ascii")
            lines = [text[i:i + 96] for i in range(0, len(text), 96)]
            body = "\n".join(f'        "{line}"' for line in lines)
            return f"embedded(  # {a.dtype.name} {list(a.shape)}\n{body}\n    )"
        if not self.allow_files:
            raise NotExpressible(
                f"{what} holds {len(data) / 1e6:.1f} MB of data, more than a script on the clipboard carries "
                f"({self.embed_bytes >> 20} MiB); save the script to a file instead, which writes it as a .npy file beside it")
        name = f"array_{hashlib.sha1(data).hexdigest()[:16]}.npy"
        self.files[name] = a
        return f'np.load(  # {a.dtype.name} {list(a.shape)}, a file beside this script\n        HERE / "{name}", allow_pickle=False)'


def tensor_source(t: ir.TensorProtocol, store: ArrayStore, what: str) -> str:
    try:
        arr = t.numpy()
    except Exception as e:  # noqa: BLE001 - e.g. external data that is gone
        raise NotExpressible(f"{what} cannot be read ({e})") from None
    kw = f", name={t.name!r}" if t.name else ""
    if t.doc_string:
        kw += f", doc_string={t.doc_string!r}"
    want = ir.DataType.from_numpy(np.asarray(arr).dtype) if np.asarray(arr).dtype in _PLAIN_DTYPES else None
    if want != t.dtype:
        raise NotExpressible(f"{what} holds {t.dtype.name} data, which the script does not write")
    return f"ir.Tensor({store.source(arr, what)}{kw})"


def type_source(t) -> str:
    if t is None:
        return "None"
    if isinstance(t, ir.TensorType):
        return f"ir.TensorType(ir.DataType.{t.dtype.name})"
    if isinstance(t, ir.SequenceType):
        return f"ir.SequenceType({type_source(t.elem_type)})"
    if isinstance(t, ir.OptionalType):
        return f"ir.OptionalType({type_source(t.elem_type)})"
    if isinstance(t, ir.SparseTensorType):
        return f"ir.SparseTensorType(ir.DataType.{t.dtype.name})"
    raise NotExpressible(f"the type {t} cannot be written as Python")


def dims(shape: ir.Shape | None):
    """A shape as plain data (ints, names, None), for comparing and for writing."""
    if shape is None:
        return None
    denotations = tuple(shape.get_denotation(i) for i in range(shape.rank()))
    return tuple(d if isinstance(d, int) else d.value for d in shape.dims), denotations if any(denotations) else ()


def shape_source(shape: ir.Shape | None) -> str:
    if shape is None:
        return "None"
    plain, denotations = dims(shape)
    if denotations:
        return f"ir.Shape({literal(list(plain))}, denotations={literal(list(denotations))})"
    return f"ir.Shape({literal(list(plain))})"


_SIMPLE_ATTRS = {
    ir.AttributeType.FLOAT, ir.AttributeType.INT, ir.AttributeType.STRING,
    ir.AttributeType.FLOATS, ir.AttributeType.INTS, ir.AttributeType.STRINGS,
}


def attr_key(a: ir.Attr):
    """An attribute as comparable data (tensors by their bytes)."""
    if a.type in _SIMPLE_ATTRS:
        v = a.value
        return (a.type, tuple(v) if isinstance(v, (list, tuple)) else v, a.ref_attr_name, a.doc_string)
    if a.type == ir.AttributeType.TENSOR:
        t = a.value
        try:
            arr = np.asarray(t.numpy())
            return (a.type, t.dtype, arr.shape, arr.tobytes(), t.name, a.ref_attr_name, a.doc_string)
        except Exception:  # noqa: BLE001 - unreadable: compared by identity
            return (a.type, id(t))
    return (a.type, id(a.value), a.ref_attr_name)  # graphs and the rest: the same object or changed


def attr_source(a: ir.Attr, store: ArrayStore, where: str) -> str:
    what = f"attribute '{a.name}' of {where}"
    if a.ref_attr_name:
        raise NotExpressible(f"{what} refers to a function attribute, which the script does not write")
    doc = f", doc_string={a.doc_string!r}" if a.doc_string else ""
    if a.type in _SIMPLE_ATTRS:
        v = a.value
        if a.type == ir.AttributeType.FLOAT:
            v = float(v)
        elif a.type == ir.AttributeType.FLOATS:
            v = [float(x) for x in v]
        elif isinstance(v, tuple):
            v = list(v)
        return f"ir.Attr({a.name!r}, ir.AttributeType.{a.type.name}, {literal(v)}{doc})"
    if a.type == ir.AttributeType.TENSOR:
        return f"ir.Attr({a.name!r}, ir.AttributeType.TENSOR, {tensor_source(a.value, store, what)}{doc})"
    raise NotExpressible(f"{what} is of type {a.type.name}, which the script does not write")


HELPERS = {  # the script's helper functions, each written only when the script uses it
    "values": '''def values(graph: ir.Graph) -> dict[str, ir.Value]:
    """Every tensor of the graph by name: inputs, initializers, node outputs."""
    found = {v.name: v for v in graph.inputs}
    found.update(graph.initializers)
    for node in graph:
        found.update((o.name, o) for o in node.outputs)
    return found
''',
    "embedded": '''def embedded(text: str) -> np.ndarray:
    """An array written into this script (its .npy file, in base64)."""
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)
''',
    "reorder": '''def reorder(graph: ir.Graph, order: list[int]) -> None:
    """Put the graph's nodes in the order given (positions in the current order)."""
    nodes = list(graph)
    for node in nodes:
        graph.remove(node)
    graph.extend(nodes[i] for i in order)
''',
    "reorder_initializers": '''def reorder_initializers(graph: ir.Graph, names: list[str]) -> None:
    """List the initializers in the order given, as the workbench writes them."""
    held = [graph.initializers.pop(name) for name in names]
    for value in held:
        graph.register_initializer(value)
''',
    "rename_initializer": '''def rename_initializer(graph: ir.Graph, old: str, new: str) -> None:
    """Rename an initializer where it stands (onnx-ir would list it last)."""
    held = list(graph.initializers.values())
    graph.initializers[old].name = new
    reorder_initializers(graph, [value.name for value in held])
''',
}

SAVE = '''def save(model: ir.Model, path: str, declared: set[str]) -> None:
    """Write the model. onnx-ir declares a type (value_info) for every typed tensor; like the
    workbench, keep only the declarations the source file had (renamed with their tensors)."""
    proto = ir.to_proto(model)
    keep = [vi for vi in proto.graph.value_info if vi.name in declared]
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(keep)
    onnx.save(proto, path)
'''
