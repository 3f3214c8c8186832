"""Loading and saving ONNX models, with one-sentence errors for every way a file can be bad."""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import onnx
import onnx_ir as ir

from ..errors import InvalidModelError, ModelLoadError
from .external_data import SaveResult, write_model
from .graph import Graph

__all__ = ["load_model", "load_model_bytes", "save_model", "validate_graph", "truncated_by", "KNOWN_DOMAINS", "SaveResult"]

logger = logging.getLogger(__name__)

KNOWN_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training", "com.microsoft"}
_TWO_GB = 2**31 - 1


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


def load_model(path: str | os.PathLike, *, allow_absolute_external: bool = False) -> Graph:
    """Load an ONNX file into a Graph, validated, with missing shapes inferred.

    Raises ModelLoadError / InvalidModelError with one sentence naming the file and the problem.
    External data is read lazily, and only from files inside the model's folder: a file from
    elsewhere could make the workbench read any file on the machine. `allow_absolute_external`
    also accepts absolute paths, for files the workbench wrote itself (autosaves, which refer to
    the weights where they are instead of copying them).
    """
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file.")
    if p.is_dir():
        raise ModelLoadError(f"{p} is a folder, not an ONNX model file.")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ModelLoadError(f"{p} cannot be read: {e.strerror or e}.") from None
    return load_model_bytes(data, p, allow_absolute_external=allow_absolute_external)


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


def load_model_bytes(data: bytes, path: str | os.PathLike, *, allow_absolute_external: bool = False) -> Graph:
    """Like `load_model`, from bytes already read; `path` names the file and anchors external data."""
    p = Path(path)
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
    _check_external_data(proto, p, allow_absolute_external)
    _check_tensor_sizes(proto, p)
    try:
        # onnx_ir logs its own warning for dangling inputs; validate_graph explains them better
        ir_logger = logging.getLogger("onnx_ir")
        level = ir_logger.level
        ir_logger.setLevel(logging.ERROR)
        try:
            model = ir.serde.deserialize_model(proto)
        finally:
            ir_logger.setLevel(level)
    except Exception as e:  # noqa: BLE001
        raise InvalidModelError(f"{p} holds an ONNX model that cannot be read: {_first_line(e)}.") from None
    _check_text(model, p)
    ir.external_data.set_base_dir(model.graph, str(p.parent.resolve()))
    if allow_absolute_external:
        _anchor_absolute_locations(model)
    graph = Graph(model, p)
    graph.value_info_names = {vi.name for vi in proto.graph.value_info}
    # the parsed proto is the model: check and infer on it instead of serializing the graph again
    validate_graph(graph, p, proto=proto)
    graph.infer_shapes(proto=proto)
    return graph


def _anchor_absolute_locations(model: ir.Model) -> None:
    """onnx_ir reads external data only below a tensor's base folder: an absolute location
    (autosaves, see `load_model`) becomes its file name under the file's own folder."""
    from .external_data import external_tensors

    for v, t in external_tensors(model):
        loc = str(t.location)
        if os.path.isabs(loc):
            v.const_value = ir.ExternalTensor(os.path.basename(loc), t.offset, t.length, t.dtype, shape=t.shape, name=t.name,
                                              doc_string=t.doc_string, base_dir=os.path.dirname(loc))


def _check_external_data(proto: onnx.ModelProto, path: Path, allow_absolute: bool = False) -> None:
    """Refuse external-data locations outside the model's folder (path traversal) or missing files;
    absolute locations only with `allow_absolute`."""
    base = path.parent.resolve()

    def tensors():
        from onnx.external_data_helper import _get_all_tensors

        yield from _get_all_tensors(proto)

    for t in tensors():
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
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


# elements per stored value of the typed fields, by data type (raw_data is checked in bits)
_TYPED_FIELD = {
    1: ("float_data", 1), 14: ("float_data", 2), 11: ("double_data", 1), 15: ("double_data", 2),
    7: ("int64_data", 1), 12: ("uint64_data", 1), 13: ("uint64_data", 1), 8: ("string_data", 1),
    **{t: ("int32_data", 1) for t in (2, 3, 4, 5, 6, 9, 10, 16, 17, 18, 19, 20, 24)},
}
_SUB_BYTE_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
_KNOWN_DATA_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)


def _check_tensor_sizes(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse tensors whose stored data does not fill their shape: readers (numpy, TVM's importer,
    onnxruntime) would fail later with an internal error, or read past the data."""
    from onnx.external_data_helper import _get_all_tensors

    for t in _get_all_tensors(proto):
        if t.data_type not in _KNOWN_DATA_TYPES:
            raise InvalidModelError(f"{path}: tensor '{t.name}' has an unknown data type ({t.data_type}).")
        if t.data_location == onnx.TensorProto.EXTERNAL or t.HasField("segment") or any(d < 0 for d in t.dims):
            continue  # external data is checked against its file; negative dims get their own sentence
        count = 1
        for d in t.dims:
            count *= d
        shape = "[" + ", ".join(str(d) for d in t.dims) + "]"
        type_name = onnx.TensorProto.DataType.Name(t.data_type) if t.data_type in onnx.TensorProto.DataType.values() else str(t.data_type)
        if t.raw_data:
            bits = _SUB_BYTE_BITS.get(t.data_type)
            if bits is None:
                if t.data_type == onnx.TensorProto.STRING or t.data_type not in _TYPED_FIELD:
                    continue
                bits = 8 * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            need = (count * bits + 7) // 8
            if len(t.raw_data) != need:
                raise InvalidModelError(
                    f"{path}: tensor '{t.name}' holds {len(t.raw_data)} bytes of data, but its shape {shape} of {type_name} needs {need}."
                )
            continue
        field, per = _TYPED_FIELD.get(t.data_type, (None, 1))
        if field is None:
            continue
        have = len(getattr(t, field))
        if have != count * per:
            raise InvalidModelError(
                f"{path}: tensor '{t.name}' holds {have // per} values, but its shape {shape} of {type_name} needs {count}."
            )


def _check_text(model: ir.Model, path: Path) -> None:
    """Refuse names and doc strings that are not UTF-8 text (a flipped byte): protobuf hands them
    over as bytes, and writing the model back (save, lowering, compile) would fail much later.
    Walks the IR rather than the protobuf messages: ~10x faster on big graphs."""

    def texts():
        yield from (("the model's producer_name", model.producer_name), ("the model's producer_version", model.producer_version),
                    ("the model's domain", model.domain), ("the model's doc_string", model.doc_string))
        yield from (("a metadata key", k) for k in model.metadata_props)
        yield from (("a metadata value", v) for v in model.metadata_props.values())
        for owner in (model.graph, *model.functions.values()):
            yield "a graph or function name", owner.name
            yield "a graph or function doc_string", getattr(owner, "doc_string", None)
            values = (*owner.inputs, *owner.outputs, *getattr(owner, "initializers", {}).values())
            yield from (("a tensor name", v.name) for v in values)
            yield from (("a tensor doc_string", v.doc_string) for v in values)
            for node in ir.traversal.RecursiveGraphIterator(owner):
                yield from (("a node name", node.name), ("an op type", node.op_type), ("an op domain", node.domain),
                            ("a node doc_string", node.doc_string), ("an op overload", node.overload))
                yield from (("a tensor name", v.name) for v in node.outputs)
                yield from (("an attribute name", a) for a in node.attributes)
                yield from (("an attribute doc_string", a.doc_string) for a in node.attributes.values())

    for what, text in texts():
        if type(text) is bytes:
            raise InvalidModelError(f"{path}: {what} ('{text.decode('utf-8', 'replace')[:60]}') is not valid UTF-8 text.")


def validate_graph(graph: Graph, path: str | os.PathLike | None = None, proto: onnx.ModelProto | None = None) -> None:
    """Structural checks with readable messages: undeclared domains, dangling inputs, cycles,
    duplicate outputs; then onnx.checker for the rest (op schemas, attribute types).

    `proto`, when given, is the graph already serialized (as loaded); it is not modified.
    """
    where = f"{path}: " if path is not None else ""
    g = graph.model.graph
    declared = set(graph.model.opset_imports)
    functions = {(f.domain, f.name) for f in graph.model.functions.values()}
    function_domains = {d for d, _ in functions}
    for n in g:
        dom = n.domain or ""
        if dom not in declared and not (dom == "ai.onnx" and "" in declared) and dom not in function_domains:
            raise InvalidModelError(
                f"{where}node '{n.name or n.op_type}' ({n.op_type}) uses the domain '{dom}', which the model does not import."
            )
    for v in list(g.inputs) + list(g.outputs) + list(g.initializers.values()):
        if v.shape is not None:
            for d in v.shape:
                if isinstance(d, int) and d < 0:
                    kind = "initializer" if v.is_initializer() else ("input" if v.is_graph_input() else "output")
                    raise InvalidModelError(f"{where}{kind} '{v.name}' has a negative dimension ({d}) in its shape [{', '.join(str(x if isinstance(x, int) else getattr(x, 'value', x)) for x in v.shape)}].")
    available = {v.name for v in g.inputs} | set(g.initializers.keys())
    producer_of: dict[str, ir.Node] = {}
    for n in g:
        for v in n.outputs:
            if v.name:
                if v.name in producer_of or v.name in available:
                    raise InvalidModelError(f"{where}tensor '{v.name}' is produced more than once (again by node '{n.name or n.op_type}').")
                producer_of[v.name] = n
    position = {id(n): i for i, n in enumerate(g)}
    for i, n in enumerate(g):
        for v in n.inputs:
            if v is None or not v.name:
                continue
            if v.name in available:
                continue
            prod = producer_of.get(v.name)
            if prod is None:
                raise InvalidModelError(
                    f"{where}node '{n.name or n.op_type}' ({n.op_type}) reads tensor '{v.name}', which no node, input or initializer provides."
                )
            if position[id(prod)] >= i:
                cycle = _find_cycle(graph)
                if cycle:
                    names = " -> ".join(f"'{x}'" for x in cycle)
                    raise InvalidModelError(f"{where}the graph has a cycle: {names}.")
                raise InvalidModelError(
                    f"{where}node '{n.name or n.op_type}' ({n.op_type}) reads tensor '{v.name}' before node "
                    f"'{prod.name or prod.op_type}' produces it (nodes are not in topological order)."
                )
    for v in g.outputs:
        if v.name not in available and v.name not in producer_of:
            raise InvalidModelError(f"{where}graph output '{v.name}' is not produced by any node.")
    try:
        proto = _without_external_data(proto if proto is not None else graph.to_proto())
        if proto.ByteSize() < _TWO_GB:
            onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        raise InvalidModelError(f"{where}the model fails ONNX validation: {_first_line(e)}.") from None
    except Exception as e:  # noqa: BLE001
        raise InvalidModelError(f"{where}the model cannot be checked: {_first_line(e)}.") from None


def _without_external_data(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The checker would look for external files relative to the working directory; their
    location was vetted at load, so check the structure with empty stand-ins instead."""
    from onnx.external_data_helper import _get_all_tensors

    if not any(t.data_location == onnx.TensorProto.EXTERNAL for t in _get_all_tensors(proto)):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # the caller's proto stays intact (shape inference reads it next)
    proto = copy
    for t in _get_all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            del t.dims[:]
            t.dims.append(0)
    return proto


def _find_cycle(graph: Graph) -> list[str]:
    import networkx as nx

    G = nx.DiGraph()
    g = graph.model.graph
    producer_of = {v.name: n for n in g for v in n.outputs if v.name}
    label = {}
    for n in g:
        label[id(n)] = n.name or n.op_type
        G.add_node(id(n))
        for v in n.inputs:
            if v is not None and v.name in producer_of:
                G.add_edge(id(producer_of[v.name]), id(n))
    try:
        cyc = nx.find_cycle(G)
    except nx.NetworkXNoCycle:
        return []
    names = [label[a] for a, _ in cyc]
    return names + names[:1]


def save_model(graph: Graph, path: str | os.PathLike, *, external: str = "copy") -> SaveResult:
    """Write the graph as an ONNX file, atomically (temporary file, then rename); returns where
    the weights went (`SaveResult.describe()` says it in one sentence).

    External data (core.model.external_data): with `external="copy"` weights whose file lies
    outside the destination folder are copied into `<file>.data` beside it (the graph then reads
    them from there); with `"reference"` (autosaves) they are referenced by absolute path, not
    copied. Models over 2 GB keep their in-memory weights in `<file>.data` too.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_model(graph, p, external, _write_atomically)


def _write_atomically(proto: onnx.ModelProto, p: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(proto.SerializeToString(deterministic=True))
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file 0600; give it the mode a plain open() would (or keep the old file's)
        try:
            mode = p.stat().st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
