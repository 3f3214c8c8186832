"""Depthwise-separable and squeeze-excitation networks (MobileNet / EfficientNet style).

Written op for op as torch.onnx (opset 17) exports torchvision's models in eval mode, where every
BatchNormalization has been folded into the Conv before it (a Conv with a bias), with seeded
random weights and torch-like node names (`/features/features.2/conv/conv.1/conv.1.0/Conv`):

* `mobilenet_v2`: inverted residuals (1x1 expand, 3x3 depthwise stride 1/2, 1x1 project),
  ReLU6 as `Clip(0, 6)`, 224x224, width 1.0;
* `mobilenet_v3_small`: hardswish as the `HardSwish` op, squeeze-excitation blocks
  (GlobalAveragePool -> 1x1 conv -> Relu -> 1x1 conv -> HardSigmoid -> Mul), 3x3 and 5x5
  depthwise convs, a two-layer classifier;
* `efficientnet_b0`: SiLU as `x * Sigmoid(x)`, squeeze-excitation with a SiLU squeeze and a
  Sigmoid gate, 3x3 and 5x5 depthwise convs.

What the CPU schedules must be fast on: depthwise convs, global average pools feeding tiny 1x1
convs, broadcast multiplies by a per-channel gate. Models live in memory only (built in well under
a second each); benchmarks/compiled_vs_onnxruntime.py measures them through ARCHITECTURES.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper

from core.model.samples import _Builder

__all__ = ["MOBILE", "efficientnet_b0", "make_divisible", "mobilenet_v2", "mobilenet_v3_small"]

logger = logging.getLogger(__name__)


def make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: channel counts rounded to a multiple of 8, never below 90%."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class _Net(_Builder):
    """The sample builder plus torch.onnx's naming: node `/a/a.1/Conv`, weight `a.1.weight`."""

    def __init__(self, name: str, seed: int):
        super().__init__(name, seed)
        self._consts: dict[tuple, str] = {}

    def scalar(self, value: float) -> str:
        key = ("f", float(value))
        if key not in self._consts:
            self._consts[key] = self.const(f"onnx::Const_{len(self._consts)}", np.array(value, dtype=np.float32))
        return self._consts[key]

    @staticmethod
    def node_name(scope: str, op_type: str) -> str:
        if not scope:
            return "/" + op_type
        path, current = [], ""
        for part in scope.split("."):  # features.1.conv.0 -> /features/features.1/conv/conv.0
            current = f"{current}.{part}" if part.isdigit() and current else part
            path.append("/" + current)
        return "".join(path) + "/" + op_type

    def named(self, op_type: str, inputs: list[str], scope: str, **attrs) -> str:
        name = self.node_name(scope, op_type)
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, scope: str, stride: int = 1, groups: int = 1) -> str:
        """Conv with bias (batch norm folded in, as the exporter writes eval-mode models)."""
        w = self.weight(f"{scope}.weight", (cout, cin // groups, k, k))
        b = self.weight(f"{scope}.bias", (cout,), scale=0.1)
        p = (k - 1) // 2
        return self.named(
            "Conv", [x, w, b], scope, dilations=[1, 1], group=groups, kernel_shape=[k, k], pads=[p, p, p, p], strides=[stride, stride]
        )

    def relu6(self, x: str, scope: str) -> str:
        return self.named("Clip", [x, self.scalar(0.0), self.scalar(6.0)], scope)

    def silu(self, x: str, scope: str) -> str:
        s = self.named("Sigmoid", [x], scope)
        return self.named("Mul", [x, s], scope)

    def act(self, x: str, kind: str, scope: str) -> str:
        if kind == "RE":
            return self.named("Relu", [x], scope)
        if kind == "HS":
            return self.named("HardSwish", [x], scope)
        if kind == "R6":
            return self.relu6(x, scope)
        if kind == "SiLU":
            return self.silu(x, scope)
        raise ValueError(f"unknown activation {kind}")

    def head(self, x: str, dims: list[int], acts: list[str], scope: str) -> str:
        """GlobalAveragePool -> Flatten -> Gemm (+ activation) ..., the classifier."""
        x = self.named("GlobalAveragePool", [x], "avgpool")
        x = self.named("Flatten", [x], "", axis=1)
        for i, (cin, cout) in enumerate(zip(dims[:-1], dims[1:])):
            s = f"{scope}.{i * 3 if len(dims) > 2 else 1}"
            w = self.weight(f"{s}.weight", (cout, cin))
            b = self.weight(f"{s}.bias", (cout,), scale=0.1)
            x = self.named("Gemm", [x, w, b], s, alpha=1.0, beta=1.0, transB=1)
            if acts[i]:
                x = self.act(x, acts[i], f"{scope}.{i * 3 + 1}")
        return x

    def finish(self, x: str, size: int, classes: int, doc: str) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "output"
        return self.model(
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, classes])],
            doc,
        )


def _squeeze_excitation(b: _Net, x: str, channels: int, squeeze: int, scope: str, inner: str, gate: str) -> str:
    """GlobalAveragePool -> 1x1 conv -> `inner` -> 1x1 conv -> `gate` -> Mul (torchvision's SqueezeExcitation)."""
    s = b.named("GlobalAveragePool", [x], f"{scope}.avgpool")
    s = b.conv(s, channels, squeeze, 1, f"{scope}.fc1")
    s = b.act(s, inner, f"{scope}.activation")
    s = b.conv(s, squeeze, channels, 1, f"{scope}.fc2")
    if gate == "HardSigmoid":
        s = b.named("HardSigmoid", [s], f"{scope}.scale_activation", alpha=1.0 / 6.0, beta=0.5)
    else:
        s = b.named("Sigmoid", [s], f"{scope}.scale_activation")
    return b.named("Mul", [s, x], scope)


def mobilenet_v2(seed: int = 20, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision's MobileNetV2 (width 1.0), folded batch norms, ReLU6 as Clip(0, 6)."""
    b = _Net("mobilenet_v2", seed)
    x = b.relu6(b.conv("input", 3, 32, 3, "features.0.0", stride=2), "features.0.2")
    cin, index = 32, 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            scope = f"features.{index}.conv"
            hidden = cin * t
            y, j = x, 0
            if t != 1:
                y = b.relu6(b.conv(y, cin, hidden, 1, f"{scope}.0.0"), f"{scope}.0.2")
                j = 1
            y = b.relu6(b.conv(y, hidden, hidden, 3, f"{scope}.{j}.0", stride=stride, groups=hidden), f"{scope}.{j}.2")
            y = b.conv(y, hidden, c, 1, f"{scope}.{j + 1}")
            x = b.named("Add", [x, y], f"features.{index}") if stride == 1 and cin == c else y
            cin, index = c, index + 1
    x = b.relu6(b.conv(x, cin, 1280, 1, f"features.{index}.0"), f"features.{index}.2")
    x = b.head(x, [1280, classes], [""], "classifier")
    return b.finish(x, size, classes, "MobileNetV2 (torchvision layout, batch norm folded, seeded random weights).")


def mobilenet_v3_small(seed: int = 21, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision's MobileNetV3-small: HardSwish, squeeze-excitation with HardSigmoid gates."""
    b = _Net("mobilenet_v3_small", seed)
    x = b.act(b.conv("input", 3, 16, 3, "features.0.0", stride=2), "HS", "features.0.2")
    config = (  # in, kernel, expanded, out, SE, activation, stride
        (16, 3, 16, 16, True, "RE", 2),
        (16, 3, 72, 24, False, "RE", 2),
        (24, 3, 88, 24, False, "RE", 1),
        (24, 5, 96, 40, True, "HS", 2),
        (40, 5, 240, 40, True, "HS", 1),
        (40, 5, 240, 40, True, "HS", 1),
        (40, 5, 120, 48, True, "HS", 1),
        (48, 5, 144, 48, True, "HS", 1),
        (48, 5, 288, 96, True, "HS", 2),
        (96, 5, 576, 96, True, "HS", 1),
        (96, 5, 576, 96, True, "HS", 1),
    )
    for index, (cin, k, exp, cout, se, act, stride) in enumerate(config, start=1):
        scope = f"features.{index}.block"
        y, j = x, 0
        if exp != cin:
            y = b.act(b.conv(y, cin, exp, 1, f"{scope}.0.0"), act, f"{scope}.0.2")
            j = 1
        y = b.act(b.conv(y, exp, exp, k, f"{scope}.{j}.0", stride=stride, groups=exp), act, f"{scope}.{j}.2")
        if se:
            j += 1
            y = _squeeze_excitation(b, y, exp, make_divisible(exp // 4, 8), f"{scope}.{j}", "RE", "HardSigmoid")
        y = b.conv(y, exp, cout, 1, f"{scope}.{j + 1}.0")
        x = b.named("Add", [y, x], f"features.{index}") if stride == 1 and cin == cout else y
    x = b.act(b.conv(x, 96, 576, 1, "features.12.0"), "HS", "features.12.2")
    x = b.head(x, [576, 1024, classes], ["HS", ""], "classifier")
    return b.finish(x, size, classes, "MobileNetV3-small (torchvision layout, batch norm folded, seeded random weights).")


def efficientnet_b0(seed: int = 22, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision's EfficientNet-B0: MBConv blocks, SiLU as x * Sigmoid(x), squeeze-excitation."""
    b = _Net("efficientnet_b0", seed)
    x = b.silu(b.conv("input", 3, 32, 3, "features.0.0", stride=2), "features.0.2")
    stages = (  # expand ratio, kernel, stride, in, out, layers
        (1, 3, 1, 32, 16, 1),
        (6, 3, 2, 16, 24, 2),
        (6, 5, 2, 24, 40, 2),
        (6, 3, 2, 40, 80, 3),
        (6, 5, 1, 80, 112, 3),
        (6, 5, 2, 112, 192, 4),
        (6, 3, 1, 192, 320, 1),
    )
    for stage, (ratio, k, s, cin_stage, cout, layers) in enumerate(stages, start=1):
        for i in range(layers):
            cin = cin_stage if i == 0 else cout
            stride = s if i == 0 else 1
            scope = f"features.{stage}.{i}.block"
            hidden = cin * ratio
            y, j = x, 0
            if ratio != 1:
                y = b.silu(b.conv(y, cin, hidden, 1, f"{scope}.0.0"), f"{scope}.0.2")
                j = 1
            y = b.silu(b.conv(y, hidden, hidden, k, f"{scope}.{j}.0", stride=stride, groups=hidden), f"{scope}.{j}.2")
            y = _squeeze_excitation(b, y, hidden, max(1, cin // 4), f"{scope}.{j + 1}", "SiLU", "Sigmoid")
            y = b.conv(y, hidden, cout, 1, f"{scope}.{j + 2}.0")
            x = b.named("Add", [y, x], f"features.{stage}.{i}") if stride == 1 and cin == cout else y
    x = b.silu(b.conv(x, 320, 1280, 1, "features.8.0"), "features.8.2")
    x = b.head(x, [1280, classes], [""], "classifier")
    return b.finish(x, size, classes, "EfficientNet-B0 (torchvision layout, batch norm folded, seeded random weights).")


MOBILE: dict = {
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
}
