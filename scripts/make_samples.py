"""Regenerate the bundled sample models in resources/models/ (deterministic: seeded weights).

    .venv/bin/python scripts/make_samples.py
    .venv/bin/python scripts/make_samples.py --bert OUT.onnx [--layers 12]   (scoped BERT, not bundled)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx  # noqa: E402

from core.model.samples import SAMPLES  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resources", "models")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bert", metavar="OUT", help="write the torch-named BERT-style encoder to OUT instead")
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    if args.bert:
        from core.model.samples import scoped_bert

        data = scoped_bert(layers=args.layers).SerializeToString(deterministic=True)
        with open(args.bert, "wb") as f:
            f.write(data)
        print(f"{args.bert}: {len(data) / 1024:.0f} KiB")
        return
    os.makedirs(OUT, exist_ok=True)
    for name, build in SAMPLES.items():
        path = os.path.join(OUT, f"{name}.onnx")
        data = build().SerializeToString(deterministic=True)
        with open(path, "wb") as f:
            f.write(data)
        print(f"{path}: {len(data) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
