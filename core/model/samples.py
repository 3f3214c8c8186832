"""Small models with real (seeded random) weights, for the bundled samples, tests and benchmarks.

`scripts/make_samples.py` writes them to resources/models/. Each is small (well under 2 MB) but
has the structure the rewrites and the compiler care about:

* `small_cnn`: conv + batchnorm + relu blocks, a residual add, pooling and a linear head;
* `mlp`: the MLC course's running example, linear + relu layers (MatMul, Add, Relu) with a
  symbolic batch dimension;
* `tiny_transformer`: one encoder block as exporters write it: decomposed layer norms
  (ReduceMean/Sub/Pow/Sqrt/Div), single-head attention with a Transpose feeding a MatMul, an
  Erf-based GELU, MatMul + Add linears and residual adds;
* `mm_relu`: the course's first tensor program, relu(A @ B) on 128x128 (the Schedule panel's
  guided sample).

`scoped_bert` (not bundled: generated on demand) is a BERT encoder named node by node the way
torch.onnx names it (`/encoder/layer.3/attention/self/query/MatMul`), for the scope grouping.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["small_cnn", "mlp", "tiny_transformer", "mm_relu", "scoped_bert", "SAMPLES"]

OPSET = 17


class _Builder:
    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def weight(self, name: str, shape, scale: float | None = None, positive: bool = False) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        a = self.rng.standard_normal(shape).astype(np.float32) * s
        if positive:
            a = np.abs(a) + 0.5
        self.inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> str | list[str]:
        outs = [f"{name}_out" if n_out == 1 else f"{name}_out{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs, outputs, doc: str) -> onnx.ModelProto:
        g = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="mlc-workbench samples")
        m.ir_version = 8
        m.doc_string = doc
        helper.set_model_props(m, {"source": "core/samples.py", "weights": "seeded random"})
        onnx.checker.check_model(m, full_check=True)
        return m


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """CNN on 1x3x32x32: three conv-bn-relu blocks, one residual add, max/avg pooling, linear head."""
    b = _Builder("small_cnn", seed)

    def conv_bn(x: str, cin: int, cout: int, name: str, relu: bool = True, stride: int = 1) -> str:
        w = b.weight(f"{name}.weight", (cout, cin, 3, 3))
        y = b.op("Conv", [x, w], f"{name}.conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])
        scale = b.weight(f"{name}.bn.scale", (cout,), positive=True)
        bias = b.weight(f"{name}.bn.bias", (cout,), scale=0.1)
        mean = b.weight(f"{name}.bn.mean", (cout,), scale=0.1)
        var = b.weight(f"{name}.bn.var", (cout,), positive=True)
        y = b.op("BatchNormalization", [y, scale, bias, mean, var], f"{name}.bn", epsilon=1e-5)
        return b.op("Relu", [y], f"{name}.relu") if relu else y

    x = conv_bn("input", 3, 16, "stem")
    x = b.op("MaxPool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    y = conv_bn(x, 16, 16, "block1.a")
    y = conv_bn(y, 16, 16, "block1.b", relu=False)
    x = b.op("Add", [x, y], "block1.add")
    x = b.op("Relu", [x], "block1.relu")
    x = conv_bn(x, 16, 32, "block2", stride=2)
    x = b.op("GlobalAveragePool", [x], "gap")
    x = b.op("Flatten", [x], "flatten", axis=1)
    w = b.weight("fc.weight", (10, 32))
    bias = b.weight("fc.bias", (10,), scale=0.1)
    b.op("Gemm", [x, w, bias], "fc", transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        "Small CNN with conv+batchnorm+relu blocks and a residual add (seeded random weights).",
    )


def mlp(seed: int = 1, sizes: tuple[int, ...] = (784, 128, 64, 10)) -> onnx.ModelProto:
    """The MLC course's MLP: linear (MatMul + Add) + relu layers, batch dimension symbolic."""
    b = _Builder("mlp", seed)
    x = "input"
    for i, (cin, cout) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = b.weight(f"linear{i}.weight", (cin, cout))
        bias = b.weight(f"linear{i}.bias", (cout,), scale=0.1)
        x = b.op("MatMul", [x, w], f"linear{i}.matmul")
        x = b.op("Add", [x, bias], f"linear{i}.add")
        if i < len(sizes) - 2:
            x = b.op("Relu", [x], f"relu{i}")
    b.nodes[-1].output[0] = "logits"
    return b.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", sizes[-1]])],
        "MLP with linear+relu layers and a symbolic batch dimension (seeded random weights).",
    )


def tiny_transformer(seed: int = 2, seq: int = 16, dim: int = 32, hidden: int = 64) -> onnx.ModelProto:
    """One encoder block on [batch, seq, dim], written out op by op as exporters do."""
    b = _Builder("tiny_transformer", seed)
    axes = b.const("axes_last", np.array([-1], dtype=np.int64)) if OPSET >= 18 else ""
    two = b.const("two", np.array(2.0, dtype=np.float32))
    eps = b.const("eps", np.array(1e-5, dtype=np.float32))

    def layernorm(x: str, name: str) -> str:
        mean = b.op("ReduceMean", [x, axes], f"{name}.mean", keepdims=1) if OPSET >= 18 else b.op(
            "ReduceMean", [x], f"{name}.mean", axes=[-1], keepdims=1
        )
        d = b.op("Sub", [x, mean], f"{name}.sub")
        sq = b.op("Pow", [d, two], f"{name}.pow")
        var = b.op("ReduceMean", [sq], f"{name}.var", axes=[-1], keepdims=1)
        ve = b.op("Add", [var, eps], f"{name}.add_eps")
        sd = b.op("Sqrt", [ve], f"{name}.sqrt")
        n = b.op("Div", [d, sd], f"{name}.div")
        g = b.weight(f"{name}.gamma", (dim,), positive=True)
        beta = b.weight(f"{name}.beta", (dim,), scale=0.1)
        n = b.op("Mul", [n, g], f"{name}.scale")
        return b.op("Add", [n, beta], f"{name}.shift")

    def linear(x: str, cin: int, cout: int, name: str) -> str:
        w = b.weight(f"{name}.weight", (cin, cout))
        bias = b.weight(f"{name}.bias", (cout,), scale=0.1)
        y = b.op("MatMul", [x, w], f"{name}.matmul")
        return b.op("Add", [y, bias], f"{name}.add")

    x = "input"
    h = layernorm(x, "ln1")
    q = linear(h, dim, dim, "attn.q")
    k = linear(h, dim, dim, "attn.k")
    v = linear(h, dim, dim, "attn.v")
    kt = b.op("Transpose", [k], "attn.k_t", perm=[0, 2, 1])
    scores = b.op("MatMul", [q, kt], "attn.scores")
    scale = b.const("attn.scale", np.array(1.0 / np.sqrt(dim), dtype=np.float32))
    scores = b.op("Mul", [scores, scale], "attn.scaled")
    probs = b.op("Softmax", [scores], "attn.softmax", axis=-1)
    ctx = b.op("MatMul", [probs, v], "attn.context")
    o = linear(ctx, dim, dim, "attn.out")
    x = b.op("Add", [x, o], "residual1")
    h = layernorm(x, "ln2")
    h = linear(h, dim, hidden, "ffn.up")
    # GELU, Erf form: 0.5 * x * (1 + erf(x / sqrt(2)))
    sqrt2 = b.const("gelu.sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    one = b.const("gelu.one", np.array(1.0, dtype=np.float32))
    half = b.const("gelu.half", np.array(0.5, dtype=np.float32))
    t = b.op("Div", [h, sqrt2], "gelu.div")
    t = b.op("Erf", [t], "gelu.erf")
    t = b.op("Add", [t, one], "gelu.add")
    t = b.op("Mul", [h, t], "gelu.mul")
    h = b.op("Mul", [t, half], "gelu.half_mul")
    h = linear(h, hidden, dim, "ffn.down")
    b.op("Add", [x, h], "residual2")
    b.nodes[-1].output[0] = "output"
    return b.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", seq, dim])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", seq, dim])],
        "One transformer encoder block with decomposed layer norms and an Erf GELU (seeded random weights).",
    )


def scoped_bert(seed: int = 3, layers: int = 12, seq: int = 16, dim: int = 32, heads: int = 2, ffn: int = 128, vocab: int = 512) -> onnx.ModelProto:
    """A BERT-base-shaped encoder, small in width, with torch.onnx's node names and op sequence:
    embeddings (Gather, Add, LayerNormalization), `layers` layers of multi-head self-attention
    (query/key/value MatMul+Add, Reshape/Transpose into heads, scaled scores, Softmax, context
    Transpose/Reshape, output dense + residual + LayerNorm), an Erf GELU feed-forward, a pooler."""
    b = _Builder("scoped_bert", seed)
    hd = dim // heads
    heads_shape = b.const("onnx::Reshape_heads", np.array([0, seq, heads, hd], dtype=np.int64))
    merge_shape = b.const("onnx::Reshape_merge", np.array([0, seq, dim], dtype=np.int64))
    scale = b.const("onnx::Div_scale", np.array(np.sqrt(hd), dtype=np.float32))
    sqrt2 = b.const("onnx::Div_sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    one = b.const("onnx::Add_one", np.array(1.0, dtype=np.float32))
    half = b.const("onnx::Mul_half", np.array(0.5, dtype=np.float32))

    def op(op_type, inputs, name, **attrs):
        out = f"{name}_output_0"
        b.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def dense(x, cin, cout, scope, wname):
        w = b.weight(f"{wname}.weight", (cin, cout))
        bias = b.weight(f"{wname}.bias", (cout,), scale=0.1)
        return op("Add", [op("MatMul", [x, w], f"{scope}/MatMul"), bias], f"{scope}/Add")

    def layer_norm(x, scope, wname):
        g = b.weight(f"{wname}.weight", (dim,), positive=True)
        beta = b.weight(f"{wname}.bias", (dim,), scale=0.1)
        return op("LayerNormalization", [x, g, beta], f"{scope}/LayerNormalization", axis=-1, epsilon=1e-12)

    words = b.weight("embeddings.word_embeddings.weight", (vocab, dim), scale=0.5)
    positions = b.weight("embeddings.position_embeddings.weight", (1, seq, dim), scale=0.1)
    x = op("Gather", [words, "input_ids"], "/embeddings/word_embeddings/Gather")
    x = op("Add", [x, positions], "/embeddings/Add")
    x = layer_norm(x, "/embeddings/LayerNorm", "embeddings.LayerNorm")
    for i in range(layers):
        s, w = f"/encoder/layer.{i}", f"encoder.layer.{i}"
        heads_of = {}
        for part in ("query", "key", "value"):
            y = dense(x, dim, dim, f"{s}/attention/self/{part}", f"{w}.attention.self.{part}")
            sfx = {"query": "", "key": "_1", "value": "_2"}[part]
            y = op("Reshape", [y, heads_shape], f"{s}/attention/self/Reshape{sfx}")
            perm = [0, 2, 3, 1] if part == "key" else [0, 2, 1, 3]
            heads_of[part] = op("Transpose", [y], f"{s}/attention/self/Transpose{sfx}", perm=perm)
        scores = op("MatMul", [heads_of["query"], heads_of["key"]], f"{s}/attention/self/MatMul")
        scores = op("Div", [scores, scale], f"{s}/attention/self/Div")
        probs = op("Softmax", [scores], f"{s}/attention/self/Softmax", axis=-1)
        ctx = op("MatMul", [probs, heads_of["value"]], f"{s}/attention/self/MatMul_1")
        ctx = op("Transpose", [ctx], f"{s}/attention/self/Transpose_3", perm=[0, 2, 1, 3])
        ctx = op("Reshape", [ctx, merge_shape], f"{s}/attention/self/Reshape_3")
        y = dense(ctx, dim, dim, f"{s}/attention/output/dense", f"{w}.attention.output.dense")
        y = op("Add", [y, x], f"{s}/attention/output/Add")
        x = layer_norm(y, f"{s}/attention/output/LayerNorm", f"{w}.attention.output.LayerNorm")
        h = dense(x, dim, ffn, f"{s}/intermediate/dense", f"{w}.intermediate.dense")
        act = f"{s}/intermediate/intermediate_act_fn"
        t = op("Div", [h, sqrt2], f"{act}/Div")
        t = op("Erf", [t], f"{act}/Erf")
        t = op("Add", [t, one], f"{act}/Add")
        t = op("Mul", [h, t], f"{act}/Mul")
        h = op("Mul", [t, half], f"{act}/Mul_1")
        y = dense(h, ffn, dim, f"{s}/output/dense", f"{w}.output.dense")
        y = op("Add", [y, x], f"{s}/output/Add")
        x = layer_norm(y, f"{s}/output/LayerNorm", f"{w}.output.LayerNorm")
    b.nodes[-1].output[0] = "last_hidden_state"
    first = b.const("onnx::Gather_first", np.array(0, dtype=np.int64))
    p = op("Gather", ["last_hidden_state", first], "/pooler/Gather", axis=1)
    pw = b.weight("pooler.dense.weight", (dim, dim))
    pb = b.weight("pooler.dense.bias", (dim,), scale=0.1)
    p = op("Gemm", [p, pw, pb], "/pooler/dense/Gemm", transB=1)
    op("Tanh", [p], "/pooler/activation/Tanh")
    b.nodes[-1].output[0] = "pooler_output"
    return b.model(
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, dim]),
         helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [1, dim])],
        f"BERT-style encoder, {layers} layers, torch.onnx node naming (seeded random weights).",
    )


def mm_relu(n: int = 128) -> onnx.ModelProto:
    """The MLC course's first tensor program, `mm_relu`: Y = A @ B, C = relu(Y), n x n float32.

    A and B are both inputs (as in the course's `mm_relu(A, B, C)`), so its one kernel is exactly
    the course's loop nest: the guided sample of the Schedule panel (split j by 4, reorder,
    reverse_compute_at, vectorize, decompose_reduction, parallel).
    """
    b = _Builder("mm_relu", 0)
    y = b.op("MatMul", ["A", "B"], "matmul")
    b.op("Relu", [y], "relu")
    b.nodes[-1].output[0] = "C"
    return b.model(
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n]), helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
        f"The MLC course's mm_relu: C = relu(A @ B) on {n}x{n} float32 (the Schedule panel's guided sample).",
    )


SAMPLES = {"small_cnn": small_cnn, "mlp": mlp, "tiny_transformer": tiny_transformer, "mm_relu": mm_relu}
