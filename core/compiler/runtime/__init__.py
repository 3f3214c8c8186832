"""Running compiled code: the process's thread settings and pool (setup, threads, native_pool),
the exported artifact and its run.py. `prepare()` readies this process (see setup)."""
from __future__ import annotations

from .setup import prepare

__all__ = ["prepare"]
