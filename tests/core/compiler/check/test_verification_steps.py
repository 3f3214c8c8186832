"""A quantized (QDQ) model is checked in quantization steps: one step (a float on a rounding boundary,
summed in another order) passes and the message says so in steps; a wrong conversion, many steps
off, is refused with how many."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from core.compiler.check.verification import CompiledMismatchError, step_check
from core.compiler.compile import compile_model
from core.compiler.runtime.artifact import specs_from_proto
from core.tolerances import output_step_scales
from tests.core.compiler.qdq_models import qdq_cnn


@pytest.fixture(scope="module")
def cnn() -> onnx.ModelProto:
    return qdq_cnn()


def _out_scale(model) -> float:
    ((scale, _),) = output_step_scales(model).values()
    return float(scale)


def test_the_step_of_an_output_is_the_scale_of_the_dequantize_that_writes_it(cnn):
    out_dq = next(n for n in cnn.graph.node if n.output[0] == cnn.graph.output[0].name)
    assert out_dq.op_type == "DequantizeLinear"
    scale = next(i for i in cnn.graph.initializer if i.name == out_dq.input[1])
    assert _out_scale(cnn) == pytest.approx(float(onnx.numpy_helper.to_array(scale)))


def test_one_step_off_passes_and_says_so_in_steps(cnn):
    step = _out_scale(cnn)
    ref = np.linspace(0, 1, 4, dtype=np.float32).reshape(1, 4, 1, 1)
    ours = ref.copy()
    ours[0, 2] += np.float32(step)
    _, outputs = specs_from_proto(cnn)
    check = step_check(cnn, outputs, {}, [ours], [ref], "onnx reference evaluator")  # no onnxruntime spread measured
    assert check.ok and check.allowed == 1 and check.steps == pytest.approx(1.0, abs=1e-3)
    assert check.sentence == f"within 1 quantization step (scale {step:.3g}) of onnx reference evaluator (1 at most)"


def test_three_steps_off_fails_and_says_how_many(cnn):
    step = _out_scale(cnn)
    ref = np.zeros((1, 4, 1, 1), np.float32)
    ours = ref.copy()
    ours[0, 1] = np.float32(3 * step)
    _, outputs = specs_from_proto(cnn)
    check = step_check(cnn, outputs, {}, [ours], [ref], "onnx reference evaluator")
    assert not check.ok and check.steps == pytest.approx(3.0, abs=1e-3)
    assert "3 quantization steps" in check.sentence and "more than the 1 step" in check.sentence


def test_a_float_model_gets_no_step_check(tmp_path):
    from tests.core.compiler.qdq_models import fp32_cnn

    m = fp32_cnn()
    _, outputs = specs_from_proto(m)
    z = np.zeros((1, 4, 1, 1), np.float32)
    assert step_check(m, outputs, {}, [z], [z + 1], "onnxruntime") is None


def test_the_qdq_cnn_compiles_and_matches(cnn, tmp_path):
    path = tmp_path / "cnn_qdq.onnx"
    onnx.save(cnn, path)
    art = compile_model(str(path), "cpu")
    assert art.manifest.verification.checked and art.manifest.verification.reference == "onnxruntime"


@pytest.fixture
def dequantize_without_zero_point():
    """A DequantizeLinear converter that forgets the zero point: a wrong conversion, not a rounding."""
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from core.compiler.frontend import onnx_import
    from core.compiler.frontend.quantized import QUANTIZED_CONVERTERS

    class NoZeroPoint(fe.OnnxOpConverter):
        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            return QUANTIZED_CONVERTERS["DequantizeLinear"]._impl_v10(bb, fe.onnx_input(list(inputs)[:2]), attr, params)

    onnx_import.registered_converters()
    onnx_import.register_converter("DequantizeLinear", NoZeroPoint)
    yield
    onnx_import.register_converter("DequantizeLinear", QUANTIZED_CONVERTERS["DequantizeLinear"])


def test_a_wrong_dequantize_is_refused_in_steps(cnn, tmp_path, dequantize_without_zero_point):
    path = tmp_path / "cnn_qdq.onnx"
    onnx.save(cnn, path)
    with pytest.raises(CompiledMismatchError, match=r"quantization steps \(scale [0-9.e-]+\) away from onnxruntime's int8 kernels on output 'out0', more than the 1 step"):
        compile_model(str(path), "cpu")


@pytest.mark.slow
def test_onnxruntime_quantized_resnet18_compiles_and_agrees_in_steps(tmp_path):
    """At 128x128 the compiled logits are 3 steps from onnxruntime's fused int8 run (rounding flips
    carried through 18 layers; onnxruntime's optimized and unoptimized runs agree there): refused
    before the check counted steps, within the allowance now."""
    from benchmarks.architectures.resnet import resnet18
    from core.tolerances import ATOL
    from tests.core.compiler.qdq_models import quantize_qdq

    model = quantize_qdq(resnet18(size=128))
    path = tmp_path / "resnet18_qdq.onnx"
    onnx.save(model, path)
    art = compile_model(str(path), "cpu")
    v = art.manifest.verification
    step = _out_scale(model)
    # on another CPU the sums may meet onnxruntime's exactly; judged in steps, a few of the logits' scale at most
    assert v.checked and v.max_abs_err <= v.atol <= max(ATOL, 8 * step)


@pytest.fixture
def quantize_by_floor():
    """A QuantizeLinear converter that rounds down instead of half to even (per-tensor uint8, all the
    CNN's activations need): half a step of bias at every layer, a wrong conversion."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from core.compiler.frontend import onnx_import
    from core.compiler.frontend.quantized import QUANTIZED_CONVERTERS

    class FloorQuantize(fe.OnnxOpConverter):
        @classmethod
        def _impl_v10(cls, bb, inputs, attr, params):
            x, scale, zp = inputs[0], inputs[1], inputs[2]
            y = relax.op.add(relax.op.floor(relax.op.divide(x, scale)), relax.op.astype(zp, "float32"))
            return relax.op.astype(relax.op.clip(y, 0, 255), "uint8")

    onnx_import.registered_converters()
    onnx_import.register_converter("QuantizeLinear", FloorQuantize)
    yield
    onnx_import.register_converter("QuantizeLinear", QUANTIZED_CONVERTERS["QuantizeLinear"])


def test_rounding_down_is_refused_in_steps(cnn, tmp_path, quantize_by_floor):
    """Checked against: floor rounding ends 3 steps off on this CNN (36 on a QDQ ResNet-18)."""
    path = tmp_path / "cnn_qdq.onnx"
    onnx.save(cnn, path)
    with pytest.raises(CompiledMismatchError, match=r"[0-9.]+ quantization steps \(scale [0-9.e-]+\) away from onnxruntime's int8 kernels"):
        compile_model(str(path), "cpu")
