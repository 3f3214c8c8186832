"""QDQ models for the quantization tests: a small CNN written by hand in ONNX's QDQ form, and any fp32
model quantized by onnxruntime's own `quantize_static` (QDQ format, per-channel int8 weights, uint8
activations), calibrated on a few seeded random inputs."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.architectures.qdq import quantize_qdq

__all__ = ["qdq_cnn", "quantize_qdq", "fp32_cnn", "fp32_linear", "fp32_wide_cnn", "qlinear_ops"]


def fp32_cnn(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """Conv 3->8 3x3 + Relu, Conv 8->4 3x3 + Relu, GlobalAveragePool: input [1, 3, size, size]."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["out0"], name="pool"),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("out0", TensorProto.FLOAT, [1, 4, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def qdq_cnn(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """fp32_cnn quantized by onnxruntime (quantize_qdq): two convs with DequantizeLinear'd int8 weights."""
    return quantize_qdq(fp32_cnn(seed, size), seed=seed)


def fp32_wide_cnn(seed: int = 0, size: int = 15) -> onnx.ModelProto:
    """Convs whose output channels fill AVX-512 VNNI's 16 lanes: 3->16 3x3 stride 2 with asymmetric
    pads + Relu, MaxPool 3x3, 16->32 3x3 + bias, 32->16 1x1 + Relu, GlobalAveragePool: input [2, 3, size, size]."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.4).astype(np.float32), "w1"),
        numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.standard_normal(32) * 0.1).astype(np.float32), "b2"),
        numpy_helper.from_array((rng.standard_normal((16, 32, 1, 1)) * 0.2).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 0, 1, 2], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], name="conv3"),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["r3"], ["out0"], name="pool"),
    ]
    graph = helper.make_graph(nodes, "wide_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 3, size, size])],
                              [helper.make_tensor_value_info("out0", TensorProto.FLOAT, [2, 16, 1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def fp32_linear(seed: int = 0) -> onnx.ModelProto:
    """x [1, 8, 64] -> MatMul [64, 32] + bias -> Relu -> Reshape [8, 32] -> Gemm (transB, [16, 32] + bias) -> out [8, 16]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 32)) * 0.2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal(32) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.2).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b2"),
             numpy_helper.from_array(np.array([8, 32], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"), helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"), helper.make_node("Reshape", ["r1", "shape"], ["r2"], name="rows"),
             helper.make_node("Gemm", ["r2", "w2", "b2"], ["out"], name="gemm", transB=1)]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [8, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def qlinear_ops(seed: int = 0) -> onnx.ModelProto:
    """ONNX's own integer ops, on uint8 model inputs: QLinearConv 8->16 3x3 (per-channel int8 weight,
    int32 bias) on x [1, 8, 10, 10]; QLinearMatMul [6, 32] x [32, 24] (24 columns: not a whole 16-lane block)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"), numpy_helper.from_array(np.array(120, np.uint8), "xz"),
             numpy_helper.from_array(rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(rng.uniform(0.001, 0.01, 16).astype(np.float32), "ws"), numpy_helper.from_array(np.zeros(16, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.2, np.float32), "ys"), numpy_helper.from_array(np.array(10, np.uint8), "yz"),
             numpy_helper.from_array(rng.integers(-2000, 2000, 16).astype(np.int32), "b"),
             numpy_helper.from_array(rng.integers(-127, 128, (32, 24)).astype(np.int8), "mw"), numpy_helper.from_array(np.array(0.01, np.float32), "mws"),
             numpy_helper.from_array(np.array(0, np.int8), "mwz"), numpy_helper.from_array(np.array(0.3, np.float32), "ms"),
             numpy_helper.from_array(np.array(5, np.uint8), "mz")]
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], name="qconv", pads=[1, 1, 1, 1]),
             helper.make_node("QLinearMatMul", ["a", "ys", "yz", "mw", "mws", "mwz", "ms", "mz"], ["z"], name="qmatmul")]
    graph = helper.make_graph(nodes, "qlinear", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 10, 10]),
                                                 helper.make_tensor_value_info("a", TensorProto.UINT8, [6, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 16, 10, 10]),
                               helper.make_tensor_value_info("z", TensorProto.UINT8, [6, 24])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    return model
