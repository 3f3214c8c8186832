"""Small transformer models written node for node the way exporters write them (no torch needed).

`bert_encoder()` reproduces what `torch.onnx.export` (opset 17, dynamic batch and sequence axes)
writes for a Hugging Face BERT encoder: position ids sliced from a buffer by a computed length,
token type ids from ConstantOfShape of the input's Shape, the extended attention mask built by
Unsqueeze/Cast/Sub/Mul and broadcast with Expand to a computed shape, heads split with
Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains, the head size from a Div on shapes,
Where masks, LayerNormalization, erf GELU, and a masked mean pool with ReduceSum taking its axes
as an input. `gpt2_block()` adds the causal mask idioms (Trilu of a ConstantOfShape, Where),
`vit_encoder()` the patch embedding (Conv -> Reshape -> Transpose, a class token Concat'ed after
an Expand to a computed batch). Weights are seeded random, small (hidden 64, 2 layers).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["bert_encoder", "gpt2_block", "vit_encoder"]

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


class _Builder:
    """Names values, collects nodes and initializers; each op call returns its output name."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def _name(self, op: str) -> str:
        self.count += 1
        return f"/{op}_{self.count}_output_0"

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs):
        outs = [self._name(op_type) + (f"_{i}" if i else "") for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"/{op_type}_{self.count}", **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value, dtype=np.float32, name: str | None = None) -> str:
        self.count += 1
        name = name or f"onnx::Constant_{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def weight(self, shape, scale: float = 0.08, name: str | None = None) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), name=name)

    def constant_node(self, value, dtype=np.int64) -> str:
        out = self._name("Constant")
        self.nodes.append(helper.make_node("Constant", [], [out], value=numpy_helper.from_array(np.asarray(value, dtype=dtype))))
        return out

    def dim(self, x: str, index: int) -> str:
        """Shape(x)[index] as a 1-D tensor: the exporter's Shape -> Gather -> Unsqueeze."""
        shape = self.op("Shape", [x])
        d = self.op("Gather", [shape, self.constant_node(index)], axis=0)
        return self.op("Unsqueeze", [d, self.constant_node([0])])

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        y = self.op("MatMul", [x, self.weight((n_in, n_out))])
        return self.op("Add", [self.weight((n_out,), 0.02), y])

    def layer_norm(self, x: str, hidden: int) -> str:
        gamma = self.const(1.0 + self.rng.standard_normal(hidden) * 0.05)
        beta = self.const(self.rng.standard_normal(hidden) * 0.05)
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        """erf GELU as torch's exporter writes it below opset 20."""
        e = self.op("Erf", [self.op("Div", [x, self.const(1.4142135381698608)])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(1.0)])]), self.const(0.5)])

    def attention(self, x: str, mask: str, hidden: int, heads: int) -> str:
        """Multi-head self-attention; `mask` is added to the scores (B, 1, S|1, S)."""
        batch, seq = self.dim(x, 0), self.dim(x, 1)
        # head size computed from the hidden size on shapes: Div of int64 tensors
        head = self.op("Div", [self.dim(x, 2), self.constant_node([heads])])
        heads_t = self.constant_node([heads])
        split_shape = self.op("Concat", [batch, seq, heads_t, head], axis=0)

        def split(t: str, perm: list[int]) -> str:
            return self.op("Transpose", [self.op("Reshape", [t, split_shape])], perm=perm)

        q = split(self.linear(x, hidden, hidden), [0, 2, 1, 3])
        k = split(self.linear(x, hidden, hidden), [0, 2, 3, 1])
        v = split(self.linear(x, hidden, hidden), [0, 2, 1, 3])
        scores = self.op("Div", [self.op("MatMul", [q, k]), self.const(np.sqrt(hidden // heads))])
        probs = self.op("Softmax", [self.op("Add", [scores, mask])], axis=-1)
        ctx = self.op("Transpose", [self.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merged = self.op("Reshape", [ctx, self.op("Concat", [batch, seq, self.constant_node([hidden])], axis=0)])
        return self.linear(merged, hidden, hidden)

    def model(self, name: str, inputs, outputs, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch", producer_version="2.1.0")
        onnx.checker.check_model(m)
        return m


def bert_encoder(layers: int = 2, hidden: int = 64, heads: int = 4, vocab: int = 100, max_pos: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A BERT encoder (input_ids, attention_mask: int64 [batch, sequence]) -> (last_hidden_state, pooled mean)."""
    b = _Builder(seed)
    ids, mask = "input_ids", "attention_mask"
    seq = b.dim(ids, 1)
    # position ids: a registered buffer sliced to the sequence length
    pos_buffer = b.const(np.arange(max_pos)[None, :], np.int64, name="embeddings.position_ids")
    pos_ids = b.op("Slice", [pos_buffer, b.constant_node([0]), seq, b.constant_node([1]), b.constant_node([1])])
    # token type ids: zeros of the input's (computed) shape
    types = b.op("ConstantOfShape", [b.op("Shape", [ids])], value=numpy_helper.from_array(np.array([0], np.int64)))
    emb = b.op("Add", [b.op("Gather", [b.weight((vocab, hidden), 0.5, "embeddings.word_embeddings.weight"), ids]),
                       b.op("Gather", [b.weight((2, hidden), 0.5, "embeddings.token_type_embeddings.weight"), types])])
    emb = b.op("Add", [emb, b.op("Gather", [b.weight((max_pos, hidden), 0.5, "embeddings.position_embeddings.weight"), pos_ids])])
    x = b.layer_norm(emb, hidden)
    # extended attention mask: (1 - mask[:, None, None, :]) * finfo.min, expanded to (B, 1, S, S)
    m4 = b.op("Unsqueeze", [b.op("Unsqueeze", [mask, b.constant_node([1])]), b.constant_node([2])])
    target = b.op("Concat", [b.dim(ids, 0), b.constant_node([1]), seq, seq], axis=0)
    m4 = b.op("Cast", [b.op("Expand", [m4, target])], to=F32)
    inverted = b.op("Sub", [b.const(1.0), m4])
    is_masked = b.op("Cast", [inverted], to=TensorProto.BOOL)
    ext = b.op("Where", [is_masked, b.const(np.finfo(np.float32).min), inverted])
    for _ in range(layers):
        x = b.layer_norm(b.op("Add", [b.attention(x, ext, hidden, heads), x]), hidden)
        ff = b.linear(b.gelu(b.linear(x, hidden, 4 * hidden)), 4 * hidden, hidden)
        x = b.layer_norm(b.op("Add", [ff, x]), hidden)
    # masked mean pool, ReduceSum with its axes as an input (opset 13+)
    mf = b.op("Unsqueeze", [b.op("Cast", [mask], to=F32), b.constant_node([-1])])
    axes = b.constant_node([1])
    total = b.op("ReduceSum", [b.op("Mul", [x, mf]), axes], keepdims=0)
    count = b.op("Max", [b.op("ReduceSum", [mf, axes], keepdims=0), b.const(1e-9)])
    pooled = b.op("Div", [total, count])
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity_out"))
    b.nodes.append(helper.make_node("Identity", [pooled], ["pooled"], name="/Identity_pooled"))
    return b.model(
        "bert_encoder",
        [helper.make_tensor_value_info(ids, I64, ["batch", "sequence"]), helper.make_tensor_value_info(mask, I64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("last_hidden_state", F32, ["batch", "sequence", hidden]),
         helper.make_tensor_value_info("pooled", F32, ["batch", hidden])],
    )


def gpt2_block(layers: int = 2, hidden: int = 64, heads: int = 4, vocab: int = 100, max_pos: int = 32, seed: int = 1) -> onnx.ModelProto:
    """A GPT-2 decoder (input_ids int64 [batch, sequence]) -> logits, with the causal mask built
    from the sequence length: Trilu of a ConstantOfShape, Where to finfo.min."""
    b = _Builder(seed)
    ids = "input_ids"
    seq = b.dim(ids, 1)
    pos = b.op("Unsqueeze", [b.op("Range", [b.constant_node(0), b.op("Squeeze", [seq, b.constant_node([0])]), b.constant_node(1)]), b.constant_node([0])])
    x = b.op("Add", [b.op("Gather", [b.weight((vocab, hidden), 0.5, "wte.weight"), ids]),
                     b.op("Gather", [b.weight((max_pos, hidden), 0.5, "wpe.weight"), pos])])
    square = b.op("Concat", [seq, seq], axis=0)
    ones = b.op("ConstantOfShape", [square], value=numpy_helper.from_array(np.array([1], np.int64)))
    causal = b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
    mask = b.op("Where", [causal, b.const(0.0), b.const(np.finfo(np.float32).min)])
    mask = b.op("Unsqueeze", [mask, b.constant_node([0, 1])])
    for _ in range(layers):
        x = b.op("Add", [x, b.attention(b.layer_norm(x, hidden), mask, hidden, heads)])
        x = b.op("Add", [x, b.linear(b.gelu(b.linear(b.layer_norm(x, hidden), hidden, 4 * hidden)), 4 * hidden, hidden)])
    logits = b.op("MatMul", [b.layer_norm(x, hidden), b.weight((hidden, vocab))])
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/Identity_out"))
    return b.model(
        "gpt2_block",
        [helper.make_tensor_value_info(ids, I64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("logits", F32, ["batch", "sequence", vocab])],
    )


def vit_encoder(layers: int = 2, hidden: int = 64, heads: int = 4, image: int = 32, patch: int = 8, classes: int = 10, seed: int = 2) -> onnx.ModelProto:
    """A ViT (pixel_values float [batch, 3, 32, 32]) -> logits: Conv patch embedding, Reshape +
    Transpose, a class token Expand'ed to the computed batch and Concat'ed, position embeddings."""
    b = _Builder(seed)
    px = "pixel_values"
    patches = b.op("Conv", [px, b.weight((hidden, 3, patch, patch), 0.05), b.weight((hidden,), 0.02)], kernel_shape=[patch, patch], strides=[patch, patch])
    tokens = b.op("Transpose", [b.op("Reshape", [patches, b.constant_node([0, hidden, -1])])], perm=[0, 2, 1])
    tokens = b.op("Reshape", [tokens, b.op("Concat", [b.dim(px, 0), b.constant_node([-1, hidden])], axis=0)])
    cls = b.op("Expand", [b.weight((1, 1, hidden), 0.5, "cls_token"), b.op("Concat", [b.dim(px, 0), b.constant_node([1, 1])], axis=0)])
    n = (image // patch) ** 2 + 1
    x = b.op("Add", [b.op("Concat", [cls, tokens], axis=1), b.weight((1, n, hidden), 0.5, "position_embeddings")])
    zero_mask = b.const(np.zeros((1, 1, 1, 1), np.float32))
    for _ in range(layers):
        x = b.op("Add", [x, b.attention(b.layer_norm(x, hidden), zero_mask, hidden, heads)])
        x = b.op("Add", [x, b.linear(b.gelu(b.linear(b.layer_norm(x, hidden), hidden, 4 * hidden)), 4 * hidden, hidden)])
    first = b.op("Gather", [b.layer_norm(x, hidden), b.constant_node(0)], axis=1)
    logits = b.linear(first, hidden, classes)
    b.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/Identity_out"))
    return b.model(
        "vit_encoder",
        [helper.make_tensor_value_info(px, F32, ["batch", 3, image, image])],
        [helper.make_tensor_value_info("logits", F32, ["batch", classes])],
    )
