"""`inspect MODEL [--json]`: what is in a model, without importing TVM or Qt."""
from __future__ import annotations

import json

HELP = "show node count, op histogram, inputs/outputs, parameters, opset and producer of a model"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from core import load_model
    from core.model.summary import format_summary, summarize

    s = summarize(load_model(args.model))
    print(json.dumps(s) if args.json else format_summary(s))
    return 0
