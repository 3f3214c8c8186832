"""Qt (PySide6) views and controllers. Owns no model logic: everything goes through core/."""
from __future__ import annotations

__all__ = ["run_gui"]


def run_gui(model_path: str | None = None) -> int:
    """Start the application, open `model_path` if given, and run the event loop."""
    from app.main_window import run

    return run(model_path)
