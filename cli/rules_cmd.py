"""`rules [--json]`: the rewrite rules the workbench knows (id, family, description)."""
from __future__ import annotations

import json

HELP = "list the rewrite rules (id, family, description)"


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from rewrites import all_rules

    rules = [r.to_dict() for r in all_rules()]
    if args.json:
        print(json.dumps({"rules": rules}))
        return 0
    width = max(len(r["id"]) for r in rules)
    fam = max(len(r["family"]) for r in rules)
    for r in rules:
        print(f"{r['id']:<{width}}  {r['family']:<{fam}}  {r['description']}")
    return 0
