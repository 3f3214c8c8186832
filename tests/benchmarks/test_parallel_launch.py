"""benchmarks/parallel_launch.py: the kernel it times is K parallel regions of the stated work (checked
by its result and by the launch call in its code), the table has a row per pool, work and split, and bad
arguments are refused. Structure only (no timing is asserted)."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.parallel_launch import ROW, launch_kernel, main


@pytest.mark.parametrize("chunks", [2, 3])
def test_the_kernel_runs_its_regions_through_the_pool_and_does_the_stated_work(chunks):
    import tvm

    kernel = launch_kernel(3, chunks, 2)
    code = "\n".join(m.inspect_source("ll") for m in (kernel.mod, *kernel.mod.imports) if m.kind == "llvm")
    assert "TVMBackendParallelLaunch" in code
    a = tvm.runtime.tensor(np.ones((chunks, ROW // chunks), "float32"))
    b = tvm.runtime.tensor(np.zeros((chunks, ROW // chunks), "float32"))
    kernel(a, b)
    expected = 0.0
    for _ in range(3 * 2):  # 3 regions of 2 passes each
        expected = expected * np.float32(0.999) + 1
    np.testing.assert_allclose(b.numpy(), np.full((chunks, ROW // chunks), expected, "float32"), rtol=1e-6)


def test_table_has_a_row_per_work_and_split(capsys):
    assert main(["--work", "1", "--launches", "3", "--seconds", "0"]) == 0
    out = capsys.readouterr().out
    assert "sched_yield() from Python" in out
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0] in ("native", "tvm")]
    assert [(r[0], r[1], r[2]) for r in rows] == [("native", "1", "1:1"), ("tvm", "1", "1:1"), ("native", "1", "2:1"), ("tvm", "1", "2:1")]


def test_bad_pools_are_refused(capsys):
    assert main(["--pools", "omp"]) == 2
    assert "--pools" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--work", "a"], ["--work", "0"], ["--launches", "1"]])
def test_bad_arguments_are_refused(argv, capsys):
    assert main(argv) == 2
    assert "--" in capsys.readouterr().err
