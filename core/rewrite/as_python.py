"""The edit history as code: a script over onnx-ir that turns the original model into the edited one.

    script = PythonScript(graph)              # graph: loaded from the file the edits start from
    script.apply(edit)                        # applies the edit (one History step) and writes it down
    text = script.text(source_name="m.onnx")  # def apply(model) + a __main__ reading IN, writing OUT

or, from a journal (the GUI's undo stack as data, core.model.journal): `from_journal(path, entries,
blobs, rules)`.

Each edit becomes one block of the script's `apply`, headed by its description as the History
panel shows it. The block is written from what the edit *did* (the model before and after it), not
from what kind of edit it was, so every edit kind, rewrites included, is written the same way:
nodes removed, nodes added with their attributes and wiring, inputs rewired, attributes, names,
types and weights changed, graph inputs, outputs and initializers, metadata. The workbench's own
rules run on its own engine (core.rewrite.rule), so a rewrite is written as its effect in plain
onnx-ir, which needs nothing but onnx-ir, onnx and numpy. Nodes are found by name where the name
is unique, else by their position in the graph at that point (`g.node(11)  # Conv #11`).

Exactness is checked, not hoped for: each block is executed on a copy of the model as the script
would see it, and the result is compared with the workbench's model, serialized byte for byte. Node
order is matched too (a `g.sort()` or an explicit order where an edit re-sorted the graph). An edit
whose block does not give the same bytes is refused with `NotExpressible` naming it: a script is
handed out only when it reproduces the edited model exactly.
"""
from __future__ import annotations

import itertools
import keyword
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx_ir as ir

from ..model.graph import NODE_ID, Graph
from ..model.history import Edit, History
from . import engine  # noqa: F401 - registers the journal kind of rewrites (replayed by from_journal)
from .python_source import HELPERS as _HELPERS
from .python_source import SAVE as _SAVE
from .python_source import ArrayStore, NotExpressible, attr_key, attr_source, dims, literal, shape_source, tensor_source, type_source

__all__ = ["PythonScript", "NotExpressible", "from_journal"]

logger = logging.getLogger(__name__)

_NODE = "\x00n"  # stands for a node's variable in node_changes' lines (repr never writes a NUL)
_TOKEN = "wb.as_python"  # a value's identity across edits and the copies rewrites make (meta is cloned)


# ---- what a model looks like at one moment ---------------------------------------------------------
@dataclass(frozen=True)
class _ValueState:
    name: str
    type: object
    shape: object
    const: object  # the tensor object (edits replace tensors, never change them in place)
    doc: str | None
    props: tuple


@dataclass(frozen=True)
class _NodeState:
    id: int
    op: tuple[str, str, str]  # domain, op_type, overload
    name: str | None
    doc: str | None
    inputs: tuple
    outputs: tuple
    attrs: tuple  # (name, Attr) in order
    props: tuple


class _Snapshot:
    """The parts of a model a script can change, with values named by token (not by name, which
    renames change, nor by object, which a rewrite's copy changes)."""

    def __init__(self, model: ir.Model, tokens: itertools.count, value_info: set[str] | None):
        g = model.graph
        self.values: dict[int, _ValueState] = {}
        self.objects: dict[int, ir.Value] = {}

        def tok(v: ir.Value | None):
            if v is None:
                return None
            t = v.meta.get(_TOKEN)
            if t is None:
                t = v.meta[_TOKEN] = next(tokens)
            if t not in self.values:
                self.objects[t] = v
                self.values[t] = _ValueState(v.name, v.type, dims(v.shape), v.const_value, v.doc_string,
                                             tuple(v.metadata_props.items()))
            return t

        self.inputs = [tok(v) for v in g.inputs]
        self.initializers = [tok(v) for v in g.initializers.values()]
        self.nodes: list[_NodeState] = []
        for n in g:
            self.nodes.append(_NodeState(
                n.meta.get(NODE_ID, -id(n)), (n.domain, n.op_type, n.overload), n.name, n.doc_string,
                tuple(tok(v) for v in n.inputs), tuple(tok(v) for v in n.outputs),
                tuple(n.attributes.items()), tuple(n.metadata_props.items())))
        self.outputs = [tok(v) for v in g.outputs]
        self.by_id = {s.id: s for s in self.nodes}
        self.producer = {t: (s, i) for s in self.nodes for i, t in enumerate(s.outputs)}
        self.model = {k: getattr(model, k) for k in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string")}
        self.graph = {k: getattr(g, k) for k in ("name", "doc_string")}
        self.opsets = dict(model.opset_imports)
        self.metadata = dict(model.metadata_props)
        self.graph_metadata = dict(g.metadata_props)
        self.functions = {k: id(f) for k, f in model.functions.items()}
        self.value_info = None if value_info is None else set(value_info)
        names = [v.name for v in self.values.values()]
        self.unique_values = {n for n, c in _counts(names).items() if c == 1 and n}
        self.unique_nodes = {n for n, c in _counts([s.name for s in self.nodes]).items() if c == 1 and n}


def _counts(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def _label(s: _NodeState) -> str:
    return f"{s.op[1]} '{s.name}'" if s.name else s.op[1]


# ---- one edit as a block of code -------------------------------------------------------------------
class _Block:
    """The code that turns snapshot `b` into snapshot `a` (see the module docstring)."""

    def __init__(self, b: _Snapshot, a: _Snapshot, store: ArrayStore):
        self.b, self.a, self.store = b, a, store
        self.lines: list[str] = []
        self.taken = {"g", "v", "model", "ir", "np", "onnx", "values", "embedded", "reorder", "reorder_initializers", "rename_initializer", "HERE"}
        self.node_vars: dict[int, str] = {}  # id of a node after the edit -> variable of the new node
        self.old_vars: dict[int, str] = {}  # id of a node before the edit -> variable bound to it
        self.expr: dict[int, str] = {}  # token -> expression in the script (after this block's creations)

    def var(self, name: str | None, fallback: str) -> str:
        s = re.sub(r"\W", "_", name or "").strip("_") or fallback
        if s[0].isdigit() or keyword.iskeyword(s):
            s = f"{fallback}_{s}"
        k, base = 2, s
        while s in self.taken:
            s, k = f"{base}_{k}", k + 1
        self.taken.add(s)
        return s

    def old_value(self, t: int, what: str) -> str:
        name = self.b.values[t].name
        if name not in self.b.unique_values:
            raise NotExpressible(f"{what} is the tensor '{name}', whose name does not find one tensor")
        return f"v[{name!r}]"

    def old_node(self, s: _NodeState) -> str:
        """A variable bound (at the top of the block) to a node of the graph before the edit."""
        if s.id in self.old_vars:
            return self.old_vars[s.id]
        name = self.var(s.name, s.op[1].lower())
        if s.name in self.b.unique_nodes:
            self.head.append(f"{name} = g.node({s.name!r})")
        else:
            index = self.b.nodes.index(s)
            self.head.append(f"{name} = g.node({index})  # {s.op[1]} #{index}{'' if not s.name else f' (named {s.name!r}, not uniquely)'}")
        self.old_vars[s.id] = name
        return name

    def write(self) -> list[str]:
        b, a = self.b, self.a
        self.head: list[str] = []
        body: list[str] = []
        kept = {i for i, s in a.by_id.items() if i in b.by_id and b.by_id[i].op == s.op and b.by_id[i].outputs == s.outputs}
        removed = [s for s in b.nodes if s.id not in kept]
        added = [s for s in a.nodes if s.id not in kept]
        made_by_new = {t: (s, i) for s in added for i, t in enumerate(s.outputs)}
        for t, (s, _i) in made_by_new.items():
            old = b.producer.get(t)
            if old is not None and old[0].id in kept:
                raise NotExpressible(f"the tensor '{a.values[t].name}' moves from {_label(old[0])} to {_label(s)}")
        for s in added:
            if any(isinstance(x.value, (ir.Graph, list)) and x.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for _k, x in s.attrs):
                raise NotExpressible(f"the new {_label(s)} holds a subgraph, which the script does not write")
        if a.functions != b.functions:
            raise NotExpressible("it adds or changes a local function of the model, which the script does not write")

        # new values that no node makes (initializers, graph inputs)
        for t in a.values:
            if t in b.values or t in made_by_new:
                continue
            st = a.values[t]
            var = self.var(st.name, "value")
            args = [f"name={st.name!r}"]
            if st.type is not None:
                args.append(f"type={type_source(st.type)}")
            if st.shape is not None:
                args.append(f"shape={_shape_expr(st.shape)}")
            if st.const is not None:
                args.append(f"const_value={tensor_source(st.const, self.store, f'the tensor {st.name!r}')}")
            if st.doc:
                args.append(f"doc_string={st.doc!r}")
            if st.props:
                args.append(f"metadata_props={dict(st.props)!r}")
            body.append(f"{var} = ir.Value({', '.join(args)})")
            self.expr[t] = var

        # new nodes, in the order they will stand; their outputs are new values
        later: list[str] = []
        for s in added:
            var = self.var(s.name, s.op[1].lower())
            self.node_vars[s.id] = var
            for i, t in enumerate(s.outputs):
                self.expr[t] = f"{var}.outputs[{i}]"
        made = set()
        for s in added:
            var = self.node_vars[s.id]
            ins = []
            for k, t in enumerate(s.inputs):
                if t in made_by_new and made_by_new[t][0].id not in made:
                    later.append(f"{var}.replace_input_with({k}, {self.expr[t]})")
                    ins.append("None")
                else:
                    ins.append(self.value_expr(t, f"input {k} of {_label(s)}"))
            outs = [self.new_output(a.values[t]) for t in s.outputs]
            attrs = [attr_source(x, self.store, _label(s)) for _k, x in s.attrs]
            args = [repr(s.op[0]), repr(s.op[1]), f"[{', '.join(ins)}]"]
            if attrs:
                args.append(f"[{', '.join(attrs)}]")
            args.append(f"outputs=[{', '.join(outs)}]")
            if s.op[2]:
                args.append(f"overload={s.op[2]!r}")
            if s.name is not None:
                args.append(f"name={s.name!r}")
            if s.doc:
                args.append(f"doc_string={s.doc!r}")
            if s.props:
                args.append(f"metadata_props={dict(s.props)!r}")
            body.append(f"{var} = ir.Node({', '.join(args)})")
            made.add(s.id)
        body += later

        # nodes that stay: inputs, name, attributes
        for s in a.nodes:
            if s.id not in kept:
                continue
            old = b.by_id[s.id]
            changes = self.node_changes(old, s)
            if changes:
                var = self.old_node(old)
                body += [c.replace(_NODE, var) for c in changes]

        # graph outputs and inputs
        for field in ("outputs", "inputs"):
            before = [self.value_expr(t, f"a graph {field[:-1]}", old=True) for t in getattr(b, field)]
            after = [self.value_expr(t, f"a graph {field[:-1]}") for t in getattr(a, field)]
            if before == after:
                continue
            if len(before) == len(after):
                body += [f"g.{field}[{k}] = {y}" for k, (x, y) in enumerate(zip(before, after)) if x != y]
            else:
                body += [f"g.{field}.clear()", f"g.{field}.extend([{', '.join(after)}])"]

        # nodes that go (nothing reads them any more), nodes that come (placed as they stand)
        if removed:
            body.append(f"g.remove([{', '.join(self.old_node(s) for s in removed)}], safe=True)")
        prev = None
        for s in a.nodes:
            if s.id not in kept:
                if prev is None:  # the first node: what stands in the graph now is the kept nodes
                    body.append(f"g.insert_before(g[0], {self.node_vars[s.id]})" if kept else f"g.append({self.node_vars[s.id]})")
                else:
                    anchor = self.node_vars[prev.id] if prev.id not in kept else self.old_node(b.by_id[prev.id])
                    body.append(f"g.insert_after({anchor}, {self.node_vars[s.id]})")
            prev = s

        # initializers
        b_init, a_init = set(b.initializers), set(a.initializers)
        for t in b.initializers:
            if t not in a_init:
                body.append(f"g.initializers.pop({b.values[t].name!r})")
        for t in a.initializers:
            if t not in b_init:
                body.append(f"g.register_initializer({self.value_expr(t, 'an initializer')})")

        # tensors that stay: names, types, shapes, data
        for t, st in a.values.items():
            old = b.values.get(t)
            if old is None or t in made_by_new or old == st:
                continue
            what = f"the tensor '{old.name}'"
            x = self.old_value(t, what)
            if old.const is not st.const:
                body.append(f"{x}.const_value = {'None' if st.const is None else tensor_source(st.const, self.store, what)}")
            if old.type != st.type:
                body.append(f"{x}.type = {type_source(st.type)}")
            if old.shape != st.shape:
                body.append(f"{x}.shape = {_shape_expr(st.shape)}")
            if old.doc != st.doc:
                body.append(f"{x}.doc_string = {st.doc!r}")
            if old.props != st.props:
                body.append(f"{x}.metadata_props.clear()")
                body += [f"{x}.metadata_props[{k!r}] = {w!r}" for k, w in st.props]
            if old.name != st.name:
                if t in b_init and t in a_init:  # onnx-ir would list a renamed initializer last
                    body.append(f"rename_initializer(g, {old.name!r}, {st.name!r})")
                else:
                    body.append(f"{x}.name = {st.name!r}")

        # model and graph fields, opsets, metadata
        for k, w in a.model.items():
            if b.model[k] != w:
                body.append(f"model.{k} = {literal(w)}")
        for k, w in a.graph.items():
            if b.graph[k] != w:
                body.append(f"g.{k} = {literal(w)}")
        body += _dict_changes("model.opset_imports", b.opsets, a.opsets)
        body += _dict_changes("model.metadata_props", b.metadata, a.metadata)
        body += _dict_changes("g.metadata_props", b.graph_metadata, a.graph_metadata)
        uses_values = any(re.search(r"\bv\[", line) for line in self.head + body)
        return (["v = values(g)"] if uses_values else []) + self.head + body

    def value_expr(self, t: int | None, what: str, old: bool = False) -> str:
        if t is None:
            return "None"
        if not old and t in self.expr:
            return self.expr[t]
        return self.old_value(t, what)

    def new_output(self, st: _ValueState) -> str:
        args = [f"name={st.name!r}"]
        if st.type is not None:
            args.append(f"type={type_source(st.type)}")
        if st.shape is not None:
            args.append(f"shape={_shape_expr(st.shape)}")
        if st.const is not None:
            raise NotExpressible(f"the new tensor '{st.name}' is both computed and constant")
        if st.doc:
            args.append(f"doc_string={st.doc!r}")
        if st.props:
            args.append(f"metadata_props={dict(st.props)!r}")
        return f"ir.Value({', '.join(args)})"

    def node_changes(self, old: _NodeState, new: _NodeState) -> list[str]:
        """Lines (with `_NODE` for the node's variable) changing `old` into `new`."""
        out: list[str] = []
        label = _label(old)
        before = [self.value_expr(t, f"input {k} of {label}", old=True) for k, t in enumerate(old.inputs)]
        after = [self.value_expr(t, f"input {k} of {label}") for k, t in enumerate(new.inputs)]
        if before != after:
            if len(after) > len(before):
                out.append(f"{_NODE}.resize_inputs({len(after)})")
            for k, x in enumerate(after):
                if k >= len(before) or before[k] != x:
                    out.append(f"{_NODE}.replace_input_with({k}, {x})")
            if len(after) < len(before):
                out += [f"{_NODE}.replace_input_with({k}, None)" for k in range(len(after), len(before)) if before[k] != "None"]
                out.append(f"{_NODE}.resize_inputs({len(after)})")
        if old.attrs != new.attrs:
            out += self.attr_changes(old, new)
        if old.name != new.name:
            out.append(f"{_NODE}.name = {new.name!r}")
        if old.doc != new.doc:
            out.append(f"{_NODE}.doc_string = {new.doc!r}")
        if old.props != new.props:
            out += _dict_changes(f"{_NODE}.metadata_props", dict(old.props), dict(new.props))
        return out

    def attr_changes(self, old: _NodeState, new: _NodeState) -> list[str]:
        b = dict(old.attrs)
        a = dict(new.attrs)
        label = _label(new)
        out = []
        order = [k for k in b if k in a]  # what deleting and setting leaves, in dict order
        order += [k for k in a if k not in b]
        if order != list(a):  # an order only a rebuild gives
            out.append(f"{_NODE}.attributes.clear()")
            return out + [f"{_NODE}.attributes[{k!r}] = {attr_source(x, self.store, label)}" for k, x in new.attrs]
        for k in b:
            if k not in a:
                out.append(f"del {_NODE}.attributes[{k!r}]")
        for k, x in new.attrs:
            if k not in b or (b[k] is not x and attr_key(b[k]) != attr_key(x)):
                out.append(f"{_NODE}.attributes[{k!r}] = {attr_source(x, self.store, label)}")
        return out


def _shape_expr(d) -> str:
    plain, denotations = d
    return shape_source(ir.Shape(list(plain), denotations=list(denotations) if denotations else None))


def _dict_changes(target: str, b: dict, a: dict) -> list[str]:
    out = [f"del {target}[{k!r}]" for k in b if k not in a]
    out += [f"{target}[{k!r}] = {literal(w)}" for k, w in a.items() if b.get(k, object()) != w or k not in b]
    return out


# ---- the script -------------------------------------------------------------------------------------
class PythonScript:
    """Applies edits to `graph` and writes them down as one script (see the module docstring).

    `files=False` (the clipboard): arrays too large to embed are refused instead of being written
    as `.npy` files beside the script (`array_files`)."""

    def __init__(self, graph: Graph, *, files: bool = True, apply: Callable[[Edit], None] | None = None):
        self.graph = graph
        self.history = History(graph)
        self._apply = apply
        self.store = ArrayStore(files=files)
        self._tokens = itertools.count(1)
        self._snap = _Snapshot(graph.model, self._tokens, graph.value_info_names)
        self._declared = None if graph.value_info_names is None else set(graph.value_info_names)
        self._work = graph.model.clone()  # the model as the script sees it, block by block
        self.blocks: list[tuple[str, list[str]]] = []
        self.helpers: set[str] = set()
        self._ns: dict = {}
        exec(compile("import base64, io\nimport numpy as np\nimport onnx\nimport onnx_ir as ir\n"
                     + "\n".join(_HELPERS.values()) + "\n" + _SAVE, "<as_python>", "exec"), self._ns)
        if self._bytes(self._work) != graph.to_bytes():
            raise NotExpressible(f"the model {graph.path.name if graph.path else ''} does not survive a load with onnx-ir unchanged".replace("  ", " "))

    @property
    def array_files(self) -> dict[str, object]:
        """`.npy` files the script reads from its folder (name -> array)."""
        return dict(self.store.files)

    def apply(self, edit: Edit) -> None:
        """Apply `edit` as one step (History.push, then shape inference, as the GUI and the CLI do)
        and write its block. Raises the edit's EditError (nothing applied), or NotExpressible (the
        edit applied, the script cannot reproduce it)."""
        if self._apply is not None:
            self._apply(edit)
        else:
            self.history.push(edit)
            self.graph.infer_shapes()
        self.record(edit.description)

    def record(self, description: str) -> None:
        """Write down the change since the last record as the block `description`."""
        after = _Snapshot(self.graph.model, self._tokens, self.graph.value_info_names)
        where = f"edit {len(self.blocks) + 1} ({description})"
        try:
            block = _Block(self._snap, after, self.store)
            lines = block.write()
            lines += self._run(lines, after, where)
        except NotExpressible as e:
            raise NotExpressible(f"{where} cannot be written as Python: {e}.") from None
        self._snap = after
        used = "\n".join(lines)
        self.helpers.update(h for h in ("values", "reorder", "reorder_initializers", "rename_initializer") if re.search(rf"\b{h}\(", used))
        self.blocks.append((description, lines))

    def _bytes(self, model: ir.Model, declared: set[str] | None = None) -> bytes:
        proto = ir.to_proto(model)
        declared = self.graph.value_info_names if declared is None else declared
        if declared is not None:
            keep = [vi for vi in proto.graph.value_info if vi.name in declared]
            del proto.graph.value_info[:]
            proto.graph.value_info.extend(keep)
        return proto.SerializeToString(deterministic=True)

    def _exec(self, lines: Sequence[str], where: str) -> None:
        src = "def _block(model):\n    g = model.graph\n" + "".join(f"    {line}\n" for line in lines or ["pass"])
        try:
            ns = dict(self._ns)
            ns["HERE"] = Path(".")
            exec(compile(src, "<as_python block>", "exec"), ns)
            if self.store.files:
                import numpy as np

                ns["np"] = _NpyFromStore(np, self.store.files)
            ns["_block"](self._work)
        except Exception as e:  # noqa: BLE001 - a block that does not run is the generator's bug: refuse it
            logger.warning("the block for %s does not run: %s\n%s", where, e, src)
            raise NotExpressible(f"its code does not run ({type(e).__name__}: {e})") from None

    def _run(self, lines: list[str], after: _Snapshot, where: str) -> list[str]:
        """Run the block on the script's copy; return the lines that put nodes and initializers
        in the workbench's order; raise when the result is not the workbench's model."""
        self._exec(lines, where)
        extra: list[str] = []
        g = self._work.graph
        want = [_signature_of(s, after) for s in after.nodes]
        have = [_signature(n) for n in g]
        if have != want:
            g.sort()
            if [_signature(n) for n in g] == want:
                extra.append("g.sort()  # the edit re-sorted the graph topologically, as onnx-ir sorts")
            else:
                position = {sig: i for i, sig in enumerate(have)}
                if len(position) != len(have) or set(position) != set(want):
                    raise NotExpressible("its nodes do not come out as the workbench's")
                by_sig = {_signature(n): n for n in g}
                for n in list(g):  # take back the trial sort: the explicit order counts from `have`
                    g.remove(n)
                g.extend(by_sig[sig] for sig in have)
                extra.append(f"reorder(g, {[position[sig] for sig in want]})  # the edit re-sorted the graph")
                self._exec(extra[-1:], where)
        want_init = [after.values[t].name for t in after.initializers]
        if list(g.initializers) != want_init:
            extra.append(f"reorder_initializers(g, {want_init!r})")
            self._exec(extra[-1:], where)
        if self._bytes(self._work) != self.graph.to_bytes():
            raise NotExpressible("the code written for it does not give the workbench's model byte for byte")
        return extra

    def text(self, source_name: str = "model.onnx") -> str:
        """The script: `apply(model)` and a `__main__` that reads IN.onnx and writes OUT.onnx."""
        out = [f'"""Edits made in MLC Workbench to {source_name}, as code: apply(model) turns that model into the edited one.',
               "",
               "    python THIS_SCRIPT.py IN.onnx OUT.onnx",
               "",
               "Needs onnx, onnx-ir and numpy (not the workbench)."
               + (" Reads the .npy files named below from its own folder." if self.store.files else ""),
               "Nodes are found by name, or by their position in the graph at that step where the name is not unique.",
               '"""']
        out += (["import base64", "import io"] if self.store.uses_embedded else [])
        out += ["import sys"] + (["from pathlib import Path"] if self.store.files else []) + ["",
                "import numpy as np", "import onnx", "import onnx_ir as ir", ""]
        if self.store.files:
            out += ["HERE = Path(__file__).resolve().parent", ""]
        helpers = set(self.helpers) | ({"reorder_initializers"} if "rename_initializer" in self.helpers else set())
        helpers = [h for h in _HELPERS if h in helpers or (h == "embedded" and self.store.uses_embedded)]
        for h in helpers:
            out += ["", _HELPERS[h].rstrip("\n"), ""]
        out += ["", "def apply(model: ir.Model) -> None:", "    g = model.graph"]
        if not self.blocks:
            out.append("    # no edits")
        for i, (description, lines) in enumerate(self.blocks, 1):
            out += ["", f"    # {i}. {_one_line(description)}"] + [f"    {line}" for line in lines]
            if not lines:
                out.append("    pass  # it changed nothing a file keeps")
        start = self._declared or set()
        end = self.graph.value_info_names or set()
        out += ["", "", _SAVE.rstrip("\n"), "",
                "",
                'if __name__ == "__main__":',
                "    if len(sys.argv) != 3:",
                '        sys.exit(f"usage: python {sys.argv[0]} IN.onnx OUT.onnx")',
                "    model = ir.load(sys.argv[1])",
                "    declared = {vi.name for vi in onnx.load(sys.argv[1], load_external_data=False).graph.value_info}",
                "    apply(model)",
                f"    save(model, sys.argv[2], (declared - {_set_literal(start - end)}) | {_set_literal(end - start)})"]
        return "\n".join(out) + "\n"


def _set_literal(names: set[str]) -> str:
    return "set()" if not names else "{" + ", ".join(repr(n) for n in sorted(names)) + "}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _signature(n: ir.Node) -> tuple:
    return (n.domain, n.op_type, n.name, tuple(o.name for o in n.outputs))


def _signature_of(s: _NodeState, snap: _Snapshot) -> tuple:
    return (s.op[0], s.op[1], s.name, tuple(snap.values[t].name for t in s.outputs))


class _NpyFromStore:
    """numpy, except that np.load of a `.npy` file the script will write beside it reads the array
    from the store (the in-process check runs before any file is written)."""

    def __init__(self, np, files):
        self._np, self._files = np, files

    def __getattr__(self, name):
        return getattr(self._np, name)

    def load(self, path, *args, **kw):
        name = Path(str(path)).name
        if name in self._files:
            return self._files[name]
        return self._np.load(path, *args, **kw)


# ---- from a journal ---------------------------------------------------------------------------------
class _Refused(Exception):
    """Carries NotExpressible through core.model.journal.replay (which rewords WorkbenchErrors)."""


def from_journal(path: str | Path, entries: list[dict], blobs, rules: Callable | None = None, *, files: bool = False) -> PythonScript:
    """The script for journal `entries` (core.model.journal) applied to the model in `path`.
    Raises NotExpressible, or the journal's ReplayError when an entry does not replay."""
    from ..model import journal
    from ..model.onnx_io import load_model

    graph = load_model(path)
    script = PythonScript(graph, files=files)

    def push(edit: Edit) -> None:
        try:
            script.apply(edit)
        except NotExpressible as e:
            raise _Refused(e) from None

    try:
        journal.replay(graph, entries, blobs, push, {"rules": rules} if rules is not None else None)
    except _Refused as e:
        raise e.args[0] from None
    return script
