"""Which kernels run in parallel: a conv is split over the threads from its estimated one-core
time (cpu_common.conv_runs_parallel), so a tiny model's convs, ~10 us each, stay on one thread (a
parallel region moves the data between cores) and a large conv is split; a copy from
cpu_common.PARALLEL_MIN_WORK elements. Structure
checks on scheduled TIR for named CPUs (AVX2 and AVX-512), nothing is run: the same verdicts on
any host."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_schedules import _fused


def _conv_model(channels: int, size: int) -> onnx.ModelProto:
    rng = np.random.default_rng(19)
    w = (rng.standard_normal((channels, channels, 3, 3)) / (3 * channels)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_conv_parallel_rule_reads_estimated_one_core_time():
    from core.compiler.schedules.cpu_common import (
        PARALLEL_LAUNCH_US,
        PARALLEL_MIN_US,
        conv_runs_parallel,
        fma_microseconds,
    )

    small_cnn_block = 16 * 16 * 16 * 16 * 9  # 16 -> 16 channels, 3x3, 16x16: 0.6 M multiply-adds
    assert 10 < fma_microseconds(small_cnn_block) < 16  # ~13 us (measured 12.4 with AVX-512)
    assert conv_runs_parallel(small_cnn_block)  # split: 2 threads gained ~0.9x on the quiet machine
    assert not conv_runs_parallel(small_cnn_block // 4)  # ~3 us
    assert PARALLEL_MIN_US / 2 >= 2 * PARALLEL_LAUNCH_US  # each of two threads: two launches' worth
    assert not conv_runs_parallel(8 * 8 * 8 * 8 * 9)  # 37 k multiply-adds
    assert conv_runs_parallel(64 * 64 * 56 * 56 * 9)  # 116 M: ResNet's first stage
    assert not conv_runs_parallel(250_000) and conv_runs_parallel(280_000)  # the line sits at ~0.27 M


@pytest.mark.parametrize("cpu", ["znver3", "znver4"])
def test_tiny_conv_stays_serial_and_large_conv_is_split(cpu):
    import tvm

    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=cpu)
    verdicts = {}
    for channels, size in ((8, 8), (64, 28)):
        mod = _fused(_conv_model(channels, size))
        (func,) = [f for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in g.name_hint]
        with target:
            scheduled, rule = schedule_cpu_func(func, target)
        assert rule is not None and rule.startswith("cpu.Conv2d")
        verdicts[channels] = "T.parallel" in scheduled.script()
    assert verdicts == {8: False, 64: True}  # 37 k multiply-adds vs 29 M


def _channel_shuffle_model(channels: int, size: int) -> onnx.ModelProto:
    """ShuffleNet's channel shuffle: reshape to two groups, swap them with the channels, reshape back."""
    half = channels // 2
    shapes = [numpy_helper.from_array(np.array(s, dtype=np.int64), n) for s, n in
              (([1, 2, half, size, size], "grouped"), ([1, channels, size, size], "flat"))]
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "grouped"], ["g"]),
            helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3, 4]),
            helper.make_node("Reshape", ["t", "flat"], ["y"]),
        ],
        "shuffle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        shapes,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("cpu", ["znver3", "znver4"])
def test_copies_are_split_from_16_ki_elements(cpu):
    """cpu_common.PARALLEL_MIN_WORK: with the workbench's pool a copy of 16 Ki elements and up is
    split (ShuffleNet's 272 x 14 x 14 channel shuffle, 53 Ki: serial at the old 64 Ki, 6.5 us a call
    on one Zen 4 core), a smaller one (64 x 14 x 14, 12.5 Ki) is not."""
    import tvm

    from core.compiler.schedules import schedule_pass
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=cpu)
    verdicts = {}
    for channels in (272, 64):
        with target:
            mod = schedule_pass(target)(_fused(_channel_shuffle_model(channels, 14)))
        scripts = [f.script() for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
        assert scripts
        verdicts[channels] = any("T.parallel" in s for s in scripts)
    assert verdicts == {272: True, 64: False}
