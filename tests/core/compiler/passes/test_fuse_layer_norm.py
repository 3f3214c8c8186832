"""core.compiler.passes.fuse_layer_norm: a layer norm written out op by op becomes one layer_norm."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.helpers import ort_run, relax_ops, relax_through

HIDDEN = 24


def _model(mean_axis: int = -1, exponent: float = 2.0, gamma_first: bool = False) -> onnx.ModelProto:
    """BERT's exported layer norm on a (1, 7, 24) input (odd sizes: no vector width divides 7)."""
    rng = np.random.default_rng(3)
    gamma = ", ".join(f"{v:.6f}" for v in 1 + 0.1 * rng.standard_normal(HIDDEN))
    beta = ", ".join(f"{v:.6f}" for v in 0.1 * rng.standard_normal(HIDDEN))
    mul = "Mul(gamma, normed)" if gamma_first else "Mul(normed, gamma)"
    add = "Add(beta, scaled)" if gamma_first else "Add(scaled, beta)"
    text = f"""
    <ir_version: 8, opset_import: ["" : 17]>
    ln (float[1, 7, {HIDDEN}] x) => (float[1, 7, {HIDDEN}] y)
    <float[{HIDDEN}] gamma = {{{gamma}}}, float[{HIDDEN}] beta = {{{beta}}}, float two = {{{exponent}}}, float eps = {{1e-5}}>
    {{
        mean = ReduceMean <axes = [{mean_axis}], keepdims = 1> (x)
        centred = Sub(x, mean)
        squared = Pow(centred, two)
        var = ReduceMean <axes = [{mean_axis}], keepdims = 1> (squared)
        var_eps = Add(var, eps)
        std = Sqrt(var_eps)
        normed = Div(centred, std)
        scaled = {mul}
        y = {add}
    }}
    """
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def _ops(model) -> list[str]:
    return relax_ops(model, "FuseLayerNorm")


@pytest.mark.parametrize("gamma_first", [False, True])
def test_decomposed_layer_norm_becomes_one_op(gamma_first):
    ops = _ops(_model(gamma_first=gamma_first))
    assert ops == ["nn.layer_norm"], ops


def test_other_reductions_and_powers_are_left_alone():
    ops = _ops(_model(mean_axis=1))  # normalized over tokens, not features: not a layer norm
    assert "nn.layer_norm" not in ops and ops.count("mean") == 2
    ops = _ops(_model(exponent=3.0))
    assert "nn.layer_norm" not in ops and "power" in ops


def test_fused_layer_norm_matches_onnxruntime_on_large_means(tmp_path):
    """Rows with a mean of 1000 and unit spread: a one-pass variance (E[x^2] - E[x]^2) would lose
    most digits in float32; the two-pass one layer_norm legalizes to keeps them."""
    from core.compiler.compile import compile_model

    model = _model()
    path = tmp_path / "ln.onnx"
    onnx.save(model, str(path))
    artifact = compile_model(str(path), "cpu", verify=False)
    rng = np.random.default_rng(0)
    for offset in (0.0, 1000.0):
        x = (rng.standard_normal((1, 7, HIDDEN)) + offset).astype(np.float32)
        ours = artifact.run({"x": x})[0]
        (ref,) = ort_run(model, {"x": x})
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=2e-4)


def test_the_pass_leaves_its_input_module_as_it_was():
    """Lowering keeps every stage's module: a pass must return a new one, not edit the last."""
    from core.compiler.passes.fuse_layer_norm import fuse_layer_norm
    from core.compiler.target import make_target

    mod = relax_through(_model(), make_target("cpu"), "FoldWeights")
    before = mod["main"].script(show_meta=False)
    after = fuse_layer_norm(mod)
    assert mod["main"].script(show_meta=False) == before
    assert "layer_norm" in after["main"].script(show_meta=False)
