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


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's units of work: a test file each, as `--dist loadfile` gives (module fixtures
    built once), except the GUI tests (tests/app/), which go to one worker as one unit, first
    (the largest unit is handed out first). Opening a model in the app ends with a full garbage
    collection over the whole process (app.main_window.open_model), so a GUI test is as slow as
    the heap its worker has piled up: run after hundreds of compile tests, they took 5-8 times as
    long as alone."""
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndGui(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/app" if path.startswith("tests/app/") else path

    return FilesAndGui(config, log)


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

