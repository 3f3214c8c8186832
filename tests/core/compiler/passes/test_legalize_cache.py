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


def _round_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Round", ["x"], ["y"])], "round", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _asm(executable) -> str:
    return "\n".join(m.inspect_source("asm") for m in [executable.mod, *executable.mod.imports] if m.kind == "llvm")


def test_round_on_a_cpu_is_tirx_round_and_still_ties_to_even():
    """relax.round legalizes to tirx.round on CPU targets (legalize_round), TVM's nearbyint on CUDA;
    on x86 and ARM both give the instruction nearbyint gives, rounding ties to even."""
    import numpy as np
    import tvm
    from tvm import relax

    from core.compiler.target import make_target
    from tests.helpers import relax_through

    model = _round_model()
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 4.5, 0.49999997, 2.5000002, -3.5, 7.0, 1e8 + 0.5, -0.0, 1.25, 126.5],
                 np.float32)
    host = make_target("cpu")
    assert "T.round(" in relax_through(model, host, "LegalizeOps").script()
    vm = relax.VirtualMachine(tvm.compile(relax_through(model, host, "VMFinalize"), host), tvm.cpu())
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), np.round(x))  # numpy: ties to even
    arm = make_target("cpu", triple="aarch64-linux-gnu", mcpu="cortex-a76")
    arm_asm = _asm(tvm.compile(relax_through(model, arm, "VMFinalize"), arm))
    assert "frinti" in arm_asm and "frinta" not in arm_asm  # the current rounding mode (to even), not ties away
    cuda = relax_through(model, make_target("cuda"), "LegalizeOps").script()
    assert "T.nearbyint(" in cuda and "T.round(" not in cuda


def test_a_quantized_cnns_requantization_rounds_in_vectors():
    """A QDQ CNN built for AVX2 (its quantized ops in float between their Q/DQ nodes): every rounding
    of the fused epilogues is a vector instruction. With topi's nearbyint, TVM's vectorizer left
    three of them as scalar loops in this model."""
    import re

    import tvm

    from core.compiler.target import make_target
    from tests.core.compiler.qdq_models import fp32_wide_cnn, quantize_qdq
    from tests.helpers import relax_through

    target = make_target("cpu", mcpu="znver3")
    asm = _asm(tvm.compile(relax_through(quantize_qdq(fp32_wide_cnn()), target, "VMFinalize"), target))
    assert re.search(r"\tvround(ps|pd)", asm)
    assert not re.findall(r"\tvround(ss|sd)", asm)
