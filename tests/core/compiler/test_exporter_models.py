"""Transformers written the way exporters write them compile and match onnxruntime on real inputs.

The models (tests/core/compiler/exporter_models.py) reproduce torch.onnx's opset-17 idioms:
ConstantOfShape of computed shapes, Shape -> Gather -> Unsqueeze -> Concat chains, Div on shapes,
Expand to computed shapes, Where masks, ReduceSum with axes as an input, LayerNormalization,
Range over a computed length (GPT-2's position ids), and benchmarks.architectures' GPT-2 stack
exported with dynamic batch and sequence axes.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.compile import compile_model
from core.compiler.check.reference import ort_run
from benchmarks.architectures.transformers import gpt2_blocks
from core.model.onnx_io import load_model_bytes
from tests.core.compiler.exporter_models import bert_encoder, gpt2_block, vit_encoder


def _compile(model, name: str, dims: dict[str, int]):
    return compile_model(load_model_bytes(model.SerializeToString(), f"{name}.onnx"), "cpu", verify_dims=dims)


@pytest.mark.isa
def test_bert_encoder_as_torch_onnx_writes_it_compiles_and_matches_with_a_padding_mask():
    model = bert_encoder()
    ops = {n.op_type for n in model.graph.node}
    assert {"ConstantOfShape", "Expand", "Where", "LayerNormalization", "ReduceSum", "Div", "Concat"} <= ops
    art = _compile(model, "bert", {"batch": 2, "sequence": 8})
    assert art.manifest.verification.checked and art.manifest.verification.reference == "onnxruntime"
    rng = np.random.default_rng(3)
    # another sequence length than the check's, and a padded second row
    feeds = {"input_ids": rng.integers(0, 100, (2, 11)).astype(np.int64),
             "attention_mask": np.array([[1] * 11, [1] * 6 + [0] * 5], np.int64)}
    ours, ref = art.run(feeds), ort_run(model.SerializeToString(), feeds)
    assert [o.shape for o in ours] == [(2, 11, 64), (2, 64)]
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)


@pytest.mark.isa
def test_vit_encoder_with_a_class_token_expanded_to_the_batch_compiles_and_matches():
    model = vit_encoder()
    art = _compile(model, "vit", {"batch": 2})
    feeds = {"pixel_values": np.random.default_rng(4).standard_normal((3, 3, 32, 32)).astype(np.float32)}
    np.testing.assert_allclose(art.run(feeds)[0], ort_run(model.SerializeToString(), feeds)[0], rtol=1e-3, atol=1e-4)


@pytest.mark.isa
def test_gpt2_with_position_ids_from_a_range_over_the_sequence_length_compiles_and_matches():
    """Range(0, Shape(ids)[1], 1): the positions have the dim `sequence` itself, not a fresh
    variable (which left every tensor after the embedding without a shape: FoldConstantTIR's
    "emit_te now only supports Tensor that has ShapeExpr shape")."""
    model = gpt2_block(layers=1)
    assert {"Range", "Trilu", "ConstantOfShape"} <= {n.op_type for n in model.graph.node}
    art = _compile(model, "gpt2", {"batch": 2, "sequence": 8})
    assert art.manifest.verification.checked
    feeds = {"input_ids": np.random.default_rng(5).integers(0, 100, (3, 13)).astype(np.int64)}
    np.testing.assert_allclose(art.run(feeds)[0], ort_run(model.SerializeToString(), feeds)[0], rtol=1e-3, atol=1e-4)


@pytest.mark.isa
def test_gpt2_blocks_exported_with_dynamic_axes_compile_and_match_at_two_sequence_lengths():
    kw = {"layers": 1, "hidden": 64, "heads": 2, "seq": 32}
    model = gpt2_blocks(dynamic_axes=True, **kw)
    ops = {n.op_type for n in model.graph.node}
    assert {"Shape", "Gather", "Slice", "Concat", "Div", "Sqrt", "Reshape"} <= ops
    x = np.random.default_rng(6).standard_normal((1, 32, 64)).astype(np.float32)
    # the same network as the static stack (same weights), only written with computed shapes
    np.testing.assert_allclose(ort_run(model.SerializeToString(), {"inputs_embeds": x})[0],
                               ort_run(gpt2_blocks(**kw).SerializeToString(), {"inputs_embeds": x})[0], rtol=1e-5, atol=1e-5)
    art = _compile(model, "gpt2_dynamic", {"batch": 2, "sequence": 12})
    assert art.manifest.verification.checked
    for shape in [(1, 32, 64), (3, 7, 64)]:
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        ours = art.run({"inputs_embeds": x})[0]
        assert ours.shape == shape
        np.testing.assert_allclose(ours, ort_run(model.SerializeToString(), {"inputs_embeds": x})[0], rtol=1e-3, atol=1e-4)


@pytest.mark.isa
def test_a_symbolic_size_used_as_a_number_compiles_and_matches():
    """x / sqrt(float(x.size(1))) with a symbolic dim: the size reaches Sqrt as a 0-d tensor
    (TVM's Sqrt takes no scalar expression: "requires argument 0 (x) to be a tensor")."""
    one = helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.asarray(1, np.int64)))
    nodes = [one, helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT), helper.make_node("Sqrt", ["nf"], ["root"]),
             helper.make_node("Div", ["x", "root"], ["y"])]
    graph = helper.make_graph(nodes, "scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "sequence"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    art = _compile(model, "scale", {"batch": 2, "sequence": 4})
    x = np.random.default_rng(8).standard_normal((2, 9)).astype(np.float32)
    np.testing.assert_allclose(art.run({"x": x})[0], x / 3.0, rtol=1e-6)


@pytest.mark.isa
def test_gpt2_blocks_with_computed_shapes_but_a_static_input_import_fully_static():
    """The same exporter idioms on a model exported without dynamic axes: every Shape is of a
    static tensor, and the Relax module has no symbolic size left (no fresh variable for a
    computed view target, which is what made opset-23 Attention's expansion fail)."""
    from core.compiler.frontend.onnx_import import import_graph

    model = gpt2_blocks(dynamic_axes=True, layers=1, hidden=64, heads=2, seq=32)
    for vi in (model.graph.input[0], model.graph.output[0]):
        for d, v in zip(vi.type.tensor_type.shape.dim, (1, 16, 64)):
            d.dim_value = v
    graph = load_model_bytes(model.SerializeToString(), "gpt2_static.onnx")
    text = import_graph(graph).mod["main"].script()
    assert "T.int64()" not in text and "tensor_to_shape" not in text
    art = compile_model(graph, "cpu")
    x = np.random.default_rng(9).standard_normal((1, 16, 64)).astype(np.float32)
    np.testing.assert_allclose(art.run({"inputs_embeds": x})[0], ort_run(model.SerializeToString(), {"inputs_embeds": x})[0], rtol=1e-3, atol=1e-4)
