"""Max / average pooling windows in channel-blocked layout (core.compiler.schedules.cpu_pool_nchwc):
the pools between blocked convs are the PoolNCHWc rule's (padding, ceil mode, average with and
without the padding counted, a width no column tile divides) and match onnxruntime with 8-channel
blocks (AVX2 code, runs on any x86-64 host with AVX2) and with this host's blocks; the
AVX-512 code is checked by codegen (512-bit max / add, no scalar loop over the channel block)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through

RTOL, ATOL = 1e-4, 1e-5


def _pools_model() -> onnx.ModelProto:
    """1x1 conv (8 -> 32 channels, 16x13) -> MaxPool 3x3/2 pads 1 ceil mode -> AveragePool 3x3/1
    pads 1 (padding not counted) -> AveragePool 2x2/1 (padding counted, pads at the end only)
    -> 1x1 conv: every pool inside the blocked region."""
    rng = np.random.default_rng(4)
    w0 = numpy_helper.from_array((rng.standard_normal((32, 8, 1, 1)) / 3).astype(np.float32), "w0")
    w1 = numpy_helper.from_array((rng.standard_normal((16, 32, 1, 1)) / 6).astype(np.float32), "w1")
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["m"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        helper.make_node("AveragePool", ["a"], ["p"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], count_include_pad=1),
        helper.make_node("Conv", ["p", "w1"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "pools",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 9, 7])],
        [w0, w1],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _targets():
    from core.compiler.target import host_cpu, make_target

    return {"avx2": make_target("cpu", mcpu=host_cpu(), mattr=["-avx512f"]), "host": make_target("cpu")}


def _rules_used(mod, target) -> dict[str, str]:
    import tvm

    from core.compiler.schedules import schedule_cpu_func, with_root_block

    return {g.name_hint: schedule_cpu_func(with_root_block(f), target)[1] for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.mark.parametrize("which", ["avx2", pytest.param("host", marks=pytest.mark.isa)])
def test_blocked_pools_are_the_rules_and_match_onnxruntime(which):
    import tvm
    from tvm import relax

    model = _pools_model()
    target = _targets()[which]
    used = _rules_used(relax_through(model, target, "DeadCodeElimination"), target)
    pools = {name: rule for name, rule in used.items() if "pool" in name}
    assert len(pools) == 3 and set(pools.values()) == {"cpu.PoolNCHWc"}, used
    x = np.random.default_rng(6).standard_normal((1, 8, 16, 13)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)


def test_avx512_pools_use_512_bit_vectors():
    """Codegen only (any host): the 16-channel block is one zmm register per column."""
    import tvm
    from tvm import te, topi

    from core.compiler.schedules.cpu_pool_nchwc import PoolNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu="znver4")
    data = te.placeholder((1, 2, 12, 12, 16), name="data")
    for kind in ("max", "avg"):
        out = topi.nn.pool2d(data, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), kind, ceil_mode=False, layout="NCHW16c", count_include_pad=False)
        sch = PoolNCHWc().apply(te.create_prim_func([data, out]), target)
        assert sch is not None
        lib = tvm.tirx.build(tvm.IRModule({"main": sch.mod["main"].with_attr("global_symbol", "main")}), target)
        asm = lib.inspect_source("asm")
        op = "vmaxps" if kind == "max" else "vaddps"
        assert f"{op}\t" in asm and "%zmm" in asm.split(op, 1)[1].splitlines()[0], kind
