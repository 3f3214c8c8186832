"""`compile` says which path a QDQ model's quantized ops took: int8 kernels where the target CPU has
AVX-512 VNNI (Zen 4 named), float between the Q/DQ nodes where it has not (Zen 3 named)."""
from __future__ import annotations

import onnx

from core.compiler.passes.integer_conv import int8_path
from tests.core.compiler.qdq_models import fp32_wide_cnn, quantize_qdq
from tests.helpers import run_cli


def test_compile_names_the_int8_path_for_the_cpu_named(tmp_path):
    model = tmp_path / "wide_qdq.onnx"
    onnx.save(quantize_qdq(fp32_wide_cnn()), model)
    vnni = run_cli("compile", model, "-o", tmp_path / "zen4", "--cpu", "znver4", timeout=300)
    assert vnni.returncode == 0, vnni.stderr
    assert "int8: 3 quantized convs on int8 kernels (AVX-512 VNNI)" in vnni.stdout
    avx2 = run_cli("compile", model, "-o", tmp_path / "zen3", "--cpu", "znver3", timeout=300)
    assert avx2.returncode == 0, avx2.stderr
    assert "int8: quantized ops in float between their Q/DQ nodes" in avx2.stdout


def test_the_sentence_counts_each_kind_and_stays_quiet_for_float_models():
    assert int8_path(["integer_conv_a", "integer_conv_b", "integer_matmul_c", "fused_add"], ["Conv"]) == (
        "2 quantized convs and 1 quantized matmul on int8 kernels (AVX-512 VNNI)")
    assert int8_path(["integer_matmul_c"], []) == "1 quantized matmul on int8 kernels (AVX-512 VNNI)"
    assert int8_path(["fused_conv"], ["Conv", "Relu"]) == ""
    assert int8_path(["fused_conv"], ["DequantizeLinear", "Conv"]).startswith("quantized ops in float")
