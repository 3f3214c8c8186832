"""ReadInputsInPlace (core.compiler.passes.input_alignment): the kernels that read a model input,
directly or through a view, declare it 16-byte aligned and nothing else changes; where a kernel
does not come back from TVM's JSON form the same, it keeps TVM's 64 and the module says so."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.passes.input_alignment import ALIGNED, input_alignment, input_readers, read_inputs_in_place
from core.compiler.pipeline.pass_list import default_pipeline
from core.compiler.target import make_target
from tests.helpers import checked_model, relax_through


def _model():
    """x -> Reshape (a view) -> MatMul W -> Add b -> y; x -> Relu -> z."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([128, 64], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["x2"]), helper.make_node("MatMul", ["x2", "w"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
        "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 32]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 16, 64])],
        [w, b, shape])
    return checked_model(graph)


@pytest.fixture(scope="module")
def lowered():
    target = make_target("cpu")
    return relax_through(_model(), target, last="DataflowLowering")


def test_input_readers_are_redeclared_and_nothing_else(lowered):
    readers = input_readers(lowered)
    assert len(readers) == 2  # the matmul reads the reshaped view, the relu the input itself
    out = read_inputs_in_place(lowered)
    assert input_alignment(out) == ALIGNED
    for gv, indices in readers.items():
        before, after = lowered[gv], out[gv]
        assert [p.data_alignment for p in after.params] == [ALIGNED if i in indices else p.data_alignment
                                                            for i, p in enumerate(before.params)]
        assert after.script().replace(f", align={ALIGNED}", "") == before.script()
    for gv, func in lowered.functions_items():
        if gv not in readers and type(func).__name__ == "PrimFunc":
            assert out[gv].same_as(func)


def test_a_kernel_that_does_not_come_back_keeps_its_declaration(lowered, monkeypatch):
    import tvm

    def broken(*_a, **_k):
        raise ValueError("not parsed")

    monkeypatch.setattr(tvm.ir, "load_json", broken)
    out = read_inputs_in_place(lowered)
    assert input_alignment(out) == 64
    assert all(p.data_alignment == 64 for gv in input_readers(lowered) for p in out[gv].params)


def test_an_input_read_by_anything_but_a_kernel_keeps_tvms_alignment():
    """A packed function (or a branch, another function) may assume 64 bytes: nothing claims 16."""
    from tvm import relax

    t = relax.TensorType([8], "float32")
    x = relax.Var("x", t)
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        bb.emit_func_output(bb.emit(relax.call_dps_packed("a_library_kernel", relax.Tuple([x]), t)))
    mod = bb.get()
    assert "global_symbol" in mod["main"].attrs
    assert input_readers(mod) is None and input_alignment(read_inputs_in_place(mod)) == 64


def test_cpu_pipelines_only():
    assert "ReadInputsInPlace" in [s.name for s in default_pipeline(make_target("cpu"))]
    assert "ReadInputsInPlace" not in [s.name for s in default_pipeline("cuda")]
