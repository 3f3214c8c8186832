"""Imported first by the CLI tests' forkserver (tests.helpers._PRELOAD), which then imports TVM:
readies the runtime before that, as `python main.py` does before a command that runs TVM."""
from __future__ import annotations

from core.compiler.runtime import prepare

__all__ = ["STATUS"]

STATUS = prepare()
