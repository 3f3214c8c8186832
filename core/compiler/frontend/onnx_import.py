"""ONNX Graph -> Relax IRModule, with lineage from every Relax binding back to its ONNX node.

TVM's ONNX frontend (`tvm.relax.frontend.onnx.from_onnx`) records no spans, so nothing in the
imported module says which ONNX node a binding came from. The workbench records it itself: the
importer below subclasses the frontend's `ONNXGraphImporter` and converts the graph **one node at
a time** (the frontend's own `_construct_nodes` on a one-node slice of the graph), then

* binds each node's result to a Relax variable named after the node's ONNX output tensor (the
  frontend leaves results as unbound calls that the next op's normalisation binds as `lvN`, which
  would attribute them to the wrong node), so the Relax text reads in the model's own names;
* walks the finished `main` in order: every binding up to and including a node's output variable
  belongs to that node (helpers a converter emits, e.g. the `TupleGetItem`s after `batch_norm`).

The result is `ImportResult.lineage`: Relax variable name -> ONNX node ids (core.model.graph ids).

Converter fixes. Some ONNX ops TVM converts wrongly or not at all. A fix is a converter class with
the frontend's protocol (an `OnnxOpConverter` subclass: `get_converter(opset)` returns
`fn(bb, inputs, attr, params)`), registered with::

    from core.compiler.frontend.registry import register_converter  # also re-exported by tvm_import
    register_converter("Gelu", MyGeluConverter)

Registered converters take precedence over the frontend's for every import. The module
`core/compiler/frontend/converters.py`, when it exists, is imported before the first import so its fixes (made by
calling `register_converter` at module level) always apply, in lowering and compile alike.

Model-local functions (the rewrite rules' `mlc.workbench.LinearRelu`, `GemmRelu`, `Gelu` below
opset 20) are inlined before import: the frontend knows no local functions (and would convert a
`Gelu` of any domain as ONNX's). Inlining replaces each call node in place by its body, in order,
so every node of the inlined graph still belongs to one node of the user's graph: bindings of an
inlined body map back to the workbench id of the call node, and errors name the call node.

An op neither the frontend nor a registered converter can convert raises
`core.errors.UnsupportedOpError` naming the op and the node.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import logging
import re
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from ...errors import UnsupportedOpError, WorkbenchError, brief_reason
from ..tvm_compat import importer_params, onnx_convert_map, onnx_graph_importer
from .registry import converters, register_converter, unregister_converter
from .shape_folding import fold_static_shapes

__all__ = [
    "ImportResult",
    "import_graph",
    "register_converter",
    "unregister_converter",
    "registered_converters",
    "supported_ops",
    "relax_name",
]

logger = logging.getLogger(__name__)

# the registry lives in its own module (converters register there without importing this one)
_CONVERTERS = converters()
_FIXES_LOADED = False


def registered_converters() -> dict[str, type]:
    """The workbench's converters by op type (after loading the modules that register them)."""
    _load_fixes()
    return dict(_CONVERTERS)


def _load_fixes() -> None:
    """Import the modules that register the workbench's converters (core.compiler.frontend.registry):
    TVM's converters fixed; the ops newer opsets added; quantized ops (the last two when present)."""
    global _FIXES_LOADED
    if _FIXES_LOADED:
        return
    _FIXES_LOADED = True
    importlib.import_module("core.compiler.frontend.converters")
    for module in ("core.compiler.frontend.modern_ops", "core.compiler.frontend.quantized"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise


def supported_ops() -> set[str]:
    """ONNX op types the import can convert (frontend + registered converters)."""
    _load_fixes()
    return set(onnx_convert_map()) | set(_CONVERTERS) | {"Constant", "If"}


@dataclass
class ImportResult:
    """A Relax module imported from a Graph, with lineage and how long the import took."""

    mod: Any  # tvm.IRModule
    params: dict[str, Any] = field(default_factory=dict)  # name -> tvm tensor (keep_params_in_input only)
    lineage: dict[str, list[int]] = field(default_factory=dict)  # Relax var name in main -> ONNX node ids
    bindings_of_node: dict[int, list[str]] = field(default_factory=dict)  # ONNX node id -> Relax var names
    seconds: float = 0.0
    # user's name -> name in the generated code, for the inputs, parameters and symbolic dims
    # whose ONNX name is no C identifier (or collides); the kernels carry the right-hand side
    code_names: dict[str, str] = field(default_factory=dict)


_IDENT = re.compile(r"[^0-9A-Za-z_]")


def relax_name(onnx_name: str) -> str:
    """A valid Relax identifier for an ONNX tensor name ('gpu_0/conv1_1' -> 'gpu_0_conv1_1')."""
    name = _IDENT.sub("_", onnx_name).strip("_") or "t"
    if not (name[0].isalpha() or name[0] == "_"):
        name = "t_" + name
    return name


def _importer_class():
    """The frontend's importer, converting node by node and recording lineage (built lazily: TVM import is slow)."""
    from types import SimpleNamespace

    import tvm
    from tvm import relax

    class LineageImporter(onnx_graph_importer()):
        def __init__(self, *args, node_ids: list[int], node_labels: list[str], node_names: list[str], where: str = "", reserved=(), **kwargs):
            super().__init__(*args, **kwargs)
            self.where = where
            self.node_ids = node_ids
            self.node_labels = node_labels
            self.node_names = node_names
            self.marker_of: dict[str, int] = {}  # output var name -> ONNX node id
            self.code_names: dict[str, str] = {}  # ONNX input/initializer name -> Relax parameter name
            self._taken: set[str] = set()
            # input/initializer names that are C identifiers already: they keep their names
            self.reserved: set[str] = set(reserved)

        def _fresh(self, onnx_name: str) -> str:
            base = relax_name(onnx_name)
            name, i = base, 1
            while name in self._taken or (name != onnx_name and name in self.reserved):
                name = f"{base}_{i}"
                i += 1
            self._taken.add(name)
            return name

        def _new_var(self, var_name: str, shape: list, dtype: str = "float32"):
            # every graph input (and kept parameter) becomes a Relax parameter here; its name
            # reaches the kernels' signatures (CUDA C: `float* gpu_0/data_0_ptr`), so it is made
            # a C identifier, unique among all names of main, at this one place
            if var_name in self.reserved and var_name not in self._taken:
                name = var_name  # already an identifier: keeps its name, others make way
                self._taken.add(name)
            else:
                name = self._fresh(var_name)
            self.code_names[var_name] = name
            return relax.Var(name, relax.TensorType(shape=shape, dtype=dtype))

        def _construct_nodes(self, graph):
            # variables that exist before a node converts (graph inputs, earlier results): a node
            # whose output is one of them (Identity, a no-op Reshape) made no binding of its own
            seen = {v.name for v in self._nodes.values() if isinstance(v, relax.Var)}
            for index, node in enumerate(graph.node):
                node_id = self.node_ids[index]
                restore = {}
                try:
                    if self._shape_arithmetic(node):
                        continue
                    restore = self._shapes_as_tensors(node)
                    restore.update(self._scalars_as_tensors(node, restore))
                    super()._construct_nodes(SimpleNamespace(node=[node]))
                except WorkbenchError:
                    raise
                except Exception as e:  # noqa: BLE001 - the frontend raises anything; name the node
                    reason = _in_user_terms(brief_reason(e))
                    if isinstance(e, KeyError) and e.args:  # the converter read an attribute the node does not set
                        reason = f"its converter needs the attribute '{e.args[0]}', which this node does not set"
                    raise UnsupportedOpError(
                        f"{self.where}node '{self.node_labels[index]}' ({node.op_type}) cannot be imported by TVM's ONNX "
                        f"frontend: {reason}.",
                        op_type=node.op_type,
                        node_name=self.node_names[index],
                    ) from e
                finally:
                    self._nodes.update(restore)
                for out in node.output:
                    if not out or out not in self._nodes:
                        continue
                    expr = self._nodes[out]
                    if isinstance(expr, (relax.Call, relax.TupleGetItem)):
                        expr = self.bb.emit(expr, name_hint=self._fresh(out))
                        self._nodes[out] = expr
                    if isinstance(expr, relax.Var) and expr.name not in seen:
                        self.marker_of[expr.name] = node_id
                        seen.add(expr.name)

        def _shape_values(self, name: str):
            """The int values of `name` when it is a shape with known (possibly symbolic) entries
            or a constant int tensor of at most one dimension; else None."""
            import numpy as np

            expr = self._nodes.get(name) if name else None
            ty = getattr(expr, "ty", None)
            if isinstance(ty, relax.ShapeType) and ty.values is not None:
                return list(ty.values)
            if name in self._params:
                expr = self._params[name][1] if isinstance(self._params[name], tuple) else self._params[name]
            value = getattr(expr, "data", None)
            if value is None and isinstance(expr, tvm.ir.GenericConst):
                value = expr.value
            if value is None:
                return None
            arr = value.numpy() if hasattr(value, "numpy") else None
            if arr is None or arr.ndim > 1 or not np.issubdtype(arr.dtype, np.integer):
                return None
            return [tvm.tirx.IntImm("int64", int(v)) for v in arr.reshape(-1)]

        def _shape_arithmetic(self, node) -> bool:
            """Add/Sub/Mul/Div and Concat of shapes (and int constants) computed as a shape, as
            exporters write `hidden // heads` and `(batch, seq, heads, head)`: the result stays
            symbolic, so the Reshape that uses it sees a shape, not a tensor TVM's Reshape cannot
            take. False when not applicable (the frontend converts the node)."""
            ops = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
                   "Div": lambda a, b: tvm.tirx.floordiv(a, b)}
            if node.op_type not in ops and node.op_type != "Concat" or len(node.output) != 1:
                return False
            if not any(isinstance(getattr(self._nodes.get(n), "ty", None), relax.ShapeType) for n in node.input):
                return False
            if node.op_type == "Concat":  # shapes and int constants joined: still a shape
                parts = [self._shape_values(n) for n in node.input]
                if any(p is None for p in parts):
                    return False
                self._nodes[node.output[0]] = relax.ShapeExpr([v for p in parts for v in p])
                return True
            if len(node.input) != 2:
                return False
            a, b = (self._shape_values(n) for n in node.input)
            if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
                return False
            n = max(len(a), len(b))
            a, b = (v * n if len(v) == 1 else v for v in (a, b))
            self._nodes[node.output[0]] = relax.ShapeExpr([ops[node.op_type](x, y) for x, y in zip(a, b)])
            return True

        def _shapes_as_tensors(self, node) -> dict:
            """Hand `node` its shape-valued inputs as int64 tensors when its converter cannot
            take a shape (the frontend refuses "Node X cannot handle ShapeExpr inputs": Div, Mul,
            Sub, Add on a Shape -> Gather result, as exporters write for head sizes); returns the
            entries to put back, so later consumers still see the shape."""
            def is_shape(e) -> bool:
                return isinstance(e, relax.Expr) and isinstance(getattr(e, "ty", None), relax.ShapeType)

            def unknown(e) -> bool:  # a shape whose entries TVM does not know (data-dependent dims)
                return is_shape(e) and e.ty.values is None

            values = [self._nodes.get(n) if n else None for n in node.input]
            only_unknown = False
            if node.op_type in _SHAPE_COMPATIBLE_OPS:
                mixed = node.op_type == "Concat" and any(is_shape(v) for v in values) and not all(is_shape(v) for v in values)
                # Gather and friends read a shape's values; one TVM cannot see they take as a tensor
                only_unknown = node.op_type in _SHAPE_VALUE_READERS and any(unknown(v) for v in values)
                if not mixed and not only_unknown:
                    return {}
            restore = {}
            for name in node.input:
                expr = self._nodes.get(name) if name else None
                if is_shape(expr) and (unknown(expr) or not only_unknown):
                    restore[name] = expr
                    self._nodes[name] = self.bb.emit(relax.op.shape_to_tensor(expr))
            return restore

        def _scalars_as_tensors(self, node, restore: dict) -> dict:
            """Hand `node` its symbolic scalars (a size read from a Shape: Gather, Cast, Div on
            it) as 0-d tensors when its converter takes only tensors (Sqrt of the cast head size,
            as exporters write the scores' scale: "requires argument 0 (x) to be a tensor");
            returns the entries to put back, so later consumers still see the scalar."""
            cast_to_float = node.op_type == "Cast" and _onnx_float_type(node)
            if node.op_type in _PRIM_AWARE_OPS and not cast_to_float:
                return {}
            put_back = {}
            for name in node.input:
                expr = self._nodes.get(name) if name else None
                if expr is None or name in restore or not tvm.ir.is_prim_expr(expr):
                    continue
                dtype = str(expr.ty)
                if isinstance(expr, (tvm.tirx.IntImm, tvm.tirx.FloatImm)):
                    tensor = relax.const(expr.value, dtype)
                elif dtype.startswith(("int", "uint")):
                    value = expr if dtype == "int64" else tvm.tirx.Cast("int64", expr)
                    tensor = self.bb.emit(relax.op.reshape(relax.op.shape_to_tensor(relax.ShapeExpr([value])), ()))
                    if dtype != "int64":
                        tensor = self.bb.emit(relax.op.astype(tensor, dtype))
                else:
                    continue  # a symbolic float: left to the converter
                put_back[name] = expr
                self._nodes[name] = tensor
            return put_back

        def _convert_operator(self, op_name, inputs, attrs, opset):
            fix = _CONVERTERS.get(op_name)
            if fix is None:
                return super()._convert_operator(op_name, inputs, attrs, opset)
            sym = fix.get_converter(opset)(self.bb, inputs, attrs, [self._nodes, self._params])
            if isinstance(sym, relax.Expr):
                sym = self.bb.normalize(sym)
            return sym

        def _check_for_unsupported_ops(self, graph):
            pass  # done before import, with node names (see import_graph)

    return LineageImporter


# TVM's wording for "this input must be a constant" -> the user's terms and what they can do
_RUN_TIME_INPUT = "; give the model fixed input sizes or fold the shape computation (onnxsim) so it becomes a constant"
_USER_TERMS = [
    (re.compile(r"Type <class '[\w.]+'> for (size|scale|roi) is currently unsupported"),
     lambda m: f"TVM needs its {m.group(1)}s as a constant, and here they are computed at run time" + _RUN_TIME_INPUT),
    (re.compile(r"Only constant (\w+) (?:currently )?supported"),
     lambda m: f"TVM needs its {m.group(1)} as a constant, and here they are an input or computed at run time" + _RUN_TIME_INPUT),
    (re.compile(r"Node \S* ?cannot handle ShapeExpr inputs"),
     lambda m: "TVM cannot take a shape computed from another tensor's Shape as this op's input" + _RUN_TIME_INPUT),
]


def _in_user_terms(reason: str) -> str:
    for pattern, say in _USER_TERMS:
        m = pattern.search(reason)
        if m:
            return say(m)
    return reason


# ops whose TVM converter takes a Relax shape as an input (the frontend's own list)
_SHAPE_COMPATIBLE_OPS = frozenset({
    "Reshape", "Resize", "ConstantOfShape", "Gather", "Slice", "Shape", "Expand", "Concat", "Equal", "Where", "Cast",
    "CastLike", "Squeeze",
})


# of those, the ops that read a shape as data (not as the shape of their result)
_SHAPE_VALUE_READERS = frozenset({"Gather", "Slice", "Concat", "Squeeze", "Equal", "Where", "Cast", "CastLike"})


# ops whose TVM converter computes on symbolic scalars (sizes) itself; others get them as tensors
_PRIM_AWARE_OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
    "Unsqueeze", "Cast", "Gather", "Trilu", "Neg", "Slice", "Range", "Squeeze", "Identity",
})


def _onnx_float_type(node) -> bool:
    """Whether a Cast node casts to a floating-point type."""
    from onnx import TensorProto

    to = next((a.i for a in node.attribute if a.name == "to"), 0)
    return to in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


def _bindings(func):
    from tvm import relax

    body = func.body
    if not isinstance(body, relax.SeqExpr):
        return []
    return [b for blk in body.blocks for b in blk.bindings]


def _free_var_names(expr) -> list[str]:
    from tvm import relax

    names: list[str] = []

    def visit(e):
        if isinstance(e, relax.Var):
            names.append(e.name)

    relax.analysis.post_order_visit(expr, visit)
    return names


def _inline_local_functions(proto) -> tuple[Any, list[int], list[str]]:
    """(model with local functions inlined, the index of the user's node each inlined node came
    from, the function each came through ('' for the user's own nodes)).

    onnx.inliner replaces a call node in place by its body (recursively), so walking the user's
    nodes and counting the nodes each expands to gives the mapping; the count is checked."""
    import onnx.inliner

    if not proto.functions:
        return proto, list(range(len(proto.graph.node))), [""] * len(proto.graph.node)
    funcs = {(f.domain, f.name): f for f in proto.functions}
    sizes: dict[tuple[str, str], int] = {}

    def expanded(node, depth: int = 0) -> int:
        key = (node.domain, node.op_type)
        f = funcs.get(key)
        if f is None:
            return 1
        if key not in sizes:
            if depth > 64:
                raise WorkbenchError(f"local function '{node.op_type}' calls itself; it cannot be inlined for TVM.")
            sizes[key] = sum(expanded(n, depth + 1) for n in f.node)
        return sizes[key]

    origin: list[int] = []
    via: list[str] = []
    for index, node in enumerate(proto.graph.node):
        count = expanded(node)
        origin.extend([index] * count)
        via.extend([node.op_type if (node.domain, node.op_type) in funcs else ""] * count)
    try:
        inlined = onnx.inliner.inline_local_functions(proto)
    except Exception as e:  # noqa: BLE001 - onnx raises its own C++ errors
        raise WorkbenchError(f"the model's local functions cannot be inlined for TVM: {str(e).strip() or type(e).__name__}.") from e
    if len(inlined.graph.node) != len(origin):  # pragma: no cover - the inliner expands in place
        raise WorkbenchError("internal: inlining the model's local functions did not expand them in place.")
    return inlined, origin, via


_SCALAR_CONSTANT_ATTRS = {"value_float": ("f", "float32", True), "value_floats": ("floats", "float32", False),
                          "value_int": ("i", "int64", True), "value_ints": ("ints", "int64", False)}


def _constants_as_tensors(proto) -> None:
    """Rewrite Constant nodes given as value_float(s)/value_int(s) (ONNX >= 12; the rewrite rules'
    function bodies use them) into the `value` tensor form, the only one TVM's frontend reads."""
    from onnx import helper, numpy_helper
    import numpy as np

    for node in proto.graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        spec = _SCALAR_CONSTANT_ATTRS.get(attr.name)
        if spec is None:
            continue
        field_name, dtype, scalar = spec
        raw = getattr(attr, field_name)
        array = np.array(raw if scalar else list(raw), dtype=dtype)
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(array)))


_DIM_TOKENS = re.compile(r"(\+|-|\*|//|/)")  # the frontend reads a dim_param as arithmetic on names


def _dims_as_identifiers(proto) -> dict[str, str]:
    """Rename the graph inputs' symbolic dims (in the import's copy of the model) to C identifiers.

    Why: each name in a dim_param becomes a TIR variable, which CUDA kernels take as a parameter
    named after it (`int64_t x:0`). The frontend reads a dim_param as arithmetic ('2*seq'), so the
    names between the operators are renamed, each to its own identifier (two names never merge
    into one variable). Returns {user's name: identifier} for the names that changed."""
    taken: set[str] = set()
    renamed: dict[str, str] = {}
    tokens: list[str] = []
    for vi in proto.graph.input:
        for dim in vi.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                tokens += [t for t in _DIM_TOKENS.split(dim.dim_param.replace(" ", "")) if t and not _DIM_TOKENS.fullmatch(t)]
    taken.update(t for t in tokens if relax_name(t) == t)
    for t in tokens:
        if t in renamed or t == "?" or relax_name(t) == t or t.isdigit():
            continue
        base = name = relax_name(t)
        i = 1
        while name in taken:
            name = f"{base}_{i}"
            i += 1
        taken.add(name)
        renamed[t] = name
    if renamed:
        for vi in proto.graph.input:
            for dim in vi.type.tensor_type.shape.dim:
                if dim.HasField("dim_param"):
                    parts = _DIM_TOKENS.split(dim.dim_param.replace(" ", ""))
                    dim.dim_param = "".join(renamed.get(t, t) for t in parts)
    return renamed


# element types TVM cannot compile for the CPU: sub-byte integers and floats (its tensors copy
# whole bytes: "TensorCopyFromBytes: size mismatch"), strings and complex numbers; and 8-bit
# floats, whose casts TVM computes wrongly outside the normal range (FLOAT -> FLOAT8E5M2 of
# large values and NaN) where random check inputs never go
_UNSUPPORTED_TYPES = {
    8: ("STRING", "TVM has no string tensors"),
    14: ("COMPLEX64", "TVM has no complex tensors"),
    15: ("COMPLEX128", "TVM has no complex tensors"),
    17: ("FLOAT8E4M3FN", "TVM's 8-bit float conversions do not follow ONNX's rounding and saturation"),
    18: ("FLOAT8E4M3FNUZ", "TVM's 8-bit float conversions do not follow ONNX's rounding and saturation"),
    19: ("FLOAT8E5M2", "TVM's 8-bit float conversions do not follow ONNX's rounding and saturation"),
    20: ("FLOAT8E5M2FNUZ", "TVM's 8-bit float conversions do not follow ONNX's rounding and saturation"),
    24: ("FLOAT8E8M0", "TVM's 8-bit float conversions do not follow ONNX's rounding and saturation"),
    21: ("UINT4", "TVM cannot store 4-bit integers"),
    22: ("INT4", "TVM cannot store 4-bit integers"),
    23: ("FLOAT4E2M1", "TVM cannot convert 4-bit floats"),
    25: ("UINT2", "TVM cannot store 2-bit integers"),
    26: ("INT2", "TVM cannot store 2-bit integers"),
    27: ("FLOAT6E2M3", "TVM cannot convert 6-bit floats"),
    28: ("FLOAT6E3M2", "TVM cannot convert 6-bit floats"),
}


def _refuse_unsupported_types(proto, labels: list[str], names: list[str], where: str) -> None:
    """One sentence naming the first input, output, weight or node whose element type TVM cannot
    compile (checked before import: TVM fails on them deep in code generation or at run time)."""
    from onnx import helper

    def refuse(what: str, elem: int, op: str = "", node: str = ""):
        name, why = _UNSUPPORTED_TYPES[elem]
        raise UnsupportedOpError(f"{where}{what} uses the element type {name}, and {why}; keep this part of the model in a type of 8 bits or more.",
                                 op_type=op, node_name=node)

    def elem_of(vi) -> int:
        return vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0

    for kind, values in (("input", proto.graph.input), ("output", proto.graph.output)):
        for vi in values:
            if elem_of(vi) in _UNSUPPORTED_TYPES:
                refuse(f"the model's {kind} '{vi.name}'", elem_of(vi))
    for t in proto.graph.initializer:
        if t.data_type in _UNSUPPORTED_TYPES:
            refuse(f"the weight '{t.name}'", t.data_type)
    for k, node in enumerate(proto.graph.node):
        for a in node.attribute:
            value = helper.get_attribute_value(a)
            elem = value if a.name == "to" and isinstance(value, int) else getattr(value, "data_type", 0) if a.name in ("value", "value_tensor") else 0
            if elem in _UNSUPPORTED_TYPES:
                refuse(f"node '{labels[k]}' ({node.op_type})", elem, node.op_type, names[k])


def import_graph(graph, *, keep_params_in_input: bool = False, shape_dict: dict[str, list] | None = None) -> ImportResult:
    """Import a core.model.graph.Graph into a Relax IRModule, recording lineage.

    Raises UnsupportedOpError (naming the op and the first node using it) when an op cannot be
    converted, and UnsupportedOpError naming the node when a converter fails on it.
    """
    import onnx

    _load_fixes()
    t0 = time.perf_counter()
    from ...model.external_data import self_contained_proto

    proto: onnx.ModelProto = self_contained_proto(graph)  # weights inline: the importer reads paths from the cwd
    nodes = graph.nodes
    if len(proto.graph.node) != len(nodes):  # pragma: no cover - to_proto keeps nodes 1:1
        raise WorkbenchError("internal: node count changed while serialising the graph for TVM.")
    proto, origin, via = _inline_local_functions(proto)
    _constants_as_tensors(proto)
    fold_static_shapes(proto, shape_dict)
    dim_names = _dims_as_identifiers(proto)
    known = supported_ops()
    where = f"{graph.path.name}: " if getattr(graph, "path", None) is not None else ""
    labels = [nodes[i].label + (f" (inside local function {via[k]})" if via[k] else "") for k, i in enumerate(origin)]
    for k, pn in enumerate(proto.graph.node):
        if pn.op_type not in known:
            raise UnsupportedOpError(
                f"{where}node '{labels[k]}' uses op '{pn.op_type}'"
                + (f" (domain {pn.domain})" if pn.domain not in ("", "ai.onnx") else "")
                + ", which TVM's ONNX frontend cannot import.",
                op_type=pn.op_type,
                node_name=nodes[origin[k]].label,
            )

    _refuse_unsupported_types(proto, labels, [nodes[i].label for i in origin], where)
    opset = graph.opset or 1
    importer = _importer_class()(
        shape_dict,
        "float32",
        keep_params_in_input=keep_params_in_input,
        sanitize=False,  # LineageImporter._new_var makes the names C identifiers
        node_ids=[nodes[i].id for i in origin],
        node_labels=labels,
        node_names=[nodes[i].label for i in origin],
        where=where,
        reserved={n for n in [vi.name for vi in proto.graph.input] + [t.name for t in proto.graph.initializer] if relax_name(n) == n},
    )
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink):
        warnings.simplefilter("ignore")
        mod = importer.from_onnx(proto.graph, opset)

    lineage: dict[str, list[int]] = {}
    bindings_of_node: dict[int, list[str]] = {}
    pending: list[str] = []
    for b in _bindings(mod["main"]):
        name = b.var.name
        pending.append(name)
        node_id = importer.marker_of.get(name)
        if node_id is not None:
            for p in pending:
                lineage[p] = [node_id]
                bindings_of_node.setdefault(node_id, []).append(p)
            pending = []
    if pending:  # after the last node: emit_output's tuple/alias of the results
        uses = {b.var.name: _free_var_names(b.value) for b in _bindings(mod["main"]) if b.var.name in pending}
        for name in pending:
            ids = sorted({i for u in uses.get(name, []) for i in lineage.get(u, [])})
            lineage[name] = ids
    params = {}
    if keep_params_in_input:
        params = importer_params(importer)
    code_names = {k: v for k, v in importer.code_names.items() if k != v}
    code_names.update(dim_names)
    return ImportResult(mod=mod, params=params, lineage=lineage, bindings_of_node=bindings_of_node,
                        seconds=time.perf_counter() - t0, code_names=code_names)
