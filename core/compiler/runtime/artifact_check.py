"""What an artifact folder must be before anything in it is loaded: the one reader of manifest.json
and the one judge of the folder's files and of a run's inputs, for the workbench and for run.py.

Export copies this file into every artifact beside run.py (and records its hash), and run.py loads
it from its own folder; the workbench imports it from here. So it imports only the standard library
(numpy lazily, where arrays are read), never the workbench, and `main.py run`, `bench`, the GUI's
Open Artifact and run.py refuse the same things with the same sentences:

1. a manifest that is not JSON, a field of the wrong type, `inputs`/`outputs` missing
   (`read_manifest`), a path that leads out of the folder (`inside`);
2. a file that is missing, cut short or replaced: its size and sha256 differ from the manifest's
   `checksums` (`check_files`). Loading a shared library runs its code, and a truncated one dies
   of a bus error in the dynamic loader, so the library and the thread pool are loaded only when
   the manifest vouches for them, and only when they hold every byte their ELF headers name
   (`check_library`: a manifest edited to vouch for a cut file);
3. inputs a model does not take: missing, extra, of another dtype or shape (`check_feeds`);
4. a run that fails in the VM (`run_failure`): inputs that pass 3 but that the library refuses mean
   the manifest does not describe the library.

Each refusal is an `ArtifactRefused` carrying one sentence that names the file, field or input.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re

__all__ = [
    "available_bytes",
    "ArtifactRefused",
    "FORMAT_VERSION",
    "TARGET_KINDS",
    "MANIFEST",
    "LIBRARY",
    "RUNNER",
    "SOURCE_MODEL",
    "CHECK_MODULE",
    "Fields",
    "read_manifest",
    "choose_bucket",
    "input_dim_values",
    "path_text",
    "load_manifest",
    "inside",
    "check_paths",
    "check_files",
    "check_library",
    "check_folder",
    "file_checksum",
    "read_npz",
    "check_feeds",
    "run_failure",
    "cannot_load",
    "brief",
]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
TARGET_KINDS = ("cpu", "cuda")  # core.compiler.target.TARGET_KINDS (a test keeps the two equal)

MANIFEST = "manifest.json"
LIBRARY = "model.so"
RUNNER = "run.py"
SOURCE_MODEL = "model.onnx"
CHECK_MODULE = "artifact_check.py"  # this file, as export names it in the folder

_MISSING = object()


class ArtifactRefused(ValueError):
    """An artifact folder, manifest or input refused; str() is one sentence naming the thing."""


# ---------------------------------------------------------------------------------------------
# reading JSON with one-sentence refusals


def available_bytes() -> int | None:
    """Memory the kernel can still give (/proc/meminfo's MemAvailable); None where it does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _describe(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {json.dumps(value[:40])}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_dims(v) -> bool:
    return isinstance(v, dict) and all(_is_int(n) for n in v.values())


def _is_dtype(name) -> bool:
    """A numpy dtype name of a kind TVM's runtime holds: bool, integers, floats (bfloat16 and
    float8 where numpy knows them); a complex or text dtype failed in tvm.runtime.tensor."""
    if not isinstance(name, str):
        return False
    import numpy as np  # the one reader of dtype names; run.py has numpy too

    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError):
        return False
    return dtype.kind in "biuf" or dtype.name.startswith(("bfloat16", "float8", "float4"))


def _is_checksum(v) -> bool:
    return (isinstance(v, dict) and _is_int(v.get("size")) and v["size"] >= 0 and isinstance(v.get("sha256"), str)
            and re.fullmatch(r"[0-9a-f]{64}", v["sha256"]) is not None)


class Fields:
    """One JSON object of a manifest, read field by field: `get` returns a field's value after
    checking it, or refuses in one sentence that names the file and the field's path."""

    def __init__(self, data, source: str, where: str = ""):
        self.source, self.where = source, where
        self.data = data if isinstance(data, dict) else self.fail("", "an object", data)

    def fail(self, key: str, expected: str, value=_MISSING):
        name = f"{self.where}.{key}" if self.where and key else (key or self.where or "manifest")
        if value is _MISSING:
            raise ArtifactRefused(f"{self.source} is not a valid artifact manifest: it has no '{name}' ({expected}).")
        raise ArtifactRefused(f"{self.source} is not a valid artifact manifest: its '{name}' is {_describe(value)}, not {expected}.")

    def get(self, key: str, ok, expected: str, default=_MISSING):
        """The field `key` (`default` when absent, or null with a default of None); refused unless `ok(value)`."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING or (value is None and default is None):
            if default is _MISSING:
                self.fail(key, expected)
            return default
        if not ok(value):
            self.fail(key, expected, value)
        return value

    def number(self, key: str, default=None):
        return self.get(key, _is_num, "a number", default)

    def whole(self, key: str, default=None):
        return self.get(key, _is_int, "a whole number", default)

    def text(self, key: str, default=None):
        return self.get(key, lambda v: isinstance(v, str), "a text", default)

    def obj(self, key: str) -> "Fields | None":
        """The nested object `key` as Fields (None when absent or null)."""
        value = self.get(key, lambda v: isinstance(v, dict), "an object", None)
        return None if value is None else Fields(value, self.source, f"{self.where}.{key}" if self.where else key)

    def items(self, key: str, expected: str, default=_MISSING) -> list["Fields"]:
        """The list of objects `key` (required unless a default is given), each as Fields named like 'inputs[0]'."""
        values = self.get(key, lambda v: isinstance(v, list), expected, default)
        name = f"{self.where}.{key}" if self.where else key
        return [Fields(v, self.source, f"{name}[{i}]") for i, v in enumerate(values)]


# the largest size a manifest may give one dim (int32's): a negative or larger one is taken as
# damage, since random inputs made for it (bench's, run.py's) fail in numpy with an internal error
MAX_DIM = 2**31 - 1


def _tensor(f: Fields) -> dict:
    dtype = f.get("dtype", _is_dtype, "the numpy name of a bool, integer or float dtype")
    shape = f.get("shape", lambda v: isinstance(v, list) and all(_is_int(x) or isinstance(x, str) for x in v),
                  "a list of sizes and dim names")
    for i, d in enumerate(shape):
        if _is_int(d) and not 0 <= d <= MAX_DIM:
            f.fail(f"shape[{i}]", f"a size from 0 to {MAX_DIM:,}", d)
    return {"name": f.get("name", lambda v: isinstance(v, str), "a text"), "shape": list(shape), "dtype": dtype}


def _cpu(f: Fields | None) -> dict | None:
    """target.cpu (core.compiler.target.target_cpu's record) with its fields checked, as it is."""
    if f is None:
        return None
    f.text("name")
    for key in ("features", "requires"):
        f.get(key, _is_str_list, "a list of texts", [])
    return dict(f.data)


def _latency(f: Fields | None) -> dict | None:
    if f is None:
        return None
    return {"median": f.number("median"), "p10": f.number("p10"), "p90": f.number("p90"), "min": f.number("min"),
            "max": f.number("max"), "runs": f.whole("runs", 0)}


def _verification(f: Fields | None) -> dict | None:
    if f is None:
        return None
    return {
        "checked": f.get("checked", lambda v: isinstance(v, bool), "true or false", False),
        "reason": f.text("reason"), "inputs": f.text("inputs"), "reference": f.text("reference"),
        "dims": f.get("dims", _is_dims, "dim names with sizes", {}), "rtol": f.number("rtol"),
        "atol": f.number("atol"), "scale_rtol": f.number("scale_rtol"),
        "max_abs_err": f.number("max_abs_err"), "output_scale": f.number("output_scale"),
    }


def _bucket(f: Fields) -> dict:
    """A shape bucket (core.compiler.pipeline.buckets): its function in the library, the dims it is
    compiled for, and its compile checks (its own, and the general main's at its shape)."""
    function = f.get("function", lambda v: isinstance(v, str) and v.isidentifier(), "a function name")
    dims = f.get("dims", lambda v: _is_dims(v) and bool(v) and all(1 <= n <= MAX_DIM for n in v.values()),
                 "dim names with sizes of at least 1")
    return {"function": function, "dims": dict(dims), "verification": _verification(f.obj("verification")),
            "general_verification": _verification(f.obj("general_verification"))}


def input_dim_values(specs, shapes) -> dict:
    """The symbolic dims' sizes in the inputs' `shapes` (one per spec, in the specs' order)."""
    values = {}
    for s, shape in zip(specs, shapes):
        for d, n in zip(_spec(s)[1], shape):
            if isinstance(d, str):
                values.setdefault(d, int(n))
    return values


def choose_bucket(buckets, specs, shapes):
    """The shape bucket (a manifest record: dict or core.compiler.runtime.manifest.ShapeBucket)
    whose dims equal the symbolic dims of the inputs' `shapes` exactly, or None: the general main."""
    if not buckets:
        return None
    values = input_dim_values(specs, shapes)
    for b in buckets:
        if (b["dims"] if isinstance(b, dict) else b.dims) == values:
            return b
    return None


def path_text(bucket) -> str:
    """What ran, in words: 'bucket batch=2,sequence=96' or 'general kernels'."""
    if bucket is None:
        return "general kernels"
    dims = bucket["dims"] if isinstance(bucket, dict) else bucket.dims
    return "bucket " + ",".join(f"{k}={v}" for k, v in dims.items())


def read_manifest(data, source: str = MANIFEST) -> dict:
    """Every field of a parsed manifest checked and filled in with its default, as plain values
    (nested records as dicts keyed like core.compiler.runtime.manifest's dataclasses' fields; an
    absent optional record as None); `source` names the file in a refusal. Keys this version does
    not know are returned under "extra"."""
    f = Fields(data, str(source))
    target, tuning, memory, verification, measured = (f.obj(k) for k in ("target", "tuning", "memory_estimate", "verification", "measured"))
    lineage = f.get("kernel_lineage", lambda v: isinstance(v, dict) and all(_is_str_list(x) for x in v.values()),
                    "kernel names with lists of ONNX node names", {})
    kinds = " or ".join(TARGET_KINDS)
    values = {
        "format_version": f.whole("format_version", FORMAT_VERSION),
        "name": f.text("name", "model"),
        "library": f.text("library", LIBRARY),
        "runner": f.text("runner", RUNNER),
        "source_model": f.text("source_model", SOURCE_MODEL),
        "source_model_sha256": f.text("source_model_sha256"),
        "source_path": f.text("source_path"),
        "target": None if target is None else {
            "kind": target.get("kind", lambda v: v in TARGET_KINDS, kinds, "cpu"),
            "tvm_target": target.get("tvm_target", lambda v: isinstance(v, dict), "an object", {}),
            "cpu": _cpu(target.obj("cpu")),
        },
        "device": f.get("device", lambda v: v in TARGET_KINDS, kinds, "cpu"),
        "tvm_version": f.text("tvm_version"),
        "created": f.text("created"),
        "inputs": [_tensor(t) for t in f.items("inputs", "a list of tensors")],
        "outputs": [_tensor(t) for t in f.items("outputs", "a list of tensors")],
        "code_names": f.get("code_names", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                            "dim names with identifiers", {}),
        "rewrites": f.get("rewrites", _is_str_list, "a list of texts", []),
        "converter_fixes": f.get("converter_fixes", _is_str_list, "a list of texts", []),
        "passes": [{"name": p.get("name", lambda v: isinstance(v, str), "a text"), "seconds": p.number("seconds")}
                   for p in f.items("passes", "a list of steps", [])],
        "tuning": None if tuning is None else {
            "trials": tuning.whole("trials", 0), "budget_s": tuning.number("budget_s"), "database": tuning.text("database", ""),
            "summary": tuning.text("summary"), "kernels": tuning.whole("kernels", 0),
            "kernels_from_database": tuning.whole("kernels_from_database", 0),
            "winograd_choices_from_database": tuning.whole("winograd_choices_from_database", 0),
            "model_ab": tuning.get("model_ab", lambda v: isinstance(v, dict), "an object", None),
        },
        "kernel_lineage": {k: list(v) for k, v in lineage.items()},
        "parallel_kernels": f.whole("parallel_kernels"),
        "memory_estimate": None if memory is None else {
            "params_bytes": memory.whole("params_bytes", 0), "planned_bytes": memory.whole("planned_bytes", 0),
            "unplanned_bytes": memory.whole("unplanned_bytes", 0), "dims": memory.get("dims", _is_dims, "dim names with sizes", {}),
            "dynamic_allocations": memory.whole("dynamic_allocations", 0),
        },
        "verification": _verification(verification),
        "shape_buckets": [_bucket(b) for b in f.items("shape_buckets", "a list of shape buckets", [])],
        "compile_seconds": f.number("compile_seconds"),
        "measured": None,
        "cuda": f.get("cuda", lambda v: isinstance(v, dict), "an object", None),
        "thread_pool": f.text("thread_pool"),
        "input_alignment": f.get("input_alignment", lambda v: v in (16, 64) and type(v) is int, "16 or 64", None),
        "deploy": f.get("deploy", lambda v: isinstance(v, dict), "an object", None),
        "files": f.get("files", _is_str_list, "a list of file names", []),
        "checksums": f.get("checksums", lambda v: isinstance(v, dict) and all(_is_checksum(x) for x in v.values()),
                           "file names with their size and sha256", None),
    }
    if measured is not None:
        mem = measured.obj("memory")
        values["measured"] = {
            "latency_ms": _latency(measured.obj("latency_ms")),
            "memory": None if mem is None else {k: mem.whole(k) for k in ("params_bytes", "planned_bytes", "unplanned_bytes", "peak_rss_bytes")},
            "dims": measured.get("dims", _is_dims, "dim names with sizes", {}),
            "ort_latency_ms": _latency(measured.obj("ort_latency_ms")),
            "ratio_vs_ort": measured.number("ratio_vs_ort"),
            "measured_on": measured.text("measured_on"),
        }
    values["extra"] = {k: v for k, v in f.data.items() if k not in values}
    return values


# ---------------------------------------------------------------------------------------------
# the folder


def load_manifest(folder) -> tuple[dict, str]:
    """The parsed manifest.json of `folder` (not yet checked) and its path."""
    folder = os.fspath(folder)
    man_path = os.path.join(folder, MANIFEST)
    if not os.path.isdir(folder):
        raise ArtifactRefused(f"{folder} is not an artifact folder (expected a folder with {MANIFEST} and {LIBRARY}).")
    if not os.path.isfile(man_path):
        raise ArtifactRefused(f"{folder} has no {MANIFEST}; it is not an exported artifact.")
    try:
        with open(man_path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ArtifactRefused(f"{man_path} cannot be read as JSON ({e}).") from None
    except RecursionError:  # lists or objects nested thousands deep: json's parser recurses
        raise ArtifactRefused(f"{man_path} cannot be read as JSON (it nests lists or objects too deeply).") from None
    if not isinstance(data, dict):
        raise ArtifactRefused(f"{man_path} is not an artifact manifest (expected a JSON object).")
    return data, man_path


def inside(folder, man_path: str, value, what: str) -> str:
    """The path of `value`, a file the manifest names, refused unless it is a plain relative name
    inside the artifact folder: a manifest must not make anyone read or load files elsewhere."""
    if not isinstance(value, str) or not value.strip():
        raise ArtifactRefused(f"{man_path} names the {what} as {json.dumps(value)}, which is not a file name.")
    root = os.path.realpath(folder)
    path = os.path.join(os.fspath(folder), value)
    real = os.path.realpath(path)
    if os.path.isabs(value) or os.path.commonpath([real, root]) != root:
        raise ArtifactRefused(f"{man_path} names the {what} '{value}', outside the artifact folder; refusing to read it.")
    return path


def check_paths(folder, man_path: str, data: dict) -> str:
    """Every path the parsed manifest names, confined to the folder (before any field is read, so
    a path out of the folder is named first); returns the library's path."""
    lib_path = inside(folder, man_path, data.get("library", LIBRARY), "library")
    inside(folder, man_path, data.get("source_model", SOURCE_MODEL), "source model")
    inside(folder, man_path, data.get("runner", RUNNER), "runner")
    if "thread_pool" in data:
        inside(folder, man_path, data["thread_pool"], "thread pool library")
    files = data.get("files", [])
    if not isinstance(files, list):
        raise ArtifactRefused(f"{man_path} lists its files as {type(files).__name__}, not a list of file names.")
    for name in files:
        inside(folder, man_path, name, "file")
    sums = data.get("checksums")
    for name in sums if isinstance(sums, dict) else ():
        inside(folder, man_path, name, "file")
    return lib_path


def file_checksum(path) -> dict:
    """{"size": bytes, "sha256": hex digest} of the file at `path`."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return {"size": size, "sha256": digest.hexdigest()}


def check_files(folder, man_path: str, manifest: dict) -> None:
    """Every file the manifest's `checksums` lists has its recorded size and sha256, and the files
    that are loaded (the library, the thread pool library) or read (the source model) are among
    them: a file the manifest does not vouch for is never loaded. `manifest` is read_manifest's."""
    sums = manifest["checksums"] or {}
    vouched = [(manifest["library"], "library")]
    if manifest["thread_pool"]:
        vouched.append((manifest["thread_pool"], "thread pool library"))
    if os.path.isfile(os.path.join(os.fspath(folder), manifest["source_model"])):
        vouched.append((manifest["source_model"], "source model"))
    for name, what in vouched:
        if name not in sums:
            raise ArtifactRefused(
                f"{man_path} records no size and sha256 for the {what} '{name}' (an artifact exported before files were "
                f"checked, or a manifest edited by hand); re-export the artifact, as no file the manifest does not vouch for is loaded."
            )
    for name, want in sorted(sums.items()):
        path = os.path.join(os.fspath(folder), name)
        if not os.path.isfile(path):
            raise ArtifactRefused(f"{path} is missing: the manifest lists it with {want['size']:,} bytes (a copy that left it behind?).")
        try:
            have = file_checksum(path)
        except OSError as e:
            raise ArtifactRefused(f"{path} cannot be read ({e.strerror or e}).") from None
        if have["size"] != want["size"]:
            why = "a copy cut short?" if have["size"] < want["size"] else "replaced, or written to, after export?"
            raise ArtifactRefused(f"{path} is not the file this artifact was built with: {have['size']:,} bytes where the manifest says "
                                  f"{want['size']:,} ({why}).")
        if have["sha256"] != want["sha256"]:
            raise ArtifactRefused(f"{path} is not the file this artifact was built with: its sha256 differs from the manifest's "
                                  f"(changed after export?).")
    for name in [manifest["library"], manifest["thread_pool"]]:
        if name and os.path.isfile(os.path.join(os.fspath(folder), name)):
            check_library(os.path.join(os.fspath(folder), name))


def _elf_ends(head: bytes, read) -> list[tuple[int, str]]:
    """Where an ELF file's parts end (byte offset, what), from its header `head` (64 bytes) and
    `read(offset, size)`: the program header table, every segment's bytes, the section header table."""
    wide, order = head[4] == 2, "little" if head[5] == 1 else "big"

    def word(data: bytes, at: int, size: int) -> int:
        return int.from_bytes(data[at:at + size], order)

    if wide:  # ELF64: e_phoff 32, e_shoff 40, e_phentsize 54, e_phnum 56, e_shentsize 58, e_shnum 60
        phoff, shoff, phentsize, phnum, shentsize, shnum = (word(head, a, n) for a, n in ((32, 8), (40, 8), (54, 2), (56, 2), (58, 2), (60, 2)))
    else:  # ELF32: e_phoff 28, e_shoff 32, e_phentsize 42, e_phnum 44, e_shentsize 46, e_shnum 48
        phoff, shoff, phentsize, phnum, shentsize, shnum = (word(head, a, n) for a, n in ((28, 4), (32, 4), (42, 2), (44, 2), (46, 2), (48, 2)))
    ends = [(phoff + phnum * phentsize, "program header table")]
    if shoff:
        ends.append((shoff + shnum * shentsize, "section header table"))
    table = read(phoff, phnum * phentsize) if phnum and phentsize >= (56 if wide else 32) else b""
    for i in range(len(table) // phentsize if table else 0):
        entry = table[i * phentsize:(i + 1) * phentsize]
        offset, filesz = (word(entry, 8, 8), word(entry, 32, 8)) if wide else (word(entry, 4, 4), word(entry, 16, 4))
        if filesz:
            ends.append((offset + filesz, f"segment {i}"))
    return ends


def check_library(path) -> None:
    """Refuse an ELF shared library that ends before its own tables or segments do: the dynamic
    loader maps such a file and dies of a bus error where it reads past the end. The checksums
    catch a library cut short after export; this catches one the manifest was edited to vouch
    for. A file that is not ELF is left to the loader, which refuses it in words."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 6 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
                return

            def read(offset: int, count: int) -> bytes:
                f.seek(offset)
                return f.read(min(count, 1 << 20))

            ends = _elf_ends(head, read) if len(head) >= (64 if head[4] == 2 else 52) else [(64 if head[4] == 2 else 52, "ELF header")]
    except OSError as e:
        raise ArtifactRefused(f"{path} cannot be read ({e.strerror or e}).") from None
    end, what = max(ends)
    if end > size:
        raise ArtifactRefused(f"{path} is not a complete shared library: it has {size:,} bytes and its {what} ends at byte {end:,} "
                              f"(a copy cut short?).")


def check_folder(folder) -> tuple[dict, str, str]:
    """An artifact folder checked without loading anything: read_manifest's values, the manifest's
    path and the library's path. The paths first, then the fields, then the files."""
    data, man_path = load_manifest(folder)
    lib_path = check_paths(folder, man_path, data)
    manifest = read_manifest(data, man_path)
    check_files(folder, man_path, manifest)
    if not os.path.isfile(lib_path):
        raise ArtifactRefused(f"{os.fspath(folder)} has no compiled library '{os.path.basename(lib_path)}'.")
    return manifest, man_path, lib_path


# ---------------------------------------------------------------------------------------------
# inputs and runs


def read_npz(path) -> dict:
    """The arrays of a .npz file by name."""
    import numpy as np

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ArtifactRefused(f"{path}: no such file.")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError) as e:
        raise ArtifactRefused(f"{path} cannot be read as a numpy .npz file ({str(e).splitlines()[0] if str(e) else type(e).__name__}).") from None


def _spec(s) -> tuple[str, list, str]:
    if isinstance(s, dict):
        return s["name"], s["shape"], s["dtype"]
    return s.name, s.shape, s.dtype


def check_feeds(specs, feeds: dict, source=None) -> list:
    """The inputs in the model's order as C-ordered arrays, refused when one is missing or of
    another dtype or shape than `specs` (the manifest's inputs: dicts or TensorSpecs) say; with
    `source` (the .npz file they came from), an array that is no input is refused too."""
    import numpy as np

    names = [_spec(s)[0] for s in specs]
    if source is not None:
        unknown = sorted(set(feeds) - set(names))
        if unknown:
            raise ArtifactRefused(f"{os.fspath(source)} holds '{unknown[0]}', which is not an input of the model (inputs: {', '.join(names)}).")
    arrays = []
    for s in specs:
        name, shape, dtype = _spec(s)
        if name not in feeds:
            raise ArtifactRefused(f"input '{name}' is missing (the model needs {', '.join(names)}).")
        a = np.asarray(feeds[name], order="C")  # not ascontiguousarray: it makes a 0-d input shape (1,)
        if a.dtype != np.dtype(dtype):
            raise ArtifactRefused(f"input '{name}' has dtype {a.dtype}, the model needs {dtype}.")
        if a.ndim != len(shape) or any(isinstance(d, int) and d != n for d, n in zip(shape, a.shape)):
            raise ArtifactRefused(f"input '{name}' has shape {list(a.shape)}, the model needs {list(shape)}.")
        arrays.append(a)
    return arrays


def brief(error) -> str:
    """A TVM error cut to a clause: its last line, without "Check failed: (...) is false:" and
    bracketed prefixes, inner full stops as semicolons, at most 160 characters (the same rule as
    core.errors.brief_reason, which run.py cannot import)."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip() and not ln.strip().startswith(("#", "File ", "Traceback"))]
    line = lines[-1] if lines else type(error).__name__
    line = re.sub(r"^Check failed: \(.*?\) is false:\s*", "", line)
    line = re.sub(r"^\[[^\]]*\]\s*(:\s*\d+\s*:\s*\w+\s*:\s*)?", "", line)
    line = re.sub(r"\.\s+(?=\S)", "; ", line).strip().rstrip(".;: ")
    if len(line) > 160:
        line = line[:159].rstrip() + "…"
    return line or type(error).__name__


def cannot_load(path, error) -> str:
    """The sentence for a library, vouched for by the manifest, that TVM's runtime cannot load
    here (built by another TVM, say)."""
    text = str(error).strip()
    return f"{os.fspath(path)} cannot be loaded by the TVM runtime: {text.splitlines()[0] if text else type(error).__name__}."


def run_failure(error, man_path: str | None = None, library: str = LIBRARY) -> str:
    """The sentence for a run of the VM's main that raised `error` on inputs check_feeds passed.
    TVM's match_cast of a parameter against a constant size, a rank or a dtype then means the
    library was built for other inputs than the manifest describes (a manifest edited after
    export); anything else is the inputs' values or a symbolic size used inconsistently."""
    text = str(error)
    param = re.search(r"ErrorContext\(fn=\w+, loc=param\[\d+\], param=([^,()]+)", text)
    if param and man_path and re.search(r"mismatch to specified constant|expect \w+ with (ndim|dtype) ", text):
        name = param.group(1).strip()
        wanted = re.search(r"annotation=(R\.Tensor\(\([^)]*\)[^)]*\))", text)
        needs = f"needs input '{name}' as {wanted.group(1)}, not" if wanted else f"refuses input '{name}'"
        return (f"{man_path} does not match the compiled library {library}: the library {needs} as the manifest describes it "
                f"(a manifest edited after export?); re-export the artifact.")
    return f"the compiled model fails on these inputs at run time ({brief(error)}); check the inputs' shapes and values."
