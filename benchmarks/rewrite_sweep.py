"""Every rule on every light model and bundled sample: it either applies and verifies, or does not match.

    .venv/bin/python benchmarks/rewrite_sweep.py [--models a,b] [--no-random]

For each model (as shipped, and with seeded random initializer weights, see
core.verify.with_random_weights) and each rule: matches, matches applied, matches skipped (a
match that no longer applied at rewrite time), nodes before -> after, onnx.checker validity and
the onnxruntime comparison (max abs / rel error on seeded random inputs). Also checks that
fold-conv-bn leaves no Conv-following BatchNormalization behind. Prints a table and a verdict;
exit status 1 when any rule failed (invalid model, verification beyond tolerance, skipped match).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from core import load_model  # noqa: E402
from core.rewrite import find_matches, preview  # noqa: E402
from core.verify import with_random_weights  # noqa: E402
from rewrites import all_rules  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SAMPLES = ROOT / "resources" / "models"


def conv_bns(graph) -> int:
    return sum(1 for n in graph.nodes if n.op_type == "BatchNormalization" and (p := n.input_values[0].producer) is not None and p.op_type == "Conv")


def sweep(graph, label: str) -> tuple[list[tuple], int]:
    rows, failures = [], 0
    for rule in all_rules():
        t0 = time.perf_counter()
        ms = find_matches(graph, rule)
        if not ms:
            continue
        pv = preview(graph, rule, ms)
        status, err = "ok", ""
        try:
            onnx.checker.check_model(pv.graph.to_proto(), full_check=True)
        except Exception as e:  # noqa: BLE001 - reported in the table
            status, err = "INVALID", str(e).splitlines()[0][:60]
        c = None
        if status == "ok" and pv.applied:
            try:
                c = pv.verify()
                if not c.ok:
                    status, err = "DIFFERS", c.explain()[:60]
            except Exception as e:  # noqa: BLE001
                status, err = "NO RUN", str(e)[:60]
        if pv.skipped:
            status, err = "SKIPPED", pv.skipped[0][1][:60]
        if rule.id == "fold-conv-bn" and conv_bns(pv.graph):
            status, err = "LEFT BN", f"{conv_bns(pv.graph)} Conv-following BN left"
        failures += status != "ok"
        rows.append((label, rule.id, len(ms), len(pv.applied), len(graph), len(pv.graph), c.max_abs if c else None, c.max_rel if c else None, time.perf_counter() - t0, status, err))
    return rows, failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated light model names (default: all nine) ")
    ap.add_argument("--no-random", action="store_true", help="only the models as shipped")
    args = ap.parse_args(argv)
    names = [m for m in args.models.split(",") if m] or sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))
    models = [(f"light_{n}", LIGHT / f"light_{n}.onnx") for n in names]
    if not args.models:
        models += [(p.stem, p) for p in sorted(SAMPLES.glob("*.onnx"))]
    rows, failures = [], 0
    for label, path in models:
        g = load_model(path)
        r, f = sweep(g, label)
        rows += r
        failures += f
        if not args.no_random and label.startswith("light_"):
            r, f = sweep(with_random_weights(g, seed=0), label + " (random)")
            rows += r
            failures += f
    head = f"{'model':<30} {'rule':<22} {'match':>5} {'appl':>4} {'nodes':>11} {'max abs':>9} {'max rel':>9} {'s':>5}  status"
    print(head)
    print("-" * len(head))
    for label, rule, m, a, nb, na, mabs, mrel, s, status, err in rows:
        ab = "-" if mabs is None else f"{mabs:.2g}"
        rl = "-" if mrel is None else f"{mrel:.2g}"
        print(f"{label:<30} {rule:<22} {m:>5} {a:>4} {nb:>5}->{na:<5} {ab:>9} {rl:>9} {s:>5.1f}  {status} {err}")
    print(f"\n{len(rows)} rule/model pairs with matches; {failures} failed. Rules with no match in a model are not listed.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
