"""Loading and saving ONNX models, with one-sentence errors for every way a file can be bad."""
from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Callable
from pathlib import Path

import onnx
import onnx_ir as ir

from ..errors import InvalidModelError
from .external_data import SaveResult, write_model
from .graph import Graph
from .onnx_checks import (
    _first_line,
    _without_external_data,  # noqa: F401 - core.model.validation uses it from here
    check_structure,
    check_with_checker,
    parse_model,
    read_model_bytes,
    start_checker,
    truncated_by,
)
from .shapes import InferredTypes, infer_types

__all__ = ["KNOWN_DOMAINS", "SaveResult", "load_model", "load_model_bytes", "save_model", "truncated_by", "validate_graph"]

logger = logging.getLogger(__name__)

KNOWN_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training", "com.microsoft"}


def load_model(path: str | os.PathLike, *, allow_absolute_external: bool = False,
               checked: Callable[[onnx.ModelProto, InferredTypes], None] | None = None) -> Graph:
    """Load an ONNX file into a Graph, validated, with missing shapes inferred.

    Raises ModelLoadError / InvalidModelError with one sentence naming the file and the problem.
    External data is read lazily, and only from files inside the model's folder: a file from
    elsewhere could make the workbench read any file on the machine. `allow_absolute_external`
    also accepts absolute paths, for files the workbench wrote itself (autosaves, which refer to
    the weights where they are instead of copying them). `checked(proto, types)` is called once the file
    has passed every check and its shapes are inferred (`types`: core.model.shapes), before the
    model is built (the GUI draws a big model's view from them while the model is built:
    core.views.proto_view); it must not change `proto`.
    """
    p = Path(path)
    return load_model_bytes(read_model_bytes(p), p, allow_absolute_external=allow_absolute_external, checked=checked)


@contextlib.contextmanager
def _gc_paused():
    """Building a big model allocates hundreds of thousands of small objects at once; the cyclic
    garbage collector would scan them again and again meanwhile for nothing (a 60,000-node chain:
    its deserialization 1.2 s with it paused, 1.2-3.9 s with it on, the more the busier the
    machine)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_model_bytes(data: bytes, path: str | os.PathLike, *, allow_absolute_external: bool = False,
                     checked: Callable[[onnx.ModelProto, InferredTypes], None] | None = None) -> Graph:
    """Like `load_model`, from bytes already read; `path` names the file and anchors external data.

    The checks run on the parsed protobuf first (core.model.onnx_checks, shared with `inspect`),
    then the onnx_ir model is built once from that same protobuf, while onnx.checker reads the
    file's bytes on a thread (onnx 1.23's C++ holds the GIL, so it runs before the build, not beside
    it: docs/performance.md); ONNX's C++ shape inference reads those bytes too (no second parse). A file with several problems is
    refused for the same one as when these ran one after another: structure, then what onnx_ir
    cannot read, then the checker's."""
    p = Path(path)
    with _gc_paused():
        parsed = parse_model(data, p, allow_absolute_external=allow_absolute_external)
        proto = parsed.proto
        checker = start_checker(parsed, p)
        try:
            check_structure(proto, p, produced=parsed.produced)
            inferred = None
            if checked is not None and checker(report=False) is None:
                inferred = infer_types(proto, data=parsed.data)  # once: the Graph reads the same answer
                checked(proto, inferred[0])
            try:
                # onnx_ir logs its own warning for dangling inputs; check_structure explains them better
                ir_logger = logging.getLogger("onnx_ir")
                level = ir_logger.level
                ir_logger.setLevel(logging.ERROR)
                try:
                    model = ir.serde.deserialize_model(proto)
                finally:
                    ir_logger.setLevel(level)
            except Exception as e:  # noqa: BLE001
                raise InvalidModelError(f"{p} holds an ONNX model that cannot be read: {_first_line(e)}.") from None
        except BaseException:
            checker(report=False)  # an earlier problem is the file's sentence; no checker left running
            raise
        checker()  # waits for the checker and raises what it found
        if parsed.external:  # set_base_dir walks every tensor of the IR: only when it matters
            ir.external_data.set_base_dir(model.graph, str(p.parent.resolve()))
        if allow_absolute_external:
            _anchor_absolute_locations(model)
        graph = Graph(model, p)
        graph.value_info_names = {vi.name for vi in proto.graph.value_info}
        # the parsed proto is the model: infer on it instead of serializing the graph again
        graph.infer_shapes(proto=proto, data=parsed.data, inferred=inferred)
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


def validate_graph(graph: Graph, path: str | os.PathLike | None = None, proto: onnx.ModelProto | None = None) -> None:
    """Structural checks with readable messages: undeclared domains, dangling inputs, cycles,
    duplicate outputs; then onnx.checker for the rest (op schemas, attribute types).

    Both run on the protobuf (core.model.onnx_checks: fast, and the same checks `inspect` makes);
    `proto`, when given, is the graph already serialized (as loaded); it is not modified.
    """
    proto = proto if proto is not None else graph.to_proto()
    check_structure(proto, path)
    check_with_checker(proto, path)


def save_model(graph: Graph, path: str | os.PathLike, *, external: str = "copy") -> SaveResult:
    """Write the graph as an ONNX file, atomically; returns where the weights went
    (`SaveResult.describe()` says it in one sentence).

    External data (core.model.external_data): with `external="copy"` weights whose file lies
    outside the destination folder are copied into `<file>.data` beside it (the graph then reads
    them from there); with `"reference"` (autosaves) they are referenced by absolute path, not
    copied. Models over 2 GB keep their in-memory weights in `<file>.data` too. The model and its
    data file are replaced as a pair: a kill leaves the old pair or the new one. A full disk, a
    missing permission or a read-only file system raise a WorkbenchError naming `path` (core.files).
    """
    from ..files import new_folders

    p = Path(path)
    with new_folders(p.parent, named=p):  # a failed save leaves no folder it made
        return write_model(graph, p, external)
