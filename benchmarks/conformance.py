"""ONNX conformance: the onnx wheel's per-operator node tests (and its backend model cases) through the workbench.

Every case (a model, its inputs and the expected outputs, built by
`onnx.backend.test.case.node.collect_testcases()` from the installed wheel) is compiled with
`compile_model(model, "cpu")` (the check against a reference included) and run with
`Artifact.run` on the case's own inputs; the outputs are compared with the expected ones at
rtol 1e-3 / atol 1e-4 (exact for integers, bools and strings), shapes and dtypes too. Each case
lands in one class:

* pass: compiled, and every output matches;
* refusal: a `WorkbenchError` (one sentence for the user) at compile or run time;
* wrong: compiled and ran without a word, and an output differs (a silent wrong answer);
* crash: any other exception, a hang past `--timeout`, or a dead worker (a segfault).

With `--tvm` every case also goes through plain TVM (`from_onnx` -> `tvm.compile` -> Relax VM),
where every exception is an "error" (TVM has no notion of a clean refusal), and the two are
printed side by side. Cases run in worker subprocesses, one case at a time each, so a hang or a
segfault costs one row, not the run. `--suite models` runs the wheel's backend model cases
(`onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}`: 140 models with
`test_data_set_*`) instead of the node tests.

    nice -n 10 .venv/bin/python benchmarks/conformance.py [--ops Add,Gather] [--cases REGEX] [--limit N]
        [--tvm] [--suite node|models] [--jobs 1] [--timeout 120] [--json OUT.json] [--show refusal,wrong,crash]

The whole node suite takes ~10 min per side on a quiet 2-core machine; iterate on `--ops`.
"""
from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing as mp
import os
import re
import sys
import time
import traceback
from pathlib import Path

if not __package__:  # run as a file: the repository root, for the benchmarks package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.common  # noqa: E402,F401 - first: it prepares the process before anything imports tvm

__all__ = ["CLASSES", "load_cases", "run_case", "compare_expected"]

logger = logging.getLogger(__name__)

RTOL = 1e-3
ATOL = 1e-4
CLASSES = ("pass", "refusal", "wrong", "crash")
# A worker's memory grows with every case it compiles; left to run the whole suite, workers ran the
# host out of memory and were counted as crashes (docs/performance.md, ONNX node conformance). So
# a worker retires after this many cases and a fresh one takes the next.
WORKER_CASES = 200
MODEL_SUITES = ("pytorch-converted", "pytorch-operator", "simple")


# -- cases ------------------------------------------------------------------------------------


def _data_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data"


def load_cases(suite: str = "node") -> dict[str, tuple]:
    """name -> (model proto, inputs list, expected outputs list) of every case of `suite`."""
    import warnings

    if suite == "node":
        from onnx.backend.test.case.node import collect_testcases

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cases = collect_testcases()
        return {c.name: (c.model, _arrays(c.data_sets[0][0]), _arrays(c.data_sets[0][1])) for c in cases if c.data_sets}
    if suite == "models":
        return {name: (None, None, None) for name in _model_case_dirs()}
    raise SystemExit(f"unknown suite '{suite}' (node or models)")


def _arrays(values: list) -> list:
    """The suite's values as numpy arrays (a few cases store TensorProtos: FLOAT8, BFLOAT16)."""
    from onnx import TensorProto, numpy_helper

    return [numpy_helper.to_array(v) if isinstance(v, TensorProto) else v for v in values]


def _model_case_dirs() -> dict[str, Path]:
    out = {}
    for sub in MODEL_SUITES:
        for d in sorted((_data_dir() / sub).iterdir()):
            if (d / "model.onnx").is_file() and (d / "test_data_set_0").is_dir():
                out[f"{sub}/{d.name}"] = d
    return out


def _read_model_case(d: Path) -> tuple:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(d / "model.onnx"))
    data = d / "test_data_set_0"

    def read(prefix: str) -> list:
        values = []
        for p in sorted(data.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1])):
            t = onnx.TensorProto()
            t.ParseFromString(p.read_bytes())
            values.append(numpy_helper.to_array(t))
        return values

    return model, read("input"), read("output")


def case_op(name: str, model) -> str:
    """The op a case tests: its model's first node of the default domain (the node suite's
    models are one node, sometimes after a Constant), else the case name."""
    if model is not None:
        ops = [n.op_type for n in model.graph.node]
        main = [o for o in ops if o != "Constant"] or ops
        if main:
            return main[0]
    return name.split("/")[-1].removeprefix("test_")


# -- comparison ---------------------------------------------------------------------------------


def compare_expected(ours: list, expected: list, rtol: float = RTOL, atol: float = ATOL) -> str:
    """'' when `ours` matches `expected` (same count, shapes, dtypes; floats close, NaN where NaN;
    everything else exact); otherwise what differs, in a few words."""
    import numpy as np

    if len(ours) != len(expected):
        return f"{len(ours)} outputs, expected {len(expected)}"
    for i, (a, b) in enumerate(zip(ours, expected)):
        if isinstance(b, list) or b is None:
            return f"output {i} is a sequence/optional; the workbench returned a tensor"
        a = np.asarray(a)
        b = np.asarray(b)
        if a.shape != b.shape:
            return f"output {i} shape {list(a.shape)}, expected {list(b.shape)}"
        if a.dtype != b.dtype:
            return f"output {i} dtype {a.dtype}, expected {b.dtype}"
        if a.size == 0:
            continue
        if np.issubdtype(b.dtype, np.floating) or np.issubdtype(b.dtype, np.complexfloating):
            af = a.astype(np.float64)
            bf = b.astype(np.float64)
            nan_ok = np.isnan(af) == np.isnan(bf)
            close = np.isclose(af, bf, rtol=rtol, atol=atol, equal_nan=True)
            if not (nan_ok.all() and close.all()):
                with np.errstate(invalid="ignore"):
                    err = np.nanmax(np.abs(af - bf)) if not np.isnan(af - bf).all() else float("nan")
                return f"output {i} differs (max abs error {err:.3g})"
        elif b.dtype.kind in "OUS":
            if not np.array_equal(a.astype(str), b.astype(str)):
                return f"output {i} differs"
        elif b.dtype.kind == "V":  # bfloat16 / float8 / int4 as raw records: compare bytes
            if a.tobytes() != b.tobytes():
                return f"output {i} differs"
        elif not np.array_equal(a, b):
            return f"output {i} differs ({int(np.count_nonzero(a != b))} elements)"
    return ""


# -- running one case (inside a worker) -----------------------------------------------------------


def _feeds(names: list[str], inputs: list) -> dict:
    return dict(zip(names, inputs))


def _input_names(model) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def run_workbench(model, inputs: list, expected: list) -> tuple[str, str]:
    """(class, detail) of one case through compile_model + Artifact.run."""
    from core.compiler.compile import compile_model
    from core.errors import WorkbenchError
    from core.model.onnx_io import load_model_bytes

    try:
        graph = load_model_bytes(model.SerializeToString(), "case.onnx")
        art = compile_model(graph, "cpu")
        ours = art.run(_feeds([s.name for s in art.inputs], inputs))
    except WorkbenchError as e:
        return "refusal", str(e)
    except Exception as e:  # noqa: BLE001 - every other exception is a crash, by definition
        return "crash", f"{type(e).__name__}: {_first_line(e)}"
    diff = compare_expected(ours, expected)
    return ("wrong", diff) if diff else ("pass", "")


def run_plain_tvm(model, inputs: list, expected: list) -> tuple[str, str]:
    """(class, detail) of one case through plain TVM: from_onnx -> tvm.compile -> VM."""
    import warnings

    import numpy as np
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = from_onnx(model, keep_params_in_input=False)
            ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm"}))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        names = _input_names(model)
        args = [tvm.runtime.tensor(np.array(x), tvm.cpu()) if isinstance(x, np.ndarray) else x for x in inputs]
        out = vm["main"](*args[: len(names)])
        from core.compiler.runtime.artifact import flatten_outputs

        ours = flatten_outputs(out)
    except Exception as e:  # noqa: BLE001
        return "refusal", f"{type(e).__name__}: {_first_line(e)}"
    diff = compare_expected(ours, expected)
    return ("wrong", diff) if diff else ("pass", "")


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]


def run_case(name: str, mode: str, cases: dict) -> tuple[str, str]:
    model, inputs, expected = cases[name]
    if model is None:
        model, inputs, expected = _read_model_case(_model_case_dirs()[name])
    return (run_workbench if mode == "workbench" else run_plain_tvm)(model, inputs, expected)


def _worker(conn, suite: str, log_path: str | None) -> None:
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    # TVM and the schedule rules write pages of text; keep the table readable
    fd = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    logging.basicConfig(level=logging.ERROR)
    cases = load_cases(suite)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        name, mode = msg
        try:
            result = run_case(name, mode, cases)
        except BaseException as e:  # noqa: BLE001
            result = ("crash", f"{type(e).__name__}: {_first_line(e)} [{traceback.format_exc(limit=2)[-200:]}]")
        conn.send(result)


class _Worker:
    def __init__(self, suite: str, log_path: str | None):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, suite, log_path), daemon=True)
        self.proc.start()
        child.close()
        self.task = None
        self.started = 0.0
        self.done = 0  # cases answered

    def send(self, task) -> None:
        self.task = task
        self.started = time.monotonic()
        self.conn.send(task)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)

    def retire(self) -> None:
        """Let the worker finish (it exits on None), killed if it does not."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.kill()


def run_all(tasks: list[tuple[str, str]], suite: str, jobs: int, timeout: float, log_path: str | None, first_timeout: float = 120.0):
    """Run (case, mode) tasks on `jobs` worker processes; yields (task, (class, detail))."""
    pending = collections.deque(tasks)
    workers: list[_Worker] = []
    fresh: set[int] = set()

    def start() -> _Worker:
        w = _Worker(suite, log_path)
        fresh.add(id(w))
        return w

    workers = [start() for _ in range(min(jobs, len(tasks)))]
    for w in workers:
        if pending:
            w.send(pending.popleft())
    while any(w.task is not None for w in workers):
        for i, w in enumerate(workers):
            if w.task is None:
                continue
            # a fresh worker first loads TVM and the cases
            limit = timeout + (first_timeout if id(w) in fresh else 0)
            result = None
            try:
                if w.conn.poll(0.05):
                    result = w.conn.recv()
                elif time.monotonic() - w.started > limit:
                    result = ("crash", f"no result within {timeout:.0f} s (hang)")
                elif not w.proc.is_alive():
                    result = ("crash", f"worker died (exit code {w.proc.exitcode})")
            except (EOFError, OSError):
                w.proc.join(5)
                result = ("crash", f"worker died (exit code {w.proc.exitcode})")
            if result is None:
                continue
            task = w.task
            yield task, tuple(result)
            fresh.discard(id(w))
            w.task = None
            w.done += 1
            if not w.proc.is_alive() or result[1].startswith("no result"):
                w.kill()
                w = workers[i] = start()
            elif w.done >= WORKER_CASES and pending:
                w.retire()
                w = workers[i] = start()
            if pending:
                w.send(pending.popleft())
    for w in workers:
        w.retire()


# -- report ---------------------------------------------------------------------------------------


def _table(counts: dict[str, collections.Counter], modes: list[str]) -> str:
    labels = {"workbench": "workbench (compile_model + Artifact.run)", "tvm": "plain TVM (from_onnx -> tvm.compile -> VM)"}
    head = "| | pass | clean refusal | silent wrong answer | crash |"
    rows = [head, "|---|---|---|---|---|"]
    for m in modes:
        c = counts[m]
        refusal = f"{c['refusal']}" + (" (errors)" if m == "tvm" else "")
        rows.append(f"| {labels[m]} | {c['pass']} | {refusal} | {c['wrong']} | {c['crash']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=["node", "models"], default="node")
    ap.add_argument("--ops", default="", help="comma-separated op types (the op each case tests)")
    ap.add_argument("--cases", default="", help="regular expression on case names")
    ap.add_argument("--limit", type=int, default=0, help="at most N cases")
    ap.add_argument("--tvm", action="store_true", help="also run every case through plain TVM")
    ap.add_argument("--no-workbench", action="store_true", help="plain TVM only")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--json", metavar="OUT", help="write every row as JSON")
    ap.add_argument("--show", default="refusal,wrong,crash", help="classes whose cases are listed per op ('' for none)")
    ap.add_argument("--log", metavar="FILE", help="append the workers' stdout/stderr here (default: dropped)")
    args = ap.parse_args(argv)

    cases = load_cases(args.suite)
    names = sorted(cases)
    ops = {n: case_op(n, cases[n][0]) for n in names}
    if args.suite == "models":
        ops = {n: n.split("/")[0] for n in names}
    if args.ops:
        wanted = {o.strip() for o in args.ops.split(",") if o.strip()}
        names = [n for n in names if ops[n] in wanted]
    if args.cases:
        rx = re.compile(args.cases)
        names = [n for n in names if rx.search(n)]
    if args.limit:
        names = names[: args.limit]
    modes = ([] if args.no_workbench else ["workbench"]) + (["tvm"] if args.tvm or args.no_workbench else [])
    tasks = [(n, m) for n in names for m in modes]
    print(f"{len(names)} cases ({args.suite} suite), modes: {', '.join(modes)}, {args.jobs} worker(s), timeout {args.timeout:.0f} s", file=sys.stderr)

    t0 = time.perf_counter()
    results: dict[tuple[str, str], tuple[str, str]] = {}
    for k, (task, res) in enumerate(run_all(tasks, args.suite, args.jobs, args.timeout, args.log), 1):
        results[task] = res
        if k % 50 == 0 or k == len(tasks):
            print(f"  {k}/{len(tasks)} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    counts = {m: collections.Counter(results[(n, m)][0] for n in names) for m in modes}
    print()
    print(_table(counts, modes))
    if len(modes) == 2:
        lost = [n for n in names if results[(n, "tvm")][0] == "pass" and results[(n, "workbench")][0] != "pass"]
        won = [n for n in names if results[(n, "workbench")][0] == "pass" and results[(n, "tvm")][0] != "pass"]
        print(f"\nplain TVM passes and the workbench does not: {len(lost)}; the workbench passes and plain TVM does not: {len(won)}")
        for n in lost:
            print(f"  {n}: {results[(n, 'workbench')][0]}: {results[(n, 'workbench')][1][:200]}")
    show = [c for c in args.show.split(",") if c]
    if show and "workbench" in modes:
        by_op: dict[str, list[str]] = collections.defaultdict(list)
        for n in names:
            cls, detail = results[(n, "workbench")]
            if cls in show:
                by_op[ops[n]].append(f"{n}: {cls}: {detail[:240]}")
        if by_op:
            print(f"\nworkbench cases by op ({', '.join(show)}):")
            for op in sorted(by_op):
                print(f"{op} ({len(by_op[op])})")
                for line in by_op[op]:
                    print(f"  {line}")
    multi = [n for n in names if results.get((n, "workbench"), ("",))[0] == "refusal" and _sentences(results[(n, "workbench")][1]) > 1]
    if "workbench" in modes:
        print(f"\nrefusals whose message is more than one sentence: {len(multi)}")
        for n in multi[:20]:
            print(f"  {n}: {results[(n, 'workbench')][1][:300]}")
    print(f"\n{len(names)} cases in {time.perf_counter() - t0:.0f} s")
    if args.json:
        rows = [{"case": n, "op": ops[n], **{m: {"class": results[(n, m)][0], "detail": results[(n, m)][1]} for m in modes}} for n in names]
        Path(args.json).write_text(json.dumps({"counts": {m: dict(counts[m]) for m in modes}, "cases": rows}, indent=1) + "\n")
    return 0


def _sentences(text: str) -> int:
    """Sentences in a message: a full stop, ? or ! followed by a space and a capital letter or the end."""
    body = re.sub(r"'[^']*'|\"[^\"]*\"|\([^)]*\)", "", text.strip())
    return 1 + len(re.findall(r"[.?!]\s+(?=[A-Z])", body))


if __name__ == "__main__":
    sys.exit(main())
