"""Checking a model after an edit: what is broken, where, and why, in one sentence each.

`core.model.onnx_io.validate_graph` guards loading: it stops at the first problem and refuses the
file. While editing, a model is often broken on purpose for a moment (a node deleted before its
replacement is wired in), so the editor needs *all* the problems, each tied to the node it is
about, to list them in the Problems panel and mark the nodes on the canvas. The same checks, per
node, in this order:

1. structure: required inputs left unconnected, undeclared domains, tensors produced twice,
   inputs nobody produces, nodes out of topological order, graph outputs nobody produces;
2. the whole model against `onnx.checker`, and when that (or 1) fails, each node against its op
   schema (`onnx.checker.check_node`: input counts, attribute types) to name the node;
3. strict shape and type inference, whose errors name the node they come from (errors that only
   echo an upstream failure, "input 0 expected to have type but instead is null", are dropped
   when a root cause is listed).

`refresh(graph)` re-infers the shapes the views show and returns the problems; call it after
every applied edit. `save_checked` writes a model only when it is valid or the caller says so.
"""
from __future__ import annotations

import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir

from ..errors import InvalidModelError
from .graph import NODE_ID as _ID
from .graph import Graph
from .onnx_io import KNOWN_DOMAINS, _without_external_data, save_model

__all__ = ["Problem", "PreparedCheck", "check", "prepare", "refresh", "problems_by_node", "save_checked"]

logger = logging.getLogger(__name__)

_TWO_GB = 2**31 - 1
_INFERENCE_LINE = re.compile(r"\(op_type:(?P<op>[^,]*), node name: (?P<name>[^)]*)\): (?P<msg>.*)")
_ECHO = "expected to have type but instead is null"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the model. `node_id` is None for model-level problems."""

    subject: str  # "Conv 'conv1'", "graph output 'y'", "the model"
    reason: str  # lower-case clause, no final period
    node_id: int | None = None
    tensor: str = ""

    @property
    def sentence(self) -> str:
        text = f"{self.subject} {self.reason}"
        return text[0].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else ".")

    def __str__(self) -> str:
        return self.sentence


def _label(n: ir.Node) -> str:
    return f"{n.op_type} '{n.name}'" if n.name else f"{n.op_type} #{n.meta.get(_ID, '?')}"


def _clean(msg: str) -> str:
    msg = re.sub(r"\[[A-Za-z]+Error\]\s*", "", msg.strip())
    msg = msg.splitlines()[0].strip() if msg else msg
    return msg.rstrip(".")


def _structure(graph: Graph) -> list[Problem]:
    g = graph.model.graph
    out: list[Problem] = []
    declared = set(graph.model.opset_imports)
    function_domains = {f.domain for f in graph.model.functions.values()}
    available = {v.name for v in g.inputs} | set(g.initializers.keys())
    producer_of: dict[str, ir.Node] = {}
    position = {id(n): i for i, n in enumerate(g)}
    for n in g:
        dom = n.domain or ""
        if dom not in declared and not (dom == "" and "ai.onnx" in declared) and dom not in function_domains:
            out.append(Problem(_label(n), f"uses the domain '{dom}', which the model does not import", n.meta.get(_ID)))
        for v in n.outputs:
            if not v.name:
                continue
            if v.name in producer_of or v.name in available:
                out.append(Problem(_label(n), f"produces tensor '{v.name}', which something else already provides", n.meta.get(_ID), v.name))
            else:
                producer_of[v.name] = n
    opsets = graph.opset_imports
    for n in g:
        spec = _spec(opsets, n)
        if spec is None:
            continue
        for k, formal in enumerate(spec.inputs):
            if formal.optional or formal.variadic:
                continue
            if k >= len(n.inputs) or n.inputs[k] is None:
                out.append(Problem(_label(n), f"has nothing connected to its required input {formal.name} (input {k})", n.meta.get(_ID)))
    for i, n in enumerate(g):
        for k, v in enumerate(n.inputs):
            if v is None or not v.name or v.name in available:
                continue
            prod = producer_of.get(v.name)
            if prod is None:
                out.append(Problem(_label(n), f"reads tensor '{v.name}' (input {k}), which no node, input or initializer provides", n.meta.get(_ID), v.name))
            elif position[id(prod)] >= i:
                out.append(Problem(_label(n), f"reads tensor '{v.name}' before {_label(prod)} computes it (a cycle or out-of-order nodes)", n.meta.get(_ID), v.name))
    seen_outputs: set[str] = set()
    for v in g.outputs:
        if v.name in seen_outputs:
            out.append(Problem(f"graph output '{v.name}'", "is listed twice", None, v.name))
        seen_outputs.add(v.name)
        if v.name not in available and v.name not in producer_of:
            out.append(Problem(f"graph output '{v.name}'", "is not produced by any node", None, v.name))
        elif v.type is None:
            out.append(Problem(f"graph output '{v.name}'", "has no declared type", None, v.name))
    if not g.outputs:
        out.append(Problem("the model", "has no graph outputs"))
    return out


def _spec(opsets: dict[str, int], n: ir.Node):
    """The op's schema at the model's opset. Called per node: the import is looked up in
    sys.modules (an `import` statement per call goes through PySide's import hook in the GUI:
    ~10,000 of them were ~0.1 s of a big model's check)."""
    op_spec = _op_spec()
    domain = n.domain or ""
    version = opsets.get(domain, opsets.get("ai.onnx") if domain == "" else None)
    return op_spec(n.op_type, domain, int(version)) if version is not None else None


def _op_spec():
    mod = sys.modules.get(__package__ + ".edits")
    if mod is None:
        from . import edits as mod  # edits imports this module: not at the top
    return mod.op_spec


def _checker_context(proto: onnx.ModelProto):
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = proto.ir_version
    ctx.opset_imports = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
    return ctx


@dataclass(frozen=True)
class _NodeRef:
    """What a message needs to know about a node, taken on the Graph's thread."""

    label: str
    node_id: int | None
    domain: str
    name: str


def _nodes_against_schemas(nodes: list[_NodeRef], proto: onnx.ModelProto, flagged: set) -> list[Problem]:
    out: list[Problem] = []
    ctx = _checker_context(proto)
    lex = onnx.checker.C.LexicalScopeContext()
    for n, np_ in zip(nodes, proto.graph.node):
        if n.domain not in KNOWN_DOMAINS or n.node_id in flagged:
            continue  # custom ops: nothing to check them against; flagged ones: said already
        try:
            onnx.checker.C.check_node(np_.SerializeToString(), ctx, lex)
        except onnx.checker.ValidationError as e:
            out.append(Problem(n.label, f"does not fit its op schema: {_clean(str(e))}", n.node_id))
    return out


def _whole_model(proto: onnx.ModelProto) -> list[Problem]:
    """onnx.checker on the whole model (the structural half of onnx_io.validate_graph is
    `_structure`, which names nodes; this reuses the proto already serialized for the rest)."""
    from onnx.external_data_helper import _get_all_tensors

    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _get_all_tensors(proto)):
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        proto = _without_external_data(copy)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        return [Problem("the model", f"fails ONNX validation: {_clean(str(e))}")]
    except Exception as e:  # noqa: BLE001
        return [Problem("the model", f"cannot be checked: {_clean(str(e))}")]
    return []


def _inference(nodes: list[_NodeRef], proto: onnx.ModelProto) -> list[Problem]:
    try:
        onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
        return []
    except Exception as e:  # noqa: BLE001 - inference raises several types; the text is what counts
        text = str(e)
    by_name = {n.name: n for n in nodes if n.name}
    found: list[Problem] = []
    for m in _INFERENCE_LINE.finditer(text):
        node = by_name.get(m.group("name").strip())
        subject = node.label if node is not None else f"{m.group('op')} node"
        found.append(Problem(subject, f"fails shape inference: {_clean(m.group('msg'))}", node.node_id if node else None))
    roots = [p for p in found if _ECHO not in p.reason]
    if roots:
        return roots
    if found:
        return found[:1]
    return [Problem("the model", f"fails shape inference: {_clean(text)}")]


@dataclass
class PreparedCheck:
    """A check split in two: `prepare` reads the Graph (on the thread that owns it, fast: the
    structural checks and one serialization); `finish` runs the ONNX checker and strict shape
    inference on the serialized copy only, so a GUI can run it on a worker thread."""

    problems: list[Problem]
    proto: onnx.ModelProto | None
    nodes: list[_NodeRef]
    revision: int

    def finish(self) -> list[Problem]:
        problems, proto = list(self.problems), self.proto
        if proto is None:
            return problems
        flagged = {p.node_id for p in problems if p.node_id is not None}
        if problems:
            return problems + _nodes_against_schemas(self.nodes, proto, flagged)
        whole = _whole_model(proto)
        if whole:
            return _nodes_against_schemas(self.nodes, proto, flagged) or whole
        return _inference(self.nodes, proto)


def prepare(graph: Graph) -> PreparedCheck:
    """The Graph-reading half of `check` (see PreparedCheck)."""
    problems = _structure(graph)
    nodes = [_NodeRef(_label(n), n.meta.get(_ID), n.domain or "", n.name or "") for n in graph.model.graph]
    try:
        proto = graph.to_proto()
    except Exception as e:  # noqa: BLE001 - the IR can hold states protobuf cannot
        return PreparedCheck(problems + [Problem("the model", f"cannot be serialized: {_clean(str(e))}")], None, nodes, graph.revision)
    if proto.ByteSize() >= _TWO_GB:
        proto = None  # the checkers cannot take it in memory; structure is what we know
    return PreparedCheck(problems, proto, nodes, graph.revision)


def check(graph: Graph) -> list[Problem]:
    """Every problem found, structural ones first; [] for a valid model.

    The per-node schema check serializes each node, so on a model that is otherwise fine it
    runs only when the whole-model checker (one call) fails, to say which node it meant."""
    return prepare(graph).finish()


def refresh(graph: Graph) -> list[Problem]:
    """Re-infer the shapes the views show, then check: call after each applied edit."""
    graph.infer_shapes()
    return check(graph)


def problems_by_node(problems: list[Problem]) -> dict[int, list[Problem]]:
    out: dict[int, list[Problem]] = {}
    for p in problems:
        if p.node_id is not None:
            out.setdefault(p.node_id, []).append(p)
    return out


def save_checked(graph: Graph, path: str | os.PathLike, *, allow_invalid: bool = False) -> list[Problem]:
    """Save atomically (core.save_model) after checking; an invalid model is refused with its
    first problem unless `allow_invalid`. Returns the problems the saved model has."""
    problems = check(graph)
    if problems and not allow_invalid:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InvalidModelError(f"Not saving {Path(path).name}: {problems[0].sentence.rstrip('.')}{more}.")
    save_model(graph, path)
    return problems
