"""LegalizeOps with each distinct call legalized once (core.compiler.passes.legalize_cache) gives the
module plain LegalizeOps gives, and reuses what it may."""
from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from core.model.graph import Graph
from core.model.samples import SAMPLES, scoped_bert


def _chain(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _imported(proto: onnx.ModelProto):
    from tvm import relax

    from core.compiler.frontend.onnx_import import import_graph

    g = Graph(ir.from_proto(proto))
    g.infer_shapes()
    return relax.transform.DecomposeOpsForInference()(import_graph(g).mod)


MODELS = {"chain": lambda: _chain(40), "small_cnn": SAMPLES["small_cnn"], "mlp": SAMPLES["mlp"],
          "tiny_transformer": SAMPLES["tiny_transformer"], "scoped_bert": lambda: scoped_bert(layers=1)}


@pytest.mark.parametrize("name", MODELS)
def test_same_module_as_plain_legalize_ops(name):
    import tvm_ffi
    from tvm import relax

    from core.compiler.passes.legalize_cache import LEGALIZE_STATS, legalize_pass

    mod = _imported(MODELS[name]())
    plain = relax.transform.LegalizeOps()(mod)
    cached = legalize_pass()(mod)
    assert tvm_ffi.structural_equal(plain, cached)
    if name == "chain":  # 40 identical Relu calls: one legalized, 39 reused
        assert LEGALIZE_STATS["misses"] == 1 and LEGALIZE_STATS["hits"] == 39
    if name == "mlp":  # symbolic batch: nothing reused, every call legalized as TVM does
        assert LEGALIZE_STATS["hits"] == 0 and LEGALIZE_STATS["uncached"] > 0


def test_ops_whose_legalizer_reads_bindings_are_never_cached():
    from core.compiler.passes.legalize_cache import cacheable_ops

    ops = cacheable_ops()
    assert {"relax.nn.relu", "relax.add", "relax.nn.conv2d"} <= ops
    # registered in modules that call bb.lookup_binding (manipulate, linear_algebra)
    assert not {"relax.reshape", "relax.matmul", "relax.permute_dims"} & ops


def test_the_pipeline_uses_it():
    from core.compiler.pipeline.pass_list import PASSES

    p = PASSES["LegalizeOps"].factory(None)
    assert p.info.name == "LegalizeOps"
