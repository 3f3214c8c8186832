"""A fast slice of ONNX's node conformance suite through compile_model + Artifact.run.

benchmarks/conformance.py runs all 1,884 cases; these are common ops plus one case of each crash
class it found (scalar inputs, Shape outputs, kernels without a root block, out-of-range random
indices, integer division, dtype of Dropout's mask, the wrong answers TVM's converters gave), so
a regression shows here in about a minute.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("conformance", Path(__file__).resolve().parents[4] / "benchmarks" / "conformance.py")
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)


@pytest.fixture(scope="module")
def cases():
    return conformance.load_cases("node")


PASS = [
    # common ops
    "test_add_bcast", "test_matmul_2d", "test_gemm_default_scalar_bias", "test_conv_with_strides_padding", "test_relu",
    "test_softmax_axis_1", "test_averagepool_2d_default", "test_batchnorm_example", "test_concat_2d_axis_0",
    "test_transpose_default", "test_reshape_reordered_all_dims", "test_sigmoid", "test_erf",
    "test_where_example", "test_maxpool_2d_default", "test_gather_0",
    # the crash classes and wrong answers the benchmark found
    "test_clip", "test_tril_neg", "test_shape_start_1", "test_slice", "test_slice_neg_steps", "test_unsqueeze_axis_0",
    "test_scatter_elements_with_axis", "test_gather_2d_indices", "test_gather_elements_0", "test_squeeze",
    "test_div_int32_trunc", "test_mod_mixed_sign_int32", "test_expand_dim_changed", "test_dropout_default_mask",
    "test_isinf_negative", "test_bitshift_left_int32_shift_ge_width", "test_mod_float_edge_cases_fmod_0_float32",
    "test_prelu_broadcast", "test_layer_normalization_2d_axis0",
    # opset-23 Attention expanded into primitive ops: sizes computed from static shapes (folded
    # before import: VMFinalize's "PrimExpr 1152 * x has not been computed", FoldConstantTIR's
    # "emit_te ... ShapeExpr shape", dynamic Pad), Sqrt of a Cast size, fully masked rows (ReduceMax of -inf)
    "test_attention_4d_expanded", "test_attention_4d_causal_expanded", "test_attention_4d_causal_nonpad_attn_mask_composition_expanded",
    "test_attention_23_fullymasked_qk_matmul_output_mode3_zero_expanded", "test_flexattention_expanded_ver26",
    # a shape folded to a constant next to ConstantOfShape of a folded size (LayerNormalization's expansion)
    "test_layer_normalization_2d_axis_negative_2_expanded",
    # refused before the workbench converted them (core.compiler.frontend.modern_ops, modern_reduce, modern_resize)
    "test_attention_3d", "test_reduce_l1_default_axes_keepdims_example", "test_resize_downsample_sizes_cubic",
]

REFUSED = {
    "test_sequence_insert_at_back": "input 'sequence' is a sequence of tensors",
    "test_cast_FLOAT_to_INT4": "INT4",
    "test_nonmaxsuppression_single_box": "its max_output_boxes_per_class is a run-time input",
    "test_resize_downsample_scales_cubic_antialias": "antialias=1",
    "test_resize_downsample_scales_linear": "scales given at run time",
    "test_reduce_l1_empty_set": "needs an input of fixed, non-zero sizes",
    "test_linear_attention_linear_expanded": "uses op 'Scan'",
}


@pytest.mark.parametrize("name", PASS)
def test_case_passes(cases, name):
    model, inputs, expected = cases[name]
    cls, detail = conformance.run_workbench(model, inputs, expected)
    assert (cls, detail) == ("pass", "")


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_case_is_refused_in_one_sentence(cases, name):
    model, inputs, expected = cases[name]
    cls, detail = conformance.run_workbench(model, inputs, expected)
    assert cls == "refusal" and REFUSED[name] in detail
    assert conformance._sentences(detail) == 1 and detail.endswith(".")


def test_comparison_checks_dtype_and_shape():
    import numpy as np

    assert conformance.compare_expected([np.ones(3, np.float32)], [np.ones(3, bool)]).startswith("output 0 dtype")
    assert conformance.compare_expected([np.ones(3)], [np.ones((3, 1))]).startswith("output 0 shape")
    assert conformance.compare_expected([np.array([np.nan, 1.0])], [np.array([np.nan, 1.0])]) == ""
    assert conformance.compare_expected([np.array([1, 2])], [np.array([1, 3])]).startswith("output 0 differs")
