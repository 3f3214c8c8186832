"""ViT-, BERT- and GPT-2-style transformer encoders, node for node as torch.onnx (opset 17) exports them.

Static shapes (batch 1, as `torch.onnx.export` writes without dynamic axes, shape arithmetic
constant-folded), seeded random weights, torch's naming (`/encoder/layer.0/attention/...`).
The three differ in the idioms a compiler has to handle well:

* `vit_encoder` (ViT-Tiny-like: 224x224, 16x16 patches -> 196 + 1 tokens, hidden 192, 3 heads,
  4 layers, MLP 768): Conv patch embedding, class token Concat, LayerNormalization ops, Erf GELU,
  attention scores scaled by a Div, 197 (odd, prime) attention columns;
* `bert_encoder` (seq 128, hidden 256, 4 heads, 4 layers, MLP 1024): word-embedding Gather, the
  layer norm decomposed into ReduceMean/Sub/Pow/Sqrt/Div as older exporters write it, the
  extended attention mask (1 - mask) * -10000 Added to the scores, a tanh pooler;
* `gpt2_blocks` (seq 64, hidden 256, 4 heads, 4 layers): HF's Conv1D as Reshape -> Gemm ->
  Reshape, one fused QKV projection Split in three, the causal mask as a Where on a constant
  lower-triangular bool buffer, the tanh form of GELU (Pow 3), scores scaled by a Mul.

Each builder takes well under a second (the weights are the bulk: ~2-10 MB).
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["TRANSFORMERS", "bert_encoder", "gpt2_blocks", "vit_encoder"]

logger = logging.getLogger(__name__)

OPSET = 17
F32 = TensorProto.FLOAT
I64 = TensorProto.INT64


class _Exporter:
    """Collects nodes and initializers under torch.onnx's names: node `/scope/Op`, output
    `/scope/Op_output_0`, parameters by their module path, constants `onnx::Op_N`."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._used: dict[str, int] = {}
        self._consts = 0

    def _node_name(self, scope: str, op_type: str) -> str:
        base = f"{scope}/{op_type}"
        n = self._used.get(base, 0)
        self._used[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def op(self, op_type: str, inputs: list[str], scope: str, n_out: int = 1, **attrs):
        name = self._node_name(scope, op_type)
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def param(self, name: str, shape, scale: float | None = None, offset: float = 0.0) -> str:
        fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:])) if len(shape) > 1 else 1
        s = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        a = (self.rng.standard_normal(shape).astype(np.float32) * np.float32(s) + np.float32(offset)).astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, name))
        return name

    def const(self, value, dtype=np.float32) -> str:
        self._consts += 1
        name = f"onnx::Constant_{self._consts}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def linear(self, x: str, n_in: int, n_out: int, path: str, scope: str) -> str:
        """nn.Linear on a 3-D input: MatMul with the transposed weight, then Add of the bias."""
        y = self.op("MatMul", [x, self.param(f"{path}.weight", (n_in, n_out))], scope)
        return self.op("Add", [self.param(f"{path}.bias", (n_out,), scale=0.02), y], scope)

    def layer_norm(self, x: str, hidden: int, path: str, scope: str, eps: float) -> str:
        gamma = self.param(f"{path}.weight", (hidden,), scale=0.05, offset=1.0)
        beta = self.param(f"{path}.bias", (hidden,), scale=0.05)
        return self.op("LayerNormalization", [x, gamma, beta], scope, axis=-1, epsilon=eps)

    def decomposed_layer_norm(self, x: str, hidden: int, path: str, scope: str, eps: float) -> str:
        """LayerNorm as exporters before opset 17 wrote it (and BERT ports still do)."""
        mean = self.op("ReduceMean", [x], scope, axes=[-1], keepdims=1)
        d = self.op("Sub", [x, mean], scope)
        var = self.op("ReduceMean", [self.op("Pow", [d, self.const(2.0)], scope)], scope, axes=[-1], keepdims=1)
        std = self.op("Sqrt", [self.op("Add", [var, self.const(eps)], scope)], scope)
        n = self.op("Div", [d, std], scope)
        n = self.op("Mul", [n, self.param(f"{path}.weight", (hidden,), scale=0.05, offset=1.0)], scope)
        return self.op("Add", [n, self.param(f"{path}.bias", (hidden,), scale=0.05)], scope)

    def gelu_erf(self, x: str, scope: str) -> str:
        """nn.GELU() below opset 20: x * 0.5 * (1 + erf(x / sqrt 2))."""
        e = self.op("Erf", [self.op("Div", [x, self.const(1.4142135381698608)], scope)], scope)
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [e, self.const(1.0)], scope)], scope), self.const(0.5)], scope)

    def gelu_tanh(self, x: str, scope: str) -> str:
        """GPT-2's NewGELU: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
        cube = self.op("Mul", [self.const(0.044715), self.op("Pow", [x, self.const(3.0)], scope)], scope)
        inner = self.op("Mul", [self.const(np.sqrt(2.0 / np.pi)), self.op("Add", [x, cube], scope)], scope)
        t = self.op("Add", [self.const(1.0), self.op("Tanh", [inner], scope)], scope)
        return self.op("Mul", [self.op("Mul", [self.const(0.5), x], scope), t], scope)

    def split_heads(self, t: str, seq: int, heads: int, head_dim: int, perm: list[int], scope: str) -> str:
        shaped = self.op("Reshape", [t, self.const([1, seq, heads, head_dim], np.int64)], scope)
        return self.op("Transpose", [shaped], scope, perm=perm)

    def merge_heads(self, ctx: str, seq: int, hidden: int, scope: str) -> str:
        t = self.op("Transpose", [ctx], scope, perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.const([1, seq, hidden], np.int64)], scope)

    def model(self, inputs, outputs, doc: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch", producer_version="2.1.0")
        m.ir_version = 8
        m.doc_string = doc
        helper.set_model_props(m, {"source": "benchmarks/architectures/transformers.py", "weights": "seeded random"})
        onnx.checker.check_model(m)
        return m


def vit_encoder(layers: int = 4, hidden: int = 192, heads: int = 3, mlp: int = 768, image: int = 224, patch: int = 16,
                classes: int = 1000, seed: int = 11) -> onnx.ModelProto:
    """ViT image classifier (pixel_values [1, 3, 224, 224] -> logits [1, 1000]), HF ViTModel's export."""
    b = _Exporter("vit_encoder", seed)
    head_dim = hidden // heads
    tokens = (image // patch) ** 2
    seq = tokens + 1
    scope = "/embeddings/patch_embeddings/projection"
    w = b.param("vit.embeddings.patch_embeddings.projection.weight", (hidden, 3, patch, patch))
    bias = b.param("vit.embeddings.patch_embeddings.projection.bias", (hidden,), scale=0.02)
    x = b.op("Conv", ["pixel_values", w, bias], scope, kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.op("Reshape", [x, b.const([1, hidden, tokens], np.int64)], "/embeddings/patch_embeddings")  # flatten(2)
    x = b.op("Transpose", [x], "/embeddings/patch_embeddings", perm=[0, 2, 1])
    cls = b.param("vit.embeddings.cls_token", (1, 1, hidden), scale=0.02)
    x = b.op("Concat", [cls, x], "/embeddings", axis=1)
    x = b.op("Add", [x, b.param("vit.embeddings.position_embeddings", (1, seq, hidden), scale=0.02)], "/embeddings")
    for i in range(layers):
        layer, path = f"/encoder/layer.{i}", f"vit.encoder.layer.{i}"
        h = b.layer_norm(x, hidden, f"{path}.layernorm_before", f"{layer}/layernorm_before", 1e-12)
        att, apath = f"{layer}/attention/attention", f"{path}.attention.attention"
        q = b.split_heads(b.linear(h, hidden, hidden, f"{apath}.query", f"{att}/query"), seq, heads, head_dim, [0, 2, 1, 3], att)
        k = b.split_heads(b.linear(h, hidden, hidden, f"{apath}.key", f"{att}/key"), seq, heads, head_dim, [0, 2, 1, 3], att)
        v = b.split_heads(b.linear(h, hidden, hidden, f"{apath}.value", f"{att}/value"), seq, heads, head_dim, [0, 2, 1, 3], att)
        kt = b.op("Transpose", [k], att, perm=[0, 1, 3, 2])
        scores = b.op("Div", [b.op("MatMul", [q, kt], att), b.const(np.sqrt(head_dim))], att)
        probs = b.op("Softmax", [scores], att, axis=-1)
        ctx = b.merge_heads(b.op("MatMul", [probs, v], att), seq, hidden, att)
        out = b.linear(ctx, hidden, hidden, f"{path}.attention.output.dense", f"{layer}/attention/output/dense")
        x = b.op("Add", [out, x], layer)
        h = b.layer_norm(x, hidden, f"{path}.layernorm_after", f"{layer}/layernorm_after", 1e-12)
        h = b.gelu_erf(b.linear(h, hidden, mlp, f"{path}.intermediate.dense", f"{layer}/intermediate/dense"),
                       f"{layer}/intermediate/intermediate_act_fn")
        h = b.linear(h, mlp, hidden, f"{path}.output.dense", f"{layer}/output/dense")
        x = b.op("Add", [h, x], f"{layer}/output")
    x = b.layer_norm(x, hidden, "vit.layernorm", "/layernorm", 1e-12)
    first = b.op("Gather", [x, b.const(0, np.int64)], "", axis=1)
    b.op("Gemm", [first, b.param("classifier.weight", (classes, hidden), scale=1.0 / np.sqrt(hidden)),
                           b.param("classifier.bias", (classes,), scale=0.02)], "/classifier", transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model(
        [helper.make_tensor_value_info("pixel_values", F32, [1, 3, image, image])],
        [helper.make_tensor_value_info("logits", F32, [1, classes])],
        f"ViT encoder: {layers} layers, hidden {hidden}, {heads} heads, {seq} tokens (seeded random weights).",
    )


def bert_encoder(layers: int = 4, hidden: int = 256, heads: int = 4, mlp: int = 1024, seq: int = 128, vocab: int = 1000,
                 seed: int = 12) -> onnx.ModelProto:
    """BERT encoder (input_ids, attention_mask int64 [1, 128]) -> (last_hidden_state, pooler_output)."""
    b = _Exporter("bert_encoder", seed)
    head_dim = hidden // heads
    emb = b.op("Gather", [b.param("bert.embeddings.word_embeddings.weight", (vocab, hidden), scale=0.5), "input_ids"],
               "/embeddings/word_embeddings")
    # position and token-type embeddings of a static export: Gathers of buffers, constant-folded
    emb = b.op("Add", [emb, b.param("onnx::Add_position_token_type", (1, seq, hidden), scale=0.5)], "/embeddings")
    x = b.decomposed_layer_norm(emb, hidden, "bert.embeddings.LayerNorm", "/embeddings/LayerNorm", 1e-12)
    # the extended attention mask: (1.0 - mask[:, None, None, :]) * -10000.0
    m = b.op("Unsqueeze", ["attention_mask", b.const([1], np.int64)], "")
    m = b.op("Unsqueeze", [m, b.const([2], np.int64)], "")
    m = b.op("Cast", [m], "", to=F32)
    ext = b.op("Mul", [b.op("Sub", [b.const(1.0), m], ""), b.const(-10000.0)], "")
    for i in range(layers):
        layer, path = f"/encoder/layer.{i}", f"bert.encoder.layer.{i}"
        att, apath = f"{layer}/attention/self", f"{path}.attention.self"
        q = b.split_heads(b.linear(x, hidden, hidden, f"{apath}.query", f"{att}/query"), seq, heads, head_dim, [0, 2, 1, 3], att)
        kt = b.split_heads(b.linear(x, hidden, hidden, f"{apath}.key", f"{att}/key"), seq, heads, head_dim, [0, 2, 3, 1], att)
        v = b.split_heads(b.linear(x, hidden, hidden, f"{apath}.value", f"{att}/value"), seq, heads, head_dim, [0, 2, 1, 3], att)
        scores = b.op("Div", [b.op("MatMul", [q, kt], att), b.const(np.sqrt(head_dim))], att)
        probs = b.op("Softmax", [b.op("Add", [scores, ext], att)], att, axis=-1)
        ctx = b.merge_heads(b.op("MatMul", [probs, v], att), seq, hidden, att)
        out = b.linear(ctx, hidden, hidden, f"{path}.attention.output.dense", f"{layer}/attention/output/dense")
        x = b.decomposed_layer_norm(b.op("Add", [out, x], f"{layer}/attention/output"), hidden,
                                    f"{path}.attention.output.LayerNorm", f"{layer}/attention/output/LayerNorm", 1e-12)
        h = b.gelu_erf(b.linear(x, hidden, mlp, f"{path}.intermediate.dense", f"{layer}/intermediate/dense"),
                       f"{layer}/intermediate/intermediate_act_fn")
        h = b.linear(h, mlp, hidden, f"{path}.output.dense", f"{layer}/output/dense")
        x = b.decomposed_layer_norm(b.op("Add", [h, x], f"{layer}/output"), hidden, f"{path}.output.LayerNorm",
                                    f"{layer}/output/LayerNorm", 1e-12)
    b.nodes[-1].output[0] = "last_hidden_state"
    x = "last_hidden_state"
    first = b.op("Gather", [x, b.const(0, np.int64)], "/pooler", axis=1)
    pooled = b.op("Gemm", [first, b.param("bert.pooler.dense.weight", (hidden, hidden)),
                           b.param("bert.pooler.dense.bias", (hidden,), scale=0.02)], "/pooler/dense", transB=1)
    b.op("Tanh", [pooled], "/pooler/activation")
    b.nodes[-1].output[0] = "pooler_output"
    return b.model(
        [helper.make_tensor_value_info("input_ids", I64, [1, seq]), helper.make_tensor_value_info("attention_mask", I64, [1, seq])],
        [helper.make_tensor_value_info("last_hidden_state", F32, [1, seq, hidden]),
         helper.make_tensor_value_info("pooler_output", F32, [1, hidden])],
        f"BERT encoder: {layers} layers, hidden {hidden}, {heads} heads, sequence {seq} (seeded random weights).",
    )


def gpt2_blocks(layers: int = 4, hidden: int = 256, heads: int = 4, seq: int = 64, seed: int = 13,
                dynamic_axes: bool = False) -> onnx.ModelProto:
    """GPT-2 block stack on hidden states (inputs_embeds [1, 64, 256]) -> the final layer norm's output.

    `dynamic_axes=True` writes what `torch.onnx.export(..., dynamic_axes={batch, sequence})` writes
    for HF's GPT2Attention instead (inputs_embeds [batch, sequence, 256], `seq` the size of the
    causal `bias` buffer): every `view` target computed from the tensor's Shape (`x.size()[:-1] +
    (nf,)` as Shape -> Slice -> Concat, `view(B, T, n_head, C // n_head)` as Shape -> Gather ->
    Unsqueeze, a Div on sizes and Concat), the causal mask sliced from the buffer by the computed
    query and key lengths, the scores divided by sqrt of the value's last size (Cast of a Gather).
    The same weights as the static stack."""
    b = _Exporter("gpt2_blocks", seed)
    head_dim = hidden // heads
    causal = b.const(np.tril(np.ones((seq, seq)))[None, None], bool)  # the sliced `bias` buffer
    masked_value = b.const(np.finfo(np.float32).min)

    def size(t: str, index: int, scope: str) -> str:
        """t.size(index) as a 1-D int64 tensor: Shape -> Gather -> Unsqueeze."""
        d = b.op("Gather", [b.op("Shape", [t], scope), b.const(index, np.int64)], scope, axis=0)
        return b.op("Unsqueeze", [d, b.const([0], np.int64)], scope)

    def leading(t: str, drop: int, scope: str) -> str:
        """t.size()[:-drop] as Shape -> Slice."""
        return b.op("Slice", [b.op("Shape", [t], scope), b.const([0], np.int64), b.const([-drop], np.int64), b.const([0], np.int64)], scope)

    def conv1d(t: str, n_in: int, n_out: int, path: str, scope: str) -> str:
        """HF's Conv1D: addmm on the flattened rows, exported as Reshape -> Gemm -> Reshape."""
        if dynamic_axes:
            flat = b.op("Reshape", [t, b.op("Concat", [b.const([-1], np.int64), size(t, -1, scope)], scope, axis=0)], scope)
        else:
            flat = b.op("Reshape", [t, b.const([-1, n_in], np.int64)], scope)
        w, bias = b.param(f"{path}.weight", (n_in, n_out)), b.param(f"{path}.bias", (n_out,), scale=0.02)
        if not dynamic_axes:
            return b.op("Reshape", [b.op("Gemm", [flat, w, bias], scope), b.const([1, seq, n_out], np.int64)], scope)
        out_shape = b.op("Concat", [leading(t, 1, scope), b.const([n_out], np.int64)], scope, axis=0)
        return b.op("Reshape", [b.op("Gemm", [flat, w, bias], scope), out_shape], scope)

    def split_heads(t: str, perm: list[int], scope: str) -> str:
        if not dynamic_axes:
            return b.split_heads(t, seq, heads, head_dim, perm, scope)
        # view(B, T, n_head, C // n_head)
        c = b.op("Div", [size(t, 2, scope), b.const([heads], np.int64)], scope)
        target = b.op("Concat", [size(t, 0, scope), size(t, 1, scope), b.const([heads], np.int64), c], scope, axis=0)
        return b.op("Transpose", [b.op("Reshape", [t, target], scope)], scope, perm=perm)

    def merge_heads(ctx: str, scope: str) -> str:
        if not dynamic_axes:
            return b.merge_heads(ctx, seq, hidden, scope)
        t = b.op("Transpose", [ctx], scope, perm=[0, 2, 1, 3])
        return b.op("Reshape", [t, b.op("Concat", [leading(t, 2, scope), b.const([hidden], np.int64)], scope, axis=0)], scope)

    def mask_and_scale(scores: str, q: str, kt: str, v: str, scope: str) -> str:
        if not dynamic_axes:
            return b.op("Where", [causal, b.op("Mul", [scores, b.const(1.0 / np.sqrt(head_dim))], scope), masked_value], scope)
        root = b.op("Sqrt", [b.op("Cast", [b.op("Gather", [b.op("Shape", [v], scope), b.const(-1, np.int64)], scope, axis=0)], scope, to=F32)], scope)
        scores = b.op("Div", [scores, root], scope)
        q_len, k_len = size(q, 2, scope), size(kt, 3, scope)
        rows = b.op("Slice", [causal, b.op("Sub", [k_len, q_len], scope), k_len, b.const([2], np.int64)], scope)
        mask = b.op("Slice", [rows, b.const([0], np.int64), k_len, b.const([3], np.int64)], scope)
        return b.op("Where", [mask, scores, masked_value], scope)

    x = "inputs_embeds"
    for i in range(layers):
        layer, path = f"/h.{i}", f"h.{i}"
        h = b.layer_norm(x, hidden, f"{path}.ln_1", f"{layer}/ln_1", 1e-5)
        att = f"{layer}/attn"
        qkv = conv1d(h, hidden, 3 * hidden, f"{path}.attn.c_attn", f"{att}/c_attn")
        q, k, v = b.op("Split", [qkv, b.const([hidden] * 3, np.int64)], att, n_out=3, axis=2)
        q = split_heads(q, [0, 2, 1, 3], att)
        kt = split_heads(k, [0, 2, 3, 1], att)
        v = split_heads(v, [0, 2, 1, 3], att)
        scores = mask_and_scale(b.op("MatMul", [q, kt], att), q, kt, v, att)
        probs = b.op("Softmax", [scores], att, axis=-1)
        ctx = merge_heads(b.op("MatMul", [probs, v], att), att)
        x = b.op("Add", [conv1d(ctx, hidden, hidden, f"{path}.attn.c_proj", f"{att}/c_proj"), x], layer)
        h = b.layer_norm(x, hidden, f"{path}.ln_2", f"{layer}/ln_2", 1e-5)
        h = b.gelu_tanh(conv1d(h, hidden, 4 * hidden, f"{path}.mlp.c_fc", f"{layer}/mlp/c_fc"), f"{layer}/mlp/act")
        x = b.op("Add", [x, conv1d(h, 4 * hidden, hidden, f"{path}.mlp.c_proj", f"{layer}/mlp/c_proj")], layer)
    b.layer_norm(x, hidden, "ln_f", "/ln_f", 1e-5)
    b.nodes[-1].output[0] = "last_hidden_state"
    dims = ["batch", "sequence", hidden] if dynamic_axes else [1, seq, hidden]
    return b.model(
        [helper.make_tensor_value_info("inputs_embeds", F32, dims)],
        [helper.make_tensor_value_info("last_hidden_state", F32, dims)],
        f"GPT-2 block stack: {layers} layers, hidden {hidden}, {heads} heads, causal, "
        + (f"dynamic batch and sequence (at most {seq})" if dynamic_axes else f"sequence {seq}") + " (seeded random weights).",
    )


TRANSFORMERS: dict = {"vit_encoder": vit_encoder, "bert_encoder": bert_encoder, "gpt2_blocks": gpt2_blocks}
