"""core.compiler.passes.layout.islands: a depthwise conv between ops that stay NCHW is left NCHW.

ShuffleNet's shape, with 8-channel blocks (AVX2): a blocked stem, grouped 1x1 convs (NCHW), a
channel shuffle, and depthwise convs between them. Blocked, each depthwise conv costs two layout
transforms; left NCHW (the NCHW depthwise rule blocks channels inside its kernel), none. A
MobileNet-style depthwise conv between two blocked dense convs stays blocked. Checked on the Relax
module (any host); the compiled model against onnxruntime on this host's ISA."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _shuffle_unit_model(mobile_tail: bool = False) -> onnx.ModelProto:
    """stem 3 -> 24 (3x3, stride 2, blocked), grouped 1x1 24 -> 48 (4 groups), channel shuffle,
    depthwise 3x3 with bias, grouped 1x1 48 -> 48 + residual add + ReLU; with `mobile_tail`, then
    a dense 1x1 48 -> 32, a depthwise 3x3 on 32 channels, a dense 1x1 32 -> 16 (blocked on both
    sides)."""
    rng = np.random.default_rng(11)
    inits = [
        _weight(rng, "w0", (24, 3, 3, 3)), _weight(rng, "b0", (24,)),
        _weight(rng, "g1", (48, 6, 1, 1)),
        _weight(rng, "dw", (48, 1, 3, 3)), _weight(rng, "dwb", (48,)),
        _weight(rng, "g2", (48, 12, 1, 1)),
        numpy_helper.from_array(np.array([1, 4, 12, 16, 16], dtype=np.int64), "split"),
        numpy_helper.from_array(np.array([1, 48, 16, 16], dtype=np.int64), "merged"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "g1"], ["c1"], kernel_shape=[1, 1], group=4),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Reshape", ["r1", "split"], ["s1"]),
        helper.make_node("Transpose", ["s1"], ["s2"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["s2", "merged"], ["s3"]),
        helper.make_node("Conv", ["s3", "dw", "dwb"], ["d1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=48),
        helper.make_node("Conv", ["d1", "g2"], ["c2"], kernel_shape=[1, 1], group=4),
        helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["y" if not mobile_tail else "r2"]),
    ]
    out_channels = 48
    if mobile_tail:
        inits += [_weight(rng, "e1", (32, 48, 1, 1)), _weight(rng, "dw2", (32, 1, 3, 3)), _weight(rng, "p1", (16, 32, 1, 1))]
        nodes += [
            helper.make_node("Conv", ["r2", "e1"], ["e"], kernel_shape=[1, 1]),
            helper.make_node("Relu", ["e"], ["er"]),
            helper.make_node("Conv", ["er", "dw2"], ["d2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=32),
            helper.make_node("Relu", ["d2"], ["dr"]),
            helper.make_node("Conv", ["dr", "p1"], ["y"], kernel_shape=[1, 1]),
        ]
        out_channels = 16
    graph = helper.make_graph(
        nodes, "shuffle_unit",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out_channels, 16, 16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _depthwise_layouts(mod) -> list[tuple[int, str]]:
    """(channels, data layout) of each depthwise conv2d call, in order."""
    from tvm import relax

    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and getattr(expr.op, "name", None) == "relax.nn.conv2d" and int(expr.attrs.groups) > 4:
            found.append((int(expr.attrs.groups), str(expr.attrs.data_layout)))

    relax.analysis.post_order_visit(mod["main"], visit)
    return found


def _out_layouts(mod) -> list[str]:
    from tests.core.compiler.passes.layout.test_layout_nchwc import _conv_layouts

    return [out for _, _, out in _conv_layouts(mod)]


def _transforms(mod) -> int:
    return mod["main"].script(show_meta=False).count("R.layout_transform(")


@pytest.mark.parametrize("mcpu,mattr", [("znver3", None), ("znver4", ["-avx512f"])])
def test_a_depthwise_conv_between_nchw_ops_stays_nchw_with_avx2_blocks(mcpu, mattr, monkeypatch):
    """Codegen-free (any host): with 8-channel blocks the stem is blocked (and left once), the
    depthwise conv read from the shuffle and read by a grouped conv stays NCHW: two transforms in
    all (the image in, the stem out), where blocking it took four."""
    from core.compiler.passes.layout import nchwc as layout_nchwc
    from core.compiler.target import make_target

    target = make_target("cpu", mcpu=mcpu, mattr=mattr)
    mod = relax_through(_shuffle_unit_model(), target, "ConvertLayoutNCHWc")
    assert _depthwise_layouts(mod) == [(48, "NCHW")]
    assert _out_layouts(mod)[0] == "NCHW8c"  # the stem
    assert _transforms(mod) == 2  # the image into NCHW3c, the stem out of NCHW8c

    # without the island rule the same conv is blocked, between two more transforms
    monkeypatch.setattr(layout_nchwc, "isolated_depthwise_weights", lambda *a, **k: [])
    before = relax_through(_shuffle_unit_model(), target, "ConvertLayoutNCHWc")
    assert _depthwise_layouts(before) == [(48, "NCHW8c")]
    assert _transforms(before) == 4


def test_a_depthwise_conv_between_blocked_convs_stays_blocked():
    """The MobileNet-style tail's depthwise conv reads a blocked dense conv and is read by one: it
    stays blocked, while the ShuffleNet-style one before it is left NCHW."""
    from core.compiler.target import make_target

    mod = relax_through(_shuffle_unit_model(mobile_tail=True), make_target("cpu", mcpu="znver3"), "ConvertLayoutNCHWc")
    assert _depthwise_layouts(mod) == [(48, "NCHW"), (32, "NCHW8c")]


def _shared_weight_model(shared: bool = True) -> onnx.ModelProto:
    """Two depthwise convs of one weight (or of two equal ones): the first between grouped convs
    (an island on its own), the second between dense convs (blocked)."""
    rng = np.random.default_rng(13)
    dw = _weight(rng, "dw", (48, 1, 3, 3))
    inits = [_weight(rng, "w0", (24, 3, 3, 3)), _weight(rng, "g1", (48, 6, 1, 1)), dw,
             _weight(rng, "g2", (48, 12, 1, 1)), _weight(rng, "e1", (48, 48, 1, 1)), _weight(rng, "p1", (16, 48, 1, 1))]
    if not shared:
        inits.append(numpy_helper.from_array(numpy_helper.to_array(dw), "dw_copy"))
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["c0", "g1"], ["c1"], kernel_shape=[1, 1], group=4),
        helper.make_node("Conv", ["c1", "dw"], ["d1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=48),
        helper.make_node("Conv", ["d1", "g2"], ["c2"], kernel_shape=[1, 1], group=4),
        helper.make_node("Conv", ["c2", "e1"], ["e"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["e", "dw" if shared else "dw_copy"], ["d2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=48),
        helper.make_node("Conv", ["d2", "p1"], ["y"], kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(nodes, "shared_weight", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("shared", [True, False])
def test_a_weight_shared_with_a_blocked_depthwise_conv_keeps_both_blocked(shared, monkeypatch):
    """The ConvertLayout callback tells convs apart by their weight: where an island shares its
    weight with a conv that is no island, both keep the blocked layout (as before the rule); with
    a weight of its own, the island is left NCHW."""
    from core.compiler.passes.layout import nchwc as layout_nchwc
    from core.compiler.target import make_target

    found = []
    original = layout_nchwc.isolated_depthwise_weights

    def spy(*args, **kwargs):
        found.append(original(*args, **kwargs))
        return found[-1]

    monkeypatch.setattr(layout_nchwc, "isolated_depthwise_weights", spy)
    mod = relax_through(_shared_weight_model(shared), make_target("cpu", mcpu="znver3"), "ConvertLayoutNCHWc")
    assert [len(f) for f in found] == [0 if shared else 1]
    assert _depthwise_layouts(mod) == [(48, "NCHW8c" if shared else "NCHW"), (48, "NCHW8c")]


@pytest.mark.isa
@pytest.mark.parametrize("mobile_tail", [False, True])
def test_shuffle_unit_matches_onnxruntime(tmp_path, mobile_tail):
    import tvm

    from core.compiler.compile import compile_model

    model = _shuffle_unit_model(mobile_tail)
    path = tmp_path / "unit.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(12).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ours = compile_model(str(path), "cpu", verify=False).vm()["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(ours, ort_run(model, {"x": x})[0], rtol=1e-3, atol=1e-4)
