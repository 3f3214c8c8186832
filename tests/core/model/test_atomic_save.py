"""A model and its external weights are saved as a pair: a kill or a failure at any point leaves
the old pair or the new one, and the next save removes what a killed one left behind."""
from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data

from core import files, load_model, save_model
from core.errors import WorkbenchError
from core.model.external_data import data_files, referenced_files, self_contained_proto
from tests.helpers import ROOT, ort_run

N, M = 1024, 512  # W is N x M float32 (2 MB, in the data file), V is M x N (2 MB, in the model file):
# both files take a moment to write, so kills fall inside either
X = np.random.default_rng(7).standard_normal((1, N)).astype(np.float32)


def _version(folder: Path, seed: int) -> tuple[Path, np.ndarray]:
    """A model Y = (X @ W + b) @ V (seed 0; seed 1: - b) with W in folder/w.bin and V, b inline;
    returns it and what it computes on X. One version's model file with the other's weights
    computes neither: a torn pair shows."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((N, M)).astype(np.float32)
    b = rng.standard_normal((M,)).astype(np.float32)
    v = rng.standard_normal((M, N)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Sub" if seed else "Add", ["xw", "b"], ["h"]),
         helper.make_node("MatMul", ["h", "v"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(v, "v")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True)
    (folder / "w.bin").write_bytes(w.tobytes())
    external = model.graph.initializer[0]
    set_external_data(external, "w.bin", offset=0, length=w.nbytes)
    external.data_location = TensorProto.EXTERNAL
    external.ClearField("raw_data")
    path = folder / f"v{seed}.onnx"
    onnx.save_model(model, str(path))
    return path, ((X @ w - b) if seed else (X @ w + b)) @ v


def _computes(path: Path) -> np.ndarray:
    """What the model at `path` computes on X, as the workbench opens it."""
    return ort_run(self_contained_proto(load_model(path)), {"x": X})[0]


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal up to float32 summation order (a torn pair is off by the values' own size)."""
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    return [_version(root / f"src{seed}", seed) for seed in (0, 1)]


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_each_save_writes_new_weights_under_a_new_name_and_then_drops_the_old(tmp_path, versions):
    (a, out_a), (b, out_b) = versions
    target = tmp_path / "m.onnx"
    res = save_model(load_model(a), target)
    assert res.data_file == tmp_path / "m.onnx.data" and _names(tmp_path) == ["m.onnx", "m.onnx.data"]
    save_model(load_model(b), target)  # the old .onnx reads m.onnx.data until the rename: the new weights go elsewhere
    assert _names(tmp_path) == ["m.onnx", "m.onnx.1.data"]
    assert _same(_computes(target), out_b)
    save_model(load_model(a), target)
    assert _names(tmp_path) == ["m.onnx", "m.onnx.data"]
    assert _same(_computes(target), out_a)
    g = load_model(target)
    assert save_model(g, target).data_file is None and _names(tmp_path) == ["m.onnx", "m.onnx.data"]  # in place: no copy


def test_a_failed_save_leaves_the_old_pair_and_the_open_model_as_they_were(tmp_path, versions, monkeypatch):
    (a, out_a), (b, _) = versions
    target = tmp_path / "m.onnx"
    save_model(load_model(a), target)
    g = load_model(b)
    before = referenced_files(g.model)
    real = files.write_temporary
    calls = []

    def disk_fills_at_the_model(path, data):
        calls.append(Path(path).name)
        if len(calls) == 2:  # the new weights are written; the model's file is not
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(files, "write_temporary", disk_fills_at_the_model)
    # (the disk here has room for the 4.2 MB: an ENOSPC then means no more files or blocks)
    with pytest.raises(WorkbenchError, match=rf"^cannot write {target}: the file system is out of room \(.* free, but no more files"):
        save_model(g, target)
    assert calls == ["m.onnx.1.data", "m.onnx"]
    assert _names(tmp_path) == ["m.onnx", "m.onnx.data"]  # no new data file, no temporary
    assert _same(_computes(target), out_a)
    assert referenced_files(g.model) == before  # the document still reads its own weights


def test_the_next_save_removes_what_a_killed_save_left_and_only_that(tmp_path, versions):
    (a, out_a), _ = versions
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    target = tmp_path / "m.onnx"
    save_model(load_model(a), target)
    left = [f".m.onnx.{dead.pid}-0123abcd.tmp", f".m.onnx.1.data.{dead.pid}-89abcdef.tmp", "m.onnx.2.data",  # a killed save's
            f".other.onnx.{dead.pid}-00ff00ff.tmp"]  # another model's killed save in the folder
    kept = ["notes.txt", "other.onnx.data", f".m.onnx.{os.getppid()}-0123abcd.tmp"]  # not ours, another model's, a live writer's
    for name in left + kept:
        (tmp_path / name).write_bytes(b"x")
    save_model(load_model(a), target)
    assert _names(tmp_path) == sorted(["m.onnx", "m.onnx.1.data", *kept])
    assert data_files(target) == [tmp_path / "m.onnx.1.data"]
    assert _same(_computes(target), out_a)


def test_another_models_data_file_is_copied_not_shared(tmp_path, versions):
    """Save As b.onnx beside a.onnx: a.onnx's next save may replace a.onnx.data, so b gets its own."""
    (a, out_a), _ = versions
    save_model(load_model(a), tmp_path / "a.onnx")
    g = load_model(tmp_path / "a.onnx")
    res = save_model(g, tmp_path / "b.onnx")
    assert res.data_file == tmp_path / "b.onnx.data" and res.copied == 1
    assert referenced_files(g.model) == {(tmp_path / "b.onnx.data").resolve()}
    (tmp_path / "a.onnx.data").unlink()
    assert _same(_computes(tmp_path / "b.onnx"), out_a)


# A process that has imported the workbench once and forks a saver per request: the saver saves
# the two versions in turn to the target until it is killed (fork: no second import per kill). It
# first saves elsewhere a few times (warm: a first save imports and faults pages in) and says how
# long a save takes it.
_SAVER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, sys.argv[1])
    from core import load_model, save_model
    sources, target, scratch = sys.argv[2:4], sys.argv[4], sys.argv[5]
    took = []
    for i in range(5):
        t0 = time.perf_counter()
        save_model(load_model(sources[i % 2]), scratch)
        took.append(time.perf_counter() - t0)
    print(sorted(took)[2], flush=True)
    for line in sys.stdin:
        first = int(line)
        pid = os.fork()
        if pid == 0:
            print(os.getpid(), flush=True)  # running: the kill's clock starts now
            i, end = first, time.monotonic() + 30  # a saver nobody kills stops by itself
            while time.monotonic() < end:
                save_model(load_model(sources[i % 2]), target)
                i += 1
            os._exit(0)
        os.waitpid(pid, 0)
        print("reaped", flush=True)
""")


# the issue asks for 20; with 40 (about 4 s) this test caught a writer that renames the new weights
# over the old data file before the model file in each of 6 runs
KILLS = 40


def test_a_save_killed_at_random_points_leaves_a_model_that_computes_one_version(tmp_path, versions):
    (a, out_a), (b, out_b) = versions
    folder = tmp_path / "saved"
    target = folder / "m.onnx"
    save_model(load_model(b), target)
    server = subprocess.Popen([sys.executable, "-c", _SAVER, str(ROOT), str(a), str(b), str(target), str(tmp_path / "warm" / "m.onnx")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rng = random.Random(44)
    leftovers = 0
    on_disk = 1  # b
    pid = None
    try:
        save_s = float(server.stdout.readline())  # the kills fall within the saver's first six saves (a forked first one is slow)
        for kill in range(KILLS):
            server.stdin.write(f"{1 - on_disk}\n")  # every save the saver makes changes the version on disk
            server.stdin.flush()
            pid = int(server.stdout.readline())
            time.sleep(rng.uniform(0.0, 6 * save_s))
            os.kill(pid, signal.SIGKILL)
            assert server.stdout.readline().strip() == "reaped"
            got = _computes(target)
            assert _same(got, out_a) or _same(got, out_b), \
                f"kill {kill + 1}: the saved model computes neither version"
            stale = [n for n in _names(folder) if files.is_temporary_name(n)] + [p.name for p in data_files(target)][1:]
            leftovers += bool(stale)
            on_disk = kill % 2
            save_model(load_model(versions[on_disk][0]), target)  # the next save cleans up after the killed one
            assert len(_names(folder)) == 2 and len(data_files(target)) == 1, _names(folder)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        server.kill()
        server.wait()
    assert leftovers > 0, "no kill fell inside a save: the test did not test what it says"
