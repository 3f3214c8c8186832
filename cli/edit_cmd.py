"""`edit MODEL -o OUT [EDIT ...]`: the headless twin of the GUI's editing.

Edits are applied in the order given, each through `core.model.history.History` (the same
`core.model.edits` commands the GUI's undo stack runs), then the model is checked
(`core.model.validation.check`) and written atomically. Nodes are named by their name, or `#ID` for
unnamed ones. A refused edit stops with its sentence (exit 2) and nothing is written; a model
that fails validation is not written unless `--allow-invalid`; writing over MODEL itself needs
`--overwrite` (the GUI asks the same question).

`--emit-python FILE.py` writes the same edits as a script over onnx-ir (core.rewrite.as_python:
`python FILE.py IN.onnx OUT.onnx` turns MODEL into the edited model, byte for byte, without the
workbench); arrays too large to embed go beside it as `.npy` files. With it, `-o` is optional.

    mlcwb edit m.onnx -o out.onnx --delete-reconnect relu1 --set conv1 strides=2,2 \\
        --insert "LeakyRelu(gap_out) after=gap_out alpha=0.2" --input-shape input N,3,32,32
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

HELP = "edit a model (delete, insert, connect, attributes, renames, outputs, input shapes, weights) and save it"


class _Ordered(argparse.Action):
    """Collect every edit option into one list, in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        ops = getattr(namespace, "ops", None) or []
        ops.append((self.dest, values if isinstance(values, list) else [values]))
        namespace.ops = ops


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", help="where to write the edited model (optional with --emit-python)")
    p.add_argument("--emit-python", metavar="FILE.py", help="write the edits as a Python script over onnx-ir (runs without the workbench)")
    p.add_argument("--overwrite", action="store_true", help="allow OUTPUT to be MODEL itself")
    p.add_argument("--allow-invalid", action="store_true", help="write the model even when it fails validation")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    g = p.add_argument_group("edits (applied in the order given; repeat any of them)")
    e = dict(action=_Ordered, default=argparse.SUPPRESS)
    g.add_argument("--delete", metavar="NODE", **e, help="delete a node (its readers are left unconnected)")
    g.add_argument("--delete-reconnect", metavar="NODE", **e, help="delete a node; its readers read its matching input")
    g.add_argument("--insert", metavar="SPEC", **e,
                   help="'OP(IN1,IN2) [after=TENSOR] [name=NAME] [domain=D] [ATTR=VALUE ...]'")
    g.add_argument("--set", nargs=2, metavar=("NODE", "ATTR=VALUE"), **e, help="set an attribute (lists: 1,1)")
    g.add_argument("--remove-attr", nargs=2, metavar=("NODE", "ATTR"), **e, help="remove an attribute")
    g.add_argument("--connect", nargs=3, metavar=("NODE", "INDEX", "TENSOR"), **e, help="feed TENSOR into input INDEX")
    g.add_argument("--disconnect", nargs=2, metavar=("NODE", "INDEX"), **e, help="disconnect input INDEX")
    g.add_argument("--rename-node", nargs=2, metavar=("NODE", "NEW"), **e, help="rename a node")
    g.add_argument("--rename-tensor", nargs=2, metavar=("TENSOR", "NEW"), **e, help="rename a tensor everywhere")
    g.add_argument("--add-output", metavar="TENSOR", **e, help="make a tensor a graph output")
    g.add_argument("--remove-output", metavar="TENSOR", **e, help="stop exposing a graph output")
    g.add_argument("--input-shape", nargs=2, metavar=("INPUT", "DIMS"), **e, help="e.g. input N,3,224,224 ('?' unknown)")
    g.add_argument("--replace-initializer", nargs=2, metavar=("NAME", "FILE.npy"), **e, help="replace a weight's data")


def _node_id(graph, ref: str) -> int:
    from core import EditError

    import re

    if ref.startswith("#") and ref[1:].isdigit() and graph.has_node(int(ref[1:])):
        return int(ref[1:])
    n = graph.find_node(ref)
    # "Relu #10" / "Relu#10": how messages and the app name an unnamed node
    m = re.fullmatch(r"\s*([A-Za-z_][\w.]*)\s*#(\d+)\s*", ref) if n is None else None
    if m and graph.has_node(int(m.group(2))):
        found = graph.node(int(m.group(2))).op_type
        if found != m.group(1):
            raise EditError(f"Node #{m.group(2)} is a {found}, not a {m.group(1)}.")
        return int(m.group(2))
    if n is None:
        raise EditError(f"The model has no node named '{ref}'.")
    return n.id


def _index(text: str) -> int:
    from core import EditError

    if not text.isdigit():
        raise EditError(f"'{text}' is not an input index (0, 1, ...).")
    return int(text)


def _attr_value(graph, node_id: int, name: str, text: str):
    from core.model.edits import _node_spec, parse_attribute_text

    n = graph.node(node_id).ir
    spec = _node_spec(graph, n)
    if spec is not None and name in spec.attributes:
        a = spec.attributes[name]
        return parse_attribute_text(text, a.type, name, like=a.default)
    if name in n.attributes:
        return parse_attribute_text(text, n.attributes[name].type, name)
    return text  # unknown attribute: SetAttribute refuses it with the op's attribute list


def _insert(graph, spec_text: str):
    from core import EditError
    from core.model.edits import InsertNode, op_spec, parse_attribute_text

    m = re.fullmatch(r"\s*([A-Za-z_][\w.]*)\s*\(([^)]*)\)\s*(.*)", spec_text)
    if m is None:
        raise EditError(f"'{spec_text}' is not an insert spec; write it as 'OP(IN1,IN2) [after=TENSOR] [ATTR=VALUE ...]'.")
    op, ins, rest = m.groups()
    inputs = [t.strip() for t in ins.split(",")] if ins.strip() else []
    opts: dict[str, str] = {}
    for tok in rest.split():
        if "=" not in tok:
            raise EditError(f"'{tok}' in '{spec_text}' is not KEY=VALUE.")
        k, v = tok.split("=", 1)
        opts[k] = v
    after, name, domain = opts.pop("after", None), opts.pop("name", None), opts.pop("domain", "")
    version = graph.opset_imports.get(domain, graph.opset_imports.get("ai.onnx") if domain == "" else None)
    spec = op_spec(op, domain, int(version)) if version is not None else None
    attrs = {}
    for k, v in opts.items():
        a = spec.attributes.get(k) if spec is not None else None
        attrs[k] = parse_attribute_text(v, a.type, k, like=a.default) if a is not None else v
    return InsertNode(graph, op, inputs, attrs, domain=domain, name=name, insert_on=after)


def _make_edit(graph, kind: str, vals: list[str]):
    from core import EditError
    from core.model.edits import (
        AddGraphOutput,
        DeleteNode,
        RemoveAttribute,
        RemoveGraphOutput,
        RenameNode,
        RenameTensor,
        ReplaceInitializer,
        SetAttribute,
        SetInput,
        SetInputShape,
        parse_shape_text,
    )

    if kind == "delete":
        return DeleteNode(graph, _node_id(graph, vals[0]))
    if kind == "delete_reconnect":
        return DeleteNode(graph, _node_id(graph, vals[0]), bridge=True)
    if kind == "insert":
        return _insert(graph, vals[0])
    if kind == "set":
        node, assign = vals
        if "=" not in assign:
            raise EditError(f"'{assign}' is not ATTR=VALUE.")
        name, text = assign.split("=", 1)
        nid = _node_id(graph, node)
        return SetAttribute(graph, nid, name, _attr_value(graph, nid, name, text))
    if kind == "remove_attr":
        return RemoveAttribute(graph, _node_id(graph, vals[0]), vals[1])
    if kind == "connect":
        return SetInput(graph, _node_id(graph, vals[0]), _index(vals[1]), vals[2])
    if kind == "disconnect":
        return SetInput(graph, _node_id(graph, vals[0]), _index(vals[1]), None)
    if kind == "rename_node":
        return RenameNode(graph, _node_id(graph, vals[0]), vals[1])
    if kind == "rename_tensor":
        return RenameTensor(graph, vals[0], vals[1])
    if kind == "add_output":
        return AddGraphOutput(graph, vals[0])
    if kind == "remove_output":
        return RemoveGraphOutput(graph, vals[0])
    if kind == "input_shape":
        return SetInputShape(graph, vals[0], parse_shape_text(vals[1]))
    if kind == "replace_initializer":
        return ReplaceInitializer(graph, vals[0], vals[1])
    raise EditError(f"unknown edit '{kind}'.")


def run(args) -> int:
    from core import WorkbenchError, load_model
    from core.model.history import History
    from core.model.validation import refresh, save_checked

    src = Path(args.model)
    out = Path(args.output) if args.output else None
    emit = Path(args.emit_python) if args.emit_python else None
    if out is None and emit is None:
        raise WorkbenchError("edit needs -o OUT.onnx, --emit-python FILE.py or both.")
    if out is not None and out.resolve() == src.resolve() and not args.overwrite:
        raise WorkbenchError(f"Refusing to overwrite {src} (the model being edited); pass --overwrite or choose another -o.")
    if emit is not None and emit.resolve() == src.resolve():
        raise WorkbenchError(f"Refusing to write the script over {src}, the model being edited; choose another --emit-python.")
    graph = load_model(src)
    nodes_before = len(graph)
    script = None
    if emit is not None:
        from core.rewrite.as_python import PythonScript

        script = PythonScript(graph)
    history = script.history if script is not None else History(graph)
    applied = []
    for kind, vals in getattr(args, "ops", []):
        edit = _make_edit(graph, kind, vals)
        try:
            history.push(edit)
            refresh(graph)
            if script is not None:
                script.record(edit.description)  # NotExpressible names the edit
        except WorkbenchError as e:
            where = "" if script is not None and isinstance(e, _not_expressible()) else f" (edit {len(applied) + 1}: {edit.description})"
            raise type(e)(f"{e.message.rstrip('.')}{where}; nothing was written.") from None
        applied.append(edit.description)
    problems = save_checked(graph, out, allow_invalid=args.allow_invalid) if out is not None else []
    if script is not None:
        _write_script(script, emit, src.name)
    if args.json:
        print(json.dumps({
            "model": str(src), "output": str(out) if out is not None else None, "edits": applied, "nodes_before": nodes_before,
            "nodes_after": len(graph), "problems": [p.sentence for p in problems],
            "python": str(emit) if emit is not None else None,
            "python_arrays": sorted(script.array_files) if script is not None else [],
        }))
    else:
        for d in applied:
            print(f"  {d}")
        for p in problems:
            print(f"  problem: {p.sentence}")
        wrote = [str(p) for p in (out, emit) if p is not None]
        print(f"{len(applied)} edit{'s' if len(applied) != 1 else ''} applied, {nodes_before} -> {len(graph)} nodes; wrote {' and '.join(wrote)}")
    return 0


def _not_expressible():
    from core.rewrite.as_python import NotExpressible

    return NotExpressible


def _write_script(script, path: Path, source_name: str) -> None:
    """The script, and the .npy files it reads beside it (each written atomically)."""
    import io

    import numpy as np

    from core.files import atomic_write

    for name, array in script.array_files.items():
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        atomic_write(path.parent / name, buf.getvalue())
    atomic_write(path, script.text(source_name).encode())
