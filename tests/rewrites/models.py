"""Models for rule tests, built with onnx.helper and seeded random weights, in the forms the
exporters write (torch.onnx's dynamo exporter for the Llama-style decoder): no torch needed.

    g = llama_decoder(opset=23)          # 2 layers: RMSNorm, rotary q/k, attention, SwiGLU MLP
    g = model([...nodes...], inputs, outputs, inits, opset=18)
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from core import Graph
from core.model.onnx_io import load_model_bytes

__all__ = ["model", "llama_decoder", "rng", "F"]

F = TensorProto.FLOAT


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def model(nodes, inputs, outputs, inits=None, opset: int = 18, domains=None) -> Graph:
    """A shape-inferred, checked Graph. `inputs`/`outputs`: (name, elem_type, shape) or
    ValueInfoProtos; `inits`: name -> numpy array; `domains`: extra opset imports."""

    def vi(x):
        return x if isinstance(x, onnx.ValueInfoProto) else helper.make_tensor_value_info(*x)

    graph = helper.make_graph(
        nodes, "test", [vi(i) for i in inputs], [vi(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()],
    )
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    m = helper.make_model(graph, opset_imports=imports, ir_version=10)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    onnx.checker.check_model(m, full_check=True)
    return load_model_bytes(m.SerializeToString(), "test.onnx")


class _Builder:
    """Nodes and seeded weights of one model, named like an exporter names them."""

    def __init__(self, seed: int):
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.rng = rng(seed)
        self.n = 0

    def op(self, op_type: str, *inputs: str, name: str | None = None, **attrs) -> str:
        self.n += 1
        out = f"{(name or op_type).replace('.', '_')}_{self.n}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name or f"{op_type}_{self.n}", **attrs))
        return out

    def const(self, name: str, value) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def weight(self, name: str, shape, scale: float = 0.2) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def rms_norm(self, x: str, prefix: str, hidden: int) -> str:
        """RMSNorm as the dynamo exporter writes it: Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul/Mul."""
        sq = self.op("Pow", x, "two", name=f"{prefix}.pow")
        ms = self.op("ReduceMean", sq, "axes_last", name=f"{prefix}.mean", keepdims=1, noop_with_empty_axes=0)
        eps = self.op("Add", ms, "eps", name=f"{prefix}.add_eps")
        rt = self.op("Sqrt", eps, name=f"{prefix}.sqrt")
        inv = self.op("Reciprocal", rt, name=f"{prefix}.rsqrt")
        normed = self.op("Mul", x, inv, name=f"{prefix}.mul")
        w = self.const(f"{prefix}.weight", (1.0 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32))
        return self.op("Mul", normed, w, name=f"{prefix}.scale")

    def rotary(self, x: str, cos4: str, sin4: str, prefix: str, head: int) -> str:
        """x * cos + rotate_half(x) * sin; rotate_half = Concat(-x[..., h/2:], x[..., :h/2])."""
        half = head // 2
        s1 = self.op("Slice", x, "zero", self.const(f"half_{head}", np.array([half], np.int64)), "axis3", "one", name=f"{prefix}.x1")
        s2 = self.op("Slice", x, f"half_{head}", "int_max", "axis3", "one", name=f"{prefix}.x2")
        neg = self.op("Neg", s2, name=f"{prefix}.neg")
        rot = self.op("Concat", neg, s1, name=f"{prefix}.rotate_half", axis=-1)
        a = self.op("Mul", x, cos4, name=f"{prefix}.mul_cos")
        b = self.op("Mul", rot, sin4, name=f"{prefix}.mul_sin")
        return self.op("Add", a, b, name=f"{prefix}.add")


def llama_decoder(opset: int = 18, layers: int = 2, hidden: int = 16, heads: int = 2, inter: int = 32, seq: int = 4, seed: int = 0) -> Graph:
    """A tiny Llama-style decoder: per layer RMSNorm, q/k/v projections, rotary embedding of q and k
    (cos/sin of Concat(freqs, freqs), shared by both), causal softmax attention, output projection,
    residual, RMSNorm, SwiGLU MLP silu(x W1) * (x W3) W2, residual; a final RMSNorm. Inputs:
    hidden states [1, seq, hidden] and float position ids [1, seq]."""
    head = hidden // heads
    b = _Builder(seed)
    b.const("two", np.array(2.0, np.float32))
    b.const("eps", np.array(1e-6, np.float32))
    b.const("axes_last", np.array([-1], np.int64))
    b.const("zero", np.array([0], np.int64))
    b.const("one", np.array([1], np.int64))
    b.const("axis3", np.array([3], np.int64))
    b.const("int_max", np.array([np.iinfo(np.int64).max], np.int64))
    b.const("qkv_shape", np.array([1, seq, heads, head], np.int64))
    b.const("out_shape", np.array([1, seq, hidden], np.int64))
    b.const("scale", np.array(np.sqrt(head), np.float32))
    b.const("mask", np.triu(np.full((seq, seq), -1e9, np.float32), 1))
    inv_freq = (1.0 / (10000 ** (np.arange(0, head, 2, dtype=np.float32) / head))).astype(np.float32)
    b.const("inv_freq", inv_freq.reshape(1, 1, -1))
    # rotary cos/sin, as the exporter computes them from the position ids, shared by every layer
    pos = b.op("Unsqueeze", "position_ids", "axes_last", name="rotary.pos")
    freqs = b.op("Mul", pos, "inv_freq", name="rotary.freqs")
    emb = b.op("Concat", freqs, freqs, name="rotary.emb", axis=-1)
    cos = b.op("Cos", emb, name="rotary.cos")
    sin = b.op("Sin", emb, name="rotary.sin")

    x = "hidden_states"
    for i in range(layers):
        p = f"layers.{i}"
        h = b.rms_norm(x, f"{p}.input_layernorm", hidden)
        q, k, v = (b.op("MatMul", h, b.weight(f"{p}.self_attn.{n}_proj.weight", (hidden, hidden)), name=f"{p}.self_attn.{n}_proj") for n in "qkv")
        q, k, v = (b.op("Transpose", b.op("Reshape", t, "qkv_shape", name=f"{p}.self_attn.{n}_view"), name=f"{p}.self_attn.{n}_t", perm=[0, 2, 1, 3])
                   for t, n in ((q, "q"), (k, "k"), (v, "v")))
        cos4 = b.op("Unsqueeze", cos, "one", name=f"{p}.rotary.cos4")
        sin4 = b.op("Unsqueeze", sin, "one", name=f"{p}.rotary.sin4")
        q = b.rotary(q, cos4, sin4, f"{p}.self_attn.q_rot", head)
        k = b.rotary(k, cos4, sin4, f"{p}.self_attn.k_rot", head)
        kt = b.op("Transpose", k, name=f"{p}.self_attn.k_T", perm=[0, 1, 3, 2])
        s = b.op("Div", b.op("MatMul", q, kt, name=f"{p}.self_attn.qk"), "scale", name=f"{p}.self_attn.scale")
        a = b.op("Softmax", b.op("Add", s, "mask", name=f"{p}.self_attn.mask"), name=f"{p}.self_attn.softmax", axis=-1)
        o = b.op("MatMul", a, v, name=f"{p}.self_attn.av")
        o = b.op("Reshape", b.op("Transpose", o, name=f"{p}.self_attn.o_t", perm=[0, 2, 1, 3]), "out_shape", name=f"{p}.self_attn.o_view")
        o = b.op("MatMul", o, b.weight(f"{p}.self_attn.o_proj.weight", (hidden, hidden)), name=f"{p}.self_attn.o_proj")
        x = b.op("Add", x, o, name=f"{p}.residual1")
        h = b.rms_norm(x, f"{p}.post_attention_layernorm", hidden)
        gate = b.op("MatMul", h, b.weight(f"{p}.mlp.gate_proj.weight", (hidden, inter)), name=f"{p}.mlp.gate_proj")
        act = b.op("Mul", gate, b.op("Sigmoid", gate, name=f"{p}.mlp.sigmoid"), name=f"{p}.mlp.silu")
        up = b.op("MatMul", h, b.weight(f"{p}.mlp.up_proj.weight", (hidden, inter)), name=f"{p}.mlp.up_proj")
        m = b.op("Mul", act, up, name=f"{p}.mlp.gated")
        m = b.op("MatMul", m, b.weight(f"{p}.mlp.down_proj.weight", (inter, hidden)), name=f"{p}.mlp.down_proj")
        x = b.op("Add", x, m, name=f"{p}.residual2")
    y = b.rms_norm(x, "norm", hidden)
    b.nodes.append(helper.make_node("Identity", [y], ["last_hidden_state"], name="output"))
    return model(
        b.nodes, [("hidden_states", F, [1, seq, hidden]), ("position_ids", F, [1, seq])],
        [("last_hidden_state", F, [1, seq, hidden])], b.inits, opset=opset,
    )
