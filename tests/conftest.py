"""Shared fixtures. Qt runs offscreen: the variable must be set before any QApplication exists."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.compiler.runtime import prepare  # noqa: E402

# every process of the run (each pytest-xdist worker imports this file) readies TVM's thread
# settings and loads the workbench's parallel launch before any test imports tvm
prepare()

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(p.name for p in LIGHT_DIR.glob("light_*.onnx"))
SAMPLES_DIR = ROOT / "resources" / "models"
SAMPLE_MODELS = sorted(p.name for p in SAMPLES_DIR.glob("*.onnx"))


@pytest.fixture(scope="session")
def light_dir() -> Path:
    return LIGHT_DIR


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES_DIR


def light(name: str) -> Path:
    """Path of a light model from the onnx wheel, e.g. light('resnet50')."""
    return LIGHT_DIR / f"light_{name}.onnx"


def sample(name: str) -> Path:
    """Path of a bundled sample model, e.g. sample('mlp')."""
    return SAMPLES_DIR / f"{name}.onnx"
