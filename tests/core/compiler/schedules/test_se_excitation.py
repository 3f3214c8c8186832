"""Squeeze-excitation blocks in channel-blocked layout: the excitation (1x1 conv on the pooled
[C, 1, 1], bias, gate) is computed once per channel in the conv's write-back, not once per
element of the [C, H, W] multiply that broadcasts it (cpu_depthwise.inline_tail), and the block
matches onnxruntime with 8-channel blocks (AVX2 code, any x86-64 host with AVX2) and on this host."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4


def _w(rng, name, shape, scale=1.0):
    return numpy_helper.from_array((scale * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _se_model(gate: str = "sigmoid", size: int = 10, channels: int = 32) -> onnx.ModelProto:
    """1x1 conv + SiLU -> SE (GlobalAveragePool, 1x1 conv + ReLU, 1x1 conv, `gate`, Mul) -> 1x1 conv."""
    rng = np.random.default_rng(21)
    c = channels
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["f"], kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["f"], ["fg"]),
        helper.make_node("Mul", ["f", "fg"], ["fa"]),
        helper.make_node("GlobalAveragePool", ["fa"], ["p"]),
        helper.make_node("Conv", ["p", "w_sq", "b_sq"], ["q"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["q"], ["qr"]),
        helper.make_node("Conv", ["qr", "w_ex", "b_ex"], ["g"], kernel_shape=[1, 1]),
        helper.make_node("HardSigmoid", ["g"], ["gs"]) if gate == "hardsigmoid" else helper.make_node("Sigmoid", ["g"], ["gs"]),
        helper.make_node("Mul", ["fa", "gs"], ["s"]),
        helper.make_node("Conv", ["s", "w1"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "se",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, size, size])],
        [
            _w(rng, "w0", (c, 8, 1, 1)), _w(rng, "b0", (c,), 0.1),
            _w(rng, "w_sq", (8, c, 1, 1)), _w(rng, "b_sq", (8,), 0.1),
            _w(rng, "w_ex", (c, 8, 1, 1)), _w(rng, "b_ex", (c,), 0.1),
            _w(rng, "w1", (16, c, 1, 1)),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _avx2_target():
    from core.compiler.target import host_cpu, make_target

    return make_target("cpu", mcpu=host_cpu(), mattr=["-avx512f"])


def _excitation_kernel(model, target):
    """The fused kernel of the excitation conv, its gate and the broadcast multiply."""
    import tvm

    mod = relax_through(model, target, "DeadCodeElimination")
    found = [
        f for g, f in mod.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc) and g.name_hint.startswith("fused_conv2d_NCHWc") and "multiply" in g.name_hint
        and len(f.params[-1].shape) == 5 and int(f.params[-1].shape[2]) > 1 and int(f.params[0].shape[2]) == 1
    ]
    assert len(found) == 1, [g.name_hint for g in mod.get_global_vars()]
    return found[0]


def _blocks_writing(sch, buffer_name: str) -> list[str]:
    """The text of every block of schedule `sch` that writes the buffer `buffer_name`."""
    found, todo = [], [sch.get_sblock("root")]
    while todo:
        block = todo.pop()
        stmt = sch.get(block)
        if any(str(w.source.name) == buffer_name for w in stmt.writes):
            found.append(str(stmt))
        todo.extend(sch.get_child_blocks(block))
    return found


@pytest.mark.parametrize("gate", ["sigmoid", "hardsigmoid"])
def test_excitation_gate_is_computed_once_per_channel(gate):
    """Codegen-free (any host): the block that writes the [C/b, H, W, b] product reads the gate
    from a [C/b, 1, 1, b] buffer; the sigmoid (or HardSigmoid's clip) is not in it."""
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc

    target = _avx2_target()
    func = _excitation_kernel(_se_model(gate), target)
    sch = Conv2dNCHWc().apply(func, target)
    (product,) = _blocks_writing(sch, str(func.params[-1].name))
    assert "sigmoid" not in product and "max(" not in product and "min(" not in product, product
    if gate == "sigmoid":
        assert "T.sigmoid" in sch.mod["main"].script()  # still computed: once per channel, elsewhere


def _run_pipeline(model, target, x):
    import tvm
    from tvm import relax

    mod = relax_through(model, target, "VMFinalize")
    vm = relax.VirtualMachine(tvm.compile(mod, target), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


@pytest.mark.parametrize("gate", ["sigmoid", "hardsigmoid"])
def test_se_block_matches_onnxruntime_avx2(gate):
    model = _se_model(gate)
    x = np.random.default_rng(6).standard_normal((1, 8, 10, 10)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(_run_pipeline(model, _avx2_target(), x), ref, rtol=RTOL, atol=ATOL)


@pytest.mark.isa
def test_se_block_matches_onnxruntime_on_this_host():
    from core.compiler.target import make_target

    model = _se_model("sigmoid", size=7, channels=48)
    x = np.random.default_rng(7).standard_normal((1, 8, 7, 7)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(_run_pipeline(model, make_target("cpu"), x), ref, rtol=RTOL, atol=ATOL)
