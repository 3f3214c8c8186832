"""Regenerate the bundled sample models in resources/models/ (deterministic: seeded weights).

    .venv/bin/python scripts/make_samples.py
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import onnx  # noqa: E402

from core.model.samples import SAMPLES  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resources", "models")


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    for name, build in SAMPLES.items():
        path = os.path.join(OUT, f"{name}.onnx")
        data = build().SerializeToString(deterministic=True)
        with open(path, "wb") as f:
            f.write(data)
        print(f"{path}: {len(data) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
