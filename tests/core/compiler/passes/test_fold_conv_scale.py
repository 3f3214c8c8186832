"""core.compiler.passes.fold_conv_scale: batch norm (and Mul/Add chains) after a conv folded into its weight."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.core.compiler.passes.layout.test_layout_nchwc import _bn, _model, _save, _weight
from tests.helpers import relax_through


def _ops_after_fold(model) -> list[str]:
    import re

    from core.compiler.target import make_target

    mod = relax_through(model, make_target("cpu"), "FoldScaleIntoConv")
    return re.findall(r"= R\.([a-z_.0-9]+)\(", mod["main"].script(show_meta=False))


def _bn_model(reverse_sub: bool = False, shared: bool = False):
    rng = np.random.default_rng(4)
    inits = [_weight(rng, "w", (16, 8, 3, 3)), *_bn(rng, "bn", 16),
             numpy_helper.from_array((1 + rng.random((16, 1, 1))).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal((1, 16, 1, 1)).astype(np.float32), "t")]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"]),
        helper.make_node("Mul", ["n", "s"], ["m"]),
        helper.make_node("Sub", ["t", "m"] if reverse_sub else ["m", "t"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
    ]
    if shared:  # the conv's output read twice: nothing may be folded into it
        nodes.append(helper.make_node("Add", ["r", "c"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["y"]))
    return _model(nodes, inits, [1, 8, 12, 12], [1, 16, 12, 12], "bn_chain")


@pytest.mark.isa
def test_batch_norm_mul_and_sub_become_one_bias_add():
    ops = _ops_after_fold(_bn_model())
    assert ops.count("nn.conv2d") == 1
    assert not {"subtract", "divide", "multiply"} & set(ops), ops
    assert ops.count("add") == 1


@pytest.mark.isa
def test_chain_stops_where_it_is_not_a_per_channel_affine_map_of_the_conv():
    ops = _ops_after_fold(_bn_model(reverse_sub=True))  # t - y: folded up to the Mul, the Sub stays
    assert "divide" not in ops and ops.count("subtract") == 1
    ops = _ops_after_fold(_bn_model(shared=True))  # conv output used twice: left alone
    assert "divide" in ops


@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("reverse_sub", [False, True])
def test_folded_model_matches_onnxruntime(reverse_sub):
    from core.compiler.compile import compile_model

    artifact = compile_model(_save(_bn_model(reverse_sub=reverse_sub)), "cpu", verify=True)  # raises on a mismatch
    assert artifact.manifest.verification.checked  # compared, not skipped (code this host cannot run is not)


@pytest.mark.isa
def test_symbolic_batch_is_folded_too():
    """A conv on a batch of symbolic size (shapes compared structurally, not as integers)."""
    model = _bn_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    ops = _ops_after_fold(model)
    assert not {"subtract", "divide", "multiply"} & set(ops), ops
