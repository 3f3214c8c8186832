"""onnxruntime in a process of its own, timed block by block on command (see core.compiler.measure.bench).

Why a process: both runtimes keep their worker threads spinning for a while after a run. Timed
in one process, alternately, each one's spinning threads take the cores the other is being timed
on, many times its time alone (docs/performance.md: onnxruntime in its own process). In its own
process onnxruntime keeps its default threading, and the parent leaves a pause between blocks for
the spinners to sleep.

Run as a script, it imports only numpy and onnxruntime (never the workbench; with
`hide_avx512`, also its sibling cpuid_mask.py, which imports nothing of the workbench):

    python ort_worker.py MODEL.onnx FEEDS.npz THREADS [nospin]

then reads commands on stdin, one per line, and answers each with one JSON line on stdout:

    run N          -> {"ms": [N latencies]}
    outputs PATH   -> {"saved": PATH}       (the outputs of one run, as PATH.npz: out0, out1, ...)
    quit
"""
from __future__ import annotations

import json
import logging
import os
import sys
import time

__all__ = ["serve", "OrtProcess"]

logger = logging.getLogger(__name__)


def _mask_report() -> dict | None:
    """core.compiler.measure.cpuid_mask.report() when this process runs under the mask, else None."""
    if not os.environ.get("MLCWB_CPUID_MASK"):
        return None
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_mlcwb_cpuid_mask", Path(__file__).with_name("cpuid_mask.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.report()


def serve(model_path: str, feeds_path: str, threads: int, spinning: bool = True, stdin=None, stdout=None) -> int:
    import numpy as np
    import onnxruntime as ort

    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    with np.load(feeds_path) as data:
        feeds = {name: data[name] for name in data.files}
    session.run(None, feeds)
    ready = {"ready": True, "pid": os.getpid()}
    mask = _mask_report()
    if mask is not None:
        if not mask["active"] or mask["avx512f"]:
            raise RuntimeError(
                "AVX-512 could not be hidden from onnxruntime: "
                + ("this host has no CPUID faulting" if not mask["active"] else "CPUID still reports AVX512F")
            )
        ready["cpuid_mask"] = mask
    print(json.dumps(ready), file=stdout, flush=True)
    for line in stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "run":
            times = []
            for _ in range(int(arg)):
                t0 = time.perf_counter()
                session.run(None, feeds)
                times.append((time.perf_counter() - t0) * 1000.0)
            print(json.dumps({"ms": times}), file=stdout, flush=True)
        elif command == "outputs":
            outputs = session.run(None, feeds)
            np.savez(arg, **{f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
            print(json.dumps({"saved": arg}), file=stdout, flush=True)
        elif command == "quit":
            break
    return 0


def _masked_environment() -> dict:
    from core.compiler.measure import cpuid_mask

    return cpuid_mask.environment()


class OrtProcess:
    """onnxruntime on `model_bytes` in a child process (this file run as a script); a context
    manager. `run(n)` times n runs there and returns their latencies in ms; `outputs()` returns
    one run's outputs. The child is ended on exit. `spinning=False` turns onnxruntime's spinning
    worker threads off (its better setting on a machine other processes keep busy).
    `hide_avx512=True` runs it under core.compiler.measure.cpuid_mask, so its MLAS takes the AVX2 kernels
    on an AVX-512 host; the child checks that CPUID says no AVX512F before it answers, and
    `cpuid_mask` holds what it saw (None without the mask)."""

    def __init__(self, model_bytes: bytes, feeds: dict, threads: int, spinning: bool = True, hide_avx512: bool = False):
        import subprocess
        import tempfile
        from pathlib import Path

        import numpy as np

        self._dir = tempfile.TemporaryDirectory(prefix="ort_worker_")
        folder = Path(self._dir.name)
        (folder / "model.onnx").write_bytes(model_bytes)
        np.savez(folder / "feeds.npz", **feeds)
        self._folder = folder
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(folder / "model.onnx"), str(folder / "feeds.npz"), str(int(threads)), *([] if spinning else ["nospin"])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_masked_environment() if hide_avx512 else None,
        )
        ready = self._answer()
        self.pid = int(ready["pid"])  # the process onnxruntime runs in
        self.cpuid_mask = ready.get("cpuid_mask")

    def _answer(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read().strip().splitlines()
            raise RuntimeError(f"onnxruntime worker ended: {err[-1] if err else 'no message'}")
        return json.loads(line)

    def _ask(self, command: str) -> dict:
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self._answer()

    def run(self, n: int) -> list[float]:
        return list(self._ask(f"run {int(n)}")["ms"])

    def outputs(self) -> list:
        import numpy as np

        path = self._folder / "outputs.npz"
        self._ask(f"outputs {path}")
        with np.load(path) as data:
            return [data[f"out{i}"] for i in range(len(data.files))]

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("quit\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - a stuck or dead child is killed
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            stream.close()
        self._dir.cleanup()

    def __enter__(self) -> "OrtProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2], int(sys.argv[3]), spinning="nospin" not in sys.argv[4:]))
