"""Memory over many opens: does opening model after model (or window after window) leak?

    .venv/bin/python scripts/open_close_memory.py [--opens 50] [--windows 50] [--json]

Part 1 opens `--opens` models in a row in one MainWindow, cycling through the onnx wheel's nine
light models and the bundled samples, and records the process's RSS after each open (after a
full GC pass). Part 2 creates, opens a sample in, closes and deletes `--windows` MainWindows.
Bounded memory means: RSS after the last open is close to RSS after the first cycle through the
models (every model already seen once), and window cycles add little per window. Both are
printed as growth numbers; the script fails (exit 1) when growth passes `--limit-mb`.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

__all__ = ["models", "rss_mb", "main"]


def models() -> list[Path]:
    import onnx

    light = sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("light_*.onnx"))
    samples = sorted((ROOT / "resources" / "models").glob("*.onnx"))
    return light + samples


def rss_mb() -> float:
    import psutil

    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def _settle(app, ms: int = 50) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.005)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--opens", type=int, default=50)
    p.add_argument("--windows", type=int, default=50)
    p.add_argument("--limit-mb", type=float, default=150.0, help="fail when either growth passes this")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication, QMessageBox
    from shiboken6 import Shiboken

    from app.main_window import MainWindow
    from app.workers import cancel_all

    os.environ.setdefault("MLCWB_AUTOSAVE_DIR", tempfile.mkdtemp(prefix="mlcwb-autosave-"))
    QMessageBox.warning = staticmethod(lambda *a, **k: print("warning:", a[2] if len(a) > 2 else "", file=sys.stderr))
    app = QApplication.instance() or QApplication([])
    settings_dir = Path(tempfile.mkdtemp(prefix="mlcwb-memory-"))
    paths = models()
    t0 = time.perf_counter()

    # ---- part 1: one window, many models -------------------------------------------------------
    w = MainWindow(settings=QSettings(str(settings_dir / "one.ini"), QSettings.IniFormat))
    w.resize(1200, 800)
    w.show()
    _settle(app)
    base = rss_mb()
    opens = []
    for i in range(args.opens):
        path = paths[i % len(paths)]
        ok = w.open_model(str(path), wait=True)
        _settle(app)
        opens.append({"i": i + 1, "model": path.name, "ok": ok, "rss_mb": round(rss_mb(), 1)})
        if not args.json:
            print(f"open {i + 1:>3} {path.name:<28} {opens[-1]['rss_mb']:8.1f} MB", flush=True)
    w.close()
    cancel_all()
    Shiboken.delete(w)
    _settle(app)
    after_part1 = rss_mb()
    cycle = len(paths)
    first_cycle = opens[min(cycle, len(opens)) - 1]["rss_mb"]
    # the same model at the end of each cycle: growth between cycles is what would leak
    same_model = [o["rss_mb"] for o in opens[cycle - 1::cycle]]

    # ---- part 2: many windows ------------------------------------------------------------------
    sample = ROOT / "resources" / "models" / "small_cnn.onnx"
    windows = []
    win_base = None
    for i in range(args.windows):
        win = MainWindow(settings=QSettings(str(settings_dir / "many.ini"), QSettings.IniFormat))
        win.show()
        win.open_model(str(sample), wait=True)
        _settle(app, 20)
        win.close()
        cancel_all()
        Shiboken.delete(win)
        _settle(app, 20)
        rss = round(rss_mb(), 1)
        if i == 4:
            win_base = rss  # after a few windows: caches (fonts, icons, TVM-free panels) are warm
        windows.append(rss)
        if not args.json and (i + 1) % 10 == 0:
            print(f"window {i + 1:>3} {rss:8.1f} MB", flush=True)

    result = {
        "models": [p.name for p in paths],
        "rss_start_mb": round(base, 1),
        "rss_after_first_cycle_mb": first_cycle,
        "rss_after_last_open_mb": opens[-1]["rss_mb"],
        "rss_peak_mb": max(o["rss_mb"] for o in opens),
        "growth_after_first_cycle_mb": round(opens[-1]["rss_mb"] - first_cycle, 1),
        "same_model_each_cycle_mb": same_model,
        "rss_after_closing_the_window_mb": round(after_part1, 1),
        "windows": args.windows,
        "rss_window_5_mb": win_base,
        "rss_window_last_mb": windows[-1] if windows else None,
        "growth_per_window_after_5_kb": round((windows[-1] - win_base) * 1024 / max(1, len(windows) - 5), 1) if windows and win_base else None,
        "failed_opens": [o["model"] for o in opens if not o["ok"]],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(result, indent=1))
    growth_windows = (windows[-1] - win_base) if windows and win_base else 0.0
    return 1 if result["growth_after_first_cycle_mb"] > args.limit_mb or growth_windows > args.limit_mb else 0


if __name__ == "__main__":
    sys.exit(main())
