"""Canvas speed: open -> first fitted paint, UI-thread stalls, 1:1 repaint, and the layout method
choice (dot vs the layered fallback) by graph size.

    .venv/bin/python benchmarks/canvas.py [--quick]

Prints tables (not pass/fail). Targets from the canvas issue: DenseNet-121 open -> first fitted
paint <= 1.0 s; a generated 10,000-node graph <= 3 s with the UI responsive throughout (longest
UI-thread stall reported); repaint of a 1:1 view of a 5,000-node graph <= 16 ms.
Scopes (issue 16): a 10,000-node scoped graph (torch-named BERT layers) opens collapsed <= 1 s and
with every group expanded <= 3 s; expanding one group <= 100 ms; comparing two 2,000-node graphs
(before/after fuse-gelu) <= 2 s to both sides drawn.
Runs offscreen (QT_QPA_PLATFORM=offscreen unless a display is set).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.common  # noqa: E402,F401 - first: it prepares the process before anything imports tvm

if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def make_big_model(n_nodes: int, path: Path) -> Path:
    """A valid ONNX model of about `n_nodes` nodes shaped like a deep CNN: residual blocks
    (Conv-Relu-Conv-Add-Relu) with a two-branch module every fourth block."""
    rng = np.random.default_rng(0)
    ch = 4
    nodes, inits = [], []
    w = helper.make_tensor("w", TensorProto.FLOAT, [ch, ch, 1, 1], rng.standard_normal(ch * ch).astype(np.float32))
    inits.append(w)
    x = "x"
    k = 0
    while len(nodes) < n_nodes - 6:
        p = f"b{k}_"
        if k % 4 == 3:  # two branches joined by Add
            nodes += [
                helper.make_node("Conv", [x, "w"], [p + "c1"], name=p + "conv1"),
                helper.make_node("Relu", [p + "c1"], [p + "r1"], name=p + "relu1"),
                helper.make_node("MaxPool", [x], [p + "m"], name=p + "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
                helper.make_node("Conv", [p + "m", "w"], [p + "c2"], name=p + "conv2"),
                helper.make_node("Add", [p + "r1", p + "c2"], [p + "out"], name=p + "add"),
            ]
        else:
            nodes += [
                helper.make_node("Conv", [x, "w"], [p + "c1"], name=p + "conv1"),
                helper.make_node("Relu", [p + "c1"], [p + "r1"], name=p + "relu1"),
                helper.make_node("Conv", [p + "r1", "w"], [p + "c2"], name=p + "conv2"),
                helper.make_node("Add", [p + "c2", x], [p + "a"], name=p + "add"),
                helper.make_node("Relu", [p + "a"], [p + "out"], name=p + "relu2"),
            ]
        x = p + "out"
        k += 1
    graph = helper.make_graph(
        nodes,
        f"generated_{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, ch, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, ch, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def _app():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication([sys.argv[0]])


def _window(size=(1600, 1000), panels: bool = True):
    from PySide6.QtCore import QSettings

    from app.main_window import MainWindow

    settings = QSettings(os.path.join(tempfile.mkdtemp(), "bench.ini"), QSettings.IniFormat)
    w = MainWindow(settings=settings, load_panels=panels)
    w.resize(*size)
    w.show()
    _app().processEvents()
    return w


def open_to_fitted_paint(path: Path, panels: bool = True) -> dict:
    """Seconds from open_model() to the end of the first paint of the fitted graph, and the
    longest gap between UI-thread timer ticks meanwhile (a stall the user would feel)."""
    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer

    app = _app()
    w = _window(panels=panels)
    canvas = w.canvas
    ticks: list[float] = []
    clock = QElapsedTimer()
    ticker = QTimer()
    ticker.setInterval(1)
    ticker.timeout.connect(lambda: ticks.append(clock.nsecsElapsed() / 1e9))
    done: dict = {}
    loop = QEventLoop()

    def shown(_view):
        canvas.fit()
        canvas.viewport().repaint()  # synchronous: the fitted paint itself
        done["t"] = clock.nsecsElapsed() / 1e9
        done["ui_cpu"] = time.thread_time() - ui_cpu0
        loop.quit()

    canvas.viewShown.connect(shown)
    # a big model's first picture (app.open_preview) before its own view
    canvas.previewShown.connect(lambda _v: done.setdefault("picture", clock.nsecsElapsed() / 1e9))
    cpu0 = time.process_time()
    ui_cpu0 = time.thread_time()  # the UI thread's own work (waiting for the worker costs none)
    clock.start()
    ticks.append(0.0)
    ticker.start()
    w.open_model(str(path))
    QTimer.singleShot(120_000, loop.quit)
    loop.exec()
    ticker.stop()
    cpu = time.process_time() - cpu0
    ticks.append(done.get("t", clock.nsecsElapsed() / 1e9))
    stall = max((b - a for a, b in zip(ticks, ticks[1:])), default=0.0)
    result = {
        "seconds": done.get("t", float("nan")),
        "picture": done.get("picture", done.get("t", float("nan"))),
        "cpu": cpu,
        "stall": stall,
        "nodes": len(canvas.view.nodes) if canvas.view is not None else 0,
        "phases": dict(w.last_open_phases),
        "worker_cpu": dict(getattr(w, "last_open_cpu", {})),
        "ui_cpu": done.get("ui_cpu", float("nan")),
        "method": canvas.layout_result.method if canvas.layout_result else "?",
        "items_s": canvas.last_timings.get("items", float("nan")),
    }
    w.close()
    w.deleteLater()
    app.processEvents()
    return result


def repaint_at_100(path: Path, repeats: int = 30) -> dict:
    """Median/max milliseconds to repaint the viewport at 100 % in the middle of the graph."""
    app = _app()
    w = _window()
    assert w.open_model(str(path), wait=True)
    c = w.canvas
    c.zoom_100()
    mid = sorted(c.node_items.values(), key=lambda it: it.y())[len(c.node_items) // 2]
    c.centerOn(mid)
    app.processEvents()
    def timed(action, n):
        wall, cpu = [], []
        for _ in range(n):
            t, tc = time.perf_counter(), time.thread_time()
            action()
            wall.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - tc) * 1000)
        return wall, cpu

    times, times_cpu = timed(c.viewport().repaint, repeats)
    # panning: scroll by 40 px and repaint (the common interactive case)
    sb = c.verticalScrollBar()

    def pan_step():
        sb.setValue(sb.value() + 40)
        c.viewport().repaint()

    pan, pan_cpu = timed(pan_step, repeats)
    c.fit()
    fitted, fitted_cpu = timed(c.viewport().repaint, 5)
    visible = len(c.scene().items(c.mapToScene(c.viewport().rect()).boundingRect()))
    w.close()
    w.deleteLater()
    app.processEvents()
    med = statistics.median
    return {
        "median_ms": med(times), "max_ms": max(times), "cpu_ms": med(times_cpu),
        "pan_ms": med(pan), "pan_max_ms": max(pan), "pan_cpu_ms": med(pan_cpu),
        "fitted_ms": med(fitted), "fitted_cpu_ms": med(fitted_cpu),
        "visible_items": visible, "nodes": len(c.node_items),
    }


class groups_open:
    """Open graphs with every scope group expanded ('all') or as the app decides (None)."""

    def __init__(self, mode: str | None):
        self.mode = mode

    def __enter__(self):
        from core.views.scopes import ScopeTree

        self.saved = ScopeTree.default_expanded
        if self.mode == "all":
            ScopeTree.default_expanded = lambda tree, n, boxes=0: {s.path for s in tree.groups}
        return self

    def __exit__(self, *exc):
        from core.views.scopes import ScopeTree

        ScopeTree.default_expanded = self.saved


class first_picture:
    """Open a big model as the app does (its view made from the protobuf and drawn while its onnx_ir
    model is built: app.open_preview), or with its view made from the loaded Graph."""

    def __init__(self, on: bool):
        self.on = on

    def __enter__(self):
        from app.open_preview import OpenPreview

        self.saved = OpenPreview.make
        if not self.on:
            OpenPreview.make = lambda *_a, **_k: None
        return self

    def __exit__(self, *exc):
        from app.open_preview import OpenPreview

        OpenPreview.make = self.saved


def make_scoped_model(n_nodes: int, path: Path) -> Path:
    """A BERT-style encoder with torch.onnx names, about `n_nodes` nodes (33 per layer), narrow."""
    from core.model.samples import scoped_bert

    layers = max(1, round((n_nodes - 8) / 33))
    onnx.save(scoped_bert(layers=layers, dim=16, heads=2, ffn=32, vocab=64), str(path))
    return path


def _settle(limit_s: float = 60.0) -> None:
    """Process events until no background job runs (or `limit_s` passed)."""
    from PySide6.QtCore import QEventLoop, QTimer

    from app import workers

    end = time.perf_counter() + limit_s
    while workers._RUNNING and time.perf_counter() < end:
        loop = QEventLoop()
        QTimer.singleShot(10, loop.quit)
        loop.exec()


def expand_one_group(path: Path, repeats: int = 5) -> dict:
    """Milliseconds to expand one box of the collapsed scoped model (view, relayout, new
    scene, items) and to collapse it again (the earlier layout comes back from the cache)."""
    app = _app()
    w = _window()
    assert w.open_model(str(path), wait=True)
    _settle()  # the model's background checks (Problems, rewrite matches) finish first, as they would before a user's double-click
    from core.views.scopes import is_scope_id

    shown = [i for i in w.canvas.layout_result.boxes if is_scope_id(i)]  # the first screen's boxes
    expand, collapse, expand_cpu = [], [], []
    for k in range(repeats):
        sid = shown[(k * 7) % len(shown)]
        p = sid[len("scope:"):]
        box = w.canvas.layout_result.boxes[sid]
        w.canvas.centerOn(box.x, box.y)
        t, c = time.perf_counter(), time.thread_time()
        w.scopes.expand(p)
        w.canvas.viewport().repaint()
        expand.append((time.perf_counter() - t) * 1000)
        expand_cpu.append((time.thread_time() - c) * 1000)
        t = time.perf_counter()
        w.scopes.collapse(p)
        w.canvas.viewport().repaint()
        collapse.append((time.perf_counter() - t) * 1000)
    drawn = len(w.canvas.view.nodes)
    w.close()
    w.deleteLater()
    app.processEvents()
    return {"expand_ms": statistics.median(expand), "expand_max_ms": max(expand), "expand_cpu_ms": statistics.median(expand_cpu),
            "collapse_ms": statistics.median(collapse), "drawn": drawn}


def compare_two(path: Path) -> dict:
    """Seconds from asking for a comparison of the model with its fuse-gelu rewrite to both
    sides laid out and painted (diff + two layouts + two scenes)."""
    from PySide6.QtCore import QEventLoop, QTimer

    from app.compare import CompareWindow
    from core import load_model
    from core.rewrite.engine import apply_rewrite
    from rewrites import get_rule

    app = _app()
    a = load_model(path)
    b = a.clone()
    apply_rewrite(b, get_rule("fuse-gelu"))
    cw = CompareWindow()
    cw.resize(1600, 1000)
    cw.show()
    app.processEvents()
    t, cpu0 = time.perf_counter(), time.process_time()
    d = cw.compare_graphs(a, b, "before", "after")
    while cw.left.canvas.busy or cw.right.canvas.busy or cw.left.canvas.layout_result is None or cw.right.canvas.layout_result is None:
        loop = QEventLoop()
        QTimer.singleShot(2, loop.quit)
        loop.exec()
    cw.left.canvas.viewport().repaint()
    cw.right.canvas.viewport().repaint()
    total, cpu = time.perf_counter() - t, time.process_time() - cpu0
    out = {"seconds": total, "cpu": cpu, "diff_s": cw.timings["diff"], "views_s": cw.timings["views"], "nodes": (len(a), len(b)), "matched": len(d.matched), "drawn": (len(cw.left.canvas.view.nodes), len(cw.right.canvas.view.nodes))}
    cw.close()
    app.processEvents()
    return out


def layout_methods(sizes=(300, 1000, 2000, 3000, 5000)) -> list[tuple]:
    """dot vs layered seconds by node count on the generated CNN-like graph (box sizes fixed)."""
    from core import load_model
    from core.views.layout import layout
    from core.views.viewgraph import from_graph

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            g = load_model(make_big_model(n, Path(d) / f"g{n}.onnx"))
            view = from_graph(g)
            box = {v.id: (130.0, 46.0) for v in view.nodes}
            t = time.perf_counter()
            layout(view, box, "layered")
            t_layered = time.perf_counter() - t
            t_dot = float("nan")
            if n <= 5000:
                t = time.perf_counter()
                lo = layout(view, box, "dot")
                t_dot = time.perf_counter() - t if lo.method == "dot" else float("nan")
            rows.append((len(view.nodes), t_dot, t_layered))
    return rows


def _open_in_fresh_process(path: Path, mode: str | None, preview: bool) -> dict:
    """open_to_fitted_paint as the first open of a new process, as `main.py MODEL` opens it: in one
    process the next open would also collect the models of the cases before it (what replacing a
    big model costs a user; figures in docs/performance.md)."""
    import json
    import subprocess

    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r}); import json; from pathlib import Path; "
            "import benchmarks.canvas as c; c._app(); "
            f"m = c.groups_open({mode!r}); p = c.first_picture({preview!r}); m.__enter__(); p.__enter__(); "
            f"r = c.open_to_fitted_paint(Path({str(path)!r}), True); print('RESULT' + json.dumps(r))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=os.environ.copy())
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    if line is None:
        raise RuntimeError(f"the open in a fresh process failed: {out.stderr.strip()[-500:]}")
    return json.loads(line[len("RESULT"):])


def scoped_table(d: Path) -> None:
    """The issue-16 rows: a 10,000-node scoped graph collapsed / expanded, one expand, compare."""
    scoped10k = make_scoped_model(10_000, d / "scoped_10k.onnx")
    scoped2k = make_scoped_model(2_000, d / "scoped_2k.onnx")
    print()
    print("Scoped graphs (torch-named BERT layers, offscreen 1600x1000, all panels)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; 'cpu s' is the process's CPU time, 'UI cpu' the UI thread's own,"
          " worker steps are wall (CPU) seconds of load, view, layout, overview, open hooks")
    print("'picture' is the first paint of the model's view, made from the protobuf and drawn while its onnx_ir model is built"
          " (app.open_preview), 'seconds' the paint once the model is built and can be worked on; each open is the first of a fresh process")
    print(f"{'case':<40}{'drawn nodes':>12}{'layout':>16}{'picture':>9}{'seconds':>9}{'cpu s':>7}{'UI cpu':>7}{'target':>7}{'UI stall':>10}   worker steps (s)")
    for label, mode, target, preview in (("10k scoped, opens collapsed", None, 1.0, True), ("  the same, its view made from the Graph", None, 1.0, False),
                                         ("10k scoped, every group expanded", "all", 3.0, True)):
        r = _open_in_fresh_process(scoped10k, mode, preview)
        steps = " ".join(f"{r['phases'].get(k, 0):.2f} ({r['worker_cpu'].get(k, float('nan')):.2f})" for k in ("load", "view", "layout", "overview", "hooks"))
        print(f"{label:<40}{r['nodes']:>12}{r['method']:>16}{r['picture']:>9.2f}{r['seconds']:>9.2f}{r['cpu']:>7.2f}{r['ui_cpu']:>7.2f}{target:>7.1f}"
              f"{r['stall'] * 1000:>7.0f} ms   {steps}")
    e = expand_one_group(scoped10k)
    print(f"{'expand one group (median of 5; max)':<40}{e['drawn']:>12}{'incremental':>16}{e['expand_ms'] / 1000:>9.3f}{'':>7}{e['expand_cpu_ms'] / 1000:>7.3f}{0.1:>7.1f}   max {e['expand_max_ms']:.0f} ms; collapse again {e['collapse_ms']:.0f} ms")
    c = compare_two(scoped2k)
    print(f"{'compare 2k vs fuse-gelu 2k (diff+draw)':<40}{str(c['drawn']):>12}{'':>16}{c['seconds']:>9.2f}{c['cpu']:>7.2f}{'':>7}{2.0:>7.1f}   diff {c['diff_s']:.2f} s, copies+views {c['views_s']:.2f} s; {c['nodes'][0]} vs {c['nodes'][1]} nodes, {c['matched']} matched")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the dot-vs-layered size sweep")
    parser.add_argument("--scoped", action="store_true", help="only the scoped-graph table (issue 16)")
    args = parser.parse_args(argv)
    _app()
    if args.scoped:
        with tempfile.TemporaryDirectory() as d:
            scoped_table(Path(d))
        from app.workers import cancel_all

        cancel_all()
        return 0
    with tempfile.TemporaryDirectory() as d:
        big10k = make_big_model(10_000, Path(d) / "generated_10k.onnx")
        big5k = make_big_model(5_000, Path(d) / "generated_5k.onnx")
        print("Open -> first fitted paint (offscreen, 1600x1000 window); worker steps: load, view, layout, overview")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall times include waiting for the CPU; 'cpu s' is this process's CPU time")
        print(f"{'model':<22}{'panels':>7}{'drawn nodes':>12}{'layout':>9}{'seconds':>9}{'cpu s':>7}{'target':>7}{'UI stall':>10}   worker steps (s)")
        for name, path, target in (("DenseNet-121", LIGHT / "light_densenet121.onnx", 1.0), ("ResNet-50", LIGHT / "light_resnet50.onnx", None), ("generated 10k nodes", big10k, 3.0)):
            for panels in (False, True):
                with groups_open("all"):  # every node drawn, as the target was set (no structural groups)
                    r = open_to_fitted_paint(path, panels)
                t = f"{target:.1f}" if target else "-"
                steps = " ".join(f"{r['phases'].get(k, 0):.2f}" for k in ("load", "view", "layout", "overview"))
                print(f"{name:<22}{'all' if panels else 'none':>7}{r['nodes']:>12}{r['method']:>9}{r['seconds']:>9.2f}{r['cpu']:>7.2f}{t:>7}{r['stall'] * 1000:>7.0f} ms   {steps}")
        scoped_table(Path(d))
        r = repaint_at_100(big5k)
        print()
        print("Repaint, generated 5,000-node graph")
        print(f"{'view':<30}{'median ms':>10}{'max ms':>10}{'UI cpu ms':>10}{'target':>8}")
        print(f"{'1:1 (100 %), middle':<30}{r['median_ms']:>10.1f}{r['max_ms']:>10.1f}{r['cpu_ms']:>10.1f}{'16':>8}")
        print(f"{'1:1, pan 40 px + repaint':<30}{r['pan_ms']:>10.1f}{r['pan_max_ms']:>10.1f}{r['pan_cpu_ms']:>10.1f}{'16':>8}")
        print(f"{'fitted (whole graph)':<30}{r['fitted_ms']:>10.1f}{'':>10}{r['fitted_cpu_ms']:>10.1f}{'-':>8}")
    if not args.quick:
        print()
        print("Layout method by size (generated graph, fixed box sizes): seconds")
        print(f"{'drawn nodes':>12}{'dot':>10}{'layered':>10}")
        for n, t_dot, t_lay in layout_methods():
            print(f"{n:>12}{t_dot:>10.2f}{t_lay:>10.2f}")
    from app.workers import cancel_all

    cancel_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
