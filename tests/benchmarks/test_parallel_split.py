"""benchmarks/parallel_split.py: one model built under different parallel rules, each timed at 1
and 2 threads in one alternation; the variants really change which kernels run in parallel and
the rules are restored after each build. Structure only (no timing is asserted)."""
from __future__ import annotations

import pytest

from benchmarks.parallel_split import main, parallel_rules


def test_variants_change_the_parallel_kernels_and_are_undone(capsys):
    from core.compiler.schedules import cpu_common, cpu_matmul

    before = (cpu_common.PARALLEL_MIN_US, cpu_matmul.runs_parallel)
    assert main(["--models", "mm_relu", "--variants", "default,matmul-serial,min-us=1", "--seconds", "0.02", "--blocks", "1"]) == 0
    rows = {line.split()[1]: line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("mm_relu")}
    # the 128x128x128 matmul: split by default, not with matmul-serial
    assert (rows["default"][2], rows["matmul-serial"][2], rows["min-us=1"][2]) == ("1", "0", "1")
    assert (cpu_common.PARALLEL_MIN_US, cpu_matmul.runs_parallel) == before
    with parallel_rules("min-us=5"):
        assert cpu_common.PARALLEL_MIN_US == 5.0 and cpu_common.conv_runs_parallel(300_000)
    assert cpu_common.PARALLEL_MIN_US == before[0]


def test_min_work_reaches_every_rule_that_imported_the_threshold():
    """PARALLEL_MIN_WORK is imported by value into the copy, pool, row and generic rules: the
    variant sets each module's own name, and puts each back."""
    from core.compiler.schedules import cpu_common, cpu_copy, cpu_generic, cpu_pool_nchwc, cpu_rows

    modules = (cpu_common, cpu_copy, cpu_generic, cpu_pool_nchwc, cpu_rows)
    before = [m.PARALLEL_MIN_WORK for m in modules]
    with parallel_rules("min-work=4096"):
        assert [m.PARALLEL_MIN_WORK for m in modules] == [4096] * len(modules)
    assert [m.PARALLEL_MIN_WORK for m in modules] == before


def test_chunks_first_and_no_conv_bands_set_the_conv_rules_as_before_and_are_undone():
    from core.compiler.schedules import cpu_conv_nchwc, cpu_depthwise_nchwc

    assert cpu_conv_nchwc.ROWS_FIRST and cpu_depthwise_nchwc.ROWS_FIRST
    with parallel_rules("chunks-first"):
        assert not cpu_conv_nchwc.ROWS_FIRST and not cpu_depthwise_nchwc.ROWS_FIRST
        assert cpu_depthwise_nchwc.row_bands(56) == 1
    assert cpu_conv_nchwc.ROWS_FIRST and cpu_depthwise_nchwc.ROWS_FIRST and cpu_depthwise_nchwc.row_bands(56) == 4
    with parallel_rules("no-conv-bands"):
        assert cpu_conv_nchwc.LARGE_WEIGHT_BANDS == 1 and cpu_conv_nchwc.ROWS_FIRST
    assert cpu_conv_nchwc.LARGE_WEIGHT_BANDS == 2


def test_unknown_model_or_variant_is_refused(capsys):
    assert main(["--models", "no_such_model"]) == 2
    assert "unknown model 'no_such_model'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="unknown variant 'fast'"), parallel_rules("fast"):
        pass
