"""Dockable panels. Each is one module here exposing `create_panel(window) -> QDockWidget`
(optionally `AREA = "left" | "right" | "bottom"`, default right); list its name in PANELS and the
main window creates it at start-up. Panels read `window.document` / `window.canvas` and change the
graph only through `window.document.push(edit)`.
"""
from __future__ import annotations

__all__ = ["PANELS"]

PANELS: list[str] = [
    "inspector",
    "history",
    "problems",
    "rewrites",
    "compile",
    "accuracy",
    "lowering",
    "schedule",
]
