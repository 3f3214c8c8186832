"""Checks of an ONNX model as parsed protobuf, before (or without) building the onnx_ir model.

Everything here reads the `onnx.ModelProto` the file parsed into: the protobuf fields live in C
(upb), so walking 60,000 nodes here takes tens of milliseconds, where the same walk over the
onnx_ir objects costs a second to build first. `load_model` (core.model.onnx_io) runs these checks
and then builds the Graph; `inspect` (core.model.summary.summarize_file) runs the same checks and
summarizes the protobuf directly, so both refuse the same files with the same sentence.

No onnx_ir import here: importing it costs ~0.5 s (it imports sympy), which `inspect` skips.
"""
from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..errors import InvalidModelError, ModelLoadError

__all__ = ["ParsedModel", "check_structure", "check_text", "check_with_checker", "has_external_data", "parse_model", "parse_model_proto",
           "read_model_bytes", "read_model_proto", "start_checker", "truncated_by"]

logger = logging.getLogger(__name__)

_TWO_GB = 2**31 - 1


def read_model_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, or ModelLoadError with one sentence: missing, a folder, unreadable."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file.")
    if p.is_dir():
        raise ModelLoadError(f"{p} is a folder, not an ONNX model file.")
    try:
        return p.read_bytes()
    except OSError as e:
        raise ModelLoadError(f"{p} cannot be read: {e.strerror or e}.") from None


def read_model_proto(path: str | os.PathLike, *, allow_absolute_external: bool = False) -> tuple[onnx.ModelProto, Path]:
    """Read and parse an ONNX file with every check `load_model` makes before building its Graph (external data,
    tensor sizes, UTF-8 text, structure, onnx.checker); ModelLoadError / InvalidModelError name the file and problem."""
    p = Path(path)
    data = read_model_bytes(p)
    parsed = parse_model(data, p, allow_absolute_external=allow_absolute_external)
    check_structure(parsed.proto, p, produced=parsed.produced)
    check_with_checker(parsed.proto, p, parsed=parsed)
    return parsed.proto, p


@dataclass(frozen=True)
class ParsedModel:
    """A model file as parsed and checked by `parse_model`: the protobuf, the bytes it was parsed from (onnx.checker
    and shape inference take them as they are: no serializing again, ~10 ms, nor measuring, ~30 ms for 10,000 nodes),
    whether any tensor keeps its data in an external file; `produced`: the main graph's tensors when its nodes passed
    check_structure's node checks already."""

    proto: onnx.ModelProto
    data: bytes
    external: bool
    produced: frozenset[str] | None = None  # see _scan_main_nodes; check_structure takes it


def parse_model_proto(data: bytes, p: Path, *, allow_absolute_external: bool = False) -> onnx.ModelProto:
    """`parse_model`'s protobuf."""
    return parse_model(data, p, allow_absolute_external=allow_absolute_external).proto


def parse_model(data: bytes, p: Path, *, allow_absolute_external: bool = False) -> ParsedModel:
    """Parse bytes into a ModelProto and check what the Graph could not be built without: a graph and opsets,
    external data inside the model's folder, tensor data that fills its shape, UTF-8 text."""
    if not data:
        raise ModelLoadError(f"{p} is empty, not an ONNX model.")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - DecodeError, RuntimeError, ValueError, and odd types on hostile input
        missing = truncated_by(data)
        if missing:
            raise ModelLoadError(
                f"{p} is cut short: its data runs {missing:,} bytes past the end of the file ({len(data):,} bytes); "
                "it was probably not copied or downloaded completely."
            ) from None
        raise ModelLoadError(f"{p} is not an ONNX model: its protobuf data cannot be parsed ({_first_line(e)}).") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise ModelLoadError(f"{p} is not an ONNX model: it has no {'graph' if not proto.HasField('graph') else 'opset imports'}.")
    tensors = _all_tensors(proto)
    external = _check_external_data(tensors, p, allow_absolute_external)
    _check_tensor_sizes(tensors, p)
    produced = _scan_main_nodes(proto)
    if produced is None or _any_bytes(proto, main_nodes=False):
        check_text(proto, p)  # raises when some text is bytes (the scan may have stopped at a structure problem)
    _check_value_types(proto.graph, p)
    return ParsedModel(proto, bytes(data), external, produced)


def _check_value_types(g: onnx.GraphProto, path: Path) -> None:
    """Refuse declared value types with an element type ONNX does not have (no onnx_ir model from them); subgraphs too."""

    def elem_types(tp):
        kind = tp.WhichOneof("value")
        if kind in ("tensor_type", "sparse_tensor_type"):
            yield getattr(tp, kind).elem_type
        elif kind in ("sequence_type", "optional_type"):
            yield from elem_types(getattr(tp, kind).elem_type)
        elif kind == "map_type":
            yield tp.map_type.key_type
            yield from elem_types(tp.map_type.value_type)

    for vi in (*g.input, *g.output, *g.value_info):
        for et in elem_types(vi.type):
            if et not in _KNOWN_DATA_TYPES and et != onnx.TensorProto.UNDEFINED:
                raise InvalidModelError(f"{path}: value '{vi.name}' has an unknown data type ({et}).")
    for n in g.node:
        for a in n.attribute if len(n.attribute) else ():
            for sub in (a.g,) if a.type == onnx.AttributeProto.GRAPH else (a.graphs if a.type == onnx.AttributeProto.GRAPHS else ()):
                _check_value_types(sub, path)


def _all_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every TensorProto of the model (initializers and attribute tensors, subgraphs and functions included), collected
    once for both tensor checks; nodes without attributes (most of a big graph) cost one length test."""
    out: list[onnx.TensorProto] = []

    def nodes(ns) -> None:
        for n in ns:
            if not len(n.attribute):
                continue
            for a in n.attribute:
                if a.HasField("t"):
                    out.append(a.t)
                out.extend(a.tensors)
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        graph(g)

    def graph(g) -> None:
        out.extend(g.initializer)
        nodes(g.node)

    graph(proto.graph)
    for f in proto.functions:
        nodes(f.node)
    return out


def _first_line(e: BaseException) -> str:
    # onnx_ir wraps the real problem ("Error calling _deserialize_graph"): report the innermost cause
    seen = 0
    while (e.__cause__ or e.__context__) is not None and seen < 20:
        e = e.__cause__ or e.__context__
        seen += 1
    text = str(e).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("==>"):
            return line.rstrip(".")
    return type(e).__name__


def truncated_by(data: bytes) -> int:
    """How many bytes the top-level protobuf fields of `data` declare beyond its end (0 when the
    fields end within it, or when the data is not a protobuf message at all).

    A model cut short (an interrupted copy or download) still starts as valid protobuf: walking
    its top-level fields finds the last one (usually the graph) claiming more bytes than are
    left, which tells "truncated" apart from "corrupt" or "not ONNX"."""
    pos, end = 0, len(data)

    def varint(i: int) -> tuple[int | None, int]:
        value, shift = 0, 0
        while i < end:
            b = data[i]
            value |= (b & 0x7F) << shift
            i += 1
            if not b & 0x80:
                return value, i
            shift += 7
            if shift > 63:
                return None, i  # not a varint: not protobuf
        return -1, i  # ran off the end inside a varint

    while pos < end:
        key, pos = varint(pos)
        if key is None or key == 0:
            return 0
        if key < 0:
            return 1
        wire = key & 7
        if wire == 0:
            value, pos = varint(pos)
            if value is None:
                return 0
            if value < 0:
                return 1
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = varint(pos)
            if length is None:
                return 0
            if length < 0:
                return 1
            pos += length
        else:
            return 0  # groups (3, 4) and invalid types: ONNX uses none of them
    return pos - end if pos > end else 0


def _check_external_data(tensors: list[onnx.TensorProto], path: Path, allow_absolute: bool = False) -> bool:
    """Refuse external-data locations outside the model's folder (path traversal) or missing files;
    absolute locations only with `allow_absolute`. Returns whether any tensor has external data."""
    base = None
    for t in tensors:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        base = base or path.parent.resolve()
        loc = next((e.value for e in t.external_data if e.key == "location"), None)
        if not loc:
            raise InvalidModelError(f"{path}: tensor '{t.name}' stores its data externally but names no file.")
        target = (base / loc).resolve()
        if allow_absolute and os.path.isabs(loc):
            pass
        elif os.path.isabs(loc) or not target.is_relative_to(base):
            link = f" (a link to {target})" if not os.path.isabs(loc) and (base / loc).is_symlink() else ""
            raise InvalidModelError(
                f"{path}: tensor '{t.name}' points its external data at '{loc}'{link}, outside the model's folder; refusing to read it."
            )
        if not target.is_file():
            raise InvalidModelError(f"{path}: tensor '{t.name}' needs the external data file '{loc}', which is missing.")
        fields = {e.key: e.value for e in t.external_data}
        try:
            offset = int(fields.get("offset", "0") or 0)
            length = int(fields["length"]) if fields.get("length") not in (None, "") else None
        except ValueError:
            raise InvalidModelError(f"{path}: tensor '{t.name}' has a malformed external data offset or length.") from None
        size = target.stat().st_size
        if offset < 0 or (length is not None and length < 0) or offset + (length or 0) > size:
            raise InvalidModelError(
                f"{path}: tensor '{t.name}' reads bytes {offset}..{offset + (length or 0)} of '{loc}', which has only {size} bytes."
            )
    return base is not None


# elements per stored value of the typed fields, by data type (raw_data is checked in bits)
_TYPED_FIELD = {
    1: ("float_data", 1), 14: ("float_data", 2), 11: ("double_data", 1), 15: ("double_data", 2),
    7: ("int64_data", 1), 12: ("uint64_data", 1), 13: ("uint64_data", 1), 8: ("string_data", 1),
    **{t: ("int32_data", 1) for t in (2, 3, 4, 5, 6, 9, 10, 16, 17, 18, 19, 20, 24)},
}
_SUB_BYTE_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
_KNOWN_DATA_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)


def _check_tensor_sizes(tensors: list[onnx.TensorProto], path: Path) -> None:
    """Refuse tensors whose stored data does not fill their shape: readers (numpy, TVM's importer,
    onnxruntime) would fail later with an internal error, or read past the data. The sentence's
    texts are made only for the tensor refused (a BERT of 300 layers has ~5,000 tensors)."""

    def described(t) -> tuple[str, str]:
        shape = "[" + ", ".join(str(d) for d in t.dims) + "]"
        type_name = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in onnx.TensorProto.DataType.values() else str(t.data_type)
        return shape, type_name

    for t in tensors:
        data_type = t.data_type
        if data_type not in _KNOWN_DATA_TYPES:
            raise InvalidModelError(f"{path}: tensor '{t.name}' has an unknown data type ({data_type}).")
        dims = t.dims
        if t.data_location == onnx.TensorProto.EXTERNAL or t.HasField("segment") or any(d < 0 for d in dims):
            continue  # external data is checked against its file; negative dims get their own sentence
        count = 1
        for d in dims:
            count *= d
        raw = t.raw_data
        if raw:
            bits = _bits_per_element(data_type)
            if bits is None:
                continue
            need = (count * bits + 7) // 8
            if len(raw) != need:
                shape, type_name = described(t)
                raise InvalidModelError(
                    f"{path}: tensor '{t.name}' holds {len(raw)} bytes of data, but its shape {shape} of {type_name} needs {need}."
                )
            continue
        field, per = _TYPED_FIELD.get(data_type, (None, 1))
        if field is None:
            continue
        have = len(getattr(t, field))
        if have != count * per:
            shape, type_name = described(t)
            raise InvalidModelError(
                f"{path}: tensor '{t.name}' holds {have // per} values, but its shape {shape} of {type_name} needs {count}."
            )


_BITS: dict[int, int | None] = {}


def _bits_per_element(data_type: int) -> int | None:
    """Bits one element of `data_type` takes in raw_data; None when its size is not checked
    (strings, types without a typed field)."""
    bits = _BITS.get(data_type, -1)
    if bits == -1:
        bits = _SUB_BYTE_BITS.get(data_type)
        if bits is None and data_type != onnx.TensorProto.STRING and data_type in _TYPED_FIELD:
            bits = 8 * onnx.helper.tensor_dtype_to_np_dtype(data_type).itemsize
        _BITS[data_type] = bits
    return bits


def check_text(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse names and doc strings that are not UTF-8 text (a flipped byte): protobuf hands them
    over as bytes, and writing the model back (save, lowering, compile) would fail much later."""

    def graph_texts(g, kind="a graph or function"):
        yield f"{kind} name", g.name
        yield f"{kind} doc_string", g.doc_string
        for v in (*g.input, *g.output, *g.value_info):
            yield "a tensor name", v.name
            yield "a tensor doc_string", v.doc_string
        for t in g.initializer:
            yield "a tensor name", t.name
            yield "a tensor doc_string", t.doc_string
        yield from node_texts(g.node)

    def node_texts(nodes):
        for n in nodes:
            yield from (("a node name", n.name), ("an op type", n.op_type), ("an op domain", n.domain),
                        ("a node doc_string", n.doc_string), ("an op overload", n.overload))
            yield from (("a tensor name", o) for o in n.output)
            yield from (("a tensor name", i) for i in n.input)
            for a in n.attribute:
                yield "an attribute name", a.name
                yield "an attribute doc_string", a.doc_string
                if a.HasField("g"):
                    yield from graph_texts(a.g)
                for sub in a.graphs:
                    yield from graph_texts(sub)

    def texts():
        yield from (("the model's producer_name", proto.producer_name), ("the model's producer_version", proto.producer_version),
                    ("the model's domain", proto.domain), ("the model's doc_string", proto.doc_string))
        for m in proto.metadata_props:
            yield "a metadata key", m.key
            yield "a metadata value", m.value
        yield from graph_texts(proto.graph)
        for f in proto.functions:
            yield "a graph or function name", f.name
            yield "a graph or function doc_string", f.doc_string
            yield from (("a tensor name", v) for v in (*f.input, *f.output))
            yield from node_texts(f.node)

    if not _any_bytes(proto):
        return
    for what, value in texts():  # there is one: find it again, saying where
        if type(value) is bytes:
            raise InvalidModelError(f"{path}: {what} ('{value.decode('utf-8', 'replace')[:60]}') is not valid UTF-8 text.")


def _any_bytes(proto: onnx.ModelProto, main_nodes: bool = True) -> bool:
    """Whether any text field check_text reads came back as bytes: the same fields in a tight
    loop (a 60,000-node graph: ~0.1 s instead of ~0.5 s through check_text's generators).
    `main_nodes=False` leaves out the main graph's nodes (`_scan_main_nodes` read them)."""
    if bytes in {type(x) for x in (proto.producer_name, proto.producer_version, proto.domain, proto.doc_string)}:
        return True
    if any(type(m.key) is bytes or type(m.value) is bytes for m in proto.metadata_props):
        return True
    if _graph_has_bytes(proto.graph, main_nodes):
        return True
    for f in proto.functions:
        if bytes in (type(f.name), type(f.doc_string)) or any(type(x) is bytes for x in (*f.input, *f.output)) or _nodes_have_bytes(f.node):
            return True
    return False


def _graph_has_bytes(g, nodes: bool = True) -> bool:
    for vs in (g.input, g.output, g.value_info, g.initializer):
        for v in vs:
            if type(v.name) is bytes or type(v.doc_string) is bytes:
                return True
    return bytes in (type(g.name), type(g.doc_string)) or (nodes and _nodes_have_bytes(g.node))


def _nodes_have_bytes(ns) -> bool:
    for n in ns:
        if bytes in (type(n.name), type(n.op_type), type(n.domain), type(n.doc_string), type(n.overload)):
            return True
        for x in n.output:
            if type(x) is bytes:
                return True
        for x in n.input:
            if type(x) is bytes:
                return True
        if len(n.attribute) and _attributes_have_bytes(n.attribute):
            return True
    return False


def _attributes_have_bytes(attributes) -> bool:
    for a in attributes:
        if type(a.name) is bytes or type(a.doc_string) is bytes:
            return True
        if a.type == onnx.AttributeProto.GRAPH and _graph_has_bytes(a.g):
            return True
        if a.type == onnx.AttributeProto.GRAPHS and any(_graph_has_bytes(sub) for sub in a.graphs):
            return True
    return False


def _declared_domains(proto: onnx.ModelProto) -> set[str]:
    declared = {d.domain for d in proto.opset_import}
    if "" in declared or "ai.onnx" in declared:
        declared |= {"", "ai.onnx"}
    return declared | {f.domain for f in proto.functions}


def _scan_main_nodes(proto: onnx.ModelProto) -> frozenset[str] | None:
    """One walk over the main graph's nodes in place of four (check_text's, and check_structure's
    over domains, producers and readers): the tensor names they produce when every node passes
    all of those checks (text fields that are text, an imported domain, outputs produced once,
    inputs ready before they are read), else None, and the separate checks then find the
    problem and say it as they always have. A 10,000-node BERT: ~45 ms less."""
    g = proto.graph
    declared = _declared_domains(proto)
    available = {t.name for t in g.initializer} | {v.name for v in g.input}
    produced: set[str] = set()
    for n in g.node:
        if bytes in (type(n.name), type(n.op_type), type(n.domain), type(n.doc_string), type(n.overload)) or n.domain not in declared:
            return None
        for x in n.input:
            if x and x not in available and x not in produced:
                return None  # a bytes name too: `produced` holds text only, and bytes in `available` fail the text check
        for o in n.output:
            if type(o) is bytes:
                return None
            if o:
                if o in produced or o in available:
                    return None
                produced.add(o)
        if len(n.attribute) and _attributes_have_bytes(n.attribute):
            return None
    return frozenset(produced)


def _dim_text(d) -> str:
    return str(d.dim_value if d.HasField("dim_value") else (d.dim_param if d.HasField("dim_param") else None))


def check_structure(proto: onnx.ModelProto, path: str | os.PathLike | None = None, *, produced: frozenset[str] | None = None) -> None:
    """Structural checks with readable messages: undeclared domains, negative dimensions, dangling
    inputs, cycles, tensors produced twice, outputs nobody produces. Stops at the first problem.
    `produced`: `parse_model`'s walk found the nodes fine (ParsedModel.produced); only the rest
    is checked."""
    where = f"{path}: " if path is not None else ""
    g = proto.graph
    declared = _declared_domains(proto)
    nodes = g.node
    for n in nodes if produced is None else ():
        if n.domain not in declared:
            raise InvalidModelError(
                f"{where}node '{n.name or n.op_type}' ({n.op_type}) uses the domain '{n.domain}', which the model does not import."
            )
    initializers = {t.name for t in g.initializer}
    input_names = {v.name for v in g.input}
    for v in (*g.input, *g.output):
        tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if tt is None or not tt.HasField("shape"):
            continue
        if any(d.HasField("dim_value") and d.dim_value < 0 for d in tt.shape.dim):
            bad = next(d.dim_value for d in tt.shape.dim if d.HasField("dim_value") and d.dim_value < 0)
            kind = "initializer" if v.name in initializers else ("input" if v.name in input_names else "output")
            raise InvalidModelError(f"{where}{kind} '{v.name}' has a negative dimension ({bad}) in its shape [{', '.join(_dim_text(d) for d in tt.shape.dim)}].")
    for t in g.initializer:
        if any(d < 0 for d in t.dims):
            bad = next(d for d in t.dims if d < 0)
            raise InvalidModelError(f"{where}initializer '{t.name}' has a negative dimension ({bad}) in its shape [{', '.join(str(d) for d in t.dims)}].")
    available = input_names | initializers
    if produced is None:
        produced = _check_node_order(nodes, available, where, proto)
    for v in g.output:
        if v.name not in available and v.name not in produced:
            raise InvalidModelError(f"{where}graph output '{v.name}' is not produced by any node.")


def _check_node_order(nodes, available: set[str], where: str, proto: onnx.ModelProto):
    """check_structure's node checks: each tensor produced once, read after it is produced.
    Returns the names the nodes produce."""
    producer_of: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                if o in producer_of or o in available:
                    raise InvalidModelError(f"{where}tensor '{o}' is produced more than once (again by node '{n.name or n.op_type}').")
                producer_of[o] = i
    for i, n in enumerate(nodes):
        for name in n.input:
            if not name or name in available:
                continue
            prod = producer_of.get(name)
            if prod is None:
                raise InvalidModelError(
                    f"{where}node '{n.name or n.op_type}' ({n.op_type}) reads tensor '{name}', which no node, input or initializer provides."
                )
            if prod >= i:
                cycle = _find_cycle(proto)
                if cycle:
                    names = " -> ".join(f"'{x}'" for x in cycle)
                    raise InvalidModelError(f"{where}the graph has a cycle: {names}.")
                p = nodes[prod]
                raise InvalidModelError(
                    f"{where}node '{n.name or n.op_type}' ({n.op_type}) reads tensor '{name}' before node "
                    f"'{p.name or p.op_type}' produces it (nodes are not in topological order)."
                )
    return producer_of.keys()


def check_with_checker(proto: onnx.ModelProto, path: str | os.PathLike | None = None, *, parsed: ParsedModel | None = None) -> None:
    """onnx.checker for what check_structure leaves (op schemas, attribute types); models over
    2 GB are not checked (the checker refuses to take them). `parsed`: the file `proto` came from
    (`parse_model`): without external data the checker reads its bytes as they are."""
    error = _checker_error(proto, path, parsed)
    if error is not None:
        raise error


def start_checker(parsed: ParsedModel, path: str | os.PathLike | None = None):
    """Run `check_with_checker` on a thread; returns a function that waits for it and raises what it found (with
    `report=False`: returns it). onnx 1.23's checker holds the GIL throughout (~45 ms for a 10,000-node model), so
    for now it runs before onnx_ir's deserialization, not beside it; a checker that lets go would overlap."""
    box: list[InvalidModelError | None] = [None]

    def run() -> None:
        box[0] = _checker_error(parsed.proto, path, parsed)

    thread = threading.Thread(target=run, name="onnx-checker", daemon=True)
    thread.start()

    def result(report: bool = True) -> InvalidModelError | None:
        thread.join()
        if report and box[0] is not None:
            raise box[0]
        return box[0]

    return result


def _checker_error(proto: onnx.ModelProto, path, parsed: ParsedModel | None) -> InvalidModelError | None:
    where = f"{path}: " if path is not None else ""
    try:
        if parsed is not None and not parsed.external:
            if len(parsed.data) < _TWO_GB:
                onnx.checker.check_model(parsed.data)
        else:
            proto = _without_external_data(proto)
            if proto.ByteSize() < _TWO_GB:
                onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        return InvalidModelError(f"{where}the model fails ONNX validation: {_name_unnamed(_first_line(e), proto)}.")
    except Exception as e:  # noqa: BLE001
        return InvalidModelError(f"{where}the model cannot be checked: {_first_line(e)}.")
    return None


def _name_unnamed(text: str, proto: onnx.ModelProto) -> str:
    """onnx.checker calls an unnamed node "Node ()": name the one with the empty input it means as the workbench does ("Conv #11")."""
    m = re.match(r"Node \(\)'s input (\d+) is marked single but has an empty string", text)
    k = int(m.group(1)) if m else -1
    pos = next((i for i, n in enumerate(proto.graph.node) if not n.name and k < len(n.input) and n.input[k] == ""), None) if m else None
    return text if pos is None else text.replace("Node ()", f"{proto.graph.node[pos].op_type} #{pos + 1}", 1)


def has_external_data(proto: onnx.ModelProto) -> bool:
    """Whether any tensor of the model keeps its data in an external file."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in _all_tensors(proto))


def _without_external_data(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The checker would look for external files relative to the working directory (vetted at load): empty stand-ins."""
    if not has_external_data(proto):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # the caller's proto stays intact (shape inference reads it next)
    proto = copy
    for t in _all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            del t.dims[:]
            t.dims.append(0)
    return proto


def _find_cycle(proto: onnx.ModelProto) -> list[str]:
    import networkx as nx

    G = nx.DiGraph()
    nodes = proto.graph.node
    producer_of = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    for i, n in enumerate(nodes):
        G.add_node(i)
        for name in n.input:
            if name in producer_of:
                G.add_edge(producer_of[name], i)
    try:
        cyc = nx.find_cycle(G)
    except nx.NetworkXNoCycle:
        return []
    names = [nodes[a].name or nodes[a].op_type for a, _ in cyc]
    return names + names[:1]
