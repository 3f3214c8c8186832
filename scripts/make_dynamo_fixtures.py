"""Make the rule tests' real exporter fixtures: a tiny Llama decoder and a tiny BERT from
transformers' configs with seeded random weights, exported by torch.onnx's dynamo exporter.

    tests/rewrites/data/llama_dynamo.onnx   LlamaForCausalLM: 2 layers, hidden 64, 4 heads,
                                            2 KV heads (GQA), intermediate 128, vocab 128
    tests/rewrites/data/bert_dynamo.onnx    BertModel: 2 layers, hidden 64, 4 heads, vocab 128

It needs torch, which the project's venv does not hold. A throwaway venv (the local index has a
CPU-only torch wheel for CPython 3.11; the cp312 torch on the index is the CUDA build, which
needs the nvidia-* wheels to import):

    PY=$(PYENV_VERSION=3.11.7 pyenv prefix 3.11.7)/bin/python3.11
    $PY -m venv /tmp/torchvenv311
    /tmp/torchvenv311/bin/pip install --no-deps /opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
    /tmp/torchvenv311/bin/pip install sympy networkx jinja2 filelock fsspec typing-extensions \\
        mpmath markupsafe numpy onnx onnxscript onnxruntime transformers
    /tmp/torchvenv311/bin/python scripts/make_dynamo_fixtures.py

Made with torch 2.13.0+cpu, transformers 5.25.0, onnxscript 0.7.2. Batch and sequence are
dynamic; weights are stored inline; the nodes keep the exporter's name scopes (which layer)
but not its stack traces.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import onnx
import torch

__all__ = ["make_llama", "make_bert", "main"]

logger = logging.getLogger(__name__)

DATA = Path(__file__).resolve().parent.parent / "tests" / "rewrites" / "data"
SEQ = 8
_DROPPED_METADATA = {"pkg.torch.onnx.stack_trace", "pkg.torch.onnx.fx_node"}


def _export(module: torch.nn.Module, args: tuple, names: list[str], out: Path, opset: int) -> None:
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=512)
    shapes = {n: {0: batch, 1: seq} for n in names}
    program = torch.onnx.export(
        module, args, dynamo=True, input_names=names, dynamic_shapes=shapes,
        opset_version=opset, optimize=True, external_data=False,
    )
    model = program.model_proto
    for node in model.graph.node:  # stack traces name this machine's paths and double the file
        keep = [p for p in node.metadata_props if p.key not in _DROPPED_METADATA]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.checker.check_model(model, full_check=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, out)
    logger.info("%s: %d nodes, %.0f kB", out.name, len(model.graph.node), out.stat().st_size / 1024)


class _LogitsOnly(torch.nn.Module):
    """The model's first output alone (no KV cache outputs) so the graph is the forward pass."""

    def __init__(self, model: torch.nn.Module, field: str):
        super().__init__()
        self.model, self.field = model, field

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False) \
            if self.field == "logits" else self.model(input_ids=input_ids, attention_mask=attention_mask)
        return getattr(out, self.field)


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128, (2, SEQ), generator=g)
    return ids, torch.ones(2, SEQ, dtype=torch.int64)


def make_llama(out: Path, opset: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        attn_implementation="sdpa", tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    _export(_LogitsOnly(model, "logits"), _inputs(1), ["input_ids", "attention_mask"], out, opset)


def make_bert(out: Path, opset: int) -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, attn_implementation="sdpa",
    )
    model = BertModel(config, add_pooling_layer=False).eval()
    _export(_LogitsOnly(model, "last_hidden_state"), _inputs(2), ["input_ids", "attention_mask"], out, opset)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--opset", type=int, default=18, help="exporter opset (default 18, as torch exports today)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    np.random.seed(0)
    with torch.no_grad():
        make_llama(args.out / "llama_dynamo.onnx", args.opset)
        make_bert(args.out / "bert_dynamo.onnx", args.opset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
