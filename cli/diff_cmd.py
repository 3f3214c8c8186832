"""`diff A.onnx B.onnx [--json]`: which nodes two models share, and what differs.

Nodes are matched by name, then by structure (op type and matched inputs), as the GUI's Compare
view does (core.views.diff). Prints added, removed and changed nodes; with --json one object
`{"added": [...], "removed": [...], "changed": [{"node", "what"}], "matched": N}`.
"""
from __future__ import annotations

import json

HELP = "compare two ONNX models: nodes added, removed and changed (attributes, shapes, dtypes)"


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
    print(d.summary() + ("  (identical)" if d.identical else ""))
    for name in obj["removed"]:
        print(f"- {name}")
    for name in obj["added"]:
        print(f"+ {name}")
    for c in obj["changed"]:
        print(f"~ {c['node']}: {c['what']}")
    return 0
