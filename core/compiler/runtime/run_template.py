#!/usr/bin/env python3
"""Run a model compiled by MLC Workbench. Needs only `pip install apache-tvm numpy`.

This file is copied as `run.py` into every exported artifact folder, next to `model.so` and
`manifest.json`. It imports nothing but the standard library, numpy and TVM's runtime (no onnx,
no Qt, no workbench code), so the folder runs wherever those two packages install. Before it loads
anything it checks the folder with `artifact_check.py`, which export copies beside it: the
workbench's own reader of manifests, files and inputs, so run.py refuses what `main.py run`
refuses, in the same sentence (one line on stderr, exit status 2).

    python run.py --inputs IN.npz -o OUT.npz      # inputs by name; outputs written by name
    python run.py                                   # random inputs; prints output shapes
    python run.py --bench 50                        # also time 50 runs (median/p90/min ms)
    python run.py --dim batch=8                     # value for a symbolic dim (random inputs)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _fail(message: str) -> int:
    print(f"run.py: {message}", file=sys.stderr)
    return 2


def _load_checks():
    """artifact_check.py of this folder, loaded by its path (never another module of that name)."""
    import importlib.util

    path = os.path.join(HERE, "artifact_check.py")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} is missing; re-export the artifact (run.py checks the folder with it).")
    spec = importlib.util.spec_from_file_location("mlcwb_artifact_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _random_inputs(np, manifest: dict, dims: dict[str, int], seed: int, checks) -> dict:
    """Seeded random inputs of the manifest's shapes; a MemoryError, before anything is allocated,
    when making them would take more memory than is available (numpy's allocation succeeds on an
    overcommitting kernel, and filling it gets the process killed)."""
    rng = np.random.default_rng(seed)
    shapes = [[d if isinstance(d, int) else int(dims.get(d, 1)) for d in spec["shape"]] for spec in manifest["inputs"]]
    # each input is drawn as 8-byte values, then cast to its dtype
    need = sum(int(np.prod(shape, dtype=object)) * (8 + np.dtype(spec["dtype"]).itemsize) for shape, spec in zip(shapes, manifest["inputs"]))
    free = checks.available_bytes()
    if free is not None and need > free:
        raise MemoryError(f"making them takes {need:,} bytes, and {free:,} are available")
    feeds = {}
    for spec, shape in zip(manifest["inputs"], shapes):
        dtype = np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.floating):
            feeds[spec["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[spec["name"]] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[spec["name"]] = rng.integers(0, 4, size=shape).astype(dtype)
    return feeds


def _load_module(tvm, path: str):
    """tvm.runtime.load_module, without the "Scope Loaded:" line TVM 0.27 prints per function."""
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        return tvm.runtime.load_module(path)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            return tvm.runtime.load_module(path)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().splitlines(keepends=True):
                if b"Scope Loaded" not in line:
                    os.write(2, line)


# The workbench's host_tensor and to_numpy (core/compiler/runtime/boundary.py), repeated here so
# this file needs only TVM and numpy: inputs read in place where C-contiguous, writable and aligned
# as the kernels reading them were declared (the manifest's input_alignment: 16 where they were
# re-declared for numpy's arrays, else TVM's 64), else copied into an aligned buffer; outputs copied
# out through DLPack (an output may be an input read in place or a constant of the model).
_DLPACK_DTYPES = ("bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _host_tensor(tvm, np, a, alignment=64):
    if a.dtype.name not in _DLPACK_DTYPES:
        return tvm.runtime.tensor(a)
    if not (a.flags.c_contiguous and a.flags.writeable and a.size and a.ctypes.data % alignment == 0):  # (empty: strides may be 0)
        raw = np.empty(a.nbytes + 64, dtype=np.uint8)
        copy = np.ndarray(a.shape, a.dtype, raw, -raw.ctypes.data % 64)
        np.copyto(copy, a)
        a = copy
    import tvm_ffi  # tvm.runtime.from_dlpack refuses less than 64-byte alignment; this checks nothing

    return tvm_ffi.from_dlpack(a)


def _to_numpy(np, t):
    if t.device.dlpack_device_type() == 1:  # kDLCPU
        try:
            return np.from_dlpack(t).copy()
        except (BufferError, TypeError, ValueError, RuntimeError):
            pass
    return t.numpy()


def flatten_outputs(out) -> list:
    if hasattr(out, "numpy"):
        import numpy as np

        return [_to_numpy(np, out)]
    result = []
    for x in out:
        result.extend(flatten_outputs(x))
    return result


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class _ProcCounts:
    """/proc/loadavg and this process's task states, read through descriptors kept open (os.pread):
    cheaper than opening them afresh (the workbench's core.compiler.runtime.threads.ProcCounts,
    which this mirrors: run.py needs no workbench)."""

    def __init__(self, loadavg: str = "/proc/loadavg", tasks: str = "/proc/self/task"):
        self.loadavg, self.tasks = loadavg, tasks
        self.pid, self.load_fd, self.task_fds = -1, None, {}

    def _read(self, fds: dict, key: str, path: str) -> bytes | None:
        try:
            if key not in fds:
                fds[key] = os.open(path, os.O_RDONLY)
            return os.pread(fds[key], 512, 0)
        except OSError:
            fd = fds.pop(key, None)
            if fd is not None:
                os.close(fd)
            return None

    def elsewhere(self) -> int:
        """Threads runnable outside this process: the kernel's instantaneous count less this
        process's own runnable threads (TVM's workers yield-spin a while after a run and must not
        count as another process's work)."""
        if self.pid != os.getpid():  # a forked child: the parent's descriptors name the parent's tasks
            for fd in self.task_fds.values():
                os.close(fd)
            self.pid, self.task_fds = os.getpid(), {}
        load = {} if self.load_fd is None else {"l": self.load_fd}
        text = self._read(load, "l", self.loadavg)
        self.load_fd = load.get("l")
        try:
            total = int(text.split()[3].split(b"/")[0])
        except (AttributeError, IndexError, ValueError):
            return 0
        if total <= 1:
            return 0
        try:
            tids = os.listdir(self.tasks)
        except OSError:
            tids = []
        for gone in set(self.task_fds) - set(tids):
            os.close(self.task_fds.pop(gone))
        own = 0
        for tid in tids:
            stat = self._read(self.task_fds, tid, f"{self.tasks}/{tid}/stat")
            if stat is not None:
                end = stat.rfind(b")")
                own += stat[end + 2:end + 3] == b"R"
        return max(0, total - max(1, own))


_PROC = _ProcCounts()


def _runnable_elsewhere() -> int:
    """Threads runnable outside this process (see _ProcCounts.elsewhere). The workbench's
    core.compiler.runtime.threads does the same."""
    return _PROC.elsewhere()


def _load_thread_pool(manifest: dict):
    """The workbench's parallel launch shipped in the folder (manifest thread_pool), loaded before
    TVM so that TVM's runtime takes its TVMBackendParallelLaunch: workers that poll with the pause
    instruction (TVM's poll with a system call per look) and tasks any thread may take. None (TVM's own pool) when the folder has none, it
    will not load, or WORKBENCH_NATIVE_POOL=0."""
    import ctypes

    name = manifest.get("thread_pool")
    if not isinstance(name, str) or not name or "tvm" in sys.modules:
        return None
    if os.environ.get("WORKBENCH_NATIVE_POOL", "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    path = os.path.realpath(os.path.join(HERE, name))
    if os.path.isabs(name) or os.path.commonpath([path, os.path.realpath(HERE)]) != os.path.realpath(HERE) or not os.path.isfile(path):
        return None
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        print(f"run.py: {name} does not load here ({e}); TVM's thread pool runs the parallel kernels.", file=sys.stderr)
        return None


def _pool_governor(tvm, limit: int, pool=None):
    """Two functions, to call before and after each CPU run. Before: it gives TVM's pool the
    cores other processes leave free (their runnable threads: /proc/loadavg's count less this
    process's), at least 1 and at most `limit`. TVM splits parallel loops statically, so a
    worker whose core another process holds makes every kernel wait for it (the workbench's
    core.compiler.runtime.threads does the same). With the workbench's pool (`pool`, _load_thread_pool),
    whose count is set instead of TVM's, the pool also times each run and runs on one thread
    while one measures faster (its "one thread or all": virtual CPUs that stop running side by
    side). WORKBENCH_ADAPTIVE_THREADS=0 turns both off."""
    if os.environ.get("WORKBENCH_ADAPTIVE_THREADS", "1").strip() in ("0", "off", "false", "no") or limit <= 1:
        return (lambda: None), (lambda: None)
    if pool is not None:
        config = lambda _mode, n: pool.mlcwb_pool_set_threads(n)  # noqa: E731
    else:
        config = tvm.get_global_func("runtime.config_threadpool")
    cores = _cpu_count()
    state = {"threads": limit, "checked": float("-inf"), "fewer_seen": 0}

    timed = pool is not None and hasattr(pool, "mlcwb_pool_run_begin")
    if timed:
        import ctypes

        run_state = ctypes.create_string_buffer(int(pool.mlcwb_pool_run_state_size()))

    def size() -> None:
        now = time.monotonic()
        if now - state["checked"] < 0.002:  # tiny models do not pay for a look each run
            return
        state["checked"] = now
        others = _runnable_elsewhere()
        wanted = max(1, min(limit, cores - others))
        if wanted < state["threads"]:  # shrink when two looks in a row see the other work, not a blip
            state["fewer_seen"] += 1
            if state["fewer_seen"] < 2:
                return
        state["fewer_seen"] = 0
        if wanted != state["threads"]:
            config(1, wanted)
            state["threads"] = wanted

    if not timed:
        return size, (lambda: None)
    begin, end = pool.mlcwb_pool_run_begin, pool.mlcwb_pool_run_end  # a run left open: the pool leaves it untimed

    def before_run() -> None:
        size()
        begin(run_state)

    return before_run, (lambda: end(run_state))


def _missing_cpu_features(tvm, manifest: dict) -> list:
    """The instruction-set features the code was compiled for (manifest target.cpu.requires, LLVM's
    names) that this machine lacks, as LLVM reads them from CPUID; [] when the TVM build has no
    LLVM to ask (a runtime-only build) or the manifest predates the record."""
    cpu = (manifest.get("target") or {}).get("cpu") or {}
    read = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures", allow_missing=True)
    if read is None or not cpu.get("requires"):
        return []
    host = {str(k): bool(v) for k, v in read().items()}
    return sorted(f for f in cpu["requires"] if f in host and not host[f])


def _virtual_machine(tvm, lib, dev):
    """The Relax VM on `lib` for `dev`: tvm.runtime.vm.VirtualMachine (relax.VirtualMachine is the
    same class, and `from tvm import relax` needs TVM's compiler library, which a runtime-only TVM,
    TVM_USE_RUNTIME_LIB=1, lacks). Where even that module is missing, the VM is made as it makes
    it: the executable's VM, initialised with (device type, index, allocator) for the device and
    for the CPU (shape functions run there), the pooled allocator (2) for both."""
    try:
        from tvm.runtime.vm import VirtualMachine
    except ImportError:
        vm = lib["vm_load_executable"]()
        cpu = tvm.cpu(0)
        vm["vm_initialization"](dev.dlpack_device_type(), dev.index, 2, cpu.dlpack_device_type(), cpu.index, 2)
        return vm  # vm["main"] is the function, as on VirtualMachine
    return VirtualMachine(lib, dev)


def main(argv: list[str] | None = None) -> int:
    """Run the model; a refusal (artifact_check.ArtifactRefused) is one line on stderr, exit status 2."""
    args = _parse(argv)
    try:
        checks = _load_checks()
    except FileNotFoundError as e:
        return _fail(str(e))
    try:
        return _main(args, checks)
    except checks.ArtifactRefused as e:
        return _fail(str(e))
    except OSError as e:  # writing the outputs: a full disk, a folder that is not there
        return _fail(f"{e.filename or 'a file'} cannot be written or read ({e.strerror or e}).")


def _parse(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        prog="run.py",
        description="Run the compiled model in this folder with the TVM runtime (needs only apache-tvm and numpy).",
    )
    parser.add_argument("--inputs", metavar="IN.npz", help="inputs by name (numpy .npz); random inputs when omitted")
    parser.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs by name to this .npz file")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="device to run on (default: the artifact's target)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=N", help="value of a symbolic dim for random inputs (repeatable)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--bench", type=int, default=0, metavar="N", help="time N runs after 3 warm-up runs")
    return parser.parse_args(argv)


def _main(args, checks) -> int:
    import numpy as np

    # the paths, the fields and every file's size and sha256, before anything here is loaded
    manifest, man_path, lib_path = checks.check_folder(HERE)
    dims = {}
    for item in args.dim:
        name, _, value = item.partition("=")
        if not value.isdigit():
            return _fail(f"--dim expects NAME=N, got '{item}'.")
        dims[name] = int(value)

    if args.inputs:
        feeds = checks.read_npz(args.inputs)
        arrays = checks.check_feeds(manifest["inputs"], feeds, args.inputs)
    else:
        try:
            feeds = _random_inputs(np, manifest, dims, args.seed, checks)
        except (MemoryError, ValueError) as e:  # sizes the manifest allows but this machine cannot hold
            return _fail(f"random inputs of the shapes {man_path} gives cannot be made here ({str(e).splitlines()[0]}); pass --inputs IN.npz.")
        arrays = checks.check_feeds(manifest["inputs"], feeds)

    # TVM's thread pool starts half as many threads as there are CPUs on x86 (it assumes
    # hyperthread pairs): one on a 2-CPU machine. Run as many as the machine gives this process,
    # unless TVM_NUM_THREADS says otherwise; it must be set before TVM's pool starts.
    os.environ.setdefault("TVM_NUM_THREADS", str(_cpu_count()))
    # Workers not pinned to one core (on a busy machine every parallel kernel would wait for a
    # pinned one), yield-spinning a while when idle and then sleeping: awake for the run's next
    # parallel kernel, out of the way after it (the workbench's own default, core.compiler.target).
    os.environ.setdefault("TVM_BIND_THREADS", "0")
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "20000")
    pool = _load_thread_pool(manifest) if (args.device or manifest.get("device", "cpu")) == "cpu" else None
    import tvm

    kind = args.device or manifest.get("device", "cpu")
    dev = tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)
    missing = _missing_cpu_features(tvm, manifest)
    if missing:  # running would die of an illegal instruction
        cpu = manifest["target"]["cpu"]
        built = " ".join([str(cpu.get("name", "?")), *cpu.get("features", [])])
        return _fail(f"this model is compiled for {built} and this CPU lacks {', '.join(missing[:4])}"
                     f"{' and more' if len(missing) > 4 else ''}; run it on such a CPU, or compile it for this one.")
    if kind == "cuda" and not dev.exist:
        return _fail("this artifact runs on CUDA and no CUDA GPU is visible here.")
    try:
        lib = _load_module(tvm, lib_path)
    except Exception as e:  # noqa: BLE001 - TVM raises several types
        return _fail(checks.cannot_load(lib_path, e))
    vm = _virtual_machine(tvm, lib, dev)
    args_dev = [tvm.runtime.tensor(a, dev) if kind == "cuda" else _host_tensor(tvm, np, a, manifest.get("input_alignment") or 64) for a in arrays]

    # a shape bucket compiled for exactly these input shapes, else the general main
    bucket = checks.choose_bucket(manifest.get("shape_buckets"), manifest["inputs"], [a.shape for a in arrays])
    function = vm[bucket["function"] if bucket is not None else "main"]

    def call():  # the VM's function; its runtime checks' failures in one sentence, as the workbench words them
        try:
            return function(*args_dev)
        except Exception as e:  # noqa: BLE001 - TVM raises several types
            raise checks.ArtifactRefused(checks.run_failure(e, man_path, manifest["library"])) from None

    try:
        pool_size = int(os.environ["TVM_NUM_THREADS"])
    except ValueError:
        pool_size = _cpu_count()
    # a model without a parallel kernel (the manifest's parallel_kernels 0) runs the same on any
    # thread count: nothing to choose, as in the workbench's Artifact.run_device
    governed = kind == "cpu" and manifest.get("parallel_kernels") != 0
    before_run, after_run = _pool_governor(tvm, pool_size, pool) if governed else ((lambda: None), (lambda: None))
    before_run()
    try:
        outputs = flatten_outputs(call())
    finally:
        after_run()
    names = [o["name"] for o in manifest["outputs"]]
    for name, value in zip(names, outputs):
        print(f"{name}: shape {list(value.shape)} dtype {value.dtype}")
    if manifest.get("shape_buckets"):
        print(f"ran: {checks.path_text(bucket)}")
    if args.output:
        np.savez(args.output, **dict(zip(names, outputs)))
        print(f"wrote {args.output}")

    if args.bench > 0:
        for _ in range(3):
            before_run()
            try:
                call()
            finally:
                after_run()
        dev.sync()
        times = []
        for _ in range(args.bench):
            t0 = time.perf_counter()
            before_run()
            try:
                call()
                dev.sync()
            finally:
                after_run()
            times.append((time.perf_counter() - t0) * 1000.0)
        times.sort()
        p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
        print(f"latency over {len(times)} runs: median {times[len(times) // 2]:.3f} ms, p90 {p90:.3f} ms, min {times[0]:.3f} ms")
        if kind == "cpu":
            print("parallel kernels: " + ("the workbench's thread pool" if pool is not None else "TVM's thread pool"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        _fail("interrupted.")
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - one line, as the workbench's CLI reports its own errors
        if os.environ.get("RUN_PY_DEBUG"):
            raise
        print(f"run.py: internal error: {type(e).__name__}: {e} (set RUN_PY_DEBUG=1 for the traceback).", file=sys.stderr)
        sys.exit(1)
