"""Hostile models: a seeded generator of broken ONNX files, and a runner that sends them through
the workbench's load paths and checks that each ends in success or one clear error.

    .venv/bin/python scripts/hostile.py run --count 1000 --targets inspect,lower,gui [--seed 0]
    .venv/bin/python scripts/hostile.py make --count 20 --out /tmp/hostile   (just write the files)

For every case and target the outcome must be `ok` (loaded / lowered) or `error` (a
core.errors.WorkbenchError: one sentence, exit status 2 on the command line). Anything else is
a failure: `traceback` (another exception escaped), `crash` (the worker process died, e.g. a
segfault in a native library) or `hang` (no answer within the time limit, 30 s by default).
Cases run in long-lived worker processes (restarted after a crash or hang), so 1,000 cases take
minutes, not hours.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

__all__ = ["MUTATIONS", "make_case", "generate", "run_cases"]


def _bases() -> list[tuple[str, bytes]]:
    from core.model.samples import SAMPLES

    out = [(name, build().SerializeToString()) for name, build in SAMPLES.items()]
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    if light.exists():
        out.append(("squeezenet", light.read_bytes()))
    return out


# ---- mutations: each takes (model bytes, rng, folder) and returns bytes to write as the model ----

def m_truncate(data, rng, folder):
    return data[: rng.randrange(0, max(1, len(data)))]


def m_byte_flips(data, rng, folder):
    b = bytearray(data)
    for _ in range(rng.randint(1, 32)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def m_byte_flips_header(data, rng, folder):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(min(64, len(b)))] = rng.randrange(256)
    return bytes(b)


def m_garbage(data, rng, folder):
    return bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096)))


def _proto(data) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    return m


def m_huge_dims(data, rng, folder):
    m = _proto(data)
    vis = list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
    vi = rng.choice(vis)
    dims = vi.type.tensor_type.shape.dim
    if dims:
        d = rng.choice(dims)
        d.Clear()
        d.dim_value = rng.choice([2**31, 2**40, 2**62, 10**12])
    return m.SerializeToString()


def m_negative_dims(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer and rng.random() < 0.5:
        t = rng.choice(m.graph.initializer)
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice([-1, -7, -(2**40)])
    else:
        vi = rng.choice(list(m.graph.input))
        dims = vi.type.tensor_type.shape.dim
        if dims:
            d = rng.choice(dims)
            d.Clear()
            d.dim_value = rng.choice([-1, -3, -(2**33)])
    return m.SerializeToString()


def m_initializer_dims_mismatch(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        t.dims.append(rng.choice([3, 1000, 2**20]))
    return m.SerializeToString()


def m_missing_initializer(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer:
        del m.graph.initializer[rng.randrange(len(m.graph.initializer))]
    return m.SerializeToString()


def m_cycle(data, rng, folder):
    m = _proto(data)
    nodes = m.graph.node
    if len(nodes) >= 2:
        i = rng.randrange(len(nodes) - 1)
        j = rng.randrange(i + 1, len(nodes))
        if nodes[i].input and nodes[j].output:
            nodes[i].input[rng.randrange(len(nodes[i].input))] = nodes[j].output[0]
    return m.SerializeToString()


def m_self_loop(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    if n.input and n.output:
        n.input[0] = n.output[0]
    return m.SerializeToString()


def m_wrong_dtype(data, rng, folder):
    m = _proto(data)
    choice = rng.random()
    if choice < 0.4 and m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        t.data_type = rng.choice([0, 7, 9, 13, 999])
    elif choice < 0.7:
        vi = rng.choice(list(m.graph.input) + list(m.graph.output))
        vi.type.tensor_type.elem_type = rng.choice([0, 8, 9, 16, 999])
    else:
        n = rng.choice(m.graph.node)
        n.attribute.append(helper.make_attribute("to", rng.choice([0, 1, 999])))
    return m.SerializeToString()


def m_attribute_garbage(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    if n.attribute and rng.random() < 0.5:
        a = rng.choice(n.attribute)
        a.type = rng.choice([0, 1, 2, 3, 5, 7, 99])
    else:
        n.attribute.append(helper.make_attribute(rng.choice(["kernel_shape", "axis", "perm", "strides"]), rng.choice([[-1], -99, [2**40, 3], "x"])))
    return m.SerializeToString()


def m_unknown_op(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    n.op_type = rng.choice(["Frobnicate", "", "conv", "Conv\x00", "X" * 300])
    return m.SerializeToString()


def m_unknown_domain(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    n.domain = rng.choice(["com.evil", "ai.onnx.ml", "..", "com.microsoft"])
    return m.SerializeToString()


def m_opset(data, rng, folder):
    m = _proto(data)
    for o in m.opset_import:
        o.version = rng.choice([0, 1, 6, 999, -3, 2**40])
    if rng.random() < 0.3:
        m.ir_version = rng.choice([0, 1, 99, -1])
    return m.SerializeToString()


def m_duplicate_output(data, rng, folder):
    m = _proto(data)
    if len(m.graph.node) >= 2:
        a, b = rng.sample(range(len(m.graph.node)), 2)
        m.graph.node[a].output[0] = m.graph.node[b].output[0]
    return m.SerializeToString()


def m_drop_output_producer(data, rng, folder):
    m = _proto(data)
    out = m.graph.output[0].name
    keep = [n for n in m.graph.node if out not in n.output]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    return m.SerializeToString()


def m_empty_names(data, rng, folder):
    m = _proto(data)
    for n in m.graph.node:
        if rng.random() < 0.3 and n.input:
            n.input[rng.randrange(len(n.input))] = ""
    return m.SerializeToString()


def m_raw_data_size(data, rng, folder):
    m = _proto(data)
    if m.graph.initializer:
        t = rng.choice(m.graph.initializer)
        arr = numpy_helper.to_array(t)
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.raw_data = arr.tobytes()[: rng.randrange(0, max(1, arr.nbytes))]
    return m.SerializeToString()


def _to_external(m: onnx.ModelProto, location: str, folder: Path, write: bool):
    if not m.graph.initializer:
        return
    t = max(m.graph.initializer, key=lambda t: t.ByteSize())
    raw = numpy_helper.to_array(t).tobytes()
    if write:
        (folder / "weights.bin").write_bytes(raw)
    for f in ("float_data", "int64_data", "int32_data", "double_data", "raw_data"):
        t.ClearField(f)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(len(raw)))):
        e = t.external_data.add()
        e.key, e.value = k, v


def m_external_outside(data, rng, folder):
    m = _proto(data)
    _to_external(m, rng.choice(["../secret.bin", "../../etc/passwd", "/etc/passwd", "sub/../../x.bin", "~/.ssh/id_rsa"]), folder, False)
    return m.SerializeToString()


def m_external_missing(data, rng, folder):
    m = _proto(data)
    _to_external(m, "missing.bin", folder, False)
    return m.SerializeToString()


def m_external_bad_offset(data, rng, folder):
    m = _proto(data)
    _to_external(m, "weights.bin", folder, True)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "offset":
                e.value = rng.choice(["-5", "999999999", "abc"])
            if e.key == "length" and rng.random() < 0.5:
                e.value = rng.choice(["-1", "99999999999"])
    return m.SerializeToString()


def m_subgraph_garbage(data, rng, folder):
    m = _proto(data)
    n = rng.choice(m.graph.node)
    bad = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"])], "body", [], [helper.make_tensor_value_info("y", 1, None)])
    n.attribute.append(helper.make_attribute("then_branch", bad))
    return m.SerializeToString()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: a varint, or length-delimited bytes / message."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def m_deep_nesting(data, rng, folder):
    # If nodes nested in then_branch subgraphs, deeper than protobuf's parser allows (100) in most
    # cases; encoded by hand, since the Python protobuf runtime refuses to build such messages
    depth = rng.choice([20, 50, 200, 1000])
    leaf = _field(2, b"leaf")
    graph = leaf
    for i in range(depth):
        then = _field(1, b"then_branch") + _field(20, 5) + _field(6, graph)
        other = _field(1, b"else_branch") + _field(20, 5) + _field(6, leaf)
        node = _field(1, b"c") + _field(3, f"if{i}".encode()) + _field(4, b"If") + _field(5, then) + _field(5, other)
        graph = _field(1, node) + _field(2, f"g{i}".encode())
    bool_scalar = _field(1, b"c") + _field(2, _field(1, _field(1, 9) + _field(2, b"")))  # c: bool scalar
    graph += _field(11, bool_scalar)
    return _field(1, 8) + _field(7, graph) + _field(8, _field(1, b"") + _field(2, 17))


MUTATIONS = {f.__name__[2:]: f for f in [
    m_truncate, m_byte_flips, m_byte_flips_header, m_garbage, m_huge_dims, m_negative_dims,
    m_initializer_dims_mismatch, m_missing_initializer, m_cycle, m_self_loop, m_wrong_dtype,
    m_attribute_garbage, m_unknown_op, m_unknown_domain, m_opset, m_duplicate_output,
    m_drop_output_producer, m_empty_names, m_raw_data_size, m_external_outside, m_external_missing,
    m_external_bad_offset, m_subgraph_garbage, m_deep_nesting,
]}


def make_case(index: int, seed: int, root: Path, bases=None) -> tuple[Path, str]:
    """Write hostile case number `index` into its own folder under root; return (path, kind)."""
    rng = random.Random(seed * 1_000_003 + index)
    bases = bases or _bases()
    base_name, data = bases[index % len(bases)]
    kind = list(MUTATIONS)[rng.randrange(len(MUTATIONS))]
    folder = root / f"case{index:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        out = MUTATIONS[kind](data, rng, folder)
        # a second mutation now and then: combined damage
        if rng.random() < 0.2:
            kind2 = list(MUTATIONS)[rng.randrange(len(MUTATIONS))]
            try:
                out = MUTATIONS[kind2](out, rng, folder)
                kind = f"{kind}+{kind2}"
            except Exception:  # noqa: BLE001 - the first damage made the bytes unparseable
                pass
    except Exception:  # noqa: BLE001 - a mutation that cannot apply to this base: flip bytes instead
        out = m_byte_flips(data, rng, folder)
        kind = "byte_flips"
    path = folder / f"{base_name}.onnx"
    path.write_bytes(out)
    return path, kind


def generate(count: int, seed: int, root: Path) -> list[tuple[Path, str]]:
    bases = _bases()
    return [make_case(i, seed, root, bases) for i in range(count)]


# ---- worker: runs cases from stdin, one JSON line per case ------------------------------------

def _worker(target: str) -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from core.errors import WorkbenchError

    handlers = {}

    def do_inspect(path):
        from core import load_model
        from core.model.summary import format_summary, summarize

        format_summary(summarize(load_model(path)))

    def do_lower(path):
        # what `lower MODEL` and the Lowering panel run: core.compiler.lowering.lower(graph, "cpu"), every
        # stage down to LLVM IR; LoweringError / UnsupportedOpError are WorkbenchErrors
        from core import load_model
        from core.compiler.lowering import lower

        lower(load_model(path), "cpu")

    def do_gui(path):
        # the GUI's load path: MainWindow.open_model loads, builds the view and lays it out on a
        # worker thread; wait=True runs the event loop until the model is drawn or refused. A
        # refusal is a warning box (patched to record its text); an exception in any slot or
        # thread reaches sys.excepthook / threading.excepthook (recorded: that is a traceback).
        import threading

        from PySide6.QtWidgets import QApplication, QMessageBox

        from app.main_window import MainWindow

        app = QApplication.instance() or QApplication([])
        if "window" not in handlers:
            shown, escaped = handlers.setdefault("shown", []), handlers.setdefault("escaped", [])

            def record_box(*a, **k):
                shown.append(str(a[2]) if len(a) > 2 else str(k.get("text", "")))
                return QMessageBox.Ok

            QMessageBox.warning = staticmethod(record_box)
            QMessageBox.critical = staticmethod(record_box)
            QMessageBox.information = staticmethod(record_box)
            QMessageBox.question = staticmethod(lambda *a, **k: QMessageBox.Discard)
            sys.excepthook = lambda t, v, tb: escaped.append(f"{t.__name__}: {v}")
            threading.excepthook = lambda a: escaped.append(f"{a.exc_type.__name__}: {a.exc_value}")
            from PySide6.QtCore import QSettings

            settings = QSettings(str(Path(tempfile.mkdtemp(prefix="hostile-gui-")) / "settings.ini"), QSettings.IniFormat)
            handlers["window"] = MainWindow(settings=settings)
        w, shown, escaped = handlers["window"], handlers["shown"], handlers["escaped"]
        shown.clear()
        escaped.clear()
        before = w.document.graph
        ok = w.open_model(str(path), wait=True)
        for _ in range(3):  # let panels react to the new model (queued slots, timers at 0 ms)
            app.processEvents()
        if escaped:
            raise RuntimeError(f"exception escaped into the event loop: {escaped[0]}")
        if ok:
            if w.document.graph is None or w.document.graph is before or w.canvas.view is None:
                raise RuntimeError("open_model reported success but the window shows no new model")
            return
        if len(shown) != 1:
            raise RuntimeError(f"a refused open showed {len(shown)} messages: {shown[:3]}")
        if w.document.graph is not before:
            raise RuntimeError("a refused open replaced the open model")
        message = shown[0]
        if "internal error" in message or "Traceback" in message:
            raise RuntimeError(message)
        raise WorkbenchError(message)

    fn = {"inspect": do_inspect, "lower": do_lower, "gui": do_gui}[target]
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        t0 = time.perf_counter()
        try:
            fn(path)
            res = {"outcome": "ok"}
        except WorkbenchError as e:
            msg = str(e)
            res = {"outcome": "error", "message": msg}
            if "\n" in msg.strip() or "Traceback" in msg:
                res = {"outcome": "traceback", "message": msg[:500]}
        except RecursionError as e:
            res = {"outcome": "traceback", "message": f"RecursionError: {e}"[:500]}
        except Exception as e:  # noqa: BLE001 - this is what the run is looking for
            res = {"outcome": "traceback", "message": f"{type(e).__name__}: {e}"[:500]}
        res["seconds"] = round(time.perf_counter() - t0, 3)
        print(json.dumps(res), flush=True)


class _Worker:
    def __init__(self, target: str):
        self.target = target
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "worker", "--target", self.target],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1, cwd=str(ROOT),
        )

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def run(self, path: Path, timeout: float) -> dict:
        import selectors

        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        t0 = time.perf_counter()
        if not sel.select(timeout):
            self.stop()
            return {"outcome": "hang", "seconds": round(time.perf_counter() - t0, 1)}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.poll()
            self.stop()
            return {"outcome": "crash", "message": f"worker exited with status {code}"}
        return json.loads(line)


def run_cases(cases, targets: list[str], timeout: float = 30.0, log=None) -> dict:
    results: dict[str, Counter] = {t: Counter() for t in targets}
    failures = []
    workers = {t: _Worker(t) for t in targets}
    slowest = {t: 0.0 for t in targets}
    slowest_case = {t: "" for t in targets}
    busy = {t: 0.0 for t in targets}  # seconds spent per target, worker start-ups included
    try:
        for i, (path, kind) in enumerate(cases):
            for t in targets:
                t0 = time.perf_counter()
                r = workers[t].run(path, timeout)
                busy[t] += time.perf_counter() - t0
                results[t][r["outcome"]] += 1
                if r.get("seconds", 0.0) > slowest[t]:
                    slowest[t], slowest_case[t] = r.get("seconds", 0.0), f"{path} ({kind}, {r['outcome']})"
                if r["outcome"] not in ("ok", "error"):
                    failures.append({"case": str(path), "kind": kind, "target": t, **r})
            if log and (i + 1) % 50 == 0:
                log(f"{i + 1} cases: " + "; ".join(f"{t} {dict(c)}" for t, c in results.items()))
    finally:
        for w in workers.values():
            w.stop()
    return {"results": {t: dict(c) for t, c in results.items()}, "slowest_s": slowest, "slowest_case": slowest_case,
            "target_seconds": {t: round(v, 1) for t, v in busy.items()}, "failures": failures}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--count", type=int, default=1000)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--targets", default="inspect")
    r.add_argument("--timeout", type=float, default=30.0)
    r.add_argument("--keep", help="write the cases here and keep them")
    r.add_argument("--cli-sample", type=int, default=20, help="also run this many cases through `main.py inspect` (exit status 0 or 2, one line)")
    mk = sub.add_parser("make")
    mk.add_argument("--count", type=int, default=20)
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--out", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--target", required=True)
    args = p.parse_args(argv)
    if args.cmd == "worker":
        _worker(args.target)
        return 0
    if args.cmd == "make":
        for path, kind in generate(args.count, args.seed, Path(args.out)):
            print(f"{kind:<28} {path}")
        return 0
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hostile-"))
    t0 = time.time()
    cases = generate(args.count, args.seed, root)
    kinds = Counter(k.split("+")[0] for _, k in cases)
    summary = run_cases(cases, args.targets.split(","), args.timeout, log=lambda s: print(s, file=sys.stderr, flush=True))
    cli_bad = []
    for path, kind in cases[: args.cli_sample]:
        proc = subprocess.run([sys.executable, str(ROOT / "main.py"), "inspect", str(path)], capture_output=True, text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        if proc.returncode not in (0, 2) or (proc.returncode == 2 and len(lines) != 1) or "Traceback" in proc.stderr:
            cli_bad.append({"case": str(path), "kind": kind, "status": proc.returncode, "stderr": proc.stderr[-300:]})
    summary.update({"cases": len(cases), "seed": args.seed, "kinds": dict(kinds), "cli_checked": min(args.cli_sample, len(cases)),
                    "cli_failures": cli_bad, "seconds": round(time.time() - t0, 1)})
    print(json.dumps(summary, indent=1))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if summary["failures"] or cli_bad else 0


if __name__ == "__main__":
    sys.exit(main())
