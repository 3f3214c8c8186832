"""ResNet-18 as torchvision defines it, with its BatchNormalizations not folded into the convs: the
fp32 source a quantizer (and the accuracy debugger after it) is given.

* `resnet18`: a 7x7/2 stem conv + BN + Relu, a 3x3/2 max pool, four stages of two BasicBlocks
  (64, 128, 256, 512 channels; the first block of stages 2-4 has stride 2 and a 1x1/2 conv + BN
  downsample on its shortcut), a global average pool, Flatten and a Gemm classifier.

Node and weight names follow torchvision's modules (`layer1.0.conv1`, `layer2.0.downsample.0`,
`layer1.0.bn2.running_var`). Conv weights are He-normal; each BatchNormalization's running mean and
variance are those its input has on seeded standard normal images of its size (measured with onnxruntime, one
BatchNormalization after the other), with gamma near 1 and beta near 0, so activations stay O(1..10)
through the 18 layers, as in a trained network: quantizing it gives meaningful errors, not those of
values that explode or vanish.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["RESNET", "resnet18"]

logger = logging.getLogger(__name__)

OPSET = 17
_CALIBRATION_PIXELS = 8 * 64 * 64  # BatchNormalization statistics are measured on about this many input pixels


class _ResNet:
    """Nodes and initializers of one network; `calibrate` sets the BatchNormalizations' statistics."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.bns: list[onnx.NodeProto] = []

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits[name] = np.asarray(array, dtype=np.float32)
        return name

    def node(self, op_type: str, inputs: list[str], name: str, **attrs) -> str:
        out = f"{name}_output"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, name: str) -> str:
        """A bias-free Conv with He-normal weights (std sqrt(2 / fan_in))."""
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        p = (k - 1) // 2
        return self.node("Conv", [x, self.init(f"{name}.weight", w)], name, dilations=[1, 1], group=1,
                         kernel_shape=[k, k], pads=[p, p, p, p], strides=[stride, stride])

    def bn(self, x: str, c: int, name: str) -> str:
        """BatchNormalization with gamma about 1 and beta about 0; its statistics are set by `calibrate`."""
        ins = [x, self.init(f"{name}.weight", np.exp(self.rng.normal(0.0, 0.1, c))), self.init(f"{name}.bias", self.rng.normal(0.0, 0.1, c)),
               self.init(f"{name}.running_mean", np.zeros(c)), self.init(f"{name}.running_var", np.ones(c))]
        out = self.node("BatchNormalization", ins, name, epsilon=1e-5, momentum=0.9)
        self.bns.append(self.nodes[-1])
        return out

    def block(self, x: str, cin: int, cout: int, stride: int, name: str) -> str:
        y = self.conv(x, cin, cout, 3, stride, f"{name}.conv1")
        y = self.node("Relu", [self.bn(y, cout, f"{name}.bn1")], f"{name}.relu")
        y = self.bn(self.conv(y, cout, cout, 3, 1, f"{name}.conv2"), cout, f"{name}.bn2")
        if stride != 1 or cin != cout:
            x = self.bn(self.conv(x, cin, cout, 1, stride, f"{name}.downsample.0"), cout, f"{name}.downsample.1")
        return self.node("Relu", [self.node("Add", [y, x], f"{name}.add")], f"{name}.relu_1")

    def proto(self, nodes, inputs, outputs) -> onnx.ModelProto:
        used = {t for n in nodes for t in n.input}
        inits = [numpy_helper.from_array(a, name) for name, a in self.inits.items() if name in used]
        graph = helper.make_graph(nodes, "resnet18", inputs, outputs, inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch", producer_version="2.1.0")
        m.ir_version = 8
        return m

    def calibrate(self, side: int) -> None:
        """Each BatchNormalization's running mean and variance: its input's per channel, on seeded
        standard normal images of the model's size (the borders' share of a feature map depends on
        it), the ones before it already set (the network up to it is run)."""
        import onnxruntime as ort

        batch = max(1, round(_CALIBRATION_PIXELS / side**2))
        images = np.random.default_rng(0).standard_normal((batch, 3, side, side)).astype(np.float32)
        x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, side, side])
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        for bn in self.bns:
            upto = self.nodes[: self.nodes.index(bn)]
            model = self.proto(upto, [x], [onnx.ValueInfoProto(name=bn.input[0])])
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            (value,) = sess.run(None, {"input": images})
            self.inits[bn.input[3]] = value.mean(axis=(0, 2, 3)).astype(np.float32)
            self.inits[bn.input[4]] = value.var(axis=(0, 2, 3)).astype(np.float32)


def resnet18(seed: int = 18, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """ResNet-18 (input [1, 3, size, size] -> logits [1, classes]), seeded random weights and
    BatchNormalization statistics measured on random images (module docstring). `size` is a
    multiple of 32 (the network downsamples by 32)."""
    if size % 32:
        raise ValueError(f"resnet18 takes images whose side is a multiple of 32; {size} is not.")
    b = _ResNet(seed)
    x = b.conv("input", 3, 64, 7, 2, "conv1")
    x = b.node("Relu", [b.bn(x, 64, "bn1")], "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for i in range(2):
            x = b.block(x, cin, cout, 2 if stage > 1 and i == 0 else 1, f"layer{stage}.{i}")
            cin = cout
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    w = b.init("fc.weight", b.rng.standard_normal((classes, 512)) * np.sqrt(1.0 / 512))
    bias = b.init("fc.bias", b.rng.normal(0.0, 0.1, classes))
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"], name="fc", alpha=1.0, beta=1.0, transB=1))
    b.calibrate(size)
    m = b.proto(b.nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])])
    m.doc_string = f"ResNet-18 at {size}x{size}, {classes} classes, BatchNormalization not folded (seeded random weights)."
    helper.set_model_props(m, {"source": "benchmarks/architectures/resnet.py", "weights": "seeded random"})
    onnx.checker.check_model(m)
    return m


RESNET = {"resnet18": resnet18}
