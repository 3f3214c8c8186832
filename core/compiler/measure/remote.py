"""Measure a compiled artifact on a device running TVM's RPC server (`bench --rpc`).

`bench_remote(ART, "HOST:PORT:KEY")` asks the TVM RPC tracker at HOST:PORT for a device registered
under KEY (`HOST:PORT` alone: an RPC server without tracker or key), uploads `model.so` (shape
buckets are functions of that one library), builds the Relax VM on the device's CPU with seeded
inputs of the manifest's shapes, and times the run with TVM's time_evaluator *on the device* (no
network round trip inside a timed run). The library is never loaded here: an aarch64 `model.so`
is measured as one built for this host is.

Per-kernel time: the VM's instrument hook (`bench` on the host) takes a Python callback, which RPC
cannot pass to a device. Each kernel of the run is timed alone on the device instead, from a copy of
`model.so` whose embedded VM executable is hidden (`__tvm_ffi__library_bin` renamed), which the
device loads as a plain kernel library; argument shapes and calls per run come from the final module
(`recipe/module.json`, or the compile's in memory); arguments are synthetic (floats in [-1, 1),
integers 0). Every wait is bounded: connections, the tracker's answer, the session itself.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...errors import WorkbenchError
from ..check.reference import random_feeds
from ..runtime.manifest import LatencyStats, Manifest, MemoryUse, TensorSpec
from ..target import TargetKind
from ..tvm_compat import LIBRARY_BIN_SYMBOL
from .bench import KernelTime, latency_stats

__all__ = ["RemoteBenchResult", "RemoteAddress", "parse_tracker_address", "parse_device_address", "bench_remote"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # a tracker or device that does not answer a connection in this time is unreachable
DEVICE_WAIT_S = 30.0  # how long the tracker may take to hand out a device registered but busy
SESSION_TIMEOUT_S = 600  # the server ends a session older than this (a device stuck in a run)
_HIDDEN_BIN = (LIBRARY_BIN_SYMBOL.encode() + b"\x00", LIBRARY_BIN_SYMBOL[:-1].encode() + b"N\x00")  # same length: the ELF layout stays


@dataclass(frozen=True)
class RemoteAddress:
    """Where the device is: a tracker and a key (key not None), or an RPC server itself."""
    host: str
    port: int
    key: str | None = None


def parse_tracker_address(text: str, option: str = "--rpc") -> tuple[str, int, str]:
    """'HOST:PORT:KEY' (a TVM RPC tracker and the key its devices registered under) as
    (host, port, key); one sentence naming `option` and what is wrong otherwise (`compile
    --tune-rpc` parses its address here too: core.compiler.tuning.runners.parse_rpc_address)."""
    parts = str(text).strip().rsplit(":", 2)
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise WorkbenchError(f"{option} wants HOST:PORT:KEY (a TVM RPC tracker and a device key), not '{text}'.")
    host, port, key = (p.strip() for p in parts)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise WorkbenchError(f"{option}: the tracker port must be a number from 1 to 65535, not '{port}'.")
    return host, int(port), key


def parse_device_address(text: str) -> RemoteAddress:
    """'HOST:PORT:KEY' (a tracker and a device key, as `compile --tune-rpc` takes) or 'HOST:PORT'
    (an RPC server started without a tracker or key); one sentence naming what is wrong otherwise."""
    text = str(text).strip()
    if text.count(":") == 1:
        host, port = (p.strip() for p in text.split(":"))
        if host and port.isdigit() and 0 < int(port) < 65536:
            return RemoteAddress(host, int(port))
        raise WorkbenchError(f"--rpc wants HOST:PORT:KEY (a TVM RPC tracker and a device key) or HOST:PORT (an RPC server), not '{text}'.")
    return RemoteAddress(*parse_tracker_address(text))


@dataclass
class RemoteBenchResult:
    """What `bench --rpc` prints (see `to_json`); `outputs`: one remote run's outputs on the seeded
    inputs (numpy, the model's output order), not in the JSON."""
    target: str
    dims: dict[str, int]
    latency_ms: LatencyStats
    device: dict
    kernels: list[KernelTime] = field(default_factory=list)
    kernels_note: str | None = None  # why there are no per-kernel times, when there are none
    path: str | None = None  # with shape buckets: which code ran
    memory: dict | None = None  # the compile's estimate from the manifest (the device's resident set is not read)
    outputs: list = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        """bench --json's fields where they mean the same, plus "device" (and "kernels_note", "path" when set)."""
        d = {"target": self.target, "dims": dict(self.dims), "latency_ms": self.latency_ms.to_json(), "memory": self.memory,
             "kernels": [k.to_json() for k in self.kernels], "threads": None, "device": dict(self.device)}
        d.update({k: v for k, v in (("kernels_note", self.kernels_note), ("path", self.path)) if v})
        return d


def _bounded(fn, seconds: float, sentence: str, failed: str):
    """fn() in a helper thread, waited for `seconds` at most (TVM's C++ connect has no timeout of its
    own); `sentence` when it does not return in time, `failed` and the error's last line when it raises."""
    box: dict = {}

    def call():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e
    t = threading.Thread(target=call, name="rpc-connect", daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise WorkbenchError(sentence)
    if "error" in box:
        raise WorkbenchError(f"{failed} ({_last_line(box.pop('error'))}).")
    return box["value"]


def _greet_tracker(host: str, port: int) -> socket.socket | None:
    """A socket to the TVM RPC tracker at host:port, greeted; None when host:port answers as an RPC
    server instead (it drops a connection greeted as a tracker's); one sentence when nothing answers."""
    from tvm.rpc import base
    try:
        sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except OSError as e:
        raise WorkbenchError(f"nothing answers at {host}:{port} ({e.strerror or e}); start a TVM RPC tracker or server there, or check the address.") from None
    try:
        sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
        magic = sock.recv(4)
    except OSError:
        magic = b""
    if len(magic) == 4 and struct.unpack("<i", magic)[0] == base.RPC_TRACKER_MAGIC:
        return sock
    sock.close()
    if len(magic) == 0:
        return None
    raise WorkbenchError(f"{host}:{port} answers but is neither a TVM RPC tracker nor an RPC server.")


def _ask_tracker(sock: socket.socket, addr: RemoteAddress, wait_s: float) -> tuple[str, int, str]:
    """(device host, port, match key) the tracker on `sock` hands out for addr.key."""
    from tvm.rpc import base
    where = f"{addr.host}:{addr.port}"
    try:
        base.sendjson(sock, [base.TrackerCode.SUMMARY])
        summary = base.recvjson(sock)[1]
        keys = sorted({str(s.get("key", "")).split(":", 1)[-1] for s in summary.get("server_info", [])})
        if addr.key not in keys:
            raise WorkbenchError(f"no device is registered under key '{addr.key}' with the tracker at {where} (keys registered: {', '.join(keys) or 'none'}).")
        sock.settimeout(wait_s)
        base.sendjson(sock, [base.TrackerCode.REQUEST, addr.key, "", 1])
        try:
            value = base.recvjson(sock)
        except (TimeoutError, socket.timeout):
            raise WorkbenchError(f"every device under key '{addr.key}' at {where} stayed busy for {wait_s:.0f} s; try again when one is free.") from None
        if value[0] != base.TrackerCode.SUCCESS:
            raise WorkbenchError(f"the tracker at {where} refused the request for key '{addr.key}' ({value}).")
        host, port, matchkey = value[1]
        return str(host), int(port), str(matchkey)
    except (OSError, ValueError, IndexError, KeyError, TypeError) as e:
        raise WorkbenchError(f"the RPC tracker at {where} broke off the exchange ({e}).") from None
    finally:
        sock.close()


def _connect(addr: RemoteAddress, wait_s: float, session_timeout_s: int):
    """An RPC session on the device addr names, and that device in words."""
    from tvm import rpc
    tracker = _greet_tracker(addr.host, addr.port)
    if tracker is not None and addr.key is None:
        tracker.close()
        raise WorkbenchError(f"{addr.host}:{addr.port} is a TVM RPC tracker; name the device key too ({addr.host}:{addr.port}:KEY).")
    if tracker is None:  # an RPC server itself: its own key ("" when started without one)
        host, port, key = addr.host, addr.port, addr.key or ""
        what = f"the RPC server at {host}:{port}" + (f" (key '{key}')" if key else "")
    else:
        host, port, key = _ask_tracker(tracker, addr, wait_s)
        what = f"the device under key '{addr.key}' at {host}:{port} (from the tracker at {addr.host}:{addr.port})"
    limit = CONNECT_TIMEOUT_S * 2
    return _bounded(lambda: rpc.connect(host, port, key, session_timeout=session_timeout_s), limit,
                    f"{what} did not open a session within {limit:.0f} s.", f"{what} refused the session"), what


def _last_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[-1].strip()


def _device_info(sess, addr: RemoteAddress) -> dict:
    """The address, and the device's triple and CPU where its TVM can say (a runtime-only server cannot)."""
    info: dict = {"address": f"{addr.host}:{addr.port}", "key": addr.key}
    for field_name, fn_name in (("arch", "tvm.codegen.llvm.GetProcessTriple"), ("name", "tvm.codegen.llvm.GetHostCPUName")):
        with contextlib.suppress(Exception):  # not every device's TVM has LLVM
            info[field_name] = str(sess.get_function(fn_name)())
    return info


@dataclass
class _Source:
    """What the measurement needs of an artifact, without loading its library here."""
    manifest: Manifest
    library: Path
    final: object | None  # the module code generation received (kernel shapes), or None
    kernel_lineage: dict[str, list[str]]


def _source(art_or_dir, tmp: Path) -> _Source:
    """An Artifact's library (exported into `tmp` if it has no folder), or a folder's, checked and not loaded."""
    from ..backend.cross import export_options
    from ..runtime.artifact import Artifact, check_artifact_folder, quiet_tvm_scope_warnings
    from ..runtime.recipe import MODULE_JSON, RECIPE
    if isinstance(art := art_or_dir, Artifact):
        if art.target == TargetKind.CUDA:
            raise WorkbenchError("bench over RPC measures CPU artifacts; this one is compiled for CUDA.")
        if art.folder is not None and (art.folder / art.manifest.library).is_file():
            lib = art.folder / art.manifest.library
        else:  # compiled here and not exported: the library as export writes it
            lib = tmp / "model.so"
            with quiet_tvm_scope_warnings():
                art.library.export_library(str(lib), **export_options(art.manifest.target.cpu))  # cross-linked for another CPU
        final = art.recipe.final if art.recipe is not None else None
        if final is None and art.folder is not None:
            final = _load_final(art.folder / RECIPE / MODULE_JSON)
        return _Source(art.manifest, lib, final, dict(art.kernel_lineage))
    folder = Path(art_or_dir)
    manifest, lib = check_artifact_folder(folder)  # paths, fields, sizes and sha256, nothing loaded
    if manifest.target.kind == TargetKind.CUDA:
        raise WorkbenchError(f"bench over RPC measures CPU artifacts; {folder} is compiled for CUDA.")
    return _Source(manifest, Path(lib), _load_final(folder / RECIPE / MODULE_JSON), dict(manifest.kernel_lineage))


def _load_final(path: Path):
    """The final module of an artifact's recipe (TVM's JSON), or None."""
    import tvm
    try:
        return tvm.ir.load_json(path.read_text()) if path.is_file() else None
    except Exception as e:  # noqa: BLE001 - a recipe from another TVM version: no kernel shapes
        logger.info("cannot read %s: %s", path, e)
        return None


def _check_arch(src: _Source, device: dict, where: str) -> None:
    """Refuse an artifact whose CPU record names a triple of another architecture than the device's."""
    cpu = src.manifest.target.cpu or {}
    triple, remote = str(cpu.get("triple") or ""), str(device.get("arch") or "")
    if triple and remote and triple.split("-")[0] != remote.split("-")[0]:
        raise WorkbenchError(f"the artifact's model.so is built for {triple} and {where} is {remote}; compile it for that device's CPU.")


def _kernel_plan(final, function: str, dims: dict[str, int], code_names: dict[str, str]):
    """[(kernel, calls per run, [(shape, dtype) or int])] of the kernels `function` calls; a kernel
    whose shapes need a dim not bound here is left out."""
    import tvm
    from tvm import relax
    from tvm.sym.analyzer import Analyzer
    calls: dict[str, int] = {}

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.GlobalVar):
            calls[e.op.name_hint] = calls.get(e.op.name_hint, 0) + 1

    relax.analysis.post_order_visit(final[function], visit)
    values = {code_names.get(name, name): int(v) for name, v in dims.items()}

    def value(expr) -> int:  # a dim: a number, or an expression of symbolic dims bound to `values`
        analyzer = Analyzer()
        for var in tvm.tirx.analysis.undefined_vars(expr):
            analyzer.bind(var, tvm.tirx.IntImm(str(var.ty), values[var.name]))
        return int(analyzer.simplify(expr))

    names = {gv.name_hint for gv in final.get_global_vars()}
    plan = []
    for name, n in calls.items():
        func = final[name] if name in names and name != "shape_func" else None  # the VM's shape arithmetic, as bench leaves out
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        try:
            args = [value(p) if _shape(p) is None else ([value(d) for d in p.shape], str(p.dtype)) for p in func.params]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            logger.info("kernel %s not timed: a dim of its arguments is not known here (%s)", name, e)
            continue
        plan.append((name, n, args))
    return plan


def _shape(param):
    with contextlib.suppress(Exception):  # TVM 0.27: a kernel's parameters are buffers; a scalar Var has no shape
        return param.shape
    return None


def _kernel_times(sess, dev, src: _Source, function: str, dims: dict[str, int], tmp: Path, stop, report) -> tuple[list[KernelTime], str | None]:
    """Each kernel `function` calls, timed alone on the device (module docstring); a note instead when none can be."""
    import tvm
    if src.final is None:
        return [], "no per-kernel times: the artifact carries no recipe/module.json to read the kernels' shapes from."
    plan = _kernel_plan(src.final, function, dims, src.manifest.code_names)
    if not plan:
        return [], "no per-kernel times: no kernel of the run could be given arguments."
    if _HIDDEN_BIN[0] not in (data := src.library.read_bytes()):
        return [], f"no per-kernel times: {src.library.name} does not embed its VM executable as this version of TVM does."
    (kernels_so := tmp / "kernels.so").write_bytes(data.replace(*_HIDDEN_BIN))
    sess.upload(str(kernels_so), "workbench_kernels.so")
    lib = sess.load_module("workbench_kernels.so")
    rng = np.random.default_rng(0)
    timed: list[tuple[str, float, int]] = []
    for index, (name, n, specs) in enumerate(plan):
        stop()
        report(f"kernel {index + 1}/{len(plan)}", 0.7 + 0.25 * index / len(plan))
        args = [spec if isinstance(spec, int) else tvm.runtime.tensor(
            rng.uniform(-1, 1, size=spec[0]).astype(spec[1]) if spec[1].startswith("float") else np.zeros(spec[0], dtype=spec[1]), dev)
            for spec in specs]
        try:
            res = lib.time_evaluator(name, dev, number=1, repeat=5, min_repeat_ms=5)(*args)
        except Exception as e:  # noqa: BLE001 - one kernel that cannot run alone does not void the others
            logger.info("kernel %s not timed on the device: %s", name, _last_line(e))
            continue
        timed.append((name, float(np.median(res.results)) * 1e3 * n, n))
    total = sum(ms for _, ms, _ in timed) or 1.0
    kernels = [KernelTime(name=name, ms=round(ms, 4), share=round(ms / total, 4), calls=n, onnx_nodes=list(src.kernel_lineage.get(name, [])))
               for name, ms, n in sorted(timed, key=lambda t: -t[1])]
    return kernels, (None if kernels else "no per-kernel times: no kernel could be run alone on the device.")


def _on_device(sess, src: _Source, function: str, arrays: list, runs: int, warmup: int, kernel_dims, tmp: Path, stop, report):
    """(outputs of one run, ms of each timed run, kernels, note) on the session's CPU; no per-kernel times when kernel_dims is None."""
    import tvm
    from tvm import relax
    from ..runtime.artifact import flatten_outputs
    report("uploading the library", 0.1)
    sess.upload(str(src.library), "workbench_model.so")
    dev = sess.cpu(0)
    vm = relax.VirtualMachine(sess.load_module("workbench_model.so"), dev)
    vm.set_input(function, *[tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in arrays])
    report("warm-up", 0.2)
    vm.invoke_stateful(function)
    outputs = flatten_outputs(vm.get_outputs(function))
    if warmup > 1:
        vm.time_evaluator("invoke_stateful", dev, number=1, repeat=warmup - 1)(function)
    stop()
    report("timing", 0.3)
    times_ms = [float(t) * 1e3 for t in vm.time_evaluator("invoke_stateful", dev, number=1, repeat=runs)(function).results]
    if kernel_dims is None:
        return outputs, times_ms, [], "per-kernel time not asked for."
    report("per-kernel time", 0.7)
    return outputs, times_ms, *_kernel_times(sess, dev, src, function, kernel_dims, tmp, stop, report)


def bench_remote(art_or_dir, address: str, runs: int = 20, warmup: int = 3, dims: dict[str, int] | None = None, per_kernel: bool = True,
                 progress: Callable[[str, float], None] | None = None, *, seed: int = 0, cancel: Callable[[], bool] | None = None,
                 wait_s: float = DEVICE_WAIT_S, session_timeout_s: int = SESSION_TIMEOUT_S) -> RemoteBenchResult:
    """Latency and per-kernel time of an Artifact or exported folder (its library never loaded here) on the device
    `address` names ('HOST:PORT:KEY' or 'HOST:PORT'); `progress(step, fraction)` is called from this thread and nothing
    is printed (a GUI worker may call it). Unreachable addresses, unknown keys, busy devices: one sentence, bounded waits."""
    from ...errors import Cancelled
    from ..runtime.artifact_check import choose_bucket, path_text
    report = progress or (lambda step, frac: None)

    def stop():
        if cancel is not None and cancel():
            raise Cancelled("benchmark cancelled.")

    if runs < 1:
        raise WorkbenchError(f"--runs must be at least 1, not {runs}.")
    addr = parse_device_address(address)
    with tempfile.TemporaryDirectory(prefix="workbench-rpc-") as tmp_name:
        tmp = Path(tmp_name)
        src = _source(art_or_dir, tmp)
        inputs: list[TensorSpec] = list(src.manifest.inputs)
        feeds = random_feeds(inputs, seed=seed, dims=dims)
        bound = {d: int((dims or {}).get(d, 1)) for s in inputs for d in s.shape if isinstance(d, str)}
        bucket = choose_bucket(src.manifest.shape_buckets, inputs, [feeds[s.name].shape for s in inputs])
        function = bucket.function if bucket is not None else "main"
        report("connecting", 0.0)
        sess, where = _connect(addr, wait_s, session_timeout_s)
        failure = None
        try:
            device = _device_info(sess, addr)
            _check_arch(src, device, where)
            stop()
            outputs, times_ms, kernels, note = _on_device(sess, src, function, [feeds[s.name] for s in inputs], runs, warmup,
                                                          bound if per_kernel else None, tmp, stop, report)
        except Exception as e:  # noqa: BLE001 - TVM's RPC errors come in several types
            if isinstance(e, WorkbenchError):
                raise
            failure = f"the run on {where} failed ({_last_line(e)})."
        finally:  # the session ends with its last handle, and a TVM error's traceback can hold some in a reference cycle
            del sess
            gc.collect()
        if failure:
            raise WorkbenchError(failure)
    est = src.manifest.memory_estimate
    memory = None if est is None else MemoryUse(est.params_bytes, est.planned_bytes, est.unplanned_bytes).to_json()  # no device RSS
    report("done", 1.0)
    return RemoteBenchResult(target=str(src.manifest.target.kind), dims=bound, latency_ms=latency_stats(times_ms), device=device, kernels=kernels,
                             kernels_note=None if kernels else note, path=path_text(bucket) if src.manifest.shape_buckets else None,
                             memory=memory, outputs=outputs)
