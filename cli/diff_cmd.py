"""`diff A.onnx B.onnx [--json]`: what differs between two models, above and in their nodes.

First the model-level differences (opsets, IR version, producer, metadata, graph inputs and outputs;
core.views.model_diff), then the nodes, matched by name and then by structure as the GUI's Compare
window does (core.views.diff): added, removed and changed nodes. "(identical)" only when both agree.
With --json one object `{"identical": bool, "model": [{"field", "key", "a", "b", "what"}],
"added": [...], "removed": [...], "changed": [{"node", "what"}], "matched": N}`.
"""
from __future__ import annotations

import json

HELP = "compare two ONNX models: opsets, IR version, producer, metadata, inputs/outputs; nodes added, removed and changed"


def add_arguments(p) -> None:
    p.add_argument("a", metavar="A.onnx", help="the first model (before)")
    p.add_argument("b", metavar="B.onnx", help="the second model (after)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from core import load_model
    from core.views.diff import diff_graphs

    d = diff_graphs(load_model(args.a), load_model(args.b))
    obj = d.to_json()
    if args.json:
        print(json.dumps(obj))
        return 0
    print(f"A {args.a}\nB {args.b}")
    for c in obj["model"]:
        print(f"model: {c['what']}")
    print(d.summary() + ("  (identical)" if d.identical else ""))
    for name in obj["removed"]:
        print(f"- {name}")
    for name in obj["added"]:
        print(f"+ {name}")
    for c in obj["changed"]:
        print(f"~ {c['node']}: {c['what']}")
    return 0
