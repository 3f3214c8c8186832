"""What the workbench runs on: its own version and those of the libraries it is built from.

Read at run time (Help ▸ About, bug reports): the installed wheel's metadata for the workbench,
each library's own `__version__` where it can be imported (the number its code reports), else
its package metadata, else "not installed".
"""
from __future__ import annotations

import importlib
import importlib.metadata
import logging
import platform
from pathlib import Path

__all__ = ["workbench_version", "library_versions", "LIBRARIES"]

logger = logging.getLogger(__name__)

# (shown name, module to import, distribution name for the metadata fallback)
LIBRARIES = (
    ("TVM", "tvm", "apache-tvm"),
    ("onnx", "onnx", "onnx"),
    ("onnxruntime", "onnxruntime", "onnxruntime"),
    ("NumPy", "numpy", "numpy"),
)


def workbench_version() -> str:
    """The version `main.py --version` names: the installed distribution's, else pyproject.toml's."""
    try:
        return importlib.metadata.version("mlc-workbench")
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        import tomllib

        return str(tomllib.loads(pyproject.read_text())["project"]["version"])
    except (OSError, KeyError, ValueError):
        return "unknown"


def _version_of(module: str, dist: str) -> str:
    try:
        return str(importlib.import_module(module).__version__)
    except Exception:  # noqa: BLE001 - a broken library is reported as such, not raised from About
        logger.debug("importing %s for its version failed", module, exc_info=True)
    try:
        return importlib.metadata.version(dist) + " (not importable)"
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def library_versions() -> dict[str, str]:
    """Shown name -> version, Python first; importing TVM takes about a second the first time. Qt's
    and PySide6's versions are the GUI's to add (core imports no Qt)."""
    versions = {"Python": platform.python_version()}
    for name, module, dist in LIBRARIES:
        versions[name] = _version_of(module, dist)
    return versions
