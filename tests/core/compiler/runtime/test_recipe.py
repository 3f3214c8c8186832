"""An artifact's recipe/ rebuilds its model.so with TVM and numpy alone, bit for bit (issue 43): run
in a Python that sees only apache-tvm, apache-tvm-ffi, numpy and their own dependencies (no onnx, no
workbench), `recipe/rebuild.py -o NEW` writes a new artifact whose outputs are the original's exactly,
hand-scheduled kernels included; the manifest vouches for every recipe file, and a damaged one is
refused in one sentence."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.compiler.compile import compile_model
from core.compiler.runtime import artifact_check
from core.compiler.runtime.artifact import load_artifact
from core.errors import WorkbenchError
from tests.conftest import sample

# what `pip install apache-tvm numpy` brings (apache-tvm-ffi, ml_dtypes and typing_extensions are its dependencies)
_PACKAGES = ("tvm", "tvm_ffi", "numpy", "numpy.libs", "ml_dtypes", "typing_extensions.py")

# run rebuild.py as __main__ and report, after it exits, whether anything of the workbench or onnx was imported
_WRAPPER = """
import runpy, sys
sys.path[:0] = [{site!r}]
sys.argv = [{script!r}, *{args!r}]
code = 0
try:
    runpy.run_path({script!r}, run_name="__main__")
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
foreign = sorted(n for n in sys.modules if n.split(".")[0] in ("core", "app", "rewrites", "onnx", "onnxruntime"))
foreign += sorted(n for n, m in list(sys.modules.items()) if (getattr(m, "__file__", None) or "").startswith({repo!r}))
print("IMPORTED:" + ",".join(foreign), file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def bare_site(tmp_path_factory) -> Path:
    """A folder holding links to TVM, numpy and their dependencies only: the "fresh environment"."""
    import numpy
    import tvm

    site_packages = Path(tvm.__file__).parent.parent
    assert Path(numpy.__file__).parent.parent == site_packages
    site = tmp_path_factory.mktemp("bare-site")
    for name in _PACKAGES:
        if (site_packages / name).exists():
            (site / name).symlink_to(site_packages / name)
    return site


def rebuild(art: Path, site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """recipe/rebuild.py ARGS in an isolated Python (-I -S: no site-packages, no PYTHONPATH, not the
    repository) that sees only `site`; stderr's last line says what it imported that it must not."""
    script = str(art / "recipe" / "rebuild.py")
    code = _WRAPPER.format(site=str(site), script=script, args=list(args), repo=str(Path(__file__).resolve().parents[4]))
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd)
    lines = r.stderr.splitlines()
    assert lines and lines[-1].startswith("IMPORTED:"), r.stderr
    assert lines[-1] == "IMPORTED:", f"rebuild.py imported {lines[-1]}"
    r.stderr = "\n".join(lines[:-1])
    return r


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    # the transformer: its softmax needs the recipe's fast_math rules to come out the same
    art = tmp_path_factory.mktemp("recipe") / "art"
    compile_model(sample("tiny_transformer"), "cpu", verify=False).export(art)
    return art


def test_rebuild_gives_the_same_outputs_bit_for_bit_with_tvm_and_numpy_alone(exported, bare_site, tmp_path):
    r = rebuild(exported, bare_site, "-o", str(tmp_path / "new"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "bit for bit" in r.stdout and r.stderr == ""
    new = tmp_path / "new"
    # a whole artifact: the workbench loads it, and its manifest vouches for the new library
    again = load_artifact(new)
    assert again.manifest.checksums["model.so"].size == (new / "model.so").stat().st_size
    assert (new / "recipe" / "module.json").read_bytes() == (exported / "recipe" / "module.json").read_bytes()
    assert json.loads((new / "manifest.json").read_text())["rebuilt"]["from"] == str(exported)


def test_the_manifest_lists_every_recipe_file_with_its_hash(exported):
    m = json.loads((exported / "manifest.json").read_text())
    on_disk = sorted(p.relative_to(exported).as_posix() for p in (exported / "recipe").rglob("*") if p.is_file())
    assert {"recipe/rebuild.py", "recipe/module.json", "recipe/relax_module.py", "recipe/README.md", "recipe/fast_math.py"} <= set(on_disk)
    assert any(n.startswith("recipe/schedules/") for n in on_disk) and any(n.startswith("recipe/stages/") for n in on_disk)
    for name in on_disk:
        assert name in m["files"] and m["checksums"][name] == artifact_check.file_checksum(exported / name)
    readme = (exported / "recipe" / "README.md").read_text()
    assert m["tvm_version"] in readme and "rebuild.py -o" in readme
    trace = next((exported / "recipe" / "schedules").glob("*.py")).read_text()
    assert trace.startswith("# kernel ") and "def apply(sch):" in trace and "sch.get_sblock" in trace


def test_a_damaged_recipe_file_is_refused_in_one_sentence(exported, bare_site, tmp_path):
    import shutil

    art = tmp_path / "art"
    shutil.copytree(exported, art)
    module = art / "recipe" / "module.json"
    module.write_text(module.read_text().replace('"', "'", 1))  # same size, another sha256
    r = rebuild(art, bare_site, "-o", str(tmp_path / "new"), cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "new").exists()
    assert r.stderr.startswith("rebuild.py: ") and "module.json" in r.stderr and "sha256" in r.stderr and len(r.stderr.splitlines()) == 1
    with pytest.raises(WorkbenchError, match="module.json"):  # and the workbench refuses the folder as run.py does
        load_artifact(art)
    # an output folder that already holds something: refused too, before anything is built
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("mine")
    r = rebuild(exported, bare_site, "-o", str(busy), cwd=tmp_path)
    assert r.returncode == 2 and "not an empty folder" in r.stderr and (busy / "x").read_text() == "mine"


def test_a_hand_scheduled_kernel_is_rebuilt_bit_for_bit_and_its_trace_shipped(bare_site, tmp_path):
    from core.compiler.manual.session import open_session
    from core.compiler.target import make_target
    from core.compiler.tuning.tune import record_schedule

    mm_relu, kernel = sample("mm_relu"), "fused_matmul_relu"
    s = open_session(mm_relu, kernel)
    s.apply_all(json.loads((Path(__file__).resolve().parents[4] / "resources" / "schedules" / "mm_relu_course.json").read_text()))
    # filed as measured faster than the default, so compile takes it (as Schedule > Use in compile does)
    record_schedule(s.base, make_target("cpu"), s.trace(), 0.01, tmp_path / "db", default_ms=5.0)
    art = compile_model(mm_relu, "cpu", tune_db=tmp_path / "db", verify=False)
    assert art.manifest.tuning.kernels_from_database == 1
    art.export(tmp_path / "art")
    records = json.loads((tmp_path / "art" / "recipe" / "tuning_records.json").read_text())
    assert len(records) == 1 and records[0]["kernel"].startswith(kernel) and records[0]["trace"]
    trace = (tmp_path / "art" / "recipe" / "schedules" / f"{records[0]['kernel']}.py").read_text()
    assert "tuning database" in trace and "decompose_reduction" in trace
    r = rebuild(tmp_path / "art", bare_site, "-o", str(tmp_path / "new"), cwd=tmp_path)
    assert r.returncode == 0 and "bit for bit" in r.stdout, r.stderr


def test_an_exported_artifact_exported_again_keeps_its_recipe(exported, tmp_path):
    load_artifact(exported).export(tmp_path / "again")
    old = json.loads((exported / "manifest.json").read_text())["checksums"]
    new = json.loads((tmp_path / "again" / "manifest.json").read_text())["checksums"]
    assert {k: v for k, v in new.items() if k.startswith("recipe/")} == {k: v for k, v in old.items() if k.startswith("recipe/")}


def test_compile_on_the_command_line_writes_the_recipe_and_run_still_runs(tmp_path):
    from tests.helpers import run_cli

    r = run_cli("compile", sample("mm_relu"), "--target", "cpu", "-o", tmp_path / "art")
    assert r.returncode == 0, r.stderr
    assert "recipe/ (" in r.stdout and f"python {tmp_path / 'art'}/recipe/rebuild.py -o" in r.stdout
    assert (tmp_path / "art" / "recipe" / "rebuild.py").is_file()
    import numpy as np

    np.savez(tmp_path / "in.npz", **{s.name: np.ones(s.concrete_shape(), s.dtype) for s in load_artifact(tmp_path / "art").inputs})
    run = run_cli("run", tmp_path / "art", "--inputs", tmp_path / "in.npz", "-o", tmp_path / "out.npz")
    assert run.returncode == 0, run.stderr
