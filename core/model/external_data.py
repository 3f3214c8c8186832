"""External data (weights in a separate file) wherever a model is written or handed to a tool.

An ONNX file names its external data by a path relative to the file's folder, and a loaded Graph
reads those weights lazily from the folder it came from (onnx_ir `ExternalTensor`s with an
absolute base folder). Writing the graph anywhere else, or giving its protobuf to a tool that
resolves paths against the working directory (onnx.checker, TVM's importer, onnxruntime), breaks
that link. This module decides, for each external tensor, what the written file says:

* ``"copy"`` (Save, Save As, `rewrite -o`): weights whose data file lies inside the destination
  folder are referenced relative to it; all others are copied into ``<file>.data`` beside the
  new file, so the saved model opens anywhere the folder goes. The live graph is re-pointed at
  the copies (the document now *is* the new file).
* ``"reference"`` (autosave): every external tensor is referenced by the absolute path of the file
  it is in now, so an autosave costs no copy of the weights; only weights that exist in memory
  alone (edited, folded) are stored with it. The live graph is left as it was.
* `self_contained_proto`: weights inline, for importers and onnxruntime (models under 2 GB).

Models whose protobuf would pass 2 GB store their in-memory weights in ``<file>.data`` too.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_ir as ir

__all__ = ["SaveResult", "external_tensors", "referenced_files", "write_model", "self_contained_proto", "content_fingerprint", "TWO_GB", "MODES"]

logger = logging.getLogger(__name__)

TWO_GB = 2**31 - 1
MODES = ("copy", "reference")


@dataclass
class SaveResult:
    """Where a saved model's weights went, for the status bar and the CLI."""

    path: Path
    data_file: Path | None = None  # the `<file>.data` written beside the model, if any
    copied: int = 0  # external tensors copied into data_file
    referenced: list[Path] = field(default_factory=list)  # data files referenced where they are

    def describe(self) -> str:
        """One sentence for the user: which file holds the weights."""
        parts = []
        if self.data_file is not None:
            what = f"{self.copied} external weight{'s' if self.copied != 1 else ''} copied" if self.copied else "weights"
            parts.append(f"{what} into {self.data_file.name} beside it")
        if self.referenced:
            names = ", ".join(str(p) for p in self.referenced[:3]) + (" ..." if len(self.referenced) > 3 else "")
            parts.append(f"weights still read from {names}")
        return f"Saved {self.path}" + (f" ({'; '.join(parts)})." if parts else ".")


def _initializer_values(model: ir.Model) -> Iterator[ir.Value]:
    for g in model.graphs():
        yield from g.initializers.values()


def external_tensors(model: ir.Model) -> list[tuple[ir.Value, ir.ExternalTensor]]:
    """Initializers whose data lives in an external file (not yet read into memory)."""
    return [(v, v.const_value) for v in _initializer_values(model) if isinstance(v.const_value, ir.ExternalTensor)]


def _file_of(t: ir.ExternalTensor) -> Path:
    return Path(os.path.join(str(t.base_dir or ""), str(t.location))).resolve()


def referenced_files(model: ir.Model) -> set[Path]:
    """The external data files the model reads its weights from (absolute paths)."""
    return {_file_of(t) for _, t in external_tensors(model)}


def _moved(t: ir.ExternalTensor, location: str, base_dir: str) -> ir.ExternalTensor:
    return ir.ExternalTensor(location, t.offset, t.length, t.dtype, shape=t.shape, name=t.name,
                             doc_string=t.doc_string, base_dir=base_dir)


@contextlib.contextmanager
def _swapped(pairs: list[tuple[ir.Value, ir.TensorProtocol]]):
    """Give values other tensors while serializing; the originals come back afterwards."""
    old = [(v, v.const_value) for v, _ in pairs]
    try:
        for v, t in pairs:
            v.const_value = t
        yield
    finally:
        for v, t in old:
            v.const_value = t


def _in_memory_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in _initializer_values(model)
               if v.const_value is not None and not isinstance(v.const_value, ir.ExternalTensor))


def _attribute_externals_inline(proto: onnx.ModelProto, base: Path | None) -> None:
    """Tensors in attributes (Constant nodes) that still point at a file: read them in (rare)."""
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_tensor, uses_external_data

    for t in _get_all_tensors(proto):
        if uses_external_data(t):
            if base is None:
                raise ValueError(f"tensor '{t.name}' stores its data externally and the model has no folder to read it from")
            load_external_data_for_tensor(t, str(base))
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]


def self_contained_proto(graph) -> onnx.ModelProto:
    """The graph as a protobuf with every weight inline: what TVM's importer, onnx.checker and
    onnxruntime need whatever the working directory (they resolve external paths against it).
    The graph keeps reading from its files; only the returned proto carries the bytes."""
    ext = external_tensors(graph.model)
    if not ext:
        return graph.to_proto()
    inline = [(v, ir.Tensor(t.numpy(), name=t.name, doc_string=t.doc_string)) for v, t in ext]
    with _swapped(inline):
        proto = graph.to_proto()
    _attribute_externals_inline(proto, Path(graph.path).parent.resolve() if getattr(graph, "path", None) else None)
    return proto


def content_fingerprint(graph) -> str | None:
    """A hash of the model as an autosave writes it (external weights named by absolute path,
    not read): equal fingerprints mean the same model. Crash recovery compares the replayed
    journal with the autosaved model by it. None for models over 2 GB (not worth the time)."""
    import hashlib

    if _in_memory_bytes(graph.model) >= TWO_GB:
        return None
    absolute = [(v, _moved(t, str(_file_of(t)), "")) for v, t in external_tensors(graph.model)]
    with _swapped(absolute):
        data = graph.to_proto().SerializeToString(deterministic=True)
    return hashlib.sha256(data).hexdigest()


def write_model(graph, path: Path, mode: str, write_proto) -> SaveResult:
    """Write `graph` to `path` with its external data handled per `mode` (see the module
    docstring); `write_proto(proto, path)` writes the protobuf itself (atomically)."""
    if mode not in MODES:
        raise ValueError(f"unknown external-data mode '{mode}' (expected one of {', '.join(MODES)})")
    model = graph.model
    dest = path.parent.resolve()
    data_name = path.name + ".data"
    data_path = dest / data_name
    result = SaveResult(path)
    ext = external_tensors(model)
    big = _in_memory_bytes(model) >= TWO_GB
    temporary: list[tuple[ir.Value, ir.TensorProtocol]] = []
    to_write: list[ir.Value] = []
    in_data_file: list[ir.Value] = []  # already in `<file>.data`: kept unless it must be rewritten
    referenced: set[Path] = set()
    for v, t in ext:
        f = _file_of(t)
        if f == data_path:
            in_data_file.append(v)
        elif mode == "reference":
            temporary.append((v, _moved(t, str(f), "")))
            referenced.add(f)
        elif f.is_relative_to(dest):
            rel = os.path.relpath(f, dest)
            if rel != str(t.location) or Path(str(t.base_dir)).resolve() != dest:
                v.const_value = _moved(t, rel, str(dest))  # same bytes, named from the new folder
            referenced.add(f)
        else:
            to_write.append(v)
    if big:
        to_write += [v for v in _initializer_values(model)
                     if v.const_value is not None and not isinstance(v.const_value, ir.ExternalTensor) and v.const_value.nbytes > 1024]
    if to_write:
        external = {id(v) for v, _ in ext}
        result.copied = sum(1 for v in to_write if id(v) in external)
        # the data file is replaced as a whole: what it held already is carried over
        to_write = in_data_file + to_write
        written = ir.external_data.convert_tensors_to_external([v.const_value for v in to_write], str(dest), data_name)
        pairs = list(zip(to_write, written))
        if mode == "copy":
            for v, t in pairs:
                v.const_value = t  # the document reads its weights from the saved file from now on
        else:
            temporary += pairs
        result.data_file = data_path
    elif in_data_file:
        referenced.add(data_path)
        if mode == "reference":
            temporary += [(v, _moved(v.const_value, str(data_path), "")) for v in in_data_file]
        else:
            for v in in_data_file:
                if Path(str(v.const_value.base_dir)).resolve() != dest or str(v.const_value.location) != data_name:
                    v.const_value = _moved(v.const_value, data_name, str(dest))
    with _swapped(temporary):
        proto = graph.to_proto()
    if not to_write and proto.ByteSize() >= TWO_GB:  # pragma: no cover - in-memory estimate missed it
        raise ValueError(f"{path}: the model is over 2 GB even with its weights stored externally")
    write_proto(proto, path)
    result.referenced = sorted(referenced)
    return result
