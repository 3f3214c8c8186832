"""`rewrite MODEL --rules ID[,ID...] | --for ort -o OUT.onnx [--verify] [--json]`: apply rewrite rules.

`--for ort` states the goal, an optimized ONNX for onnxruntime: it allows the rules of the
"onnxruntime" family (their results are com.microsoft contrib ops, which the compiler cannot
take), and without --rules applies that goal's recipe (`rewrites.GOALS`).

Each rule is applied to all its non-overlapping matches, in the order given, through the same
engine the GUI uses. With --verify, each rule's result is run against the model before it with
onnxruntime on seeded random inputs; a rule whose outputs differ beyond tolerance is refused,
nothing is written, and the exit status is 2.
"""
from __future__ import annotations

import json
import sys

HELP = "apply rewrite rules to a model and save the result (optionally verified with onnxruntime)"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--rules", help="comma-separated rule ids (see `rules`); required unless --for is given")
    p.add_argument("--for", dest="goal", choices=["ort"], help="rewrite for onnxruntime: allows its contrib-op rules; alone, applies its recipe")
    p.add_argument("-o", "--output", required=True, help="where to write the rewritten model")
    p.add_argument("--verify", action="store_true", help="check each rule's result numerically with onnxruntime")
    p.add_argument("--seed", type=int, default=0, help="seed of the random verification inputs (default 0)")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE", help="size of a symbolic dim for verification (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from cli.compile_cmd import parse_dims
    from core import load_model, save_model
    from core.model.history import History
    from core.rewrite import run_rules
    from core.verify import VerificationError
    from rewrites import UnknownRuleError, check_goal, get_rules, recipe

    if args.rules is None and args.goal is None:
        raise UnknownRuleError("name the rules with --rules ID[,ID...] or a goal with --for ort.")
    rules = get_rules(args.rules) if args.rules is not None else recipe(args.goal)  # unknown ids fail before the model is read
    check_goal(rules, args.goal)
    graph = load_model(args.model)
    dims = parse_dims(args.dim, graph)
    history = History(graph)
    try:
        reports = run_rules(graph, rules, history=history, verify=args.verify, seed=args.seed, dims=dims)
    except VerificationError as e:
        if args.json:
            print(json.dumps({"model": args.model, "output": None, "ok": False, "error": str(e)}))
        raise
    from core.model.onnx_io import validate_graph

    validate_graph(graph, args.output)
    saved = save_model(graph, args.output)
    if args.json:
        print(json.dumps({"model": args.model, "output": args.output, "ok": True, "rules": [r.to_dict() for r in reports],
                          "external_data": str(saved.data_file) if saved.data_file else None}))
        return 0
    w = max(len(r.rule) for r in reports)
    print(f"{'rule':<{w}}  matches  applied  nodes before -> after  verification")
    for r in reports:
        if r.verification is None:
            ver = "not run" if not args.verify else "nothing to check"
        else:
            ver = f"max abs {r.verification.max_abs:.3g}, max rel {r.verification.max_rel:.3g}"
        print(f"{r.rule:<{w}}  {r.matches:>7}  {r.applied:>7}  {r.nodes_before:>12} -> {r.nodes_after:<5}  {ver}")
        for s in r.skipped:
            print(f"{'':<{w}}  skipped: {s}", file=sys.stderr)
    print(f"wrote {args.output}" + (f" (weights in {saved.data_file.name} beside it)" if saved.data_file else ""))
    return 0
