"""Kernels over a symbolic sequence (a dynamic-axes transformer's): attention's probs @ V, whose
reduction runs over the symbolic sequence, takes the matmul rule (B read in place, columns in
vectors, batch x heads x rows in parallel) and a layer norm over symbolic rows takes the row rule
(parallel rows, vector reductions); both used to fall to the generic rule, which left them as
scalar loops on one thread (issue 40: 10.9 ms against 0.33 ms static for BERT's probs @ V).
Code for an AVX2 CPU (haswell), which this host and an AVX2 one both run; checked at two shapes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.core.compiler.schedules.test_schedules import ATOL, RTOL, _fused, _rules_used
from tests.helpers import ort_run


def _attention_tail() -> onnx.ModelProto:
    """probs [batch, 4, seq, seq] @ v [batch, 4, seq, 64] -> [batch, 4, seq, 64], then a
    LayerNormalization of a [batch, seq, 64] input: the two symbolic-sequence kernels."""
    rng = np.random.default_rng(3)
    gamma = numpy_helper.from_array((1 + 0.1 * rng.standard_normal(64)).astype(np.float32), "gamma")
    beta = numpy_helper.from_array((0.1 * rng.standard_normal(64)).astype(np.float32), "beta")
    nodes = [helper.make_node("MatMul", ["probs", "v"], ["ctx"], name="probs_v"),
             helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(
        nodes, "attention_tail",
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4, "seq", "seq"]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, ["batch", 4, "seq", 64]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("ctx", TensorProto.FLOAT, ["batch", 4, "seq", 64]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 64])],
        [gamma, beta])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def avx2():
    from core.compiler.target import make_target

    return make_target("cpu", mcpu="haswell")


def test_symbolic_sequence_kernels_take_the_matmul_and_row_rules_and_match_onnxruntime(avx2):
    import tvm
    from tvm import relax

    model = _attention_tail()
    mod = _fused(model)
    used = _rules_used(mod, avx2)
    assert [rule for name, rule in used.items() if "matmul" in name] == ["cpu.Matmul"], used
    assert [rule for name, rule in used.items() if "norm" in name] == ["cpu.RowReduction"], used
    for batch, seq in ((1, 37), (2, 64)):
        rng = np.random.default_rng(seq)
        feeds = {"probs": rng.random((batch, 4, seq, seq)).astype(np.float32),
                 "v": rng.standard_normal((batch, 4, seq, 64)).astype(np.float32),
                 "h": rng.standard_normal((batch, seq, 64)).astype(np.float32)}
        with avx2:
            from core.compiler.schedules import schedule_pass

            scheduled = schedule_pass(avx2)(mod)
        vm = relax.VirtualMachine(tvm.compile(scheduled, avx2), tvm.cpu())
        ours = [o.numpy() for o in vm["main"](*[tvm.runtime.tensor(a) for a in feeds.values()])]
        for got, ref in zip(ours, ort_run(model, feeds)):
            np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    # parallel and vectorized, no longer the scalar loops the generic rule left
    for gvar, func in scheduled.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc) and ("matmul" in gvar.name_hint or "norm" in gvar.name_hint):
            text = func.script()
            assert "T.parallel(" in text and "T.vectorized(" in text, gvar.name_hint
