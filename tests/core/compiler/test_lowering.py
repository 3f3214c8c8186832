"""Step-through lowering: stages, lineage, views, cache, cancel, failures, and agreement with compile."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from core import load_model
from core.errors import UnsupportedOpError
from tests.conftest import sample


@pytest.fixture(scope="module")
def mlp_stages():
    from core.compiler.lowering import LoweringCache, lower

    cache = LoweringCache()
    graph = load_model(sample("mlp"))
    return graph, cache, lower(graph, "cpu", cache=cache)


def test_stage_chain_covers_every_level(mlp_stages):
    _, _, stages = mlp_stages
    names = [s.name for s in stages]
    assert names[:2] == ["ONNX graph", "Relax import"]
    for must in ("LegalizeOps", "FuseOps", "FuseTIR", "ScheduleTIR", "CallTIRRewrite"):
        assert must in names
    assert names[-1] == "LLVM IR"
    assert [s.index for s in stages] == list(range(len(stages)))
    levels = [s.level for s in stages]
    assert levels[0] == "graph" and levels[-1] == "target code" and "tensor program" in levels
    assert levels == sorted(levels, key=("graph", "tensor program", "target code").index)  # one way down
    legal = stages[names.index("LegalizeOps")]
    assert "R.call_tir" in legal.text and "@T.prim_func" in legal.text
    assert "R.call_tir" not in stages[names.index("Relax import")].text
    assert "define " in stages[-1].text  # LLVM IR
    assert all(s.seconds >= 0 for s in stages)
    # the pass's own time comes from a tvm.instrument PassInstrument
    assert any(name == "LegalizeOps" for name, _, _ in legal.pass_seconds)
    assert not stages[names.index("FoldConstantTIR")].changed  # nothing to fold in an MLP: same text


def test_lineage_reaches_kernels_and_target_code(mlp_stages):
    graph, _, stages = mlp_stages
    compute = {n.id for n in graph.nodes}
    fused = next(s for s in stages if s.name == "FuseTIR")
    view = fused.view
    calls = [n for n in view.nodes if n.data.get("callee")]
    assert calls, "FuseTIR main calls kernels"
    covered = {i for n in calls for i in n.origin}
    assert covered == compute  # every ONNX node ends up in exactly the kernels that compute it
    # each fused kernel's origin is its own layer: matmul + add (+ relu)
    by_name = {graph.node(i).name: i for i in compute}
    first = next(n for n in calls if by_name["linear0.matmul"] in n.origin)
    assert set(first.origin) == {by_name["linear0.matmul"], by_name["linear0.add"], by_name["relu0"]}
    # clicking a node finds its IR line
    line = fused.lines_of(first.id)
    assert line and first.data["callee"] in fused.text.splitlines()[line[0] - 1]
    # the call expands into its TIR kernel, with the same origin
    kernel = fused.function_view(first.data["callee"])
    blocks = [n for n in kernel.nodes if n.data.get("kind") == "block"]
    assert blocks and set(blocks[0].origin) == set(first.origin)
    assert kernel.edges
    # target code: the same kernels, located in the LLVM IR
    code = stages[-1].view
    kernels = [n for n in code.nodes if n.data.get("kernel")]
    before_vm = next(s for s in stages if s.name == "DataflowLowering").view  # scheduling may rename kernels
    assert {n.data["kernel"] for n in kernels} == {n.data["callee"] for n in before_vm.nodes if n.data.get("callee")}
    assert all(n.data["line"] for n in kernels)
    assert code.edges


def test_onnx_stage_view_is_the_model(mlp_stages):
    graph, _, stages = mlp_stages
    onnx_stage = stages[0]
    ids = {n.id for n in onnx_stage.view.nodes if isinstance(n.id, int)}
    assert ids == {n.id for n in graph.nodes}
    node = graph.find_node("linear1.matmul")
    start, _ = onnx_stage.lines_of(node.id)
    assert "linear1.matmul" in onnx_stage.text.splitlines()[start - 1]


def test_edited_pipeline_reuses_unchanged_prefix(mlp_stages):
    from core.compiler.lowering import lower
    from core.compiler.pipeline.pass_list import default_pipeline

    graph, cache, stages = mlp_stages
    # FuseTIR is required; it stays (a no-op without FuseOps)
    specs = [s.toggled(False) if s.name == "FuseOps" else s for s in default_pipeline("cpu")]
    again = lower(graph, "cpu", specs, cache=cache)
    names = [s.name for s in again]
    assert "FuseOps" not in names
    cut = names.index("FoldConstantTIR")
    assert all(s.cached for s in again[1:cut + 1])
    assert not any(s.cached for s in again[cut + 1:])
    fused = next(s for s in again if s.name == "FuseTIR")
    assert "fused_" not in fused.text  # no fusion happened


def test_reordering_and_invalid_pipelines_are_explained():
    from core.errors import WorkbenchError
    from core.compiler.lowering import LoweringError, lower
    from core.compiler.pipeline.pass_list import PassSpec, default_pipeline, validate

    specs = default_pipeline("cpu")
    names = [s.name for s in specs]
    i, j = names.index("FuseOps"), names.index("FuseTIR")
    specs[i], specs[j] = specs[j], specs[i]
    assert any("FuseTIR must come after FuseOps" in p for p in validate(specs))
    assert validate([PassSpec("LegalizeOps", enabled=False)])
    with pytest.raises(LoweringError) as info:
        lower(load_model(sample("mlp")), "cpu", specs)
    assert isinstance(info.value, WorkbenchError)
    assert [s.name for s in info.value.stages] == ["ONNX graph"]


def test_cancel_between_steps_keeps_done_stages():
    from core.compiler.lowering import LoweringCancelled, lower

    seen = []

    def progress(event):
        seen.append(event.message)

    with pytest.raises(LoweringCancelled) as info:
        lower(load_model(sample("mlp")), "cpu", cancel=lambda: len(seen) >= 4, progress=progress)
    assert len(info.value.stages) == 4
    assert info.value.stages[0].name == "ONNX graph"


def test_unsupported_op_keeps_onnx_stage():
    from core.compiler.lowering import lower
    import onnx_ir as ir

    from core.model.graph import Graph

    nodes = [helper.make_node("Celu", ["x"], ["y"], name="the_celu")]
    g = helper.make_graph(nodes, "celu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    graph = Graph(ir.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
    with pytest.raises(UnsupportedOpError) as info:
        lower(graph, "cpu")
    assert "the_celu" in str(info.value) and "Celu" in str(info.value)
    assert [s.name for s in info.value.stages] == ["ONNX graph"]
    assert info.value.stages[0].view.nodes


def test_cuda_target_gives_cuda_source_without_gpu():
    from core.compiler.lowering import lower

    stages = lower(load_model(sample("mlp")), "cuda")
    cuda = next(s for s in stages if s.name == "CUDA C")
    assert cuda.level == "target code" and cuda.language == "cuda"
    assert "__global__" in cuda.text
    kernels = [n for n in cuda.view.nodes if n.data.get("kernel")]
    assert kernels and all(n.data["line"] for n in kernels)
    sched = next(s for s in stages if s.name == "ScheduleTIR")
    assert "threadIdx" in sched.text  # GPU kernels are bound to threads


@pytest.mark.slow
def test_compile_from_the_same_pipeline_matches_onnxruntime():
    import tvm

    from core.compiler.pipeline.pass_list import build_relax_pipeline, default_pipeline
    from core.compiler.target import make_target
    from core.compiler.frontend.onnx_import import import_graph
    from tests.helpers import ort_run, random_feeds

    graph = load_model(sample("small_cnn"))
    target = make_target("cpu")
    mod = import_graph(graph).mod
    ex = tvm.compile(mod, target, relax_pipeline=build_relax_pipeline(default_pipeline(target), target))
    vm = tvm.relax.VirtualMachine(ex, tvm.cpu())
    feeds = random_feeds(graph.to_proto())
    got = vm["main"](*[tvm.runtime.tensor(v) for v in feeds.values()]).numpy()
    np.testing.assert_allclose(got, ort_run(graph.to_proto(), feeds)[0], rtol=1e-4, atol=1e-4)


def test_chunked_cpu_codegen_defines_every_kernel_once(mlp_stages):
    import re

    import tvm

    from core.compiler.lowering import _cpu_code_parallel
    from core.compiler.target import make_target

    _, _, stages = mlp_stages
    mod = next(s for s in stages if s.name == "VMFinalize").mod
    kernels = {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    (name, language, text), = _cpu_code_parallel(mod, make_target("cpu"), False, 2)
    assert (name, language) == ("LLVM IR", "llvm") and text.count("; ---- kernels") == 2
    defined = re.findall(r"^define [^@]*@\"?__tvm_ffi_([\w.]+?)\"?\(", text, re.M)
    assert sorted(defined) == sorted(kernels)


def test_lineage_of_shared_fused_functions_in_interleaved_branches():
    """Two identical conv+bn+relu branches, whose bindings the importer interleaves (conv a, conv b,
    bn a, bn b, ...), each keep their own ONNX nodes through FuseOps (matched along the data flow)."""
    import numpy as np
    import onnx_ir as ir
    from onnx import numpy_helper

    from core.model.graph import Graph
    from core.compiler.lowering import lower

    rng = np.random.default_rng(0)
    inits, nodes = [], []
    for b in ("a", "b"):
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), f"w_{b}"))
        for p in ("s", "bias", "m", "v"):
            inits.append(numpy_helper.from_array((np.abs(rng.standard_normal(4)) + 0.5).astype(np.float32), f"{p}_{b}"))
        nodes.append(helper.make_node("Conv", ["x", f"w_{b}"], [f"c_{b}"], name=f"conv_{b}", pads=[1, 1, 1, 1]))
    for b in ("a", "b"):
        nodes.append(helper.make_node("BatchNormalization", [f"c_{b}", f"s_{b}", f"bias_{b}", f"m_{b}", f"v_{b}"], [f"n_{b}"], name=f"bn_{b}"))
    for b in ("a", "b"):
        nodes.append(helper.make_node("Relu", [f"n_{b}"], [f"r_{b}"], name=f"relu_{b}"))
    nodes.append(helper.make_node("Add", ["r_a", "r_b"], ["y"], name="join"))
    g = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    graph = Graph(ir.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])))
    graph.infer_shapes()
    stages = lower(graph, "cpu", target_code=False)
    fused = next(s for s in stages if s.name == "FuseTIR")
    ids = {n.name: n.id for n in graph.nodes}
    convs = [n for n in fused.view.nodes if n.data.get("callee", "") and "conv2d" in n.data["callee"]]
    assert len(convs) == 2
    for node in convs:
        branch, other = ("a", "b") if ids["conv_a"] in node.origin else ("b", "a")
        # its own branch (FuseOps may fuse the join into one of them), none of the other's
        assert {ids[f"conv_{branch}"], ids[f"bn_{branch}"], ids[f"relu_{branch}"]} <= set(node.origin) <= \
            {ids[f"conv_{branch}"], ids[f"bn_{branch}"], ids[f"relu_{branch}"], ids["join"]}
    assert {i for n in convs for i in n.origin} == set(ids.values())


def test_a_kernel_is_scheduled_by_hand_from_before_schedule_tir(mlp_stages):
    """kernel_to_schedule hands the Schedule panel a kernel as it stands before ScheduleTIR, with
    the ONNX nodes it computes; from a later stage it takes the last module before ScheduleTIR;
    a Relax function is not a kernel."""
    from core.compiler.lowering import kernel_to_schedule

    _graph, _cache, stages = mlp_stages
    cut = [s.name for s in stages].index("ScheduleTIR")
    before = stages[cut - 1]
    kernel = next(k[1:] for k in before.lineage_map() if str(k).startswith("@fused_"))
    mod, ids = kernel_to_schedule(stages, before, kernel)
    assert mod is before.mod and ids
    import tvm

    scheduled = stages[cut]
    other = next(gv.name_hint for gv, f in scheduled.mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))
    assert kernel_to_schedule(stages, scheduled, other)[0] is before.mod
    assert kernel_to_schedule(stages, before, "main") is None


def test_lineage_of_a_long_chain_after_fuse_ops_is_each_fused_call_its_own_run_of_nodes():
    """FuseOps cuts a chain of Relu into a few long fused calls; each call's lineage is the run of
    nodes it computes, in order, together every node once (realigning `main` by an index of the
    vanished bindings' readers: it scanned them all per call, quadratic on big graphs). The
    lineage is computed on first use."""
    import onnx_ir as ir

    from core.compiler.pipeline.lineage import _callee, _function_bindings
    from core.compiler.lowering import lower
    from core.model.graph import Graph
    from tests.core.compiler.passes.test_legalize_cache import _chain

    g = Graph(ir.from_proto(_chain(600)))
    g.infer_shapes()
    stages = lower(g, "cpu", target_code=False)
    fuse = next(s for s in stages if s.name == "FuseOps")
    assert fuse.lineage._real is None  # not computed yet
    runs = [fuse.lineage.of_var(b.var) for b in _function_bindings(fuse.mod["main"]) if (_callee(b.value) or "").startswith("fused")]
    assert len(runs) >= 2
    assert [i for run in runs for i in run] == [n.id for n in g.nodes]
