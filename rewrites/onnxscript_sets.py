"""onnxscript's rule sets as workbench rules: its common clean-ups, its opset-23 fusions and its
onnxruntime fusions (a family of their own, "onnxruntime": their results are contrib ops that
only onnxruntime runs, so they are for `rewrite --for ort`, not for the compiler).

Each rule here wraps onnxscript `RewriteRule`s as they ship (core.rewrite.onnxscript_rule):
onnxscript's matcher finds the matches and says why one fails, its replacement is spliced in as
one undoable edit. Left out: onnxscript's multi-pass transformer fusions (SDPA -> MHA ->
Attention, GQA, cos/sin caches), whose intermediate results are private-domain ops that nothing
runs, so no single step of them can be previewed or verified on its own.
"""
from __future__ import annotations

import logging

from core.rewrite.onnxscript_compat import rules_from
from core.rewrite.onnxscript_rule import OnnxscriptRule

__all__ = ["RULES", "ORT_FAMILY"]

logger = logging.getLogger(__name__)

ORT_FAMILY = "onnxruntime"  # results are onnxruntime contrib ops (com.microsoft)

_COMMON = "rules.common"


def _common(*names: str):
    return lambda: [rules_from(_COMMON, n) for n in names]


def _call(module: str, name: str):
    return lambda: [rules_from(module, name)()]


def _rotary_rules() -> list:
    """onnxscript's RotaryEmbedding23 fusion with cos/sin of the batch size opset 23 asks for.

    torch.onnx's dynamo export of a transformers Llama computes the angles once for the batch,
    [1, seq, head/2], and lets Mul broadcast them; RotaryEmbedding without position_ids wants
    cos/sin of [batch, seq, head/2] (onnxruntime refuses 1 against 2). Where the angles' batch is
    not x's, they are expanded to it; the angles must be 3-D (a 4-D or 2-D cos is refused)."""
    base = rules_from("rules.fusion._rotary_embedding", "RotaryEmbedding23Fusion")

    class RotaryEmbedding23(base):
        def check(self, context, x, freqs, **rest):
            result = super().check(context, x=x, freqs=freqs, **rest)
            if result and (freqs.shape is None or len(freqs.shape) != 3):
                return result.fail("the angles (freqs) are not known to be 3-D (batch, sequence, head/2).", freqs)
            return result

        def rewrite(self, op, x, freqs, **_):
            cos, sin = op.Cos(freqs), op.Sin(freqs)
            if freqs.shape[0] != x.shape[0]:
                shape = op.Concat(op.Shape(x, start=0, end=1), op.Shape(freqs, start=1), axis=0)
                cos, sin = op.Expand(cos, shape), op.Expand(sin, shape)
            return op.RotaryEmbedding(x, cos, sin, interleaved=0, num_heads=x.shape[1])

    return [RotaryEmbedding23.rule()]


RULES: list[OnnxscriptRule] = [
    # ---- fusions into standard ONNX ops (onnxscript rules/common) ----------------------------------
    OnnxscriptRule(
        "fuse-pad-into-conv", "fusion", "a constant zero Pad of the spatial dims into the Conv's pads attribute",
        _common("fuse_pad_into_conv_rule"), produces=("Conv",), pattern_text="Conv(Pad(x, pads), w, b)",
        conditions=("Pad mode is constant, its value 0", "pads are constant and pad only spatial dims"),
    ),
    OnnxscriptRule(
        "fuse-conv-affine", "fusion", "a constant scalar Mul/Add before or after a Conv into its weights and bias",
        _common("conv_affine_fusion_rule", "affine_conv_fusion_rule"), produces=("Conv",),
        pattern_text="Conv(x, w, b) * scale + offset, or Conv(x * scale + offset, w, b)",
        conditions=("constant weight and bias", "scale and offset are constant scalars"),
    ),
    OnnxscriptRule(
        "fuse-hardswish", "fusion", "Clip(x + 3, 0, 6) / 6 (times x) into HardSigmoid (HardSwish)",
        lambda: [rules_from(_COMMON, "fuse_hardswish_rules")()], produces=("HardSwish", "HardSigmoid"), min_opset=14,
        pattern_text="Clip(x + 3, 0, 6) / 6 * x", conditions=("bias 3, clip to [0, 6], divisor 6",),
    ),
    OnnxscriptRule(
        "fold-batchnorm-gemm", "folding", "BatchNormalization after Gemm or ConvTranspose into its weights and bias",
        _common("fuse_batchnorm_into_gemm_rule", "fuse_batchnorm_into_conv_transpose_rule"),
        produces=("Gemm", "ConvTranspose"), pattern_text="BatchNormalization(Gemm(a, b, c))",
        conditions=("constant weights and batch-norm parameters",),
    ),
    # ---- clean-ups (onnxscript rules/common) ------------------------------------------------------
    OnnxscriptRule(
        "merge-relu-clip-chains", "cleanup", "Relu/Clip applied twice in a row into one",
        _common("successive_relu_rule", "successive_clip_rule", "successive_clip_relu_rule", "successive_relu_clip_rule"),
        produces=("Relu", "Clip"), pattern_text="Relu(Relu(x)), Clip(Clip(x)), Relu(Clip(x)), Clip(Relu(x))", min_opset=11,
        conditions=("constant clip bounds",),
    ),
    OnnxscriptRule(
        "min-max-to-clip", "cleanup", "Min/Max with constant bounds into one Min, Max or Clip",
        _common("min_min_rule", "max_max_rule", "min_max_rule", "max_min_rule"),
        produces=("Clip",), pattern_text="Max(Min(x, hi), lo) and the like", min_opset=11,  # Clip's bounds as inputs
        conditions=("constant scalar bounds", "lower bound <= upper bound"),
    ),
    OnnxscriptRule(
        "collapse-slices", "cleanup", "a Slice that keeps everything into Identity, one covering its axis into nothing",
        _common("collapse_slice_rule", "collapse_slice2_rule"), produces=("Identity",),
        pattern_text="Slice(x, starts, ends, axes, steps)", conditions=("constant starts/ends/axes/steps", "known input shape"),
    ),
    OnnxscriptRule(
        "remove-arithmetic-no-ops", "cleanup", "x + 0, x - 0, x * 1, x / 1 and inference Dropout into Identity",
        _common("add_0_rule", "sub_0_rule", "mul_by_1_rule", "div_by_1_rule", "dropout_inference_rule", "dropout_zero_rule"),
        produces=("Identity",), pattern_text="Add(x, 0), Sub(x, 0), Mul(x, 1), Div(x, 1), Dropout(x)",
        conditions=("the other operand is a constant 0 or 1 that does not broadcast x to a bigger shape",),
    ),
    OnnxscriptRule(
        "remove-redundant-expand", "cleanup", "an Expand that changes nothing, or that a following binary op broadcasts anyway",
        lambda: [rules_from(_COMMON, "no_op_expand_rule"), rules_from(_COMMON, "expand_before_binary_op_rules")],
        pattern_text="Expand(x, shape), or Add(Expand(x, shape), y) and other binary ops",
        conditions=("the expanded shape equals x's, or the binary op's broadcast gives the same result",),
    ),
    OnnxscriptRule(
        "materialize-reshape-shape", "cleanup", "a computed Reshape shape that shape inference knows into a constant",
        _common("materialize_reshape_shape_rule"), pattern_text="Reshape(x, shape computed at run time)", min_opset=14,  # allowzero
        conditions=("the output shape is fully known", "the shape input is not already constant"),
    ),
    OnnxscriptRule(
        "simplify-transposes", "cleanup", "Transpose of a Transpose into one, identity Transposes away",
        _common("transpose_transpose_rule", "no_op_transpose_rule"), produces=("Transpose", "Identity"),
        pattern_text="Transpose(Transpose(x))", conditions=("perm attributes given",),
    ),
    OnnxscriptRule(
        "simplify-casts", "cleanup", "Cast to the type a value already has away; float -> float16 chains into one Cast",
        _common("cast_cast_rule", "no_op_cast_rule"), produces=("Cast", "Identity"),
        pattern_text="Cast(x, to=type of x), Cast(Cast(x))", conditions=("the element types are known",),
    ),
    OnnxscriptRule(
        "merge-unsqueezes", "cleanup", "Unsqueeze of an Unsqueeze into one",
        _common("unsqueeze_unsqueeze_rule"), produces=("Unsqueeze",), pattern_text="Unsqueeze(Unsqueeze(x, a1), a2)",
        conditions=("constant, non-negative axes",),
    ),
    # ---- transformer blocks into ONNX opset-23 ops (onnxscript rules/fusion) ----------------------
    OnnxscriptRule(
        "fuse-rms-normalization", "transformer", "x * 1/sqrt(mean(x^2) + eps) * scale into RMSNormalization (opset 23)",
        lambda: rules_from("rules.fusion._rms_normalization", "rms_normalization_rules"),
        produces=("RMSNormalization",), min_opset=23,
        pattern_text="Mul(Mul(x, Reciprocal(Sqrt(Add(ReduceMean(Pow(x, 2)), eps)))), scale)",
        conditions=("opset >= 23", "eps a float scalar", "float input and scale"),
    ),
    OnnxscriptRule(
        "fuse-rotary-embedding", "transformer", "x * cos + rotate_half(x) * sin into RotaryEmbedding (opset 23)",
        _rotary_rules,
        produces=("RotaryEmbedding",), min_opset=23,
        pattern_text="x * Unsqueeze(Cos(f)) + Concat(-x2, x1) * Unsqueeze(Sin(f)), f = Concat(freqs, freqs)",
        conditions=("opset >= 23", "x is 4-D with static heads and head size", "x split into equal halves",
                    "the angles are 3-D (batch or 1, sequence, head size / 2)"),
    ),
    # ---- for onnxruntime: contrib ops (com.microsoft) ------------------------------------------------
    OnnxscriptRule(
        "ort-skip-layer-normalization", ORT_FAMILY, "residual Add + LayerNormalization into SkipLayerNormalization (onnxruntime)",
        lambda: [rules_from("ort_fusions.skip_normalization", "skip_layer_normalization_ruleset")],
        produces=("SkipLayerNormalization",), pattern_text="LayerNormalization(Add(x, skip), gamma, beta)",
        conditions=("3-D input and skip of one shape", "1-D gamma and beta of the hidden size"),
    ),
    OnnxscriptRule(
        "ort-bias-gelu", ORT_FAMILY, "Gelu(x + bias) into BiasGelu (onnxruntime)",
        lambda: [rules_from("ort_fusions.bias_gelu", "bias_gelu_rules")],
        produces=("BiasGelu",), pattern_text="Gelu(Add(x, bias))", conditions=("1-D bias", "Gelu without tanh approximation"),
    ),
    OnnxscriptRule(
        "ort-erf-gelu", ORT_FAMILY, "the Erf form of GELU into onnxruntime's Gelu (com.microsoft)",
        lambda: [rules_from("ort_fusions.erfgelu", "rules")],
        produces=("Gelu",), pattern_text="0.5 * (x * (Erf(x / sqrt(2)) + 1))", conditions=("constants 0.5, sqrt(2), 1",),
        commute=True,  # torch.onnx writes Mul(Mul(x, ...), 0.5): the constant second
    ),
    OnnxscriptRule(
        "ort-fused-matmul", ORT_FAMILY, "Transpose or scaling around MatMul into FusedMatMul (onnxruntime)",
        lambda: [rules_from("ort_fusions.fused_matmul_rule_sets", "fused_matmul_rule_sets")()],
        produces=("FusedMatMul",), pattern_text="MatMul(Transpose(x), y), Div(MatMul(x, y), c), Transpose(MatMul(x, y))",
        conditions=("constant scalar divisor", "a transpose of the last two axes"),
    ),
]
