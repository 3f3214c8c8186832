"""core.compiler.passes.layout.conv_width (WidenConvRows): a blocked conv whose output rows have no register
tile computes one column more, cut off after its bias and ReLU. ISA-sensitive (the tile and the
channel block follow the vector width): in .ci/run's AVX2 pass."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import ort_run, relax_through


def _model(size: int = 39, kernel: int = 7, stride: int = 2, tail: str = "relu") -> onnx.ModelProto:
    """A stem like zfnet512's: Conv (3 -> 32, kernel x kernel, stride, no padding) + bias, then
    `tail`: "relu" (Relu), "two" (the conv read by Relu and by a Sigmoid: no tail to fold) or
    "residual" (Relu, then Add of a second conv's output: the tail stops at the Add). A 39-wide
    image gives a 17-wide output, prime: one-pixel register tiles."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((0.2 * rng.standard_normal((32, 3, kernel, kernel))).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    out = (size - kernel) // stride + 1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride, stride], name="conv")]
    inits = [w, b]
    if tail == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    elif tail == "two":
        nodes += [helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
                  helper.make_node("Mul", ["r", "s"], ["y"], name="mul")]
    else:
        w2 = numpy_helper.from_array((0.2 * rng.standard_normal((32, 3, kernel, kernel))).astype(np.float32), "w2")
        inits.append(w2)
        nodes += [helper.make_node("Relu", ["c"], ["r"], name="relu"),
                  helper.make_node("Conv", ["x", "w2"], ["c2"], strides=[stride, stride], name="conv2"),
                  helper.make_node("Add", ["r", "c2"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, out, out])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _text(model) -> str:
    from core.compiler.target import make_target

    return relax_through(model, make_target("cpu"), "WidenConvRows")["main"].script(show_meta=False)


@pytest.mark.isa
def test_prime_width_conv_is_computed_one_column_wider():
    text = _text(_model())
    assert "padding=[0, 0, 0, 2]" in text  # the stride's worth of zero columns on the right
    assert text.count("R.call_tir(cut_columns") == 1
    wide = text.split("R.call_tir(cut_columns")[0]
    assert "R.nn.relu" in wide and ", 17, 18, " in wide  # bias and ReLU on the 18 columns, then the cut


@pytest.mark.isa
@pytest.mark.parametrize("size, kernel, stride", [(41, 7, 2), (19, 3, 1)])
def test_tiled_widths_and_winograd_convs_are_left_alone(size, kernel, stride):
    """A 17-wide output of a 3x3 stride-1 conv is Winograd's; an 18-wide one has tiles of 9 or 6 already."""
    text = _text(_model(size=size, kernel=kernel, stride=stride))
    assert "cut_columns" not in text


@pytest.mark.isa
@pytest.mark.parametrize("tail", ["relu", "two", "residual"])
def test_widened_conv_matches_onnxruntime(tmp_path, tail):
    from core.compiler.compile import compile_model

    model = _model(tail=tail)
    assert "cut_columns" in _text(model)
    path = tmp_path / "stem.onnx"
    onnx.save(model, str(path))
    artifact = compile_model(str(path), "cpu", verify=False)
    assert "conv" in {name for names in artifact.kernel_lineage.values() for name in names}
    x = np.random.default_rng(3).standard_normal((1, 3, 39, 39)).astype(np.float32)
    (ours,) = artifact.run({"x": x})
    (ref,) = ort_run(model, {"x": x})
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_widen_conv_rows_in_the_pipeline():
    from core.compiler.pipeline.pass_list import PASSES, default_pipeline

    names = [s.name for s in default_pipeline("cpu")]
    assert names.index("ConvertLayoutNCHWc") < names.index("WidenConvRows") < names.index("LegalizeOps")
    assert PASSES["WidenConvRows"].level == "graph"
    assert "WidenConvRows" not in [s.name for s in default_pipeline("cuda")]
