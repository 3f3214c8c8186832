"""A quick seeded subset of the hostile run's artifact, disk and kill families (the full run is
`scripts/hostile.py run --targets run,bench,runpy,open-artifact,full-disk,read-only,kill-save`):
damaged copies of a real artifact through `main.py run`, `main.py bench`, the artifact's own run.py
and the GUI's Open Artifact; `edit`, `rewrite` and `compile` onto a full and a read-only tmpfs; a
save of a model with external weights killed midway. Each case ends in success or one sentence
(exit 2) as its kind demands (damage to a file the manifest vouches for is refused, an extra file
is harmless); no traceback, signal or hang, and nothing half-written left behind.

What the generator found when it was written, each fixed where it was and tested below: a
manifest nested thousands deep (a RecursionError in run, bench and run.py), a negative or huge size
in a manifest's shape (bench: "negative dimensions are not allowed", an internal error), a complex
dtype or a malformed target.cpu (internal errors), a model.so cut short with its checksum edited to
match (a bus error in the dynamic loader), the thread pool's copy failing on a full disk (a second
line, and an artifact exported without it)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from core.compiler.runtime.artifact_check import file_checksum
from scripts.hostile import (ARTIFACT_MUTATIONS, DISK_COMMANDS, DISK_OUTPUTS, artifact_bases, expected_outcome, generate_artifacts,
                             generate_disk, mount_refused, run_cases, run_command)
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """One folder for the module's artifact cases: its _bases (the artifacts of mlp and mm_relu) are compiled once."""
    return tmp_path_factory.mktemp("hostile")


def _no_failures(summary) -> None:
    assert summary["failures"] == [], json.dumps(summary["failures"][:3], indent=1)


def test_damaged_artifacts_through_run_bench_run_py_and_open_artifact(root):
    cases = generate_artifacts(len(ARTIFACT_MUTATIONS), seed=3, root=root)
    assert {k.split("+")[0] for _, k in cases} == set(ARTIFACT_MUTATIONS)  # every kind of damage
    summary = run_cases(cases, ["run", "runpy", "open-artifact", "bench"], timeout=60)
    _no_failures(summary)
    for target, got in summary["results"].items():
        assert sum(got.values()) == len(cases) and got.get("error", 0) >= len(cases) - 4, (target, got)
        assert got.get("ok", 0) >= 1, (target, got)  # an unlisted extra file opens


def test_an_outcome_other_than_the_kind_demands_is_a_failure(root, tmp_path):
    """The judge can fail: damage that is not refused, and a refusal of harmless damage, are failures."""
    bases = artifact_bases(root)
    refused = tmp_path / "refused" / "art"  # an intact copy presented as a cut library: it runs
    shutil.copytree(bases["mlp"], refused)
    np.savez(refused.parent / "in.npz", input=np.zeros((2, 784), np.float32))
    harmless = tmp_path / "harmless" / "art"  # an "extra file" case whose manifest is gone
    shutil.copytree(bases["mlp"], harmless)
    (harmless / "manifest.json").unlink()
    np.savez(harmless.parent / "in.npz", input=np.zeros((2, 784), np.float32))
    assert expected_outcome("so_truncate") == "error" and expected_outcome("file_added") == "ok"
    assert expected_outcome("manifest_shape+file_added") == "any" and expected_outcome("file_added+so_other") == "error"
    summary = run_cases([(refused, "so_truncate"), (harmless, "file_added")], ["run"], timeout=60)
    got = {(f["kind"], f["outcome"], f.get("expected")) for f in summary["failures"]}
    assert got == {("so_truncate", "ok", "error"), ("file_added", "error", "ok")}, summary["failures"]


@pytest.mark.parametrize("code,outcome", [
    ("import sys; sys.exit(0)", "ok"),
    ("import sys; print('mlcwb: x.onnx is not a model.', file=sys.stderr); sys.exit(2)", "error"),
    ("import sys; print('mlcwb: one.', file=sys.stderr); print('two', file=sys.stderr); sys.exit(2)", "traceback"),
    ("import sys; print('mlcwb: internal error in run: ValueError', file=sys.stderr); sys.exit(1)", "traceback"),
    ("raise SystemExit(__import__('os').kill(__import__('os').getpid(), 7))", "crash"),  # SIGBUS, as a cut library died
    ("import time; time.sleep(30)", "hang"),
])
def test_how_a_command_ended_is_judged(code, outcome):
    r = run_command([sys.executable, "-c", code], timeout=2)
    assert r["outcome"] == outcome, r
    if outcome == "crash":
        assert "SIGBUS" in r["message"]


def test_a_library_cut_short_and_vouched_for_is_refused_before_it_is_loaded(root, tmp_path):
    # found by the generator: the manifest edited to vouch for a cut model.so passed the checksums,
    # and the dynamic loader died of a bus error mapping it (exit 135, no message)
    art = tmp_path / "art"
    shutil.copytree(artifact_bases(root)["mlp"], art)
    data = (art / "model.so").read_bytes()
    (art / "model.so").write_bytes(data[: len(data) // 3])
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["checksums"]["model.so"] = file_checksum(art / "model.so")
    (art / "manifest.json").write_text(json.dumps(manifest))
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 784), np.float32))
    r = run_cli("run", art, "--inputs", tmp_path / "in.npz")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-1000:]
    assert f"model.so is not a complete shared library: it has {len(data) // 3:,} bytes and its section header table ends at byte {len(data):,}" in r.stderr


def _run_py(folder, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(folder / "run.py"), *map(str, args)], capture_output=True, text=True, timeout=120, env=env)


def _one_line(r, says: str, who: str) -> None:
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (who, r.returncode, r.stderr[-1000:])
    assert says in r.stderr, (who, r.stderr)


def _set(path: tuple, value):
    def change(manifest):
        holder = manifest
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = value
    return change


@pytest.mark.parametrize("damage,says", [
    # found by the generator: json's parser recursed past Python's limit (a RecursionError: an
    # internal error in run and bench, run.py's "internal error" line)
    ("nested", "manifest.json cannot be read as JSON (it nests lists or objects too deeply)."),
    # bench made random inputs of the manifest's shape before the library could refuse it: numpy's
    # "negative dimensions are not allowed", an internal error
    (_set(("inputs", 0, "shape"), [2, -1]),
     "manifest.json is not a valid artifact manifest: its 'inputs[0].shape[1]' is the number -1, not a size from 0 to 2,147,483,647."),
    (_set(("inputs", 0, "shape"), [2**40, 784]),
     "manifest.json is not a valid artifact manifest: its 'inputs[0].shape[0]' is the number 1099511627776, not a size from 0"),
    # a complex dtype passed as "a numpy dtype name": tvm.runtime.tensor's "unknown dtype `complex64`", an internal error
    (_set(("inputs", 0, "dtype"), "complex64"),
     "its 'inputs[0].dtype' is the text \"complex64\", not the numpy name of a bool, integer or float dtype."),
    # target.cpu was read as any object: a list among its required features was "unhashable type: 'list'"
    (_set(("target", "cpu", "requires", 3), [1, "a", None]), "its 'target.cpu.requires' is a list, not a list of texts."),
])
def test_a_manifest_the_generator_broke_is_refused_by_run_bench_and_run_py(root, tmp_path, damage, says):
    art = tmp_path / "art"
    shutil.copytree(artifact_bases(root)["mlp"], art)
    text = (art / "manifest.json").read_text()
    if damage == "nested":
        text = '{"deep": ' + "[" * 5000 + "]" * 5000 + ", " + text.lstrip()[1:]
    else:
        manifest = json.loads(text)
        damage(manifest)
        text = json.dumps(manifest)
    (art / "manifest.json").write_text(text)
    np.savez(tmp_path / "in.npz", input=np.zeros((2, 784), np.float32))
    _one_line(run_cli("run", art, "--inputs", tmp_path / "in.npz"), says, "run")
    _one_line(run_cli("bench", art, "--runs", "1"), says, "bench")
    _one_line(_run_py(art), says, "run.py")


def test_run_py_refuses_random_inputs_larger_than_memory_before_making_them(root, tmp_path):
    # sizes a manifest may give (each under 2**31) whose product no machine holds: numpy's allocation
    # succeeds on an overcommitting kernel, and filling it got run.py killed (exit 137)
    art = tmp_path / "art"
    shutil.copytree(artifact_bases(root)["mlp"], art)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["inputs"][0]["shape"] = [2**31 - 1, 2**31 - 1]
    (art / "manifest.json").write_text(json.dumps(manifest))
    _one_line(_run_py(art), f"run.py: random inputs of the shapes {art / 'manifest.json'} gives cannot be made here (making them takes ", "run.py")
    assert "pass --inputs IN.npz." in _run_py(art).stderr


def test_writes_onto_a_full_and_a_read_only_disk(tmp_path):
    for target in ("full-disk", "read-only"):
        why = mount_refused(tmp_path / "probe", target)
        if why:
            pytest.skip(why)
        cases = generate_disk(3, seed=1, root=tmp_path / target, target=target)
        assert {k.split("-", 1)[0] for _, k in cases} == set(DISK_COMMANDS)
        assert {k.split("-", 1)[1] for _, k in cases} == set(DISK_OUTPUTS)
        summary = run_cases(cases, [target], timeout=300)
        _no_failures(summary)
        assert summary["results"][target] == {"error": 3}, summary["results"]


def test_saves_killed_midway(tmp_path):
    cases = generate_disk(4, seed=2, root=tmp_path, target="kill-save")
    summary = run_cases(cases, ["kill-save"], timeout=120)
    _no_failures(summary)
    assert summary["results"]["kill-save"] == {"ok": 4}
    assert sum(summary["found"]["kill-save"].values()) == 4  # each opened as the old version or the new


def test_an_export_whose_thread_pool_does_not_fit_fails_as_a_whole(root, tmp_path, monkeypatch, caplog):
    # found by the full-disk target: the thread pool's copy into the artifact ran out of room, and
    # export went on without it, warning that the pool "could not be built" (a second line on
    # stderr) before the manifest failed too; the copy's failure is the export's, named by the caller
    import errno

    from core.compiler.runtime import artifact as artifact_mod

    art = artifact_mod.load_artifact(artifact_bases(root)["mlp"])
    real = shutil.copy2

    def full_at_the_pool(src, dst, **kw):
        if str(dst).endswith("threadpool.so"):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real(src, dst, **kw)

    monkeypatch.setattr(artifact_mod.shutil, "copy2", full_at_the_pool)
    with pytest.raises(OSError, match="No space left on device"):
        art.export(tmp_path / "out" / "art")
    assert not (tmp_path / "out").exists()  # no folder, no hidden staging folder
    assert "could not be built" not in caplog.text
