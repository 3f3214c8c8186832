"""The rules deciding whether a depthwise conv or pool runs in parallel (cpu_depthwise.
depthwise_runs_parallel): from its estimated one-core time, the larger of its multiply-adds' and
its bytes' share, so a stride-2 conv that moves a megabyte for few multiply-adds is split over the
threads and a small 7x7 one is not. Structure checks read the scheduled TIR (any ISA)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_schedules import _fused
from tests.helpers import ort_run

RTOL, ATOL = 1e-3, 1e-4


def _depthwise_model(channels: int, size: int, kernel: int, stride: int) -> onnx.ModelProto:
    rng = np.random.default_rng(16)
    w = (rng.standard_normal((channels, 1, kernel, kernel)) / kernel).astype(np.float32)
    b = (0.1 * rng.standard_normal(channels)).astype(np.float32)
    pad = kernel // 2
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], group=channels, kernel_shape=[kernel, kernel], pads=[pad] * 4, strides=[stride] * 2),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    out = (size + 2 * pad - kernel) // stride + 1
    graph = helper.make_graph(
        nodes,
        "depthwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, out, out])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def target():
    from core.compiler.target import make_target

    return make_target("cpu")


def test_depthwise_parallel_rule_weighs_bytes_and_multiply_adds():
    from core.compiler.schedules.cpu_depthwise import depthwise_runs_parallel

    # mobilenet_v3_small's 72-channel 56x56 -> 28x28 stride-2 3x3: 0.5 M multiply-adds, 1.1 MB moved
    assert depthwise_runs_parallel(72 * 28 * 28 * 9, 4 * 72 * (56 * 56 + 28 * 28))
    # its 576-channel 7x7 5x5: 0.7 M multiply-adds, 0.2 MB: ~29 us on one core, split (from 15 us)
    assert depthwise_runs_parallel(576 * 49 * 25, 2 * 4 * 576 * 49)
    # a 3x3 one on the same 576 x 7 x 7: 0.25 M multiply-adds, ~11 us, stays serial
    assert not depthwise_runs_parallel(576 * 49 * 9, 2 * 4 * 576 * 49)
    assert depthwise_runs_parallel(32 * 112 * 112 * 9, 2 * 4 * 32 * 112 * 112)  # 3.6 M multiply-adds


def _scheduled_depthwise(model, target):
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_cpu_func

    mod = relax.transform.AttachAttrLayoutFreeBuffers()(_fused(model))
    (func,) = [f for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "conv2d" in g.name_hint]
    scheduled, rule = schedule_cpu_func(func, target)
    assert rule == "cpu.DepthwiseConv2dNCHW"
    return scheduled


@pytest.mark.isa
def test_bandwidth_heavy_stride2_depthwise_runs_in_parallel(target):
    import tvm
    from tvm import relax

    from core.compiler.schedules import schedule_pass

    model = _depthwise_model(72, 56, 3, 2)
    assert "T.parallel" in _scheduled_depthwise(model, target).script()
    with target:
        scheduled = schedule_pass(target)(_fused(model))
    vm = relax.VirtualMachine(tvm.compile(scheduled, target), tvm.cpu())
    x = np.random.default_rng(17).standard_normal((1, 72, 56, 56)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.isa
def test_small_depthwise_stays_on_one_thread(target):
    assert "T.parallel" not in _scheduled_depthwise(_depthwise_model(64, 7, 5, 1), target).script()
