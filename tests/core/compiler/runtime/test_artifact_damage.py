"""A damaged artifact is refused before anything in it is loaded, in one sentence naming the thing,
by `main.py run`, `main.py bench` and the artifact's own run.py alike (exit status 2, one line on
stderr, no traceback). Before the manifest recorded each file's size and sha256 a model.so cut in
half died of a bus error (exit 135, no message) in all three, a model.so replaced by text gave a
TVM traceback in run.py, a manifest whose `inputs` was damaged a KeyError in run.py, a manifest
input shape that differs from the library an internal error in bench, and run.py took an .npz
with an input too many."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from core.compiler.compile import compile_model
from core.compiler.runtime import artifact_check
from core.compiler.runtime.artifact import check_artifact_folder, load_artifact
from core.errors import WorkbenchError
from tests.conftest import sample
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("damage") / "mlp"
    compile_model(sample("mlp"), "cpu", verify=False).export(folder)
    return folder


def _manifest(folder, change):
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    change(m)
    path.write_text(json.dumps(m))


def _cut(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# damage -> what the one line on stderr says (after the folder's path where it names a file there)
DAMAGES = {
    "model.so cut in half": (lambda f: _cut(f / "model.so"), "model.so is not the file this artifact was built with: {half} bytes where the manifest says {full} (a copy cut short?)."),
    "model.so replaced by text": (lambda f: (f / "model.so").write_text("not a library\n"), "model.so is not the file this artifact was built with: 14 bytes where the manifest says"),
    "model.so with one byte changed": (lambda f: _flip_a_byte(f / "model.so"), "model.so is not the file this artifact was built with: its sha256 differs from the manifest's"),
    "model.so missing": (lambda f: (f / "model.so").unlink(), "model.so is missing: the manifest lists it with"),
    "thread pool cut short": (lambda f: _cut(f / "threadpool.so"), "threadpool.so is not the file this artifact was built with"),
    "source model replaced": (lambda f: (f / "model.onnx").write_bytes(b"/etc/hostname"), "model.onnx is not the file this artifact was built with: 13 bytes"),
    "checks module missing": (lambda f: (f / "artifact_check.py").unlink(), "artifact_check.py is missing"),
    "manifest inputs a dict": (lambda f: _manifest(f, lambda m: m.update(inputs={"input": [1, 784]})),
                               "manifest.json is not a valid artifact manifest: its 'inputs' is an object, not a list of tensors."),
    "manifest inputs missing": (lambda f: _manifest(f, lambda m: m.pop("inputs")),
                                "manifest.json is not a valid artifact manifest: it has no 'inputs' (a list of tensors)."),
    "manifest input shape changed": (lambda f: _manifest(f, lambda m: m["inputs"][0].update(shape=["batch", 100])),
                                     "manifest.json does not match the compiled library model.so: the library needs input 'input' as R.Tensor((batch, 784)"),
    "library not vouched for": (lambda f: _manifest(f, lambda m: m.pop("checksums")),
                                "manifest.json records no size and sha256 for the library 'model.so'"),
}


def _one_line(r, needle: str, who: str) -> None:
    assert r.returncode == 2, (who, r.returncode, r.stderr[-2000:])
    assert needle in r.stderr, (who, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, (who, r.stderr)


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_run_bench_and_run_py_refuse_a_damaged_artifact_in_one_line(exported, tmp_path, damage):
    folder = tmp_path / "art"
    shutil.copytree(exported, folder)
    full = (folder / "model.so").stat().st_size
    apply, says = DAMAGES[damage]
    apply(folder)
    needle = says.format(half=f"{full // 2:,}", full=f"{full:,}")
    shape = (2, 100) if damage == "manifest input shape changed" else (2, 784)  # inputs as the manifest says
    np.savez(tmp_path / "in.npz", input=np.zeros(shape, np.float32))

    _one_line(run_cli("run", folder, "--inputs", tmp_path / "in.npz"), needle, "main.py run")
    _one_line(run_cli("bench", folder, "--runs", "1", "--vs-ort"), needle, "main.py bench")  # ours runs before onnxruntime
    r = subprocess.run([sys.executable, str(folder / "run.py"), "--inputs", str(tmp_path / "in.npz")], capture_output=True,
                       text=True, timeout=120, cwd=str(tmp_path), env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    _one_line(r, needle, "run.py")
    assert r.stderr.startswith("run.py: ") and r.stdout == ""
    if damage != "manifest input shape changed":  # found only by running
        with pytest.raises(WorkbenchError) as e:
            check_artifact_folder(folder)  # what the GUI's Open Artifact asks before it offers to load
        assert needle in str(e.value)


def test_an_npz_with_an_input_too_many_is_refused_by_run_and_run_py_alike(exported, tmp_path):
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 784), np.float32), extra=np.zeros(3, np.float32))
    said = f"{tmp_path / 'in.npz'} holds 'extra', which is not an input of the model (inputs: input)."
    _one_line(run_cli("run", exported, "--inputs", tmp_path / "in.npz"), said, "main.py run")
    r = subprocess.run([sys.executable, str(exported / "run.py"), "--inputs", str(tmp_path / "in.npz")], capture_output=True, text=True, timeout=120)
    _one_line(r, said, "run.py")


@pytest.mark.parametrize("feeds,says", [
    ({}, "input 'input' is missing (the model needs input)."),
    ({"input": np.zeros((2, 783), np.float32)}, "input 'input' has shape [2, 783], the model needs ['batch', 784]."),
    ({"input": np.zeros((2, 784), np.float64)}, "input 'input' has dtype float64, the model needs float32."),
])
def test_run_py_and_main_py_run_word_a_bad_input_the_same(exported, tmp_path, feeds, says):
    np.savez(tmp_path / "in.npz", **feeds)
    runs = {"main.py run": run_cli("run", exported, "--inputs", tmp_path / "in.npz"),
            "run.py": subprocess.run([sys.executable, str(exported / "run.py"), "--inputs", str(tmp_path / "in.npz")],
                                     capture_output=True, text=True, timeout=120)}
    for who, r in runs.items():
        _one_line(r, says, who)
    assert runs["main.py run"].stderr.removeprefix("mlcwb: ") == runs["run.py"].stderr.removeprefix("run.py: ")


def test_the_manifest_vouches_for_every_file_of_the_folder(exported):
    m = json.loads((exported / "manifest.json").read_text())
    on_disk = sorted(p.relative_to(exported).as_posix() for p in exported.rglob("*") if p.is_file())  # the recipe's as recipe/NAME
    assert m["files"] == on_disk and "artifact_check.py" in on_disk and "run.py" in on_disk and "recipe/rebuild.py" in on_disk
    assert sorted(m["checksums"]) == [n for n in on_disk if n != "manifest.json"]
    for name, want in m["checksums"].items():
        assert artifact_check.file_checksum(exported / name) == want
    # the folder carries the workbench's own checks, byte for byte
    assert (exported / "artifact_check.py").read_bytes() == open(artifact_check.__file__, "rb").read()
    assert load_artifact(exported).manifest.checksums["model.so"].size == (exported / "model.so").stat().st_size


def test_the_checks_module_imports_only_the_standard_library():
    """run.py loads it wherever only TVM and numpy are installed; numpy is imported where arrays are read."""
    import ast

    tree = ast.parse(open(artifact_check.__file__).read())
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {(n.module or "").split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom)}
    assert top <= {"__future__", "hashlib", "json", "logging", "os", "re"}, top
    inner = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert inner - top <= {"numpy"}

    from core.compiler.target import TARGET_KINDS

    assert artifact_check.TARGET_KINDS == TARGET_KINDS  # spelt out there, as it cannot import them
