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

The result is `ImportResult.lineage`: Relax variable name -> ONNX node ids (core.graph ids).

Converter fixes. Some ONNX ops TVM converts wrongly or not at all. A fix is a converter class with
the frontend's protocol (an `OnnxOpConverter` subclass: `get_converter(opset)` returns
`fn(bb, inputs, attr, params)`), registered with::

    from core.tvm_import import register_converter
    register_converter("Gelu", MyGeluConverter)

Registered converters take precedence over the frontend's for every import. The module
`core/tvm_converters.py`, when it exists, is imported before the first import so its fixes (made by
calling `register_converter` at module level) always apply, in lowering and compile alike.

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

from .errors import UnsupportedOpError, WorkbenchError

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

_CONVERTERS: dict[str, type] = {}
_FIXES_LOADED = False


def register_converter(op_type: str, converter_class: type) -> None:
    """Use `converter_class` (frontend protocol: `get_converter(opset)`) for every `op_type` node."""
    if not hasattr(converter_class, "get_converter"):
        raise TypeError(f"converter for {op_type} must have get_converter(opset) like tvm's OnnxOpConverter")
    _CONVERTERS[op_type] = converter_class


def unregister_converter(op_type: str) -> None:
    """Remove a registered converter (the frontend's own, if any, applies again)."""
    _CONVERTERS.pop(op_type, None)


def registered_converters() -> dict[str, type]:
    """The workbench's converters by op type (after loading core.tvm_converters, if present)."""
    _load_fixes()
    return dict(_CONVERTERS)


def _load_fixes() -> None:
    global _FIXES_LOADED
    if _FIXES_LOADED:
        return
    _FIXES_LOADED = True
    try:
        importlib.import_module("core.tvm_converters")
    except ModuleNotFoundError as e:
        if e.name != "core.tvm_converters":
            raise


def supported_ops() -> set[str]:
    """ONNX op types the import can convert (frontend + registered converters)."""
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    _load_fixes()
    return set(_get_convert_map()) | set(_CONVERTERS) | {"Constant", "If"}


@dataclass
class ImportResult:
    """A Relax module imported from a Graph, with lineage and how long the import took."""

    mod: Any  # tvm.IRModule
    params: dict[str, Any] = field(default_factory=dict)  # name -> tvm tensor (keep_params_in_input only)
    lineage: dict[str, list[int]] = field(default_factory=dict)  # Relax var name in main -> ONNX node ids
    bindings_of_node: dict[int, list[str]] = field(default_factory=dict)  # ONNX node id -> Relax var names
    seconds: float = 0.0


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

    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    class LineageImporter(fe.ONNXGraphImporter):
        def __init__(self, *args, node_ids: list[int], node_labels: list[str], where: str = "", **kwargs):
            super().__init__(*args, **kwargs)
            self.where = where
            self.node_ids = node_ids
            self.node_labels = node_labels
            self.marker_of: dict[str, int] = {}  # output var name -> ONNX node id
            self._taken: set[str] = set()

        def _fresh(self, onnx_name: str) -> str:
            base = relax_name(onnx_name)
            name, i = base, 1
            while name in self._taken:
                name = f"{base}_{i}"
                i += 1
            self._taken.add(name)
            return name

        def _construct_nodes(self, graph):
            # variables that exist before a node converts (graph inputs, earlier results): a node
            # whose output is one of them (Identity, a no-op Reshape) made no binding of its own
            seen = {v.name for v in self._nodes.values() if isinstance(v, relax.Var)}
            for index, node in enumerate(graph.node):
                node_id = self.node_ids[index]
                try:
                    super()._construct_nodes(SimpleNamespace(node=[node]))
                except WorkbenchError:
                    raise
                except Exception as e:  # noqa: BLE001 - the frontend raises anything; name the node
                    first = (str(e).strip().splitlines() or [type(e).__name__])[-1].strip()
                    raise UnsupportedOpError(
                        f"{self.where}node '{self.node_labels[index]}' ({node.op_type}) cannot be imported by TVM's ONNX "
                        f"frontend: {first.rstrip('.')}.",
                        op_type=node.op_type,
                        node_name=self.node_labels[index],
                    ) from e
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


def import_graph(graph, *, keep_params_in_input: bool = False, shape_dict: dict[str, list] | None = None) -> ImportResult:
    """Import a core.graph.Graph into a Relax IRModule, recording lineage.

    Raises UnsupportedOpError (naming the op and the first node using it) when an op cannot be
    converted, and UnsupportedOpError naming the node when a converter fails on it.
    """
    import onnx

    _load_fixes()
    t0 = time.perf_counter()
    proto: onnx.ModelProto = graph.to_proto()
    nodes = graph.nodes
    known = supported_ops()
    where = f"{graph.path.name}: " if getattr(graph, "path", None) is not None else ""
    for n in nodes:
        if n.op_type not in known:
            raise UnsupportedOpError(
                f"{where}node '{n.label}' uses op '{n.op_type}'"
                + (f" (domain {n.domain})" if n.domain not in ("", "ai.onnx") else "")
                + ", which TVM's ONNX frontend cannot import.",
                op_type=n.op_type,
                node_name=n.label,
            )
    if len(proto.graph.node) != len(nodes):  # pragma: no cover - to_proto keeps nodes 1:1
        raise WorkbenchError("internal: node count changed while serialising the graph for TVM.")

    opset = graph.opset or 1
    importer = _importer_class()(
        shape_dict,
        "float32",
        keep_params_in_input=keep_params_in_input,
        sanitize=True,
        node_ids=[n.id for n in nodes],
        node_labels=[n.label for n in nodes],
        where=where,
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
        params = {name: value for name, (_var, value) in importer._params.items()}
    return ImportResult(mod=mod, params=params, lineage=lineage, bindings_of_node=bindings_of_node,
                        seconds=time.perf_counter() - t0)
