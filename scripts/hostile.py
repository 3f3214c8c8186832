"""Hostile inputs: seeded generators of broken ONNX files, damaged artifacts, full and read-only
disks and killed saves, and a runner that sends them through the workbench and checks that each
ends in success or one clear error.

    .venv/bin/python scripts/hostile.py run --count 1000 --targets inspect,lower,gui [--seed 0]
    .venv/bin/python scripts/hostile.py run --count 300 --targets run,bench,runpy,open-artifact
    .venv/bin/python scripts/hostile.py run --count 40 --targets full-disk,read-only,kill-save   (as root)
    .venv/bin/python scripts/hostile.py make --count 20 --out /tmp/hostile [--family artifacts]   (just write the cases)

Targets (`run --help` says more):
  models     inspect, lower, gui: seeded mutations of the sample models, loaded, lowered, opened
  artifacts  run, bench, runpy, open-artifact: seeded damage to a copy of one exported artifact
             (libraries cut, flipped, replaced; listed files deleted, unlisted ones added; manifest
             fields deleted or of the wrong type, shapes changed, paths out of the folder, checksums
             edited, invalid or cut JSON) through `main.py run`, `main.py bench`, the artifact's own
             run.py and the GUI's Open Artifact
  disks      full-disk, read-only: `edit`, `rewrite`, `compile` onto a small tmpfs that is full or
             read-only (mounted per case; root only, skipped with a sentence where mount is refused)
  kills      kill-save: a save of a model with external weights killed with SIGKILL at a seeded moment

For every case and target the outcome must be `ok` (loaded / ran) or `error` (a
core.errors.WorkbenchError: one sentence, exit status 2 and one line on stderr on the command
line). Anything else is a failure: `traceback` (another exception escaped, an internal error),
`crash` (a process died of a signal, e.g. a segfault or a bus error in a native library) or
`hang` (no answer within the time limit, 30 s by default). So is an artifact's damage that must be
refused (a file the manifest vouches for, cut or replaced) but ran, or harmless damage (an extra
file) that was refused; a write onto a full or read-only disk that did not name the path or left
anything behind (a partial file, a temporary, an empty folder); and a killed save after which the
folder does not open as the old or the new version, or the next save leaves temporaries.
Cases run in long-lived worker processes (restarted after a crash or hang); the workbench's
commands are forked from one that has imported it once, so 1,000 cases take minutes, not hours.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

__all__ = ["MUTATIONS", "make_case", "generate", "run_cases"]


def _bases() -> list[tuple[str, bytes]]:
    from core.model.samples import SAMPLES

    out = [(name, build().SerializeToString()) for name, build in SAMPLES.items()]
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    if light.exists():
        out.append(("squeezenet", light.read_bytes()))
    return out


# ---- mutations: each takes (model bytes, rng, folder) and returns bytes to write as the model ----

def m_truncate(data, rng, folder):
    return data[: rng.randrange(0, max(1, len(data)))]


def m_byte_flips(data, rng, folder):
    b = bytearray(data)
    for _ in range(rng.randint(1, 32)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def m_byte_flips_header(data, rng, folder):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(min(64, len(b)))] = rng.randrange(256)
    return bytes(b)


def m_garbage(data, rng, folder):
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096)))


def _proto(data) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    return m


def m_huge_dims(data, rng, folder):
    m = _proto(data)
    vis = list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
    vi = rng.choice(vis)
    dims = vi.type.tensor_type.shape.dim
    if dims:
        d = rng.choice(dims)
        d.Clear()
        d.dim_value = rng.choice([2**31, 2**40, 2**62, 10**12])
    return m.SerializeToString()


def m_negative_dims(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer and rng.random() < 0.5:
        t = rng.choice(m.graph.initializer)
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice([-1, -7, -(2**40)])
    else:
        vi = rng.choice(list(m.graph.input))
        dims = vi.type.tensor_type.shape.dim
        if dims:
            d = rng.choice(dims)
            d.Clear()
            d.dim_value = rng.choice([-1, -3, -(2**33)])
    return m.SerializeToString()


def m_initializer_dims_mismatch(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        t.dims.append(rng.choice([3, 1000, 2**20]))
    return m.SerializeToString()


def m_missing_initializer(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer:
        del m.graph.initializer[rng.randrange(len(m.graph.initializer))]
    return m.SerializeToString()


def m_cycle(data, rng, folder):
    m = _proto(data)
    nodes = m.graph.node
    if len(nodes) >= 2:
        i = rng.randrange(len(nodes) - 1)
        j = rng.randrange(i + 1, len(nodes))
        if nodes[i].input and nodes[j].output:
            nodes[i].input[rng.randrange(len(nodes[i].input))] = nodes[j].output[0]
    return m.SerializeToString()


def m_self_loop(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    if n.input and n.output:
        n.input[0] = n.output[0]
    return m.SerializeToString()


def m_wrong_dtype(data, rng, folder):
    m = _proto(data)
    choice = rng.random()
    if choice < 0.4 and m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        t.data_type = rng.choice([0, 7, 9, 13, 999])
    elif choice < 0.7:
        vi = rng.choice(list(m.graph.input) + list(m.graph.output))
        vi.type.tensor_type.elem_type = rng.choice([0, 8, 9, 16, 999])
    else:
        n = rng.choice(m.graph.node)
        n.attribute.append(helper.make_attribute("to", rng.choice([0, 1, 999])))
    return m.SerializeToString()


def m_attribute_garbage(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    if n.attribute and rng.random() < 0.5:
        a = rng.choice(n.attribute)
        a.type = rng.choice([0, 1, 2, 3, 5, 7, 99])
    else:
        n.attribute.append(helper.make_attribute(rng.choice(["kernel_shape", "axis", "perm", "strides"]), rng.choice([[-1], -99, [2**40, 3], "x"])))
    return m.SerializeToString()


def m_unknown_op(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    n.op_type = rng.choice(["Frobnicate", "", "conv", "Conv\x00", "X" * 300])
    return m.SerializeToString()


def m_unknown_domain(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    n.domain = rng.choice(["com.evil", "ai.onnx.ml", "..", "com.microsoft"])
    return m.SerializeToString()


def m_opset(data, rng, folder):
    m = _proto(data)
    for o in m.opset_import:
        o.version = rng.choice([0, 1, 6, 999, -3, 2**40])
    if rng.random() < 0.3:
        m.ir_version = rng.choice([0, 1, 99, -1])
    return m.SerializeToString()


def m_duplicate_output(data, rng, folder):
    m = _proto(data)
    if len(m.graph.node) >= 2:
        a, b = rng.sample(range(len(m.graph.node)), 2)
        m.graph.node[a].output[0] = m.graph.node[b].output[0]
    return m.SerializeToString()


def m_drop_output_producer(data, rng, folder):
    m = _proto(data)
    out = m.graph.output[0].name
    keep = [n for n in m.graph.node if out not in n.output]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m.SerializeToString()


def m_empty_names(data, rng, folder):
    m = _proto(data)
    for n in m.graph.node:
        if rng.random() < 0.3 and n.input:
            n.input[rng.randrange(len(n.input))] = ""
    return m.SerializeToString()


def m_raw_data_size(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        arr = numpy_helper.to_array(t)
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.raw_data = arr.tobytes()[: rng.randrange(0, max(1, arr.nbytes))]
    return m.SerializeToString()


def _to_external(m: onnx.ModelProto, location: str, folder: Path, write: bool):
    if not m.graph.initializer:
        return
    t = max(m.graph.initializer, key=lambda t: t.ByteSize())
    raw = numpy_helper.to_array(t).tobytes()
    if write:
        (folder / "weights.bin").write_bytes(raw)
    for f in ("float_data", "int64_data", "int32_data", "double_data", "raw_data"):
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v


def m_external_outside(data, rng, folder):
    m = _proto(data)
    _to_external(m, rng.choice(["../secret.bin", "../../etc/passwd", "/etc/passwd", "sub/../../x.bin", "~/.ssh/id_rsa"]), folder, False)
    return m.SerializeToString()


def m_external_missing(data, rng, folder):
    m = _proto(data)
    _to_external(m, "missing.bin", folder, False)
    return m.SerializeToString()


def m_external_bad_offset(data, rng, folder):
    m = _proto(data)
    _to_external(m, "weights.bin", folder, True)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "offset":
                e.value = rng.choice(["-5", "999999999", "abc"])
            if e.key == "length" and rng.random() < 0.5:
                e.value = rng.choice(["-1", "99999999999"])
    return m.SerializeToString()


def m_subgraph_garbage(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    bad = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"])], "body", [], [helper.make_tensor_value_info("y", 1, None)])
    n.attribute.append(helper.make_attribute("then_branch", bad))
    return m.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: a varint, or length-delimited bytes / message."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def m_deep_nesting(data, rng, folder):
    # If nodes nested in then_branch subgraphs, deeper than protobuf's parser allows (100) in most
    # cases; encoded by hand, since the Python protobuf runtime refuses to build such messages
    depth = rng.choice([20, 50, 200, 1000])
    leaf = _field(2, b"leaf")
    graph = leaf
    for i in range(depth):
        then = _field(1, b"then_branch") + _field(20, 5) + _field(6, graph)
        other = _field(1, b"else_branch") + _field(20, 5) + _field(6, leaf)
        node = _field(1, b"c") + _field(3, f"if{i}".encode()) + _field(4, b"If") + _field(5, then) + _field(5, other)
        graph = _field(1, node) + _field(2, f"g{i}".encode())
    bool_scalar = _field(1, b"c") + _field(2, _field(1, _field(1, 9) + _field(2, b"")))  # c: bool scalar
    graph += _field(11, bool_scalar)
    return _field(1, 8) + _field(7, graph) + _field(8, _field(1, b"") + _field(2, 17))


MUTATIONS = {f.__name__[2:]: f for f in [
    m_truncate, m_byte_flips, m_byte_flips_header, m_garbage, m_huge_dims, m_negative_dims,
    m_initializer_dims_mismatch, m_missing_initializer, m_cycle, m_self_loop, m_wrong_dtype,
    m_attribute_garbage, m_unknown_op, m_unknown_domain, m_opset, m_duplicate_output,
    m_drop_output_producer, m_empty_names, m_raw_data_size, m_external_outside, m_external_missing,
    m_external_bad_offset, m_subgraph_garbage, m_deep_nesting,
]}


def make_case(index: int, seed: int, root: Path, bases=None) -> tuple[Path, str]:
    """Write hostile case number `index` into its own folder under root; return (path, kind)."""
    rng = random.Random(seed * 1_000_003 + index)
    bases = bases or _bases()
    base_name, data = bases[index % len(bases)]
    kind = list(MUTATIONS)[rng.randrange(len(MUTATIONS))]
    folder = root / f"case{index:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        out = MUTATIONS[kind](data, rng, folder)
        # a second mutation now and then: combined damage
        if rng.random() < 0.2:
            kind2 = list(MUTATIONS)[rng.randrange(len(MUTATIONS))]
            try:
                out = MUTATIONS[kind2](out, rng, folder)
                kind = f"{kind}+{kind2}"
            except Exception:  # noqa: BLE001 - the first damage made the bytes unparseable
                pass
    except Exception:  # noqa: BLE001 - a mutation that cannot apply to this base: flip bytes instead
        out = m_byte_flips(data, rng, folder)
        kind = "byte_flips"
    path = folder / f"{base_name}.onnx"
    path.write_bytes(out)
    return path, kind


def generate(count: int, seed: int, root: Path) -> list[tuple[Path, str]]:
    bases = _bases()
    return [make_case(i, seed, root, bases) for i in range(count)]


# ---- artifact corruptions: each takes (artifact folder, rng, other artifact) and damages the folder ----
# One real artifact of resources/models/mlp.onnx is compiled once per run; every case is a damaged
# copy of it, with an .npz of inputs that fit what its manifest (if still readable) says.

ARTIFACT_MODEL = ROOT / "resources" / "models" / "mlp.onnx"
OTHER_MODEL = ROOT / "resources" / "models" / "mm_relu.onnx"  # the "another artifact" a library is swapped from


def artifact_bases(root: Path, names=("mlp", "other")) -> dict[str, Path]:
    """{"mlp": folder, "other": folder}: artifacts of ARTIFACT_MODEL and OTHER_MODEL compiled and
    exported once into root/_bases (reused when there, so `make` and `run` in one folder compile once)."""
    out = {name: root / "_bases" / name for name in names}
    for name, folder in out.items():
        if not (folder / "manifest.json").is_file():
            from core.compiler.compile import compile_model

            compile_model(str(ARTIFACT_MODEL if name == "mlp" else OTHER_MODEL), "cpu", verify=False).export(folder)
    return out


def _libraries(folder: Path) -> list[str]:
    return [n for n in ("model.so", "threadpool.so") if (folder / n).is_file()]


def _cut(path: Path, rng) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(0, max(1, len(data)))])


def _read_json(folder: Path):
    return json.loads((folder / "manifest.json").read_text())


def _write_json(folder: Path, data) -> None:
    (folder / "manifest.json").write_text(json.dumps(data, indent=2))


def _json_paths(value, prefix=()) -> list[tuple]:
    """Every key path in a parsed manifest: ("target", "kind"), ("inputs", 0, "shape"), ..."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        out.append((*prefix, k))
        out.extend(_json_paths(v, (*prefix, k)))
    return out


def _at(data, path: tuple):
    for k in path[:-1]:
        data = data[k]
    return data


def a_so_truncate(folder, rng, other):
    name = rng.choice(_libraries(folder))
    _cut(folder / name, rng)
    return name


def a_so_byte_flips(folder, rng, other):
    name = rng.choice(_libraries(folder))
    b = bytearray((folder / name).read_bytes())
    for _ in range(rng.randint(1, 32)):
        b[rng.randrange(len(b))] ^= rng.randrange(1, 256)  # xor with a non-zero byte: always a change
    (folder / name).write_bytes(bytes(b))
    return name


def a_so_text(folder, rng, other):
    name = rng.choice(_libraries(folder))
    text = rng.choice([b"", b"not a library\n", b"#!/bin/sh\necho hello\n", b"\x7fELF" + bytes(rng.randrange(256) for _ in range(200)),
                       b"<html><body>404 Not Found</body></html>\n"])
    (folder / name).write_bytes(text)
    return name


def a_so_other(folder, rng, other):
    # another artifact's compiled library copied over this one's (model.so or the thread pool)
    name = rng.choice(_libraries(folder))
    shutil.copyfile(other / "model.so", folder / name)
    return name


def a_so_revouched(folder, rng, other):
    # model.so damaged and the manifest's checksum edited to match: the hashes no longer catch it,
    # so what loads it must still refuse in a sentence (a cut ELF file dies of a bus error when mapped)
    how = rng.choice(["cut", "text", "other"])
    {"cut": lambda: _cut(folder / "model.so", rng), "text": lambda: (folder / "model.so").write_bytes(b"not a library\n"),
     "other": lambda: shutil.copyfile(other / "model.so", folder / "model.so")}[how]()
    from core.compiler.runtime.artifact_check import file_checksum

    data = _read_json(folder)
    data["checksums"]["model.so"] = file_checksum(folder / "model.so")
    _write_json(folder, data)
    return how


def a_file_deleted(folder, rng, other):
    name = rng.choice(_read_json(folder)["files"])
    (folder / name).unlink()
    return name


def a_file_added(folder, rng, other):
    # harmless: a file the manifest does not list is never read
    name = rng.choice(["notes.txt", "model.so.bak", ".DS_Store", "extra.so", "out.npz", "manifest.json~", "Thumbs.db"])
    (folder / name).write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 2048))))
    return name


def a_manifest_field_deleted(folder, rng, other):
    data = _read_json(folder)
    gone = []
    for _ in range(rng.randint(1, 3)):
        paths = _json_paths(data)
        if not paths:
            break
        path = rng.choice(paths)
        del _at(data, path)[path[-1]]
        gone.append(".".join(map(str, path)))
    _write_json(folder, data)
    return ",".join(gone)


_WRONG = [None, True, False, 0, -1, 1.5, 10**30, "", "text", "../model.so", [], {}, [1, "a", None], {"a": 1}]


def a_manifest_wrong_type(folder, rng, other):
    data = _read_json(folder)
    path = rng.choice([p for p in _json_paths(data) if len(p) <= 3] if rng.random() < 0.7 else _json_paths(data))
    holder, old = _at(data, path), _at(data, path)[path[-1]]
    holder[path[-1]] = rng.choice([v for v in _WRONG if type(v) is not type(old)])
    _write_json(folder, data)
    return ".".join(map(str, path))


def a_manifest_shape(folder, rng, other):
    data = _read_json(folder)
    side = rng.choice(["inputs", "outputs"])
    spec = data[side][0]
    shape = spec["shape"]
    change = rng.choice(["dim", "dim", "drop", "add", "empty", "dtype"])
    if change == "dim":
        shape[rng.randrange(len(shape))] = rng.choice([0, 1, 3, 783, 785, -1, -784, 2**40, 2**63 + 5, "batch", "n", ""])
    elif change == "drop":
        del shape[rng.randrange(len(shape))]
    elif change == "add":
        shape.insert(rng.randrange(len(shape) + 1), rng.choice([1, 2, "batch"]))
    elif change == "empty":
        spec["shape"] = []
    else:
        spec["dtype"] = rng.choice(["float64", "float16", "int8", "int64", "bool", "complex64", "uint8"])
    _write_json(folder, data)
    return f"{side}.{change}"


def a_manifest_path_outside(folder, rng, other):
    data = _read_json(folder)
    where = rng.choice(["library", "runner", "source_model", "thread_pool", "files", "checksums", "link"])
    value = rng.choice(["../model.so", "/etc/passwd", str(other / "model.so"), "sub/../../elsewhere.so", "../../../../../../lib/libc.so.6"])
    if where == "files":
        data["files"].append(value)
    elif where == "checksums":
        data["checksums"][value] = dict(data["checksums"]["model.so"])
    elif where == "link":  # model.so a symbolic link to another artifact's library: inside by name, outside in fact
        (folder / "model.so").unlink()
        os.symlink(other / "model.so", folder / "model.so")
    else:
        data[where] = value
    _write_json(folder, data)
    return where


def a_manifest_checksums(folder, rng, other):
    data = _read_json(folder)
    sums = data["checksums"]
    name = rng.choice(sorted(sums))
    change = rng.choice(["size", "sha256", "library dropped", "missing file", "bad hex"])
    if change == "size":
        sums[name]["size"] = max(0, sums[name]["size"] + rng.choice([-1, 1, 4096, -(2**20)]))
    elif change == "sha256":
        sha = sums[name]["sha256"]
        i = rng.randrange(64)
        sums[name]["sha256"] = sha[:i] + ("0" if sha[i] != "0" else "1") + sha[i + 1:]
    elif change == "library dropped":
        del sums[rng.choice(["model.so", "threadpool.so"] if "threadpool.so" in sums else ["model.so"])]
    elif change == "missing file":
        sums["kernels.cu"] = {"size": 10, "sha256": "0" * 64}
    else:
        sums[name]["sha256"] = rng.choice(["", "xyz", "0" * 63, sums[name]["sha256"].upper()])
    _write_json(folder, data)
    return change


def a_manifest_invalid_json(folder, rng, other):
    text = (folder / "manifest.json").read_bytes()
    change = rng.choice(["syntax", "nested", "not utf-8", "empty", "bom", "not an object"])
    if change == "syntax":  # a character inserted where it breaks the JSON (inside a string it may not)
        for _ in range(100):
            at = rng.randrange(len(text))
            broken = text[:at] + rng.choice([b"{", b"}", b",", b"]", b'"', b":", b"\x00"]) + text[at:]
            try:
                json.loads(broken)
            except ValueError:
                break
        text = broken
    elif change == "nested":  # deeper than json's parser recurses
        depth = rng.choice([5_000, 100_000])
        text = text[:1] + b'"deep": ' + b"[" * depth + b"]" * depth + b"," + text[1:]
    elif change == "not utf-8":
        at = text.index(b'"name": "') + 9
        text = text[:at] + b"\xff\xfe" + text[at:]
    elif change == "empty":
        text = b""
    elif change == "bom":
        text = b"\xef\xbb\xbf" + text
    else:
        text = rng.choice([b"[]", b"null", b'"manifest"', b"42", b"[" + text + b"]"])
    (folder / "manifest.json").write_bytes(text)
    return change


def a_manifest_truncated(folder, rng, other):
    text = (folder / "manifest.json").read_bytes().rstrip()
    (folder / "manifest.json").write_bytes(text[: rng.randrange(0, len(text))])
    return ""


ARTIFACT_MUTATIONS = {f.__name__[2:]: f for f in [
    a_so_truncate, a_so_byte_flips, a_so_text, a_so_other, a_so_revouched, a_file_deleted, a_file_added,
    a_manifest_field_deleted, a_manifest_wrong_type, a_manifest_shape, a_manifest_path_outside,
    a_manifest_checksums, a_manifest_invalid_json, a_manifest_truncated,
]}
# what each damage must end in on every target: refused ("error"), harmless ("ok"), or either ("any":
# a deleted optional field, a null where a default applies, a dim name changed)
ARTIFACT_EXPECT = {name: "error" for name in ARTIFACT_MUTATIONS}
ARTIFACT_EXPECT.update(file_added="ok", manifest_field_deleted="any", manifest_wrong_type="any", manifest_shape="any")


def expected_outcome(kind: str) -> str:
    """What an artifact case of `kind` ("a+b" for combined damage) must end in: "error" when any
    of its damages must be refused, "ok" when all are harmless, else "any" (models' kinds: "any")."""
    wants = {ARTIFACT_EXPECT.get(k, "any") for k in kind.split("+")}
    return "error" if "error" in wants else "ok" if wants == {"ok"} else "any"


def _fitting_inputs(folder: Path) -> dict[str, np.ndarray]:
    """Inputs as the (damaged) manifest describes them, symbolic dims 2; the original model's
    where it cannot be read or describes no array that can be made."""
    fallback = {"input": np.zeros((2, 784), np.float32)}
    try:
        specs = _read_json(folder)["inputs"]
        feeds = {}
        for s in specs:
            shape = [2 if isinstance(d, str) else d for d in s["shape"]]
            if not isinstance(s["name"], str) or not all(isinstance(d, int) and 0 <= d <= 4096 for d in shape):
                return fallback
            feeds[s["name"]] = np.zeros(shape, np.dtype(s["dtype"]))
        return feeds or fallback
    except Exception:  # noqa: BLE001 - any damage to the manifest: the original inputs
        return fallback


def make_artifact_case(index: int, seed: int, root: Path, bases: dict[str, Path]) -> tuple[Path, str]:
    """Write damaged artifact number `index` as root/art{index}/art with in.npz beside it; return (folder, kind)."""
    rng = random.Random(seed * 1_000_003 + index + 500_000)
    names = list(ARTIFACT_MUTATIONS)
    case = root / f"art{index:04d}"
    shutil.rmtree(case, ignore_errors=True)
    folder = case / "art"
    shutil.copytree(bases["mlp"], folder, symlinks=True)
    kind = names[index % len(names)]  # every kind in any len(names) cases in a row; the damage's details are the rng's
    detail = ARTIFACT_MUTATIONS[kind](folder, rng, bases["other"])
    if rng.random() < 0.2:  # combined damage now and then
        kind2 = rng.choice(names)
        try:
            ARTIFACT_MUTATIONS[kind2](folder, rng, bases["other"])
            kind = f"{kind}+{kind2}"
        except Exception:  # noqa: BLE001 - the first damage left nothing for the second (a manifest gone)
            pass
    np.savez(case / "in.npz", **_fitting_inputs(folder))
    (case / "case.json").write_text(json.dumps({"kind": kind, "detail": detail, "expect": expected_outcome(kind)}))
    return folder, kind


def generate_artifacts(count: int, seed: int, root: Path) -> list[tuple[Path, str]]:
    bases = artifact_bases(root)
    return [make_artifact_case(i, seed, root, bases) for i in range(count)]


# ---- disks and kills: writes onto a full or read-only disk, and a save killed midway ----------
# A full or read-only disk is a small tmpfs mounted for each case (root only); a write there must
# end in one sentence naming the path (exit 2) and leave the disk exactly as it was. A kill-save
# case kills a save of a model with external weights at a seeded moment: the folder must still
# open as the old or the new version, and the next save must leave no temporaries behind.

DISK_SIZE = "2m"
DISK_MODELS = {"mlp": ARTIFACT_MODEL, "small_cnn": ROOT / "resources" / "models" / "small_cnn.onnx", "mm_relu": OTHER_MODEL}
DISK_COMMANDS = ("edit", "rewrite", "compile")
DISK_OUTPUTS = ("new-folder", "root", "replace")  # a folder the write would make, the disk's top, over an earlier file
KILL_X_SEED = 7


def _two_versions(folder: Path, n: int) -> dict[str, Path]:
    """Two versions of Y = (X @ W + b) @ V (the second subtracts b and has other weights), W in a
    data file beside each, V and b inline; a torn pair (one version's file, the other's weights)
    computes neither. Writes folder/{a,b}/model.onnx and folder/expected.npz (X and both outputs)."""
    from onnx.external_data_helper import set_external_data

    x = np.random.default_rng(KILL_X_SEED).standard_normal((1, n)).astype(np.float32)
    outs, paths = {}, {}
    for seed, name in enumerate("ab"):
        rng = np.random.default_rng(seed)
        w = rng.standard_normal((n, n // 2)).astype(np.float32)
        b = rng.standard_normal((n // 2,)).astype(np.float32)
        v = rng.standard_normal((n // 2, n)).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Sub" if seed else "Add", ["xw", "b"], ["h"]),
             helper.make_node("MatMul", ["h", "v"], ["y"])], "mm",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(v, "v")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "w.bin").write_bytes(w.tobytes())
        external = model.graph.initializer[0]
        set_external_data(external, "w.bin", offset=0, length=w.nbytes)
        external.data_location = TensorProto.EXTERNAL
        external.ClearField("raw_data")
        paths[name] = folder / name / "model.onnx"
        onnx.save_model(model, str(paths[name]))
        outs[name] = ((x @ w - b) if seed else (x @ w + b)) @ v
    np.savez(folder / "expected.npz", x=x, a=outs["a"], b=outs["b"])
    return paths


def _disk_models(root: Path) -> dict[str, Path]:
    models = dict(DISK_MODELS)
    ext = root / "_models" / "external"
    if not (ext / "a" / "model.onnx").is_file():
        _two_versions(ext, 512)  # 0.5 MB of weights in w.bin, 0.5 MB inline
    models["external"] = ext / "a" / "model.onnx"
    return models


def _disk_argv(command: str, model: Path, out: Path) -> list:
    if command == "edit":
        return ["edit", model, "-o", out]
    if command == "rewrite":
        return ["rewrite", model, "--rules", "eliminate-identity", "-o", out]
    return ["compile", model, "--target", "cpu", "-o", out]


def make_disk_case(index: int, seed: int, root: Path, target: str) -> tuple[Path, str]:
    """Write case number `index` of a full-disk or read-only target as root/{target}{index}/case.json."""
    rng = random.Random(seed * 1_000_003 + index + {"full-disk": 700_000, "read-only": 800_000}[target])
    # every command and output, and each pair of them in any 9 cases in a row
    command, output = DISK_COMMANDS[index % 3], DISK_OUTPUTS[(index // 3 + index) % 3]
    model = rng.choice(["small_cnn", "mlp"] if command == "compile" else ["small_cnn", "mlp", "mm_relu", "external"])
    case = root / f"{target}{index:04d}"
    case.mkdir(parents=True, exist_ok=True)
    spec = {"target": target, "command": command, "model": model, "output": output,
            "free": rng.choice([0.0, 0.1, 0.5, 0.9, 0.99]),  # of what the write needs (full-disk)
            "inodes": target == "full-disk" and model == "external" and command != "compile" and rng.random() < 0.3}
    (case / "case.json").write_text(json.dumps(spec))
    return case, f"{command}-{output}"


def make_kill_case(index: int, seed: int, root: Path) -> tuple[Path, str]:
    """Write kill-save case number `index`: two versions, which one is on disk first, when the save of the other is killed."""
    rng = random.Random(seed * 1_000_003 + index + 900_000)
    case = root / f"kill{index:04d}"
    n = rng.choice([256, 512, 1024])  # 0.25, 1 or 4 MB of weights in the data file
    _two_versions(case, n)
    first = rng.choice("ab")
    spec = {"first": first, "then": "b" if first == "a" else "a", "delay": rng.uniform(0.0, 1.2),
            "first_saved_by": rng.choice(["workbench", "workbench", "onnx"])}  # onnx: a data file of another name
    (case / "case.json").write_text(json.dumps(spec))
    return case, f"kill-save-{spec['first_saved_by']}"


def generate_disk(count: int, seed: int, root: Path, target: str) -> list[tuple[Path, str]]:
    if target == "kill-save":
        return [make_kill_case(i, seed, root) for i in range(count)]
    _disk_models(root)
    return [make_disk_case(i, seed, root, target) for i in range(count)]


def mount_refused(folder: Path, target: str = "full-disk") -> str | None:
    """None when a tmpfs can be mounted on `folder` here (and, for the read-only target, remounted
    read-only); else why not, in one sentence."""
    if shutil.which("mount") is None:
        return f"there is no mount command here, so the {target} target is skipped."
    folder.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True, text=True)
    if r.returncode != 0:
        return f"a tmpfs cannot be mounted here ({r.stderr.strip() or 'mount refused'}), so the {target} target is skipped."
    try:
        if target == "read-only":
            r = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True, text=True)
            if r.returncode != 0:
                return f"a tmpfs cannot be remounted read-only here ({r.stderr.strip() or 'remount refused'}), so the read-only target is skipped."
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)
    return None


def _snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder`: a file by its size and sha256, a folder as 'folder'."""
    import hashlib

    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = "folder" if p.is_dir() and not p.is_symlink() else f"{p.lstat().st_size}:{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}"
    return out


def _footprint(path: Path) -> int:
    """Bytes a file or folder takes on a tmpfs (whole 4 kB pages per file)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in files)


# ---- worker: runs cases from stdin, one JSON line per case ------------------------------------

def _worker(target: str) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from core.errors import WorkbenchError

    handlers = {}

    def do_inspect(path):
        from core import load_model
        from core.model.summary import format_summary, summarize

        format_summary(summarize(load_model(path)))

    def do_lower(path):
        # what `lower MODEL` and the Lowering panel run: core.compiler.lowering.lower(graph, "cpu"), every
        # stage down to LLVM IR; LoweringError / UnsupportedOpError are WorkbenchErrors
        from core import load_model
        from core.compiler.lowering import lower

        lower(load_model(path), "cpu")

    def window():
        # one MainWindow per worker; message boxes patched to record their text, and an exception
        # in any slot or thread recorded through sys.excepthook / threading.excepthook
        import threading

        from PySide6.QtWidgets import QApplication, QMessageBox

        from app.main_window import MainWindow

        app = QApplication.instance() or QApplication([])
        if "window" not in handlers:
            shown, escaped = handlers.setdefault("shown", []), handlers.setdefault("escaped", [])

            def record_box(*a, **k):
                shown.append(str(a[2]) if len(a) > 2 else str(k.get("text", "")))
                return QMessageBox.Ok

            QMessageBox.warning = staticmethod(record_box)
            QMessageBox.critical = staticmethod(record_box)
            QMessageBox.information = staticmethod(record_box)
            QMessageBox.question = staticmethod(lambda *a, **k: QMessageBox.Discard)
            sys.excepthook = lambda t, v, tb: escaped.append(f"{t.__name__}: {v}")
            threading.excepthook = lambda a: escaped.append(f"{a.exc_type.__name__}: {a.exc_value}")
            from PySide6.QtCore import QSettings

            settings = QSettings(str(Path(tempfile.mkdtemp(prefix="hostile-gui-")) / "settings.ini"), QSettings.IniFormat)
            handlers["window"] = MainWindow(settings=settings)
        handlers["shown"].clear()
        handlers["escaped"].clear()
        return app, handlers["window"], handlers["shown"], handlers["escaped"]

    def refusal(shown: list[str]):
        # a refusal shows exactly one message box, one sentence that is no internal error
        if len(shown) != 1:
            raise RuntimeError(f"a refused open showed {len(shown)} messages: {shown[:3]}")
        if "internal error" in shown[0] or "Traceback" in shown[0]:
            raise RuntimeError(shown[0])
        return WorkbenchError(shown[0])

    def do_gui(path):
        # the GUI's load path: MainWindow.open_model loads, builds the view and lays it out on a
        # worker thread; wait=True runs the event loop until the model is drawn or refused. A
        # refusal is a warning box; an exception escaping into the event loop is a traceback.
        app, w, shown, escaped = window()
        before = w.document.graph
        ok = w.open_model(str(path), wait=True)
        for _ in range(3):  # let panels react to the new model (queued slots, timers at 0 ms)
            app.processEvents()
        if escaped:
            raise RuntimeError(f"exception escaped into the event loop: {escaped[0]}")
        if ok:
            if w.document.graph is None or w.document.graph is before or w.canvas.view is None:
                raise RuntimeError("open_model reported success but the window shows no new model")
            return
        if w.document.graph is not before:
            raise RuntimeError("a refused open replaced the open model")
        raise refusal(shown)

    def do_open_artifact(path):
        # File > Open Compiled Artifact once its folder dialog has answered: CompilePanel.open_artifact
        # checks the folder, asks (answered "Load and Run" here), loads, and measures on a worker
        # thread. A refusal before the job is one warning box; a failed job the panel's status line.
        app, w, shown, escaped = window()
        panel = w.panels["compile"].widget()
        if "panel" not in handlers:
            panel.confirm_load = lambda folder: True
            panel.runs.setValue(2)
            panel.vs_ort.setChecked(False)
            handlers["panel"] = panel
        panel.progress.setFormat("")  # the previous case's "done" must not read as this one's
        before = panel.job
        panel.open_artifact(str(path))
        job = panel.job
        if job is not before:
            while not job.isFinished():
                app.processEvents()
                time.sleep(0.005)
            for _ in range(50):  # the job's outcome signals, queued to this thread
                app.processEvents()
                if panel.progress.format() in ("done", "failed", "cancelled"):
                    break
                time.sleep(0.002)
        if escaped:
            raise RuntimeError(f"exception escaped into the event loop: {escaped[0]}")
        if job is before:
            raise refusal(shown)
        if shown:
            raise RuntimeError(f"a loaded artifact also showed messages: {shown[:3]}")
        ended, status = panel.progress.format(), panel.status.text()
        if ended == "done":
            return
        if ended == "failed" and "internal error" not in status and "\n" not in status.strip():
            raise WorkbenchError(status)
        raise RuntimeError(f"the artifact's job ended as {ended!r}: {status}")

    def ort_outputs(proto, x):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = so.inter_op_num_threads = 1  # no pool threads in a process that forks savers
        return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    def do_kill_save(path):
        # a save of a model with external weights (core.save_model, as Save and `edit` do) forked
        # from this worker and killed with SIGKILL at a seeded moment of it; then the folder must
        # open with core's loader and compute the old version or the new, and the next save must
        # leave no temporary file and no data file the model does not read
        import signal

        from core import load_model, save_model
        from core.files import is_temporary_name
        from core.model.external_data import data_files, referenced_files, self_contained_proto

        case = Path(path)
        spec = json.loads((case / "case.json").read_text())
        expected = np.load(case / "expected.npz")
        x, first, then = expected["x"], case / spec["first"] / "model.onnx", case / spec["then"] / "model.onnx"
        folder = case / "target"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        target = folder / "model.onnx"
        if spec["first_saved_by"] == "workbench":
            save_model(load_model(first), target)
        else:  # onnx's layout: the weights in w.bin, a name the workbench's saves do not use
            for p in first.parent.iterdir():
                shutil.copyfile(p, folder / p.name)
        key = ("save seconds", str(then))
        if key not in handlers:  # how long a save of this model takes here (the median of 3, warm)
            scratch = Path(tempfile.mkdtemp(prefix="hostile-save-"))
            took = []
            for _ in range(3):
                g = load_model(then)
                t0 = time.perf_counter()
                save_model(g, scratch / "model.onnx")
                took.append(time.perf_counter() - t0)
            shutil.rmtree(scratch, ignore_errors=True)
            handlers[key] = sorted(took)[1]
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the saver: never returns
            status = 1
            try:
                os.close(read_end)
                graph = load_model(then)
                os.write(write_end, b"r")  # about to save: the kill's clock starts
                save_model(graph, target)
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        os.read(read_end, 1)
        os.close(read_end)
        time.sleep(spec["delay"] * handlers[key])
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        try:
            graph = load_model(target)
        except WorkbenchError as e:
            raise RuntimeError(f"after the kill the model does not open: {e}") from None
        got = ort_outputs(self_contained_proto(graph), x)

        def which(out):
            for name in ("a", "b"):
                want = expected[name]
                if out.shape == want.shape and np.allclose(out, want, rtol=1e-3, atol=1e-4 * np.abs(want).max()):
                    return name
            return None

        version = which(got)
        if version is None:
            raise RuntimeError("after the kill the model computes neither version (a torn pair)")
        save_model(graph, target)  # the next save: it cleans up after the killed one
        graph = load_model(target)
        reads = {p.resolve() for p in referenced_files(graph.model)}
        left = [p.name for p in folder.iterdir() if is_temporary_name(p.name)]
        left += [p.name for p in data_files(target) if p.resolve() not in reads]
        if left:
            raise RuntimeError(f"the save after the kill left {', '.join(sorted(left))} in {folder}")
        if which(ort_outputs(self_contained_proto(graph), x)) != version:
            raise RuntimeError("the save after the kill changed what the model computes")
        return "old" if version == spec["first"] else "new"

    fn = {"inspect": do_inspect, "lower": do_lower, "gui": do_gui, "open-artifact": do_open_artifact, "kill-save": do_kill_save}[target]
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        t0 = time.perf_counter()
        try:
            said = fn(path)
            res = {"outcome": "ok", **({"found": said} if said else {})}
        except WorkbenchError as e:
            msg = str(e)
            res = {"outcome": "error", "message": msg}
            if "\n" in msg.strip() or "Traceback" in msg:
                res = {"outcome": "traceback", "message": msg[:500]}
        except RecursionError as e:
            res = {"outcome": "traceback", "message": f"RecursionError: {e}"[:500]}
        except Exception as e:  # noqa: BLE001 - this is what the run is looking for
            res = {"outcome": "traceback", "message": f"{type(e).__name__}: {e}"[:500]}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        print(json.dumps(res), flush=True)


class _Worker:
    def __init__(self, target: str):
        self.target = target
        self.proc = None
        self.timeout = 30.0  # the cli worker's limit per command

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "worker", "--target", self.target, "--timeout", str(self.timeout)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, cwd=str(ROOT),
        )

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def run(self, path: Path, timeout: float) -> dict:
        return self.request(str(path), timeout)

    def request(self, line: str, timeout: float) -> dict:
        """Send one line (a case's path, or for the cli worker a JSON request) and read its answer."""
        import selectors

        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(f"{line}\n")
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        t0 = time.perf_counter()
        if not sel.select(timeout):
            self.stop()
            return {"outcome": "hang", "seconds": round(time.perf_counter() - t0, 1)}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.poll()
            self.stop()
            return {"outcome": "crash", "message": f"worker exited with status {code}"}
        return json.loads(line)


# ---- commands: targets judged as a user sees them, by exit status and stderr -----------------

_PROGRESS = re.compile(r"^\[\s*[\d.]+%\]")  # compile's progress lines on stderr


def judge(returncode: int, stderr: str, seconds: float, progress: bool = False) -> dict:
    """How a command ended: `ok` (exit 0), `error` (exit 2 and exactly one line on stderr, not
    counting compile's progress lines when `progress`), `crash` (killed by a signal: a bus error,
    a segfault) or `traceback` (anything else: exit 1, an internal error, several lines)."""
    import signal

    res = {"seconds": round(seconds, 3)}
    lines = [ln for ln in stderr.strip().splitlines() if not (progress and _PROGRESS.match(ln))]
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.Signals._value2member_map_ else str(-returncode)
        return {**res, "outcome": "crash", "message": f"killed by {name}; stderr: {stderr[-300:]}"}
    if "Traceback" in stderr:
        return {**res, "outcome": "traceback", "message": stderr[-500:]}
    if returncode == 0:
        return {**res, "outcome": "ok"}
    if returncode == 2 and len(lines) == 1:
        return {**res, "outcome": "error", "message": lines[0]}
    return {**res, "outcome": "traceback", "message": f"exit status {returncode}, {len(lines)} lines on stderr: {stderr[-500:]}"}


def run_command(argv: list[str], timeout: float, cwd=None, env=None) -> dict:
    """Run argv as a fresh process (its own process group, killed after `timeout` s: `hang`) and judge it."""
    import signal

    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env, start_new_session=True)
    try:
        _out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"outcome": "hang", "seconds": round(time.perf_counter() - t0, 1)}
    return judge(proc.returncode, err, time.perf_counter() - t0)


def _forked_main(argv: list[str], cwd: str, timeout: float) -> dict:
    """`python main.py ARGV` as a child forked from this process (which has imported the
    workbench and TVM once, as tests.helpers.run_cli does): main.main in the child, its stdout
    dropped and its stderr to a file; returns its exit status (minus the signal that killed it)
    and stderr, or a `hang` when it ran past `timeout` s (then killed)."""
    import signal
    import traceback

    with tempfile.TemporaryDirectory(prefix="hostile-cli-") as tmp:
        err_path = os.path.join(tmp, "stderr")
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            status = 1
            try:
                os.setsid()
                os.chdir(cwd)
                for fd, path in ((1, os.devnull), (2, err_path)):
                    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                    os.dup2(target, fd)
                    os.close(target)
                sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stdout
                sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
                sys.argv = [str(ROOT / "main.py"), *argv]
                import main as entry

                code = entry.main(argv)
                status = 0 if code is None else code
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - an uncaught error ends the interpreter with status 1
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(status)
        while True:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.perf_counter() - t0 > timeout:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"outcome": "hang", "seconds": round(time.perf_counter() - t0, 1)}
            time.sleep(0.005)
        seconds = time.perf_counter() - t0
        with open(err_path, errors="replace") as f:
            stderr = f.read()
    return {"returncode": os.waitstatus_to_exitcode(wait_status), "stderr": stderr, "seconds": seconds}


def _cli_worker(timeout: float) -> None:
    """The `cli` worker: imports what every TVM command imports (the runtime readied first, as
    `python main.py` does), then runs each request {"argv", "cwd"} from stdin by _forked_main."""
    from core.compiler.runtime import prepare

    prepare()
    import cli  # noqa: F401
    import core.compiler.compile  # noqa: F401
    import main  # noqa: F401
    import onnxruntime  # noqa: F401
    import tvm.relax  # noqa: F401

    for line in sys.stdin:
        if line.strip():
            req = json.loads(line)
            print(json.dumps(_forked_main(req["argv"], req.get("cwd", str(ROOT)), timeout)), flush=True)


class _Cli:
    """`main.py ARGV` runs, forked from one `cli` worker (restarted if it dies)."""

    def __init__(self):
        self.worker = _Worker("cli")

    def stop(self):
        self.worker.stop()

    def raw(self, argv: list, timeout: float, cwd: Path = ROOT) -> dict:
        """{"returncode", "stderr", "seconds"}, or an outcome (hang; crash of the worker itself)."""
        self.worker.timeout = timeout
        return self.worker.request(json.dumps({"argv": [str(a) for a in argv], "cwd": str(cwd)}), timeout + 30)

    def main(self, argv: list, timeout: float, progress: bool = False) -> dict:
        """The command's outcome, judged."""
        res = self.raw(argv, timeout)
        return res if "outcome" in res else judge(res["returncode"], res["stderr"], res["seconds"], progress)


class _Command:
    """An artifact target run as a command per case (the `_Worker` interface): the workbench's
    `run` and `bench` forked by a `cli` worker, the artifact's own run.py as a fresh process with
    nothing of the workbench on its path."""

    def __init__(self, target: str, cli: _Cli):
        self.target, self.cli = target, cli

    def stop(self):
        pass

    def run(self, path: Path, timeout: float) -> dict:
        path, inputs = Path(path), Path(path).parent / "in.npz"
        if self.target == "run":
            return self.cli.main(["run", path, "--inputs", inputs], timeout)
        if self.target == "bench":
            return self.cli.main(["bench", path, "--runs", "2"], timeout)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return run_command([sys.executable, str(path / "run.py"), "--inputs", str(inputs)], timeout, path.parent, env)


class _Disk:
    """The full-disk and read-only targets (the `_Worker` interface): mount a tmpfs in the case's
    folder, put an earlier file there and fill it (or make it read-only), run the command by the
    `cli` worker, and check that it ended in one sentence naming the path and left the disk as it was."""

    def __init__(self, target: str, cli: _Cli):
        self.target, self.cli = target, cli
        self.needed = {}  # (command, model) -> bytes its output takes, measured once on a normal disk

    def stop(self):
        pass

    def _needed(self, root: Path, command: str, model: Path, timeout: float) -> int:
        key = (command, model.name)
        if key not in self.needed:
            out = root / "_needed" / f"{command}-{model.stem}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            dest = out / ("art" if command == "compile" else "m.onnx")
            r = self.cli.main(_disk_argv(command, model, dest), timeout, progress=True)
            if r["outcome"] != "ok":
                raise RuntimeError(f"{command} of {model} fails on a normal disk: {r.get('message', r['outcome'])}")
            self.needed[key] = sum(_footprint(p) for p in out.iterdir())
        return self.needed[key]

    def run(self, path: Path, timeout: float) -> dict:
        spec, root = json.loads((Path(path) / "case.json").read_text()), Path(path).parent
        models = _disk_models(root)
        model, command = models[spec["model"]], spec["command"]
        mnt = Path(path) / "mnt"
        mnt.mkdir(exist_ok=True)
        try:
            needed = self._needed(root, command, model, timeout) if self.target == "full-disk" else 0
        except RuntimeError as e:
            return {"outcome": "traceback", "message": str(e)}
        options = f"size={DISK_SIZE}"
        if spec["inodes"]:
            options += ",nr_inodes=3" if spec["output"] == "replace" else ",nr_inodes=2"  # the top folder, an earlier file, one more
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], capture_output=True, text=True)
        if mounted.returncode != 0:
            return {"outcome": "traceback", "message": f"mount refused: {mounted.stderr.strip()}"}
        try:
            name = "art" if command == "compile" else "m.onnx"
            out = mnt / "out" / name if spec["output"] == "new-folder" else mnt / name
            if spec["output"] == "replace":  # an earlier file (or artifact) where the new one goes: it must survive
                if command == "compile":
                    shutil.copytree(artifact_bases(root, ["other"])["other"], out)
                else:
                    shutil.copyfile(models["mm_relu"], out)
            if self.target == "full-disk" and not spec["inodes"]:
                st = os.statvfs(mnt)
                free = st.f_bavail * st.f_frsize
                leave = max(0, min(int(needed * spec["free"]), needed - 8192))
                if free > leave:
                    with open(mnt / "filler", "wb") as f:
                        f.write(b"\0" * ((free - leave) // 4096 * 4096))
            if self.target == "read-only":
                subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)
            before = _snapshot(mnt)
            res = self.cli.raw(_disk_argv(command, model, out), timeout)
            if "outcome" in res:  # a hang, or the cli worker itself died
                return res
            r = judge(res["returncode"], res["stderr"], res["seconds"], progress=True)
            problems = []
            if r["outcome"] == "ok":
                problems.append(f"{command} succeeded on a {'full' if self.target == 'full-disk' else 'read-only'} disk")
            elif r["outcome"] == "error" and str(mnt) not in r["message"]:
                problems.append("the sentence does not name the path")
            if re.search(r"\bdone\b", res["stderr"]):
                problems.append("it printed 'done'")
            after = _snapshot(mnt)
            if after != before:
                changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                problems.append(f"the disk changed: {', '.join(changed[:5])}")
            if problems and r["outcome"] in ("ok", "error"):
                r["problem"] = "; ".join(problems)
            return r
        finally:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


MODEL_TARGETS = ("inspect", "lower", "gui")
ARTIFACT_TARGETS = ("run", "bench", "runpy", "open-artifact")
DISK_TARGETS = ("full-disk", "read-only", "kill-save")
ALL_TARGETS = MODEL_TARGETS + ARTIFACT_TARGETS + DISK_TARGETS
_COMMAND_TARGETS = {"run", "bench", "runpy"}
_TARGETS_HELP = """targets:
  broken ONNX files (seeded mutations of the sample models):
    inspect        load and summarize, as `main.py inspect` does
    lower          lower to LLVM IR, as `main.py lower` and the Lowering panel do
    gui            the main window's Open (MainWindow.open_model), in-process
  damaged artifacts (seeded damage to a copy of one exported artifact of resources/models/mlp.onnx):
    run            main.py run ART --inputs IN.npz (IN.npz fits the manifest)
    bench          main.py bench ART --runs 2
    runpy          python ART/run.py --inputs IN.npz, the artifact's own runner
    open-artifact  File > Open Compiled Artifact (CompilePanel.open_artifact), in-process
  disks and kills (each target its own cases):
    full-disk      main.py edit / rewrite / compile onto a 2 MB tmpfs filled so the output cannot fit
                   (root only: mount; skipped with a sentence where mount is refused)
    read-only      the same commands onto a tmpfs remounted read-only
    kill-save      a save of a model with external weights (core.save_model), killed with SIGKILL at a
                   seeded moment: the folder opens as the old or the new version, the next save leaves
                   no temporaries
"""


def run_cases(cases, targets: list[str], timeout: float = 30.0, log=None) -> dict:
    """Every case through every target; a failure is an outcome other than ok / error, or (for an
    artifact's damage that must be refused, or that is harmless) not the one expected_outcome says."""
    results: dict[str, Counter] = {t: Counter() for t in targets}
    failures = []
    cli = _Cli()
    workers = {t: _Command(t, cli) if t in _COMMAND_TARGETS else _Disk(t, cli) if t in ("full-disk", "read-only") else _Worker(t)
               for t in targets}
    found: dict[str, Counter] = {t: Counter() for t in targets}
    slowest = {t: 0.0 for t in targets}
    slowest_case = {t: "" for t in targets}
    busy = {t: 0.0 for t in targets}  # seconds spent per target, worker start-ups included
    try:
        for i, (path, kind) in enumerate(cases):
            expect = expected_outcome(kind)
            for t in targets:
                t0 = time.perf_counter()
                r = workers[t].run(path, timeout)
                busy[t] += time.perf_counter() - t0
                results[t][r["outcome"]] += 1
                if "found" in r:
                    found[t][r["found"]] += 1
                if r.get("seconds", 0.0) > slowest[t]:
                    slowest[t], slowest_case[t] = r.get("seconds", 0.0), f"{path} ({kind}, {r['outcome']})"
                if r["outcome"] not in ("ok", "error") or "problem" in r:
                    failures.append({"case": str(path), "kind": kind, "target": t, **r})
                elif expect != "any" and r["outcome"] != expect:
                    failures.append({"case": str(path), "kind": kind, "target": t, "expected": expect, **r})
            if log and (i + 1) % 50 == 0:
                log(f"{i + 1} cases: " + "; ".join(f"{t} {dict(c)}" for t, c in results.items()))
    finally:
        for w in workers.values():
            w.stop()
        cli.stop()
    return {"results": {t: dict(c) for t, c in results.items()}, "slowest_s": slowest, "slowest_case": slowest_case,
            "target_seconds": {t: round(v, 1) for t, v in busy.items()}, "failures": failures,
            "found": {t: dict(c) for t, c in found.items() if c}}


def _merge(total: dict, part: dict) -> None:
    """Add one family's run_cases summary into the run's."""
    for key in ("results", "slowest_s", "slowest_case", "target_seconds", "found"):
        total.setdefault(key, {}).update(part[key])
    total.setdefault("failures", []).extend(part["failures"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Hostile inputs (broken models, damaged artifacts, full and read-only disks, killed saves) "
                                "through the workbench: each must end in success or one clear error.",
                                epilog=_TARGETS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate cases and run them through targets", epilog=_TARGETS_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--count", type=int, default=1000, help="cases per family whose targets are named (default 1000)")
    r.add_argument("--artifact-count", type=int, help="damaged artifacts (default: --count)")
    r.add_argument("--disk-count", type=int, help="cases of each disk and kill target (default: --count, at most 40)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--targets", default="inspect", help="comma-separated, from: " + ", ".join(ALL_TARGETS))
    r.add_argument("--timeout", type=float, default=30.0, help="seconds a case may take on one target before it is a hang")
    r.add_argument("--keep", help="write the cases here and keep them")
    r.add_argument("--cli-sample", type=int, default=20, help="also run this many model cases through `main.py inspect` (exit status 0 or 2, one line)")
    mk = sub.add_parser("make", help="just write the cases")
    mk.add_argument("--count", type=int, default=20)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--family", choices=["models", "artifacts", *DISK_TARGETS], default="models",
                    help="broken models, damaged artifacts, or the cases of a disk or kill target")
    mk.add_argument("--out", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--target", required=True)
    w.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args(argv)
    if args.cmd == "worker":
        _cli_worker(args.timeout) if args.target == "cli" else _worker(args.target)
        return 0
    if args.cmd == "make":
        if args.family in DISK_TARGETS:
            made = generate_disk(args.count, args.seed, Path(args.out), args.family)
        else:
            made = (generate_artifacts if args.family == "artifacts" else generate)(args.count, args.seed, Path(args.out))
        for path, kind in made:
            print(f"{kind:<28} {path}")
        return 0
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in ALL_TARGETS]
    if unknown:
        p.error(f"unknown target '{unknown[0]}' (targets: {', '.join(ALL_TARGETS)})")
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hostile-"))
    t0 = time.time()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    summary: dict = {"results": {}, "failures": []}
    kinds: Counter = Counter()
    counts = {}
    cli_bad, cli_checked = [], 0
    families = [("models", MODEL_TARGETS, lambda: generate(args.count, args.seed, root / "models")),
                ("artifacts", ARTIFACT_TARGETS, lambda: generate_artifacts(args.artifact_count or args.count, args.seed, root / "artifacts"))]
    for t in DISK_TARGETS:
        families.append((t, (t,), lambda t=t: generate_disk(args.disk_count or min(args.count, 40), args.seed, root / t, t)))
    skipped = {}
    for family, family_targets, make in families:
        wanted = [t for t in targets if t in family_targets]
        if wanted and family in ("full-disk", "read-only"):
            why = mount_refused(root / "_probe", family)
            if why:
                log(why)
                skipped[family] = why
                continue
        if not wanted:
            continue
        cases = make()
        counts[family] = len(cases)
        kinds.update(k.split("+")[0] for _, k in cases)
        _merge(summary, run_cases(cases, wanted, args.timeout, log=log))
        if family == "models":
            for path, kind in cases[: args.cli_sample]:
                cli_checked += 1
                proc = subprocess.run([sys.executable, str(ROOT / "main.py"), "inspect", str(path)], capture_output=True, text=True, timeout=60)
                lines = proc.stderr.strip().splitlines()
                if proc.returncode not in (0, 2) or (proc.returncode == 2 and len(lines) != 1) or "Traceback" in proc.stderr:
                    cli_bad.append({"case": str(path), "kind": kind, "status": proc.returncode, "stderr": proc.stderr[-300:]})
    summary.update({"cases": sum(counts.values()), "cases_per_family": counts, "skipped": skipped, "seed": args.seed, "kinds": dict(kinds),
                    "cli_checked": cli_checked, "cli_failures": cli_bad, "seconds": round(time.time() - t0, 1)})
    print(json.dumps(summary, indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if summary["failures"] or cli_bad else 0


if __name__ == "__main__":
    sys.exit(main())
