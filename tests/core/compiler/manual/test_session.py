"""Scheduling a kernel by hand (core.compiler.manual.session): the MLC course's mm_relu steps,
refusals in one sentence, undo/redo, traces as data, measuring, and compile using the trace."""
from __future__ import annotations

import json

import pytest

from core.compiler.measure.kernel_measure import estimate_bytes, estimate_flops, peak_estimate
from core.compiler.manual.session import (
    StepRefused,
    describe_step,
    list_kernels,
    load_steps,
    open_session,
    parse_step,
)
from core.errors import WorkbenchError
from tests.conftest import sample

MM_RELU = sample("mm_relu")
KERNEL = "fused_matmul_relu"

# the course's walk, with the names the loop nest shows (FuseTIR calls the course's j "i1")
COURSE = [
    {"primitive": "split", "loop": "matmul/i1", "factors": [None, 4]},
    {"primitive": "reorder", "loops": ["i1_0", "k", "i1_1"]},
    {"primitive": "reverse_compute_at", "block": "compute", "loop": "i1_0"},
    {"primitive": "vectorize", "loop": "i1_1"},
    {"primitive": "vectorize", "loop": "ax0"},
    {"primitive": "parallel", "loop": "i0"},
    {"primitive": "decompose_reduction", "block": "matmul", "loop": "k"},
]


@pytest.fixture(scope="module")
def kernels():
    return list_kernels(MM_RELU)


def test_mm_relu_has_one_kernel_with_the_course_loop_nest(kernels):
    (k,) = kernels
    assert k.name == KERNEL and "matmul" in k.onnx_nodes
    info = k.to_json()
    assert info["flops"] == 2 * 128**3 + 128 * 128  # multiply-add per k, plus the relu's max
    assert info["bytes"] == 3 * 128 * 128 * 4
    blocks = {b["name"]: b for b in info["blocks"]}
    assert [(lp["name"], lp["extent"], lp["kind"]) for lp in blocks["matmul"]["loops"]] == [
        ("matmul/i0", 128, "serial"), ("matmul/i1", 128, "serial"), ("k", 128, "serial")]
    assert blocks["matmul"]["iters"] == "SSR" and blocks["matmul"]["reads"] == ["A", "B"]
    assert blocks["compute"]["writes"] == ["compute_intermediate"]


def test_course_steps_transform_the_kernel_and_undo_redo_restore_it():
    s = open_session(MM_RELU, KERNEL)
    naive = s.script()
    s.apply_all(COURSE)
    text = s.script()
    assert "T.parallel(T.int64(128))" in text and "T.vectorized(T.int64(4))" in text
    assert 'T.sblock("matmul_init")' in text and 'T.sblock("matmul_update")' in text
    nest = s.nest()
    kinds = {lp.name: lp.loop_kind for lp in nest.loops}
    assert kinds["i0"] == "parallel" and kinds["i1_1"] == "vectorized" and kinds["ax0"] == "vectorized"
    assert nest.blocks["compute"].loops == ["i0", "i1_0", "ax0"]  # moved under the matmul's i1_0
    trace = s.trace_python()
    assert "sch.split(" in trace and "sch.reverse_compute_at(" in trace and "sch.decompose_reduction(" in trace
    assert s.undo()["primitive"] == "decompose_reduction" and "matmul_init" not in s.script()
    while s.undo():
        pass
    assert s.script() == naive and not s.can_undo and s.can_redo
    s.redo()
    assert s.steps == [parse_step(COURSE[0])]
    s.apply({"primitive": "reorder", "loops": ["i1_0", "k", "i1_1"]})
    assert not s.can_redo  # a new step drops the redo list


def test_refused_steps_are_one_sentence_and_keep_the_steps():
    s = open_session(MM_RELU, KERNEL)
    s.apply(COURSE[0])
    before = s.script()
    cases = [
        ({"primitive": "split", "loop": "i9", "factors": [None, 4]}, "no loop 'i9'"),
        ({"primitive": "split", "loop": "k", "factors": [3, 4]}, "split k by [3, 4] was refused by TVM"),
        ({"primitive": "vectorize", "loop": "k"}, "vectorize k was refused by TVM"),
        ({"primitive": "compute_inline", "block": "nope"}, "no block 'nope'"),
        ({"primitive": "cache_read", "block": "matmul", "buffer": "C"}, "block 'matmul' reads A, B, not 'C'"),
    ]
    for step, words in cases:
        with pytest.raises(StepRefused) as e:
            s.apply(step)
        assert words in str(e.value) and "\n" not in str(e.value) and str(e.value).endswith(".")
    assert len(s.steps) == 1 and s.script() == before
    fresh = open_session(MM_RELU, KERNEL)
    with pytest.raises(StepRefused, match="ambiguous: say matmul/i1 or compute/i1"):
        fresh.apply({"primitive": "split", "loop": "i1", "factors": [None, 4]})
    with pytest.raises(StepRefused, match=r"^step 2: "):
        fresh.apply_all([COURSE[0], {"primitive": "parallel", "loop": "nope"}])
    assert len(fresh.steps) == 1


@pytest.mark.parametrize("bad, words", [
    ({"primitive": "exec", "loop": "k"}, "unknown primitive"),
    ({"primitive": "split", "loop": "k"}, "needs 'factors'"),
    ({"primitive": "split", "loop": "k", "factors": [None, None]}, "one factor open"),
    ({"primitive": "split", "loop": "k", "factors": [0, 4]}, "positive integers"),
    ({"primitive": "parallel", "loop": "k", "code": "x"}, "takes no 'code'"),
    ({"primitive": "transform_layout", "block": "matmul", "buffer": "A", "index_map": "i, j -> __import__('os').getpid()"}, "index map"),
    ({"primitive": "transform_layout", "block": "matmul", "buffer": "A", "index_map": "i, j -> i ** 2, j"}, "only indices"),
    ({"primitive": "transform_layout", "block": "matmul", "buffer": "A", "index_map": "i, j -> q, j"}, "'q' is not one of its indices"),
    ("split", "JSON object"),
])
def test_steps_are_checked_data_never_code(bad, words):
    with pytest.raises(StepRefused, match=words):
        parse_step(bad)


def test_transform_layout_cache_write_and_inline_steps():
    s = open_session(MM_RELU, KERNEL)
    s.apply({"primitive": "transform_layout", "block": "matmul", "buffer": "matmul_intermediate", "index_map": "i, j -> j // 16, i, j % 16"})
    assert "matmul_intermediate = T.sblock_alloc_buffer((T.int64(8), T.int64(128), T.int64(16)))" in s.script()
    s.apply({"primitive": "cache_write", "block": "matmul", "buffer": "matmul_intermediate", "scope": "local"})
    assert "matmul_intermediate_local" in s.script()
    s.apply({"primitive": "reverse_compute_inline", "block": "compute"})
    assert 'T.sblock("compute")' not in s.script()
    assert describe_step(s.steps[0]) == "transform_layout matmul_intermediate of matmul: i, j -> j // 16, i, j % 16"


def test_saved_trace_loads_back_as_steps(tmp_path):
    s = open_session(MM_RELU, KERNEL)
    s.apply_all(COURSE)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(s.to_json()))
    saved = json.loads(path.read_text())
    assert saved["kernel"] == KERNEL and saved["steps"][0] == {"primitive": "split", "loop": "matmul/i1", "factors": [None, 4]}
    assert any(inst[0] == "DecomposeReduction" for inst in saved["tvm_trace"][0])  # TVM's own JSON trace
    again = open_session(MM_RELU, KERNEL)
    again.apply_all(load_steps(path))
    assert again.script() == s.script()
    (tmp_path / "bad.json").write_text('{"steps": 3}')
    with pytest.raises(Exception, match="must hold a list of steps"):
        load_steps(tmp_path / "bad.json")


@pytest.mark.isa
@pytest.mark.slow
def test_measure_gives_time_rate_and_baselines():
    s = open_session(MM_RELU, KERNEL)
    naive = s.measure()
    assert naive.ms > 0 and naive.default_ms is not None and naive.tuned_ms is None
    assert naive.gflops == pytest.approx(s.flops / (naive.ms * 1e-3) / 1e9)
    assert 0 < naive.peak_fraction < 1
    # the default schedule packs, tiles and vectorizes: far faster than the naive loop nest
    assert naive.default_ms < naive.ms
    s.apply_all(COURSE[:3])
    m = s.measure()
    assert m.steps == 3 and m.label == "reverse_compute_at compute at i1_0" and m.default_ms == naive.default_ms
    assert [x.steps for x in s.measurements] == [0, 3]


def test_peak_estimate_reads_the_targets_vector_width():
    import tvm

    from core.compiler.target import host_cores, host_cpu

    host = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu(), "num-cores": host_cores()})
    no512 = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu(), "mattr": ["-avx512f"], "num-cores": 4})
    p, q = peak_estimate(host), peak_estimate(no512)
    assert q.lanes in (8, 4) and q.cores == 4 and q.fma_per_cycle == 2
    with open("/proc/cpuinfo") as f:
        has512 = " avx512f" in f.read()
    assert p.lanes == (16 if has512 else q.lanes)
    assert p.gflops == pytest.approx(2 * p.cores * p.lanes * p.fma_per_cycle * p.ghz)
    assert "estimated peak" in p.describe()


def test_flops_and_bytes_estimates(kernels):
    func = kernels[0].func
    assert estimate_flops(func) == 2 * 128**3 + 128**2
    assert estimate_bytes(func) == 196608


@pytest.mark.isa
@pytest.mark.slow
def test_a_filed_trace_is_what_compile_applies_when_fastest(tmp_path):
    from core.compiler.compile import compile_model
    from core.compiler.target import make_target
    from core.compiler.tuning.tune import database_choice, record_schedule

    s = open_session(MM_RELU, KERNEL)
    s.apply_all(COURSE)
    target = make_target("cpu")
    # a measured default slower than the hand schedule: compile must take the hand schedule
    record_schedule(s.base, target, s.trace(), 0.01, tmp_path, default_ms=5.0)
    assert database_choice(s.base, target, tmp_path)[0] == "search"
    art = compile_model(MM_RELU, "cpu", tune_db=tmp_path)
    assert art.manifest.tuning.kernels_from_database == 1
    assert art.manifest.verification.checked  # and it still matches onnxruntime
    kernel = next(f for gv, f in art.scheduled_mod.functions_items() if gv.name_hint.startswith(KERNEL))
    text = kernel.script()
    assert 'T.sblock("matmul_init")' in text and "i1_0" in text and "T.parallel(T.int64(128))" in text


def test_a_trace_filed_after_progress_json_was_corrupt_still_applies(tmp_path):
    """A corrupt progress.json set aside (tuning_files) means "a kernel without an entry gets no
    MetaSchedule record"; a schedule filed by hand gets an entry, so it applies."""
    from core.compiler.target import make_target
    from core.compiler.tuning.tune import database_choice, database_dir, record_schedule
    from core.compiler.tuning.db import PROGRESS_FILE

    s = open_session(MM_RELU, KERNEL)
    s.apply_all(COURSE)
    target = make_target("cpu")
    folder = database_dir(tmp_path, target)
    folder.mkdir(parents=True)
    (folder / (PROGRESS_FILE + ".corrupt")).write_text("{not json")
    record_schedule(s.base, target, s.trace(), 0.01, tmp_path)
    assert database_choice(s.base, target, tmp_path)[0] == "search"


@pytest.mark.isa
@pytest.mark.slow
def test_use_in_compile_reports_the_schedule_compile_will_pick(tmp_path):
    s = open_session(MM_RELU, KERNEL, database=tmp_path)
    with pytest.raises(Exception, match="no steps yet"):
        s.use_in_compile()
    s.apply_all(COURSE)
    filed = s.use_in_compile()
    assert filed["database"].startswith(str(tmp_path)) and filed["ms"] > 0
    known = {o["kind"]: o["ms"] for o in filed["options"] if o["ms"] is not None}
    assert set(known) == {"default", "search"}
    fastest = min(known, key=known.get)
    assert filed["choice"] == ("hand schedule" if fastest == "search" else "default")
    # a second session sees the filed record as the kernel's tuned schedule
    again = open_session(MM_RELU, KERNEL, database=tmp_path)
    assert again.baselines()[2] == "search"


def _two_conv_model(tmp_path) -> str:
    """ResNet-50's last 1x1 conv shape class (a 7x7 map, many channels; 256 -> 128 here) after a
    3x3 conv: two channel-blocked conv kernels, as in a real network (ResNet-50 itself lowered in
    ~10 s more for the same kernel form)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) / 8).astype(np.float32), name)
             for name, shape in [("w3", (256, 16, 3, 3)), ("b3", (256,)), ("w1", (128, 256, 1, 1)), ("b1", (128,))]]
    nodes = [helper.make_node("Conv", ["x", "w3", "b3"], ["c3"], name="conv3x3", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c3"], ["r3"]),
             helper.make_node("Conv", ["r3", "w1", "b1"], ["c1"], name="conv1x1", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c1"], ["y"])]
    graph = helper.make_graph(nodes, "two_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 7, 7])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 7, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "two_convs.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.mark.isa
@pytest.mark.slow
def test_blocked_conv_kernel_lists_splits_and_measures(tmp_path):
    model = _two_conv_model(tmp_path)
    kernels = list_kernels(model)
    # the 1x1 conv on 7x7, channel-blocked (core.compiler.passes.layout.nchwc) whatever the block size
    conv = next(k for k in kernels if "conv1x1" in k.onnx_nodes)
    assert "conv2d_NCHWc" in conv.name and sum("conv2d_NCHWc" in k.name for k in kernels) == 2
    s = open_session(model, conv.name)
    assert "oc_block" in {lp.name for lp in s.nest().loops}
    s.apply_all([
        {"primitive": "split", "loop": "ow", "factors": [None, 7]},
        {"primitive": "reorder", "loops": ["oc_chunk", "oh", "ow_0", "ic", "kh", "kw", "ow_1", "oc_block"]},
        {"primitive": "vectorize", "loop": "oc_block"},
    ])
    m = s.measure()
    assert m.ms > 0 and m.default_ms > 0
    assert m.flops == 2 * 256 * 128 * 49 + 2 * 128 * 49  # multiply-adds, then the bias and the relu


# ---- the default schedule as a starting point (issue 41, item 9) ---------------------------------

@pytest.mark.parametrize("model", ["mm_relu", "small_cnn", "tiny_transformer"])
def test_default_start_gives_the_default_tir_and_undoes_to_naive(model):
    """Every kernel of three models: starting from the default gives exactly the TIR compile's
    schedule rule gives it (structural equality, not a timing), and undo returns to the naive
    kernel. Checked against the cpu.Matmul rule, whose row-padding clamp edits the IR outside
    its trace (a last replace_tir step), and cpu.DataMovement's reshape, whose trace does not
    replay (one replace_tir step)."""
    from core.compiler.manual.default_start import same_tir
    from core.compiler.manual.session import ScheduleSession
    from core.compiler.schedules import schedule_cpu_func, with_root_block
    from core.compiler.target import make_target

    target = make_target("cpu")
    for k in list_kernels(sample(model)):
        s = ScheduleSession(k.func, k.name, target)
        naive = s.func
        default, _rule = schedule_cpu_func(with_root_block(k.func), target)
        s.start_from("default")
        assert s.start == "default"
        assert same_tir(s.func, default if default is not None else naive), k.name
        while s.undo():
            pass
        assert same_tir(s.func, naive) and s.script() == naive.script()


def test_default_start_of_mm_relu_is_editable_steps_with_honest_fallbacks():
    s = open_session(MM_RELU, KERNEL)
    s.start_from("default")
    plan = s.default_plan()
    kinds = [st["primitive"] for st in s.steps]
    # the instructions with a step kind are steps; pad_einsum and set_scope are TVM trace steps
    # listing their instructions; the rule's clamp (outside its trace) is the last step
    assert {"split", "reorder", "reverse_compute_at", "fuse", "parallel", "vectorize", "unroll", "decompose_reduction"} <= set(kinds)
    traced = [st for st in s.steps if st["primitive"] == "tvm_trace"]
    assert [st["label"].rsplit(": ", 1)[1] for st in traced] == ["pad_einsum", "set_scope"]
    assert any("sch.pad_einsum(" in line for line in traced[0]["python"])
    assert kinds[-1] == "replace_tir" and plan.untraced and "outside TVM's trace" in describe_step(s.steps[-1])
    assert "cpu.Matmul" in plan.describe() and "2 kept as TVM trace" in plan.describe()
    with pytest.raises(WorkbenchError, match="outside TVM's trace"):
        s.trace()
    s.undo()  # without the clamp: the trace of the steps is TVM's, and a further step applies by name
    assert "sch.pad_einsum(" in s.trace_python() and "sch.split(" in s.trace_python()
    s.apply({"primitive": "unroll", "loop": "ax0"})
    assert s.nest().by_name["ax0"].loop_kind == "unrolled"
    s.start_from("naive")
    assert not s.steps and s.start == "naive"


def test_steps_with_a_tvm_trace_save_and_load_back(tmp_path):
    s = open_session(MM_RELU, KERNEL)
    s.start_from("default")
    s.undo()
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(s.to_json()), encoding="utf-8")
    again = open_session(MM_RELU, KERNEL)
    again.apply_all(load_steps(path))
    assert again.script() == s.script()
