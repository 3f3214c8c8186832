"""core.compiler.passes.pad_attention: attention over an odd key count runs over keys padded to whole
vectors, the padding masked out of the softmax. ISA-sensitive (the padding is the target's vector
width): in .ci/run's AVX2 pass."""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

from tests.helpers import ort_run, relax_through


def _attention(tokens: int, softmax_axis: int = -1, scale_op: str = "Div") -> onnx.ModelProto:
    """softmax(Q Kᵀ / sqrt(d)) V over 2 heads of 8, as exporters write it (Kᵀ a Transpose)."""
    shape = f"[1, 2, {tokens}, 8]"
    scale = "2.828427" if scale_op == "Div" else "0.353553"
    text = f"""
    <ir_version: 8, opset_import: ["" : 17]>
    attention (float{shape} q, float{shape} k, float{shape} v) => (float{shape} y)
    <float s = {{{scale}}}>
    {{
        kt = Transpose <perm = [0, 1, 3, 2]> (k)
        scores = MatMul(q, kt)
        scaled = {scale_op}(scores, s)
        probs = Softmax <axis = {softmax_axis}> (scaled)
        y = MatMul(probs, v)
    }}
    """
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def _softmax_widths(model) -> list[int]:
    from core.compiler.target import make_target

    mod = relax_through(model, make_target("cpu"), "PadAttentionKeys")
    script = mod["main"].script(show_meta=False)
    return [int(w) for w in re.findall(r"R\.Tensor\(\(1, 2, \d+, (\d+)\), dtype=\"float32\"\) = R\.nn\.softmax", script)]


def _lanes() -> int:
    from core.compiler.target import vector_lanes
    from core.compiler.target import make_target

    return vector_lanes(make_target("cpu"))


@pytest.mark.isa
@pytest.mark.parametrize("scale_op", ["Div", "Mul"])
def test_odd_key_count_is_padded_to_whole_vectors(scale_op):
    lanes = _lanes()
    assert _softmax_widths(_attention(37, scale_op=scale_op)) == [-(-37 // lanes) * lanes]


@pytest.mark.isa
def test_whole_vectors_and_other_axes_are_left_alone():
    assert _softmax_widths(_attention(64)) == [64]  # 64 tokens: every vector width divides
    assert _softmax_widths(_attention(37, softmax_axis=2)) == [37]  # over queries: not attention


def test_not_in_the_gpu_pipeline():
    from core.compiler.pipeline.pass_list import default_pipeline

    assert "PadAttentionKeys" in [s.name for s in default_pipeline("cpu")]
    assert "PadAttentionKeys" not in [s.name for s in default_pipeline("cuda")]


@pytest.mark.isa
def test_padded_attention_matches_onnxruntime(tmp_path):
    """Scores near 0 (a padded key scored 0 instead of masked would take a fifth of every row)
    and up to +-40 (the masked columns must stay out of the max too)."""
    from core.compiler.compile import compile_model

    model = _attention(37)
    path = tmp_path / "attention.onnx"
    onnx.save(model, str(path))
    artifact = compile_model(str(path), "cpu", verify=False)
    rng = np.random.default_rng(1)
    for spread in (0.1, 4.0):
        feeds = {n: (spread * rng.standard_normal((1, 2, 37, 8))).astype(np.float32) for n in ("q", "k")}
        feeds["v"] = rng.standard_normal((1, 2, 37, 8)).astype(np.float32)
        ours = artifact.run(feeds)[0]
        (ref,) = ort_run(model, feeds)
        np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_keys_are_padded_to_groups_of_16_where_that_costs_little():
    from core.compiler.passes.pad_attention import padded_keys

    assert padded_keys(197, 16) == 208 and padded_keys(197, 8) == 208  # a ViT: AVX-512 and AVX2 alike
    assert padded_keys(136, 8) == 144  # whole AVX2 vectors already, 8 keys more give 16-key groups
    assert padded_keys(136, 16) == 144
    assert padded_keys(37, 8) == 40  # 48 would add 11 keys to 37: whole vectors only
    assert padded_keys(24, 8) == 24 and padded_keys(64, 8) == 64 and padded_keys(128, 16) == 128


def test_avx2_scores_take_two_vector_tiles_over_16_key_groups_and_match_onnxruntime(tmp_path):
    """136 keys (17 AVX2 vectors) as AVX2 code, which runs on any x86-64 host here: padded to
    144, the scores matmul takes 6-row tiles of two vectors with Kᵀ read in place (not 13 rows
    of one vector, a broadcast load per FMA), and the attention matches onnxruntime."""
    import tvm

    from core.compiler.compile import compile_model
    from core.compiler.target import make_target
    from tests.helpers import scheduled_through

    model = _attention(136)
    scheduled = scheduled_through(model, make_target("cpu", mattr="-avx512f"))
    (scores,) = [f.script() for g, f in scheduled.functions_items()
                 if isinstance(f, tvm.tirx.PrimFunc) and g.name_hint.startswith("fused_matmul")]
    assert "T.int64(8), T.int64(144)), \"float32\")" in scores, "Kᵀ padded to 144 keys"
    assert "T.unroll(T.int64(6))" in scores and "T.vectorized(T.int64(16))" in scores
    assert "_global" not in scores, "Kᵀ read in place, not packed"
    path = tmp_path / "attention.onnx"
    onnx.save(model, str(path))
    artifact = compile_model(str(path), "cpu", cpu_features="-avx512f", verify=False)
    rng = np.random.default_rng(2)
    feeds = {n: (4.0 * rng.standard_normal((1, 2, 136, 8))).astype(np.float32) for n in ("q", "k", "v")}
    (ref,) = ort_run(model, feeds)
    np.testing.assert_allclose(artifact.run(feeds)[0], ref, rtol=1e-4, atol=1e-5)
