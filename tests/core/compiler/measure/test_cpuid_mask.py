"""core.compiler.measure.cpuid_mask: a process that sees no AVX-512, for AVX2-against-AVX2 measurements on
an AVX-512 host (benchmarks/compiled_vs_onnxruntime.py --as-avx2).

Every case runs child processes: the mask is preloaded when a process starts. They skip where the
host has no CPUID faulting (then the benchmark refuses --as-avx2 with the same sentence)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.compiler.measure import cpuid_mask

ROOT = Path(__file__).resolve().parents[4]

# what CPUID tells numpy, and what the mask says it did
SEEN = (
    "import json; from numpy._core._multiarray_umath import __cpu_features__ as f; "
    "import core.compiler.measure.cpuid_mask as m; "
    "print(json.dumps({'numpy_avx512f': bool(f.get('AVX512F')), 'numpy_avx2': bool(f.get('AVX2')), 'mask': m.report()}))"
)


def _host_has_avx512f() -> bool:
    return "avx512f" in Path("/proc/cpuinfo").read_text().split()


def _run(code: str, masked: bool) -> subprocess.CompletedProcess:
    env = cpuid_mask.environment() if masked else None
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def mask_works():
    why_not = cpuid_mask.probe()
    if why_not:
        pytest.skip(why_not)


def test_a_masked_process_sees_avx2_and_no_avx512(mask_works):
    run = _run(SEEN, masked=True)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["mask"]["active"] and seen["mask"]["answered"] > 0, seen
    assert not seen["mask"]["avx512f"] and not seen["numpy_avx512f"], seen
    assert seen["numpy_avx2"] == ("avx2" in Path("/proc/cpuinfo").read_text().split()), seen  # only AVX-512 is hidden

    plain = _run(SEEN, masked=False)
    assert plain.returncode == 0, plain.stderr
    unmasked = json.loads(plain.stdout.strip().splitlines()[-1])
    assert unmasked["mask"] is None
    assert unmasked["numpy_avx512f"] == _host_has_avx512f()  # without the mask, the host as it is


def test_a_segfault_that_is_not_cpuid_still_ends_the_process(mask_works):
    run = _run("import ctypes; ctypes.string_at(0)", masked=True)
    assert run.returncode == -signal.SIGSEGV, (run.returncode, run.stderr[-500:])


def test_a_segv_handler_installed_later_gets_the_other_faults_and_cpuid_stays_masked(mask_works):
    """Python's faulthandler (as TVM's backtrace printer) installs its SIGSEGV handler after the
    mask is loaded: CPUID is still answered by the mask, and a real fault reaches faulthandler."""
    code = (
        "import ctypes, faulthandler, os, sys; faulthandler.enable(); "
        "lib = ctypes.CDLL(os.environ['MLCWB_CPUID_MASK']); "
        "print('avx512f', bool(lib.mlcwb_cpuid_leaf7_ebx() & (1 << 16)), flush=True); "
        "ctypes.string_at(0)"
    )
    run = _run(code, masked=True)
    assert "avx512f False" in run.stdout, (run.stdout, run.stderr[-500:])
    assert "Fatal Python error: Segmentation fault" in run.stderr, run.stderr[-500:]
    assert run.returncode == -signal.SIGSEGV


def test_the_environment_keeps_what_was_preloaded_and_tuned(mask_works):
    env = cpuid_mask.environment({"LD_PRELOAD": "/x/other.so", "GLIBC_TUNABLES": "glibc.malloc.check=0"})
    lib = str(cpuid_mask.build())
    assert env["LD_PRELOAD"] == f"{lib} /x/other.so"
    assert env["GLIBC_TUNABLES"].startswith("glibc.malloc.check=0:glibc.cpu.hwcaps=-AVX512F")
    assert env[cpuid_mask.ENV] == lib


def _tiny_model() -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 48])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_onnxruntime_under_the_mask_says_so_and_computes_the_same(mask_works):
    from core.compiler.measure.ort_worker import OrtProcess

    feeds = {"x": np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)}
    model = _tiny_model()
    with OrtProcess(model, feeds, 1, hide_avx512=True) as masked, OrtProcess(model, feeds, 1) as plain:
        assert masked.cpuid_mask and masked.cpuid_mask["active"] and not masked.cpuid_mask["avx512f"]
        assert plain.cpuid_mask is None
        assert len(masked.run(3)) == 3
        np.testing.assert_allclose(masked.outputs()[0], plain.outputs()[0], rtol=1e-5, atol=1e-5)


def test_the_benchmark_compares_avx2_code_with_onnxruntimes_avx2_kernels(mask_works, capsys):
    from benchmarks import compiled_vs_onnxruntime as bench

    assert bench.main(["--models", "mlp", "--as-avx2", "--runs", "4", "--seconds", "0.2", "--blocks", "2", "--one-thread", "off"]) == 0
    out = capsys.readouterr().out
    if _host_has_avx512f():
        assert "onnxruntime runs its AVX2 kernels" in out, out
        assert "-avx512f (AVX2)" in out, out  # ours compiled without AVX-512
    else:
        assert "this host has no AVX-512" in out, out
    row = next(line for line in out.splitlines() if line.startswith("mlp"))
    assert "ok (" in row, row


def test_the_benchmark_refuses_as_avx2_with_one_sentence_where_the_mask_cannot_work(monkeypatch, capsys):
    """On an AVX-512 host (faked: on an AVX2 one there is nothing to hide, and the benchmark
    rightly runs both as they are) without CPUID faulting."""
    from benchmarks import compiled_vs_onnxruntime as bench

    monkeypatch.setattr(bench, "host_has_avx512", lambda: True)
    monkeypatch.setattr(cpuid_mask, "probe", lambda: "this host has no CPUID faulting (arch_prctl ARCH_SET_CPUID), so AVX-512 cannot be hidden from a process")
    assert bench.main(["--models", "mlp", "--as-avx2"]) == 2
    assert "--as-avx2: this host has no CPUID faulting" in capsys.readouterr().err


def test_as_avx2_on_a_host_without_avx512_runs_both_as_they_are(monkeypatch, capsys):
    """Nothing to hide on an AVX2 host (and no CPUID faulting needed): no mask, ours compiled for
    the host, and the header says so."""
    from benchmarks import compiled_vs_onnxruntime as bench
    from core.compiler.measure import ort_worker

    monkeypatch.setattr(bench, "host_has_avx512", lambda: False)
    monkeypatch.setattr(cpuid_mask, "probe", lambda: pytest.fail("no mask is needed on an AVX2 host"))
    hidden = []
    real_init = ort_worker.OrtProcess.__init__

    def init(self, *args, hide_avx512=False, **kwargs):
        hidden.append(hide_avx512)
        real_init(self, *args, hide_avx512=hide_avx512, **kwargs)

    monkeypatch.setattr(ort_worker.OrtProcess, "__init__", init)
    assert bench.main(["--models", "mlp", "--as-avx2", "--runs", "4", "--seconds", "0.2", "--blocks", "2", "--one-thread", "off"]) == 0
    out = capsys.readouterr().out
    assert "this host has no AVX-512, so both runtimes run their AVX2 code as they are" in out, out
    assert hidden == [False] and "-avx512f" not in out
