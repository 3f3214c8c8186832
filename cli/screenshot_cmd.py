"""`screenshot MODEL -o OUT.png [--size WxH]`: the main window with the model fitted, as a PNG.

Renders offscreen (QT_QPA_PLATFORM=offscreen when there is no display), so it works on CI and
over ssh; used for docs and visual checks of the canvas.
"""
from __future__ import annotations

import os
import re
import sys

HELP = "render the main window with MODEL fitted into a PNG (offscreen when there is no display)"


def add_arguments(p) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--size", default="1600x1000", help="window size WxH in pixels (default 1600x1000)")
    p.add_argument("--zoom", choices=["fit", "100"], default="fit", help="fit the whole graph (default) or show it at 100%% from the top")


def _parse_size(text: str) -> tuple[int, int]:
    from core.errors import WorkbenchError

    m = re.fullmatch(r"\s*(\d+)\s*[xX×]\s*(\d+)\s*", text)
    if not m or not (200 <= int(m.group(1)) <= 10000 and 200 <= int(m.group(2)) <= 10000):
        raise WorkbenchError(f"--size '{text}' is not a window size like 1600x1000 (200 to 10000 pixels a side).")
    return int(m.group(1)), int(m.group(2))


def _wait(app, done, timeout_s: float) -> None:
    """Process events until `done()` or `timeout_s` passed."""
    import time

    end = time.monotonic() + timeout_s
    while not done() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def run(args) -> int:
    from core.errors import WorkbenchError

    width, height = _parse_size(args.size)
    out = os.path.abspath(args.output)
    if not os.path.isdir(os.path.dirname(out)):
        raise WorkbenchError(f"{args.output}: the folder {os.path.dirname(out)} does not exist.")
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # validate first: a bad file is exit 2 with its sentence, before any window exists
    from core import load_model

    load_model(args.model)

    from PySide6.QtCore import QSettings, QTemporaryDir
    from PySide6.QtWidgets import QApplication

    from app.main_window import MainWindow

    app = QApplication.instance() or QApplication([sys.argv[0]])
    scratch = QTemporaryDir()
    # a throwaway settings file: a screenshot must not depend on (or change) the user's window state
    settings = QSettings(os.path.join(scratch.path(), "screenshot.ini"), QSettings.IniFormat)
    window = MainWindow(settings=settings)
    window.show()
    window.resize(width, height)
    app.processEvents()
    if not window.open_model(args.model, wait=True):
        raise WorkbenchError(f"{args.model} could not be opened.")
    app.processEvents()
    if window.minimumSizeHint().width() > width or window.minimumSizeHint().height() > height:
        # the docked panels' minimum sizes do not fit: show the canvas alone at the asked size
        from PySide6.QtWidgets import QDockWidget

        for dock in window.findChildren(QDockWidget):
            dock.hide()
        app.processEvents()
        window.resize(width - 1, height)  # a resize to the size Qt believes it has is ignored
        app.processEvents()
    window.resize(width, height)
    app.processEvents()
    if args.zoom == "fit":
        window.canvas.fit()
    # the panels' background work (match counts, the model check) is part of the picture: a shot
    # with "…" where the counts go shows a state no one waits in
    rewrites = window.panels.get("rewrites")
    if rewrites is not None and hasattr(rewrites.widget(), "wait_idle"):
        rewrites.widget().wait_idle(60)
    problems = window.panels.get("problems")
    _wait(app, lambda: problems is None or getattr(problems.widget(), "_job", None) is None, 30)
    app.processEvents()
    image = window.grab()
    if not image.save(out, "PNG"):
        raise WorkbenchError(f"{args.output} cannot be written.")
    window.close()
    from app.workers import cancel_all

    cancel_all()  # panels may still be counting matches in the background: stop them before exit
    print(out)
    return 0
