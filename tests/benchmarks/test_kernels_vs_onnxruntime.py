"""benchmarks/kernels_vs_onnxruntime.py: onnxruntime's profile names mapped back to ONNX nodes, and
a small model's kernels matched with onnxruntime's nodes through the compiled model's lineage;
`--clock cpu`: thread CPU time at one thread, a row per model and its kernels by group. No timing
is asserted beyond its being measured."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from benchmarks.kernels_vs_onnxruntime import (
    compare,
    kernel_classes,
    main,
    ort_node_key,
    ort_per_node,
    ours_per_kernel,
)


def test_ort_node_names_map_back_to_onnx_nodes():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c_out"], name="conv"),
        helper.make_node("Clip", ["c_out"], ["clip_out"], name="clip"),
        helper.make_node("Sigmoid", ["clip_out"], ["s_out"], name="sig"),
        helper.make_node("Mul", ["clip_out", "s_out"], ["y"], name="mul"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [], []))
    assert ort_node_key("c_out_nchwc", model) == "conv"  # an NCHWc node: its output's name
    assert ort_node_key("mul/QuickGeluFusion/", model) == "mul"
    assert ort_node_key("clip", model) == "conv"  # the Conv fused with its Clip carries the Clip's name
    assert ort_node_key("sig", model) == "sig"  # after a Clip, not a Conv
    assert ort_node_key("ReorderOutput_token_3", model) == "ReorderOutput_token_3"


def test_a_conv_relu_kernel_is_matched_with_its_onnxruntime_nodes(tmp_path):
    from core.compiler.compile import compile_model

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
        [numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    art = compile_model(str(path), "cpu", verify=False)
    feeds = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    ours, ours_total = ours_per_kernel(art, feeds, 1, 3)
    nodes, ops, ort_total = ort_per_node(model, feeds, 1, 3)
    assert ours_total > 0 and ort_total > 0
    rows, unmatched = compare(ours, art.kernel_lineage, nodes)
    conv_rows = [r for r in rows if "conv" in r[3]]
    assert len(conv_rows) == 1 and conv_rows[0][1] > 0 and conv_rows[0][2] > 0, rows
    assert "conv" not in unmatched and ops


def test_kernels_are_grouped_by_what_they_were_fused_from():
    assert kernel_classes("fused_matmul_add_relu1_prepacked") == "matmul / conv"
    assert kernel_classes("fused_softmax2") == "softmax"
    assert kernel_classes("fused_erf_multiply") == "activation"
    assert kernel_classes("fused_layer_norm3") == "layer norm"
    assert kernel_classes("transpose7") == "copies"
    assert kernel_classes("add4") == "other"


def test_cpu_clock_prints_a_row_per_model_and_its_kernels(capsys):
    assert main(["--clock", "cpu", "--models", "mlp", "--blocks", "2", "--runs", "2", "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "thread CPU time at 1 thread" in out
    row = next(line for line in out.splitlines() if line.startswith("mlp")).split()
    # 'mlp  ours min / median  ort min / median  x ort (min)  x ort (med)  load': both ratios measured
    assert len(row) == 10 and row[2] == row[5] == "/" and float(row[7]) > 0 and float(row[8]) > 0, row
    assert "ours by group (CPU ms, share): matmul / conv" in out
    assert len([line for line in out.splitlines() if line.startswith("    ") and " ms " in line]) == 2  # --top 2 kernels


def test_cpu_clock_refuses_more_threads_and_unknown_models(capsys):
    assert main(["--clock", "cpu", "--threads", "1,2", "--models", "mlp"]) == 2
    assert "--threads must be 1" in capsys.readouterr().err
    assert main(["--models", "no_such_model"]) == 2
    assert "unknown model 'no_such_model'" in capsys.readouterr().err
