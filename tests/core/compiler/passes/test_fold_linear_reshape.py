"""core.compiler.passes.fold_linear_reshape: GPT-2's Conv1D (Reshape -> Gemm -> Reshape) as one matmul
on the 3-D activation, so the GELU after it fuses into the matmul's kernel."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.helpers import ort_run, relax_ops


def _conv1d(out_shape: str = "[1, 7, 40]", bias: bool = True) -> onnx.ModelProto:
    """x [1, 7, 24] -> Reshape [7, 24] -> Gemm (W 24x40, + b) -> Reshape back -> tanh GELU."""
    rng = np.random.default_rng(5)
    w = ", ".join(f"{v:.5f}" for v in 0.2 * rng.standard_normal(24 * 40))
    b = ", ".join(f"{v:.5f}" for v in 0.1 * rng.standard_normal(40))
    gemm = "Gemm(flat, w, b)" if bias else "Gemm(flat, w)"
    dims = out_shape.strip("[]").replace(" ", "")
    text = f"""
    <ir_version: 8, opset_import: ["" : 17]>
    conv1d (float[1, 7, 24] x) => (float{out_shape} y)
    <float[24, 40] w = {{{w}}}, float[40] b = {{{b}}}, int64[2] flat_shape = {{7, 24}},
     int64[3] out_shape = {{{dims}}}, float three = {{3.0}}, float k = {{0.044715}}, float c = {{0.7978846}},
     float one = {{1.0}}, float half = {{0.5}}>
    {{
        flat = Reshape(x, flat_shape)
        g = {gemm}
        h = Reshape(g, out_shape)
        cube = Pow(h, three)
        kcube = Mul(k, cube)
        inner = Add(h, kcube)
        scaled = Mul(c, inner)
        t = Tanh(scaled)
        halved = Mul(half, h)
        t1 = Add(one, t)
        y = Mul(halved, t1)
    }}
    """
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def _ops(model) -> list[str]:
    return relax_ops(model, "FoldLinearReshape")


@pytest.mark.parametrize("bias", [True, False])
def test_reshape_gemm_reshape_becomes_one_matmul(bias):
    ops = _ops(_conv1d(bias=bias))
    assert "reshape" not in ops and ops.count("matmul") == 1, ops


def test_a_reshape_to_other_dimensions_is_left_alone():
    ops = _ops(_conv1d(out_shape="[7, 1, 40]"))  # not the input's leading dimensions back
    assert ops.count("reshape") == 2, ops


def test_gelu_fuses_into_the_matmul_and_matches_onnxruntime(tmp_path):
    from core.compiler.compile import compile_model

    model = _conv1d()
    path = tmp_path / "conv1d.onnx"
    onnx.save(model, str(path))
    artifact = compile_model(str(path), "cpu", verify=False)
    kernels = [name for name in artifact.kernel_lineage if "matmul" in name]
    assert kernels and all("tanh" in name for name in kernels), list(artifact.kernel_lineage)
    x = np.random.default_rng(0).standard_normal((1, 7, 24)).astype(np.float32)
    np.testing.assert_allclose(artifact.run({"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-4, atol=1e-5)
