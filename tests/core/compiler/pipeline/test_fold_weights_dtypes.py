"""Folded constants keep their dtype: TVM's relax.const without one narrows int64 to int32 and
float64 to float32, so an index computed from constants (torch's dynamo export builds a mask's
GatherND indices so) met the int64 shape it is added to as int32, and the compile failed
("Binary operators must have the same datatype")."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from core.compiler.compile import compile_model
from core.compiler.passes.relax_rewrite import array_const


def test_array_const_keeps_the_dtype():
    for dtype in (np.int64, np.float64, np.int32, np.float32, np.bool_):
        const = array_const(np.zeros((2, 3), dtype))
        assert str(const.ty.dtype) == np.dtype(dtype).name


def test_fold_weights_keeps_an_int64_constant_int64():
    """The dynamo Llama's mask indices as Relax has them at import: broadcast_to of an int64
    constant, then added to an int64 tensor; FoldWeights folds the broadcast."""
    from tvm import relax

    from core.compiler.pipeline.pass_list import fold_weights_pass

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=[2], dtype="int64"))
    with bb.function("main", [x]):
        with bb.dataflow():
            idx = bb.emit(relax.op.broadcast_to(array_const(np.array([0, 1], np.int64)), relax.ShapeExpr([3, 2])))
            out = bb.emit_output(relax.op.add(idx, x))
        bb.emit_func_output(out)
    folded = fold_weights_pass()(bb.get())  # failed: the folded constant came back int32
    assert "int32" not in folded.script()


def test_the_dynamo_llama_compiles_at_a_fixed_size():
    """The real export (tests/rewrites/data), its inputs fixed at [2, 32]: it failed in FoldWeights."""
    from core import load_model
    from core.model.boundary_edits import SetInputShape

    graph = load_model(Path(__file__).resolve().parents[3] / "rewrites" / "data" / "llama_dynamo.onnx")
    for v in list(graph.model.graph.inputs):
        SetInputShape(graph, v.name, [2, 32]).do(graph)
    art = compile_model(graph, "cpu")  # verified against onnxruntime
    assert art.manifest.verification.checked
