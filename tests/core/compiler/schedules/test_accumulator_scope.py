"""Register tiles accumulate in a stack array (cpu_common.ACCUMULATOR_SCOPE = "global"): TVM lowers a
"local" buffer through TVMBackendAllocWorkspace, and inside a parallel loop that call ran once per
row of every parallel kernel, with the tile in heap memory LLVM could not keep in registers.
Structure checks read the kernel as tirx.LowerTVMBuiltin leaves it, built for znver3 / znver4
without running it; the numerics run the whole pipeline for this host against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through

RTOL, ATOL = 1e-3, 1e-4
TARGETS = [("znver4", None), ("znver4", ["-avx512f"]), ("znver3", None)]


def _block_model(size: int = 28, channels: int = 256, k: int = 3, stride: int = 2) -> onnx.ModelProto:
    """1x1 expand 16 -> `channels` + ReLU, depthwise k x k (SiLU), 1x1 project to 16, random
    weights: the expand conv and the depthwise conv are large enough to run in parallel."""
    rng = np.random.default_rng(23)

    def w(name, shape, scale=1.0):
        return numpy_helper.from_array((scale * rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["e"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["e"], ["a"]),
        helper.make_node("Conv", ["a", "w1", "b1"], ["d"], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2, group=channels),
        helper.make_node("Sigmoid", ["d"], ["g"]),
        helper.make_node("Mul", ["d", "g"], ["da"]),
        helper.make_node("Conv", ["da", "w2"], ["y"], kernel_shape=[1, 1]),
    ]
    out = (size + 2 * (k // 2) - k) // stride + 1
    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, out, out])],
        [w("w0", (channels, 16, 1, 1)), w("b0", (channels,), 0.1), w("w1", (channels, 1, k, k)), w("b1", (channels,), 0.1),
         w("w2", (16, channels, 1, 1))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _kernel(model, target, name_part: str):
    """The fused kernel whose name contains `name_part`, as the pipeline hands it to the rules."""
    import tvm

    mod = relax_through(model, target, "DeadCodeElimination")
    funcs = [f for g, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and name_part in g.name_hint]
    assert funcs, [g.name_hint for g in mod.functions]
    return funcs[0]


def _lowered(func, target) -> str:
    """`func` after tirx.LowerTVMBuiltin, where a buffer becomes a stack array or a workspace
    allocation (captured from tvm.compile, which only generates code for `target`)."""
    import tvm

    captured = []

    @tvm.instrument.pass_instrument
    class Capture:
        def run_after_pass(self, mod, info):
            if info.name == "tirx.LowerTVMBuiltin":
                captured.append(mod.script())

    with tvm.transform.PassContext(instruments=[Capture()]):
        tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)
    assert captured
    return "\n".join(captured)


@pytest.mark.parametrize("mcpu,mattr", TARGETS)
def test_parallel_depthwise_and_1x1_convs_keep_their_tile_on_the_stack(mcpu, mattr):
    from core.compiler.schedules.cpu_conv_nchwc import Conv2dNCHWc
    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    model = _block_model()
    for rule, name in ((DepthwiseConv2dNCHWc(), "depthwise_conv2d_NCHWc"), (Conv2dNCHWc(), "relu")):  # relu: the expand conv
        func = rule.apply(_kernel(model, target, name), target).mod["main"]
        assert "T.parallel" in func.script() and "_global = T.sblock_alloc_buffer" in func.script(), name
        lowered = _lowered(func, target)
        assert "T.parallel" in lowered and "TVMBackendAllocWorkspace" not in lowered, name


@pytest.mark.parametrize("mcpu,mattr", TARGETS)
def test_depthwise_with_a_padded_copy_per_plane_keeps_a_workspace_tile(mcpu, mattr):
    """A 5x5 stride-1 conv copies each plane padded inside the parallel loop; beside that copy the
    stack tile ran 1.6-1.9x slower (efficientnet_b0), so its accumulator stays "local"."""
    from core.compiler.schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    rule = DepthwiseConv2dNCHWc()
    kernel = _kernel(_block_model(size=14, k=5, stride=1), target, "depthwise_conv2d_NCHWc")
    assert rule.candidates(kernel, target)[0]["pad"] == "plane"
    script = rule.apply(kernel, target).mod["main"].script()
    assert "T.parallel" in script and "_local = T.sblock_alloc_buffer" in script


@pytest.mark.isa
@pytest.mark.parametrize("k,stride", [(3, 2), (5, 1)])
def test_parallel_block_matches_onnxruntime_on_this_host(k, stride):
    """The whole pipeline for this host (its default threads), stack tiles in parallel kernels."""
    import tvm
    from tvm import relax

    from core.compiler.target import make_target

    model = _block_model(size=28 if stride == 2 else 14, k=k, stride=stride)
    size = 28 if stride == 2 else 14
    x = np.random.default_rng(29).standard_normal((1, 16, size, size)).astype(np.float32)
    (ref,) = ort_run(model, {"x": x})
    target = make_target("cpu")
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    for _ in range(3):  # the threads' shares of each parallel kernel write disjoint rows every time
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=RTOL, atol=ATOL)


def _winograd_model(channels: int = 64, size: int = 14) -> onnx.ModelProto:
    """A 3x3 "same" conv + ReLU with random weights, which takes Winograd F(2,3) at 14x14."""
    rng = np.random.default_rng(31)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4), helper.make_node("Relu", ["c"], ["y"])],
        "winograd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, size, size])],
        [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) / 24).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("mcpu,mattr", TARGETS)
def test_winograd_gemm_keeps_its_tile_on_the_stack(mcpu, mattr, monkeypatch):
    """The Winograd GEMM's register tile is a stack array too: one workspace allocation fewer per
    GEMM block than with a "local" tile (the others are the transformed input and product,
    allocated once; with AVX2 code this kernel's 49 tiles give the GEMM a second block for its
    partial last tile, cpu_winograd.PAIR_TAIL_TILES)."""
    import core.compiler.schedules.cpu_winograd as winograd
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    kernel = _kernel(_winograd_model(), target, "winograd")
    counts = {}
    for scope in ("local", winograd.ACCUMULATOR_SCOPE):
        monkeypatch.setattr(winograd, "ACCUMULATOR_SCOPE", scope)
        func = winograd.Conv2dWinogradNCHWc().apply(kernel, target).mod["main"]
        assert "T.parallel" in func.script()
        counts[scope] = _lowered(func, target).count("TVMBackendAllocWorkspace")
    tiles = func.script().count("_global = T.sblock_alloc_buffer")
    assert tiles == (2 if mattr or mcpu == "znver3" else 1), func.script()
    assert counts["global"] == counts["local"] - tiles, counts
