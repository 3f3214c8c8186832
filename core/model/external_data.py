"""External data (weights in a separate file) wherever a model is written or handed to a tool.

An ONNX file names its external data by a path relative to the file's folder, and a loaded Graph
reads those weights lazily from the folder it came from (onnx_ir `ExternalTensor`s with an
absolute base folder). Writing the graph anywhere else, or giving its protobuf to a tool that
resolves paths against the working directory (onnx.checker, TVM's importer, onnxruntime), breaks
that link. This module decides, for each external tensor, what the written file says:

* ``"copy"`` (Save, Save As, `rewrite -o`): weights whose data file lies inside the destination
  folder are referenced relative to it; all others are copied into ``<file>.data`` beside the
  new file, so the saved model opens anywhere the folder goes. Another model's data file named
  as this module names them (``X.onnx.data``) is copied too: that model's next save may replace
  it. The live graph is re-pointed at the copies (the document now *is* the new file).
* ``"reference"`` (autosave): every external tensor is referenced by the absolute path of the file
  it is in now, so an autosave costs no copy of the weights; only weights that exist in memory
  alone (edited, folded) are stored with it. The live graph is left as it was.
* `self_contained_proto`: weights inline, for importers and onnxruntime (models under 2 GB).

Models whose protobuf would pass 2 GB store their in-memory weights in ``<file>.data`` too.

Atomic pairs: a kill at any moment of a save leaves the old model reading its old weights, or the
new one reading the new. A data file is never written in place: the new weights go to a name no
file has (``<file>.data``, else ``<file>.1.data``, ...; written under a temporary name, synced,
renamed), then the model is written under a temporary name and renamed over the old one, and
only then are this model's data files it no longer reads removed. Temporary files and unread
data files a killed save left are removed by the next save (core.files).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx_ir as ir

__all__ = ["SaveResult", "data_files", "external_tensors", "referenced_files", "write_model", "self_contained_proto", "content_fingerprint", "TWO_GB", "MODES"]

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


def write_model(graph, path: Path, mode: str) -> SaveResult:
    """Write `graph` to `path` with its external data handled per `mode` (see the module
    docstring), as a pair the old one is replaced by at one rename (see "Atomic pairs" there).
    A user's write problem (full disk, permission, read-only) is one sentence naming `path`
    (core.files); a failure leaves the old files and the live graph as they were."""
    if mode not in MODES:
        raise ValueError(f"unknown external-data mode '{mode}' (expected one of {', '.join(MODES)})")
    model = graph.model
    dest = path.parent.resolve()
    result = SaveResult(path)
    ext = external_tensors(model)
    big = _in_memory_bytes(model) >= TWO_GB
    temporary: list[tuple[ir.Value, ir.TensorProtocol]] = []  # only while serializing
    permanent: list[tuple[ir.Value, ir.TensorProtocol]] = []  # the live graph's from now on (copy mode, once written)
    to_write: list[ir.Value] = []
    in_data_file: list[ir.Value] = []  # in a data file of this model: kept unless one must be written
    referenced: set[Path] = set()
    for v, t in ext:
        f = _file_of(t)
        if f.parent == dest and _is_data_file_of(f.name, path.name):
            in_data_file.append(v)
        elif mode == "reference":
            temporary.append((v, _moved(t, str(f), "")))
            referenced.add(f)
        elif f.is_relative_to(dest) and not _managed_name(f.name):
            rel = os.path.relpath(f, dest)
            if rel != str(t.location) or Path(str(t.base_dir)).resolve() != dest:
                permanent.append((v, _moved(t, rel, str(dest))))  # same bytes, named from the new folder
            referenced.add(f)
        else:
            to_write.append(v)
    if big:
        to_write += [v for v in _initializer_values(model)
                     if v.const_value is not None and not isinstance(v.const_value, ir.ExternalTensor) and v.const_value.nbytes > 1024]
    data_path = None
    planned: list[ir.ExternalTensor] = []
    if to_write:
        external = {id(v) for v, _ in ext}
        result.copied = sum(1 for v in to_write if id(v) in external)
        # a new data file holds all of this model's external weights: the old one stays whole for the old .onnx
        to_write = in_data_file + to_write
        data_path = dest / _fresh_data_name(path)
        planned = _layout([v.const_value for v in to_write], data_path)
        (permanent if mode == "copy" else temporary).extend(zip(to_write, planned))
        result.data_file = data_path
    elif in_data_file:
        for v in in_data_file:
            t = v.const_value
            f = _file_of(t)
            referenced.add(f)
            if mode == "reference":
                temporary.append((v, _moved(t, str(f), "")))
            elif Path(str(t.base_dir)).resolve() != dest or str(t.location) != f.name:
                permanent.append((v, _moved(t, f.name, str(dest))))
    with _swapped(temporary + permanent):
        proto = graph.to_proto()
    if not to_write and proto.ByteSize() >= TWO_GB:  # pragma: no cover - in-memory estimate missed it
        raise ValueError(f"{path}: the model is over 2 GB even with its weights stored externally")
    data = proto.SerializeToString(deterministic=True)
    sources = [v.const_value for v in to_write]
    _write_pair(path, data, data_path, lambda f: _write_tensors(f, sources, planned), sum(t.length for t in planned))
    for v, t in permanent:
        v.const_value = t  # the document reads its weights from the saved files from now on
    keep = referenced | ({data_path} if data_path is not None else set())
    _remove_unread_data_files(path, keep)
    result.referenced = sorted(referenced)
    return result


def _write_pair(path: Path, model_bytes: bytes, data_path: Path | None, write_data, data_bytes: int) -> None:
    """The new data file under its new name (synced), then the model over `path` by a rename:
    until that rename the old model reads its old, untouched data; after it the new one reads
    the new data. On failure whatever this wrote is removed."""
    from ..files import check_space, fsync_folder, remove_stale_temporaries, write_temporary, writing

    needed = len(model_bytes) + data_bytes
    remove_stale_temporaries(path.parent)
    check_space(path, needed)
    made: list[Path] = []
    with writing(path, needed):  # said once what this wrote is gone: the free space is then true
        try:
            if data_path is not None:
                made.append(write_temporary(data_path, write_data))
                os.replace(made[-1], data_path)
                made[-1] = data_path
                fsync_folder(data_path.parent)
            made.append(write_temporary(path, model_bytes))
            os.replace(made[-1], path)
        except BaseException:
            for f in made:
                with contextlib.suppress(OSError):
                    os.unlink(f)
            raise
    fsync_folder(path.parent)


def _layout(tensors: list[ir.TensorProtocol], data_path: Path) -> list[ir.ExternalTensor]:
    """Where each tensor goes in the new data file: packed in order (as onnx_ir writes them)."""
    out, offset = [], 0
    for t in tensors:
        out.append(ir.ExternalTensor(data_path.name, offset, t.nbytes, t.dtype, shape=t.shape, name=t.name,
                                     doc_string=t.doc_string, base_dir=str(data_path.parent)))
        offset += t.nbytes
    return out


def _write_tensors(f, tensors: list[ir.TensorProtocol], planned: list[ir.ExternalTensor]) -> None:
    for t, where in zip(tensors, planned, strict=True):
        f.seek(where.offset)
        t.tofile(f)
        if f.tell() != where.offset + where.length:
            raise ValueError(f"tensor '{t.name}' wrote {f.tell() - where.offset} bytes where its size says {where.length}")


def _data_name_pattern(model_name: str) -> re.Pattern:
    return re.compile(re.escape(model_name) + r"(\.[0-9]+)?\.data")


def _is_data_file_of(name: str, model_name: str) -> bool:
    """Whether `name` is one of the names `_fresh_data_name` gives the data of `model_name`."""
    return _data_name_pattern(model_name).fullmatch(name) is not None


def _managed_name(name: str) -> bool:
    """A name the workbench gives some model's data ('X.onnx.data', 'X.onnx.3.data'): another
    model's such file may be replaced by that model's next save, so it is copied, not shared."""
    return re.fullmatch(r".+\.onnx(\.[0-9]+)?\.data", name) is not None


def _fresh_data_name(path: Path) -> str:
    """The first of '<file>.data', '<file>.1.data', ... that does not exist: a name the old model
    cannot be reading from, so writing it leaves the old pair whole."""
    for i in itertools.count():
        name = f"{path.name}.data" if i == 0 else f"{path.name}.{i}.data"
        if not os.path.lexists(path.parent / name):
            return name
    raise AssertionError("unreachable")  # pragma: no cover


def data_files(path: str | os.PathLike) -> list[Path]:
    """The data files named for the model `path` that exist ('<file>.data', '<file>.N.data'): what
    removing a model (an autosave) removes with it."""
    p = Path(path)
    try:
        names = os.listdir(p.parent)
    except OSError:
        return []
    return sorted(p.parent / n for n in names if _is_data_file_of(n, p.name))


def _remove_unread_data_files(path: Path, keep: set[Path]) -> None:
    """After the rename: this model's data files the new model does not read (the old pair's,
    or a killed save's) go."""
    keep = {k.resolve() for k in keep}
    for f in data_files(path):
        if f.resolve() not in keep:
            try:
                f.unlink()
            except OSError as e:
                logger.warning("cannot remove %s, which %s no longer reads: %s", f, path, e)
