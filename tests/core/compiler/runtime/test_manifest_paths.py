"""A manifest cannot make the workbench read or load files outside the artifact folder: every
path in it (library, source model, runner, file list) is confined, and a source model that is not
the compiled one is refused; each in one sentence, exit status 2 on the command line."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from core.compiler.runtime.artifact import check_artifact_folder, load_artifact
from core.compiler.compile import compile_model
from core.errors import WorkbenchError
from tests.helpers import ROOT, external_weights_cnn, run_cli


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("manifest")
    art = compile_model(external_weights_cnn(base / "m"), "cpu")
    return art.export(base / "art")


def _tampered(exported, tmp_path, **changes):
    folder = tmp_path / "art"
    shutil.copytree(exported, folder)
    man = json.loads((folder / "manifest.json").read_text())
    man.update(changes)
    (folder / "manifest.json").write_text(json.dumps(man))
    return folder


@pytest.mark.parametrize("key,value,what", [
    ("source_model", "/etc/hostname", "source model '/etc/hostname', outside the artifact folder"),
    ("source_model", "../m/cnn_bn_ext.onnx", "source model '../m/cnn_bn_ext.onnx', outside the artifact folder"),
    ("library", "/usr/lib/x86_64-linux-gnu/libm.so.6", "library '/usr/lib/x86_64-linux-gnu/libm.so.6', outside"),
    ("runner", "../../run.py", "runner '../../run.py', outside"),
    ("files", ["model.so", "../../etc/passwd"], "file '../../etc/passwd', outside"),
    ("source_model", 42, "names the source model as 42, which is not a file name"),
])
def test_paths_outside_the_folder_are_refused(exported, tmp_path, key, value, what):
    folder = _tampered(exported, tmp_path, **{key: value})
    with pytest.raises(WorkbenchError, match="manifest.json names the") as e:
        check_artifact_folder(folder)
    assert what in str(e.value) and "\n" not in str(e.value)


def test_bench_vs_ort_with_a_source_model_elsewhere_exits_2(exported, tmp_path):
    folder = _tampered(exported, tmp_path, source_model="/etc/hostname")
    r = run_cli("bench", folder, "--runs", "1", "--vs-ort")
    assert r.returncode == 2 and "source model '/etc/hostname', outside the artifact folder" in r.stderr
    assert "internal error" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_replaced_source_model_is_refused(exported, tmp_path):
    folder = _tampered(exported, tmp_path)
    (folder / "model.onnx").write_bytes(b"/etc/hostname is not a model")
    with pytest.raises(WorkbenchError, match="model.onnx is not the file this artifact was built with"):
        load_artifact(folder)
    r = run_cli("bench", folder, "--runs", "1", "--vs-ort")
    assert r.returncode == 2 and "model.onnx is not the file this artifact was built with" in r.stderr


def test_run_py_refuses_a_library_outside_its_folder(exported, tmp_path):
    folder = _tampered(exported, tmp_path, library="../elsewhere.so")
    r = subprocess.run([sys.executable, str(folder / "run.py")], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 2 and "outside the artifact folder" in r.stderr


def test_bench_vs_ort_of_an_intact_artifact_from_another_folder(exported, tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "main.py"), "bench", str(exported), "--runs", "2", "--vs-ort", "--json"],
                       capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-1500:]
    assert json.loads(r.stdout)["outputs_match_ort"] is True


@pytest.mark.parametrize("damage", ["inputs a dict", "inputs missing"])
def test_run_and_bench_refuse_a_damaged_manifest_in_one_sentence(exported, tmp_path, damage):
    folder = _tampered(exported, tmp_path, inputs={"x": [1, 3, 8, 8]})
    if damage == "inputs missing":
        man = json.loads((folder / "manifest.json").read_text())
        del man["inputs"]
        (folder / "manifest.json").write_text(json.dumps(man))
    said = "its 'inputs' is an object, not a list of tensors" if damage == "inputs a dict" else "it has no 'inputs' (a list of tensors)"
    for args in (("run", folder, "--inputs", tmp_path / "in.npz"), ("bench", folder, "--runs", "1")):
        r = run_cli(*args)
        assert r.returncode == 2, (args[0], r.stderr)
        assert f"manifest.json is not a valid artifact manifest: {said}." in r.stderr, (args[0], r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_exported_manifest_reads_back_into_the_same_json(exported):
    from core.compiler.runtime.manifest import Manifest

    written = json.loads((exported / "manifest.json").read_text())
    m = Manifest.from_json(written, exported / "manifest.json")
    assert m.verification.checked and m.inputs and m.passes and m.memory_estimate.params_bytes > 0
    assert m.to_json() == written and not m.extra
