"""The accuracy debugger through its real paths: onnxruntime runs of two models, and compiled
programs against onnxruntime (issue 42: one changed Conv is the first divergence and nothing
earlier; a model against itself has none; a quantized model's errors in quantization steps; a
wrong conversion found inside its fused kernel)."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.accuracy.debug import debug_compiled, debug_models
from core.errors import WorkbenchError
from core.model.onnx_io import load_model_bytes
from tests.core.views.test_diff_matching import cnn, delete_reconnect


def graph(proto: onnx.ModelProto, name: str = "m.onnx"):
    return load_model_bytes(proto.SerializeToString(), name)


def scaled_weight(model: onnx.ModelProto, weight: str, factor: float) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name == weight:
            t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * factor).astype(np.float32), weight))
    return m


@pytest.mark.parametrize("names", [False, True])
def test_one_conv_with_larger_weights_is_the_first_divergence_and_nothing_earlier_differs(names):
    a = cnn(names=names)
    b = scaled_weight(a, "b0b_w", 1.02)  # the second conv of the first block
    report = debug_models(graph(a), graph(b, "b.onnx"))
    conv = next(i for i, n in enumerate(a.graph.node) if n.op_type == "Conv" and n.input[1] == "b0b_w")
    first = report.first
    assert first is not None and first.op == "Conv" and first.output == "b0b_c"
    assert first.node == (a.graph.node[conv].name or graph(a).nodes[conv].label) and first.node_id == graph(a).nodes[conv].id
    order = [t.output for t in report.tensors]
    assert all(t.ok for t in report.tensors[: order.index("b0b_c")])  # everything before it agrees
    assert not report.tensors[-1].ok and len(report.tensors) == len(a.graph.node)
    assert report.to_json()["first_divergence"]["node"] == first.node


def test_a_model_against_itself_has_no_divergence():
    a = cnn()
    report = debug_models(graph(a), graph(a))
    assert report.first is None and report.tensors and all(t.ok and t.max_abs == 0 for t in report.tensors)
    assert report.to_json()["first_divergence"] is None


def test_a_deleted_node_leaves_its_neighbours_matched_and_the_reader_diverges():
    a = cnn()
    relu = next(i for i, n in enumerate(a.graph.node) if n.op_type == "Relu" and n.output[0] == "b0a_r")
    b = delete_reconnect(a, relu)
    report = debug_models(graph(a), graph(b, "b.onnx"))
    assert "b0a_r" not in [t.output for t in report.tensors] and report.not_compared == 1
    assert report.first is not None and report.first.output == "b0b_c"  # the conv that read the Relu


def test_chunks_compare_the_same_values_as_one_run():
    a = cnn()
    b = scaled_weight(a, "b1a_w", 1.05)
    whole = debug_models(graph(a), graph(b))
    split = debug_models(graph(a), graph(b), budget=1)  # one tensor per chunk
    assert whole.chunks == 1 and split.chunks == len(split.tensors) > 1
    assert [(t.output, t.ok) for t in whole.tensors] == [(t.output, t.ok) for t in split.tensors]
    for w, s in zip(whole.tensors, split.tensors):  # onnxruntime fuses differently when other tensors are outputs
        assert s.max_abs == pytest.approx(w.max_abs, rel=1e-4, abs=1e-5)
    assert whole.first.output == split.first.output == "b1a_c"


def test_kept_and_recomputed_values_are_the_same():
    a = cnn()
    b = scaled_weight(a, "stem_w", 1.1)
    kept = debug_models(graph(a), graph(b))
    none_kept = debug_models(graph(a), graph(b), keep_bytes=0)
    assert "y" in kept.kept and not none_kept.kept
    for x, y in zip(kept.pair("stem_c"), none_kept.pair("stem_c")):
        np.testing.assert_array_equal(x, y)
    ours, ref = kept.pair("stem_c")
    assert float(np.abs(ours - ref).max()) == pytest.approx(kept.tensor("stem_c").max_abs)


def test_models_with_other_inputs_are_refused_in_one_sentence():
    a = cnn()
    b = onnx.ModelProto()
    b.CopyFrom(a)
    b.graph.input[0].name = "image"
    b.graph.node[0].input[0] = "image"
    with pytest.raises(WorkbenchError, match="takes an input 'image' that the model it is compared with has not"):
        debug_models(graph(a), graph(b))


def test_user_inputs_are_used_and_checked():
    a = cnn()
    x = np.full((1, 3, 8, 8), 0.5, np.float32)
    report = debug_models(graph(a), graph(scaled_weight(a, "stem_w", 1.02)), inputs={"x": x})
    assert report.inputs == "user-supplied"
    ours, ref = report.pair("stem_c")
    from onnx.reference import ReferenceEvaluator

    ref_direct = ReferenceEvaluator(_exposed(a, "stem_c")).run(None, {"x": x})[0]
    np.testing.assert_allclose(ref, ref_direct, rtol=1e-5, atol=1e-5)
    with pytest.raises(WorkbenchError, match="'x'"):
        debug_models(graph(a), graph(a), inputs={"x": x[:, :2]})


def _exposed(model, tensor):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.append(onnx.ValueInfoProto(name=tensor))
    return m


def quantized_pair(tmp_path):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    fp32 = tmp_path / "fp32.onnx"
    onnx.save(cnn(seed=3), fp32)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.k = 0

        def get_next(self):
            self.k += 1
            return {"x": np.random.default_rng(self.k).standard_normal((1, 3, 8, 8)).astype(np.float32)} if self.k <= 4 else None

    q = tmp_path / "int8.onnx"
    quantize_static(str(fp32), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return fp32, q


def test_a_quantized_model_against_its_float_source_in_quantization_steps(tmp_path):
    from core import load_model

    fp32, q = quantized_pair(tmp_path)
    report = debug_models(load_model(fp32), load_model(q), reference=str(fp32), subject=str(q))
    stepped = [t for t in report.tensors if t.steps is not None]
    assert stepped, "no tensor of the QDQ model has a quantization scale"
    assert report.first is not None and report.first.op == "Conv" and report.first.output == "stem_c"
    assert any("DequantizeLinear" in note for note in report.notes)
    ranked = report.ranked()
    assert [t.severity for t in ranked] == sorted((t.severity for t in ranked), reverse=True)
    # the steps figure is the error over the scale the QDQ model quantizes that tensor with
    t = next(t for t in stepped if math.isfinite(_scale_of(q, t.output)) and not _per_axis(q, t.output))
    ours, ref = report.pair(t.output)
    assert t.steps == pytest.approx(float(np.abs(ours.astype(np.float64) - ref).max()) / _scale_of(q, t.output), rel=1e-6)


def _scale_of(path, tensor):
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] == tensor:
            return float(np.asarray(inits[n.input[1]]).max())
    return float("nan")


def _per_axis(path, tensor):
    m = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return any(n.op_type == "QuantizeLinear" and n.input[0] == tensor and inits[n.input[1]].size > 1 for n in m.graph.node)


# -- compiled programs ---------------------------------------------------------------------


def mlp_tanh(seed: int = 0) -> onnx.ModelProto:
    """x @ W1 + b1 -> Tanh -> @ W2 -> Relu: the Tanh fuses into the first MatMul's kernel."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 8)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Tanh", ["hb"], ["t"], name="act"),
             helper.make_node("MatMul", ["t", "w2"], ["o"], name="fc2"),
             helper.make_node("Relu", ["o"], ["y"], name="out")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_compiled_cnn_agrees_at_every_kernel_output_and_each_is_listed():
    report = debug_compiled(graph(cnn(names=True)))
    assert report.first is None and report.tensors and all(t.ok for t in report.tensors)
    assert report.reference == "onnxruntime" and report.chunks == 1
    # every fused kernel is named (the graph output's pooling kernel is one the compile's lineage misses)
    unnamed = [t.output for t in report.tensors if not t.kernel]
    assert set(unnamed) <= {"y"} and len(report.tensors) >= 6, unnamed
    # read at the fused kernels' outputs: a conv's output inside conv+bn+relu is not materialized
    outputs = [t.output for t in report.tensors]
    assert "stem_r" in outputs and "stem_c" not in outputs and report.not_compared > 0


@pytest.fixture
def wrong_tanh():
    """TVM's import of Tanh replaced by one 5 % too large: a wrong conversion to be found."""
    from core.compiler.frontend.registry import converters, register_converter, unregister_converter

    class WrongTanh:
        @classmethod
        def get_converter(cls, opset):
            def convert(bb, inputs, attr, params):
                from tvm import relax

                return relax.op.multiply(relax.op.tanh(inputs[0]), relax.const(1.05, "float32"))
            return convert

    before = converters().get("Tanh")
    register_converter("Tanh", WrongTanh)
    yield
    if before is None:
        unregister_converter("Tanh")
    else:
        register_converter("Tanh", before)


def test_a_wrong_conversion_is_the_first_divergence_and_is_found_inside_its_kernel(wrong_tanh):
    report = debug_compiled(graph(mlp_tanh()))
    first = report.first
    assert first is not None and first.kernel and not first.ok
    assert first.node in ("act", "fc2", "out")  # the output of the kernel holding the Tanh (where it is written out)
    if first.node != "act":  # the Tanh sits inside a fused kernel: splitting it names the node
        assert any("node 'act'" in n for n in report.notes), report.notes
    per_node = debug_compiled(graph(mlp_tanh()), per_node=True)
    assert per_node.first.node == "act" and [t.ok for t in per_node.tensors][:2] == [True, True]


def test_compiled_chunks_give_the_same_figures():
    whole = debug_compiled(graph(mlp_tanh()), per_node=True)
    split = debug_compiled(graph(mlp_tanh()), per_node=True, budget=1)
    assert split.chunks == len(split.tensors) > 1
    assert [(t.output, t.ok) for t in whole.tensors] == [(t.output, t.ok) for t in split.tensors]
    for w, s in zip(whole.tensors, split.tensors):
        assert s.max_abs == pytest.approx(w.max_abs, abs=1e-6)


def test_a_correct_rewrite_agrees_everywhere_though_its_tensors_change_hands():
    """fold-conv-bn: the folded Conv writes what the BatchNormalization wrote (same tensor name, other
    op): paired by name it agrees; the old Conv's output has no counterpart and is not compared."""
    from core.rewrite.engine import apply_rewrite
    from rewrites import get_rule

    a = graph(cnn(names=True))
    b = graph(cnn(names=True))
    apply_rewrite(b, get_rule("fold-conv-bn"))
    assert len(b.nodes) < len(a.nodes)
    report = debug_models(a, b)
    assert report.first is None and all(t.ok for t in report.tensors), [t.output for t in report.beyond]
    assert "stem_n" in [t.output for t in report.tensors] and "stem_c" not in [t.output for t in report.tensors]


def test_a_hand_scheduled_kernel_from_a_tuning_database_is_checked_against_the_reference(tmp_path):
    """tune_db: the debugged build applies the database's records (the course's mm_relu schedule)."""
    import json
    from pathlib import Path

    from core import load_model
    from core.compiler.manual.session import open_session
    from core.compiler.target import make_target
    from core.compiler.tuning.tune import record_schedule
    from tests.conftest import sample

    root = Path(__file__).resolve().parents[3]
    s = open_session(sample("mm_relu"), "fused_matmul_relu")
    s.apply_all(json.loads((root / "resources" / "schedules" / "mm_relu_course.json").read_text()))
    record_schedule(s.base, make_target("cpu"), s.trace(), 0.01, tmp_path / "db", default_ms=5.0)
    report = debug_compiled(load_model(sample("mm_relu")), tune_db=tmp_path / "db")
    assert report.first is None and report.tensors and all(t.ok for t in report.tensors)
    assert any(t.kernel and t.kernel.startswith("fused_matmul_relu") for t in report.tensors)
