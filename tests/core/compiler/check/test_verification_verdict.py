"""The compile check's refusal says what it measured: a small error on large values is not called a wrong conversion."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli import run_cli as cli_main
from core.compiler.compile import compile_model
from core.compiler.check.verification import CompiledMismatchError

SHIFT = 5e-4  # of the largest |value|: above the check's 1e-4 of the scale, far below RELATIVE_WRONG


def _large_values_model(path) -> None:
    """y = Relu(x * 1e4): values up to ~3e4, most of them near or at zero."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])
    nodes = [helper.make_node("Mul", ["x", "big"], ["s"], name="scale"), helper.make_node("Relu", ["s"], ["y"], name="scores")]
    big = numpy_helper.from_array(np.array(1e4, np.float32), "big")
    onnx.save(helper.make_model(helper.make_graph(nodes, "large", [x], [y], initializer=[big]),
                                opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture
def shifted_relu():
    """Relu converted with an offset of SHIFT x its input's largest |value|: the error a rounding
    difference amplified by large values makes, not a different function."""
    from tvm import relax
    from tvm.relax.frontend.onnx import onnx_frontend as fe

    from core.compiler.frontend import onnx_import as tvm_import

    class ShiftedRelu(fe.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            x = inputs[0]
            return relax.op.add(relax.op.nn.relu(x), relax.op.multiply(relax.op.max(relax.op.abs(x)), relax.const(SHIFT, "float32")))

    tvm_import.register_converter("Relu", ShiftedRelu)
    yield
    tvm_import.unregister_converter("Relu")


def test_a_difference_tiny_against_the_values_is_reported_without_blaming_tvm(tmp_path, shifted_relu):
    path = tmp_path / "large.onnx"
    _large_values_model(path)
    with pytest.raises(CompiledMismatchError) as e:
        compile_model(str(path), "cpu")
    text = str(e.value)
    assert e.value.node_name == "scores" and e.value.op_type == "Relu"
    assert not e.value.wrong_conversion and SHIFT <= e.value.relative_err < 2 * SHIFT  # max |x| over max relu(x)
    assert "computes a wrong result" not in text and "TVM's conversion" not in text
    assert "at Relu node 'scores'" in text and "relative error 0.000" in text
    assert "seeded random inputs (x float32 in " in text and "--verify-inputs" in text and "--atol " in text
    # the message's own --atol accepts it
    atol = float(text.split("--atol ")[1].rstrip("."))
    assert atol >= e.value.max_abs_err and e.value.accepting_atol == atol  # what the GUI's Accept offers
    art = compile_model(str(path), "cpu", atol=atol)
    assert art.manifest.verification.max_abs_err == pytest.approx(e.value.max_abs_err)


def test_on_the_users_inputs_the_cli_refuses_in_one_line_and_takes_atol(tmp_path, shifted_relu, capsys):
    path = tmp_path / "large.onnx"
    _large_values_model(path)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.linspace(-2, 2, 64, dtype=np.float32).reshape(4, 16))
    assert cli_main(["compile", str(path), "-o", str(tmp_path / "a"), "--verify-inputs", str(inputs), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the given check inputs" in err and "--verify-inputs" not in err
    assert "Relu node 'scores'" in err and "TVM's conversion" not in err
    atol = err.split("--atol ")[1].split()[0]
    assert cli_main(["compile", str(path), "-o", str(tmp_path / "b"), "--verify-inputs", str(inputs), "--atol", atol, "--json"]) == 0
    assert cli_main(["compile", str(path), "-o", str(tmp_path / "c"), "--atol", "lots"]) == 2
    assert "--atol must be a number of at least 0, not 'lots'." in capsys.readouterr().err
