"""core.compiler.passes.combine_matmul: an attention layer's Q, K and V projections as one matmul whose
column slices fuse into the heads' reshape/transpose (two kernels fewer per layer), left alone where
the combined weight outgrows L2 or a projection is read by something other than a reshape."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import (
    checked_model,
    compiled_matches_onnxruntime,
    kernel_names,
    relax_ops,
    run_cli,
)


def _attention_block(hidden: int = 32, heads: int = 2, tokens: int = 17, reshape: bool = True,
                     bias: bool = True) -> onnx.ModelProto:
    """x -> Q, K, V linear layers (seeded random weights) -> heads -> softmax(Q Kᵀ / sqrt(d)) V
    -> merged heads -> output linear layer, as torch.onnx writes a BERT/ViT self-attention. With
    `reshape` False the three projections are summed instead (no heads to split)."""
    rng = np.random.default_rng(7)
    d = hidden // heads
    inits, nodes = [], []

    def param(name, shape, scale):
        inits.append(numpy_helper.from_array((scale * rng.standard_normal(shape)).astype(np.float32), name))
        return name

    def const(name, values):
        inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def linear(x, name):
        nodes.append(helper.make_node("MatMul", [x, param(f"{name}.w", (hidden, hidden), hidden ** -0.5)], [f"{name}_mm"], name=f"{name}/MatMul"))
        if not bias:
            return f"{name}_mm"
        nodes.append(helper.make_node("Add", [param(f"{name}.b", (hidden,), 0.1), f"{name}_mm"], [name], name=f"{name}/Add"))
        return name

    q, k, v = (linear("x", n) for n in ("query", "key", "value"))
    if reshape:
        split = const("split_shape", [1, tokens, heads, d])
        for n, role in ((q, "query"), (k, "key"), (v, "value")):
            nodes.append(helper.make_node("Reshape", [n, split], [f"{role}_r"], name=f"{role}/Reshape"))
            nodes.append(helper.make_node("Transpose", [f"{role}_r"], [f"{role}_h"], perm=[0, 2, 1, 3], name=f"{role}/Transpose"))
        nodes += [
            helper.make_node("Transpose", ["key_h"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
            helper.make_node("MatMul", ["query_h", "kt"], ["scores"], name="scores"),
            helper.make_node("Div", ["scores", "scale"], ["scaled"], name="scale"),
            helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1, name="softmax"),
            helper.make_node("MatMul", ["probs", "value_h"], ["ctx_h"], name="ctx"),
            helper.make_node("Transpose", ["ctx_h"], ["ctx_t"], perm=[0, 2, 1, 3], name="merge/Transpose"),
            helper.make_node("Reshape", ["ctx_t", const("merge_shape", [1, tokens, hidden])], ["ctx"], name="merge/Reshape"),
        ]
        inits.append(numpy_helper.from_array(np.array(np.sqrt(d), np.float32), "scale"))
        last = "ctx"
    else:
        nodes += [helper.make_node("Add", [q, k], ["qk"], name="qk"), helper.make_node("Add", ["qk", v], ["qkv"], name="qkv")]
        last = "qkv"
    nodes.append(helper.make_node("MatMul", [last, param("out.w", (hidden, hidden), hidden ** -0.5)], ["y"], name="out/MatMul"))
    graph = helper.make_graph(nodes, "attention_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, hidden])], inits)
    return checked_model(graph)



@pytest.mark.isa
def test_three_projections_become_one_matmul_and_three_slices():
    ops = relax_ops(_attention_block(), "CombineParallelMatmul")
    # the projections, the scores, P V and the output layer: one matmul where there were three
    assert ops.count("matmul") == 4, ops
    assert ops.count("strided_slice") == 3, ops
    # one bias add, over the concatenated bias (AVX2 code pads the 17 keys to 24 and masks the
    # padded scores with one more add, after the slices)
    assert ops[: ops.index("strided_slice")] == ["matmul", "add"], ops


def test_slices_fuse_into_the_heads_transposes():
    kernels = kernel_names(_attention_block())
    before_scores = kernels[: next(i for i, k in enumerate(kernels) if "divide" in k)]
    assert [k for k in before_scores if "matmul" in k] == ["fused_matmul_add"], kernels
    sliced = [k for k in before_scores if "strided_slice" in k]
    assert len(sliced) == 3 and all("transpose" in k for k in sliced), kernels
    assert len(before_scores) == 4, "one matmul and three copies, where there were three and three"


@pytest.mark.isa
@pytest.mark.slow
@pytest.mark.parametrize("bias", [True, False])
def test_combined_block_matches_onnxruntime(tmp_path, bias):
    x = np.random.default_rng(3).standard_normal((1, 17, 32)).astype(np.float32)
    compiled_matches_onnxruntime(_attention_block(bias=bias), {"x": x}, tmp_path)


def _split_block(hidden: int = 32, heads: int = 2, tokens: int = 12) -> onnx.ModelProto:
    """GPT-2's c_attn: one linear layer to 3 x hidden (seeded random weights), Split into Q, K, V,
    each reshaped and transposed into heads; the output is Q Kᵀ V (no softmax: the split is what
    is tested)."""
    rng = np.random.default_rng(5)
    d = hidden // heads
    inits = [numpy_helper.from_array((hidden ** -0.5 * rng.standard_normal((hidden, 3 * hidden))).astype(np.float32), "w"),
             numpy_helper.from_array((0.1 * rng.standard_normal(3 * hidden)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([hidden] * 3, np.int64), "sizes"),
             numpy_helper.from_array(np.array([1, tokens, heads, d], np.int64), "heads")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"], name="c_attn/MatMul"),
             helper.make_node("Add", ["mm", "b"], ["qkv"], name="c_attn/Add"),
             helper.make_node("Split", ["qkv", "sizes"], ["q", "k", "v"], axis=2, name="split")]
    for n in "qkv":
        nodes += [helper.make_node("Reshape", [n, "heads"], [f"{n}_r"], name=f"{n}/Reshape"),
                  helper.make_node("Transpose", [f"{n}_r"], [f"{n}_h"], perm=[0, 2, 1, 3], name=f"{n}/Transpose")]
    nodes += [helper.make_node("Transpose", ["k_h"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
              helper.make_node("MatMul", ["q_h", "kt"], ["s"], name="scores"),
              helper.make_node("MatMul", ["s", "v_h"], ["y"], name="ctx")]
    graph = helper.make_graph(nodes, "split_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, hidden])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, tokens, d])], inits)
    return checked_model(graph)


def test_split_into_heads_becomes_slices_fused_into_the_transposes():
    kernels = kernel_names(_split_block())
    assert not any(k.startswith("split") for k in kernels), kernels
    assert sum("strided_slice" in k and "transpose" in k for k in kernels) == 3, kernels


@pytest.mark.isa
@pytest.mark.slow
def test_split_block_matches_onnxruntime(tmp_path):
    x = np.random.default_rng(6).standard_normal((1, 12, 32)).astype(np.float32)
    compiled_matches_onnxruntime(_split_block(), {"x": x}, tmp_path)


def test_left_alone_when_not_read_by_reshapes():
    """Projections summed elementwise (an MLP's parallel branches): a strided slice there would be a
    copy of its own, so the three matmuls stay."""
    ops = relax_ops(_attention_block(reshape=False), "CombineParallelMatmul")
    assert ops.count("matmul") == 4 and "strided_slice" not in ops, ops


def test_left_alone_when_the_combined_weight_outgrows_l2():
    """hidden 256: the combined [256, 768] weight is 768 KiB (BERT's size, measured slower)."""
    ops = relax_ops(_attention_block(hidden=256, heads=4), "CombineParallelMatmul")
    assert ops.count("matmul") == 6 and "strided_slice" not in ops, ops


def test_encoders():
    """vit_encoder's [192, 576] combined weights fit; bert_encoder's [256, 768] do not (module docstring)."""
    from benchmarks.architectures.transformers import bert_encoder, vit_encoder

    vit = relax_ops(vit_encoder(), "CombineParallelMatmul")
    assert vit.count("strided_slice") == 12, "3 slices in each of 4 layers"
    bert = relax_ops(bert_encoder(), "CombineParallelMatmul")
    assert "strided_slice" not in bert


def test_not_in_the_gpu_pipeline():
    from core.compiler.pipeline.pass_list import default_pipeline

    cpu = [s.name for s in default_pipeline("cpu")]
    assert cpu.index("PadAttentionKeys") < cpu.index("CombineParallelMatmul") < cpu.index("FuseOps")
    assert "CombineParallelMatmul" not in [s.name for s in default_pipeline("cuda")]


@pytest.mark.slow
def test_lower_lists_the_step(tmp_path):
    path = tmp_path / "attention.onnx"
    onnx.save(_attention_block(), str(path))
    r = run_cli("lower", path, "--json")
    assert r.returncode == 0, r.stderr
    assert "CombineParallelMatmul" in [s["name"] for s in json.loads(r.stdout)["stages"]]
