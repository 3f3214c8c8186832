"""Compile a model for CPU (LLVM) or GPU (CUDA), check it against onnxruntime, export a folder that ships.

The chain is the one the Lowering panel shows: import the ONNX graph into Relax, run the pass
pipeline of `core.pipeline` (graph passes, LegalizeOps, FuseOps/FuseTIR, then
`core.schedules.schedule_pass(target)`), then the VM lowering passes and code generation
(`tvm.compile`). What the user steps through is what gets compiled.

Never a silent wrong answer: TVM's ONNX frontend computes wrong results for some ops without any
warning, so `compile_model` runs the compiled model and onnxruntime on the same seeded random
inputs and refuses (naming the op and node that first goes wrong) when they disagree. Known bad
conversions are replaced by the workbench's own converters (`core.tvm_converters`).

An exported artifact folder holds:

* `model.so`: the compiled library (weights embedded as constants; for CUDA the kernels are
  compiled to a fatbin by nvcc at export, so nothing is compiled at load);
* `manifest.json`: inputs/outputs (shapes with symbolic dims, dtypes), target, TVM version, source
  model sha256, rewrites and passes applied, verification and measured figures;
* `run.py`: a runner that needs only `apache-tvm` and `numpy`;
* `model.onnx`: the model that was compiled (the optimized one when rewrites were applied), so
  `bench ARTIFACT --vs-ort` can compare against onnxruntime later;
* `kernels.cu` for CUDA: the generated CUDA source, for reading.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import WorkbenchError

__all__ = [
    "Artifact",
    "TensorSpec",
    "CompileCancelled",
    "CompiledMismatchError",
    "compile_model",
    "load_artifact",
    "check_artifact_folder",
    "random_feeds",
    "compare_outputs",
    "MANIFEST",
    "LIBRARY",
    "RTOL",
    "ATOL",
]

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LIBRARY = "model.so"
RUNNER = "run.py"
SOURCE_MODEL = "model.onnx"
CUDA_SOURCE = "kernels.cu"
FORMAT_VERSION = 1
RTOL = 1e-3
ATOL = 1e-4
SCALE_RTOL = 1e-4  # see compare_outputs

# nvcc targets for the exported fatbin: machine code for A100 (sm_80) and H100/H200 (sm_90) plus
# PTX that the driver JIT-compiles on any other GPU from sm_80 on. MLCWB_CUDA_ARCHS=sm_86,sm_89
# replaces the machine-code list (each architecture adds a full nvcc pass over the kernels).
_CUDA_GENCODES = tuple(a.strip() for a in os.environ.get("MLCWB_CUDA_ARCHS", "sm_80,sm_90").split(",") if a.strip())
_CUDA_PTX = "compute_80"

Progress = Callable[[str, float], None]


class CompileCancelled(WorkbenchError):
    """The user cancelled a compile."""


class CompiledMismatchError(WorkbenchError):
    """The compiled model computes something different from onnxruntime."""

    def __init__(self, message: str, op_type: str = "", node_name: str = "", max_abs_err: float = float("nan")):
        super().__init__(message)
        self.op_type = op_type
        self.node_name = node_name
        self.max_abs_err = max_abs_err


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: name, shape (ints, or names of symbolic dims), dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict) -> "TensorSpec":
        return TensorSpec(d["name"], tuple(d["shape"]), d["dtype"])

    def concrete_shape(self, dims: dict[str, int] | None = None, default: int = 1) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else int((dims or {}).get(d, default)) for d in self.shape)



@contextlib.contextmanager
def quiet_tvm_scope_warnings():
    """Drop the "Scope Saving:" / "Scope Loaded:" lines TVM 0.27's VM executable writes to stderr
    for every function it saves or loads (leftover debug output, dozens per model); every other
    line written to stderr meanwhile is passed through afterwards."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().splitlines(keepends=True):
                if b"Scope Saving" not in line and b"Scope Loaded" not in line:
                    os.write(2, line)


# --------------------------------------------------------------------------------------------
# inputs and comparison


def random_feeds(specs: list[TensorSpec], seed: int = 0, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs for `specs`: normal floats, small non-negative integers (valid as
    indices for most gathers), booleans; symbolic dims take their value from `dims` (default 1)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        shape = s.concrete_shape(dims)
        dt = np.dtype(s.dtype)
        if np.issubdtype(dt, np.floating):
            feeds[s.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[s.name] = rng.integers(0, 2, size=shape).astype(dt)
        else:
            feeds[s.name] = rng.integers(0, 4, size=shape).astype(dt)
    return feeds


def compare_outputs(
    ours: list[np.ndarray], reference: list[np.ndarray], rtol: float = RTOL, atol: float = ATOL, scale_rtol: float = SCALE_RTOL
) -> tuple[bool, float, int]:
    """(all close, max abs error, index of the first output that differs or -1).

    An output matches when every element is close (rtol, atol), or when its largest error is
    below `scale_rtol` of the output's own magnitude (max |reference|): long float32 reductions
    (VGG-19's 25088-wide Gemm with random weights: outputs up to ~4000) summed in another order
    differ by ~1e-2 on elements that happen to be near zero, which is float32 rounding, not a
    wrong conversion; a wrong conversion errs on the scale of the values themselves."""
    worst = 0.0
    first_bad = -1
    if len(ours) != len(reference):
        return False, float("inf"), 0
    for i, (a, b) in enumerate(zip(ours, reference)):
        a = np.asarray(a)
        b = np.asarray(b)
        if a.shape != b.shape:
            return False, float("inf"), i
        if a.size == 0:
            continue
        if a.dtype == np.bool_ or b.dtype == np.bool_:
            err = float(np.count_nonzero(a != b))
            close = err == 0
        else:
            af = a.astype(np.float64)
            bf = b.astype(np.float64)
            both_nan = np.isnan(af) & np.isnan(bf)
            diff = np.where(both_nan, 0.0, np.abs(af - bf))
            err = float(np.nanmax(diff)) if diff.size else 0.0
            if np.isnan(diff).any():
                err = float("inf")
            close = bool(np.all(both_nan | np.isclose(af, bf, rtol=rtol, atol=atol)))
            if not close and np.isfinite(err):
                finite = bf[np.isfinite(bf)]
                scale = float(np.abs(finite).max()) if finite.size else 0.0
                close = err <= atol + scale_rtol * scale
        worst = max(worst, err)
        if not close and first_bad < 0:
            first_bad = i
    return first_bad < 0, worst, first_bad


def _ort_session(model_bytes: bytes, threads: int | None = None):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def ort_run(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = _ort_session(model_bytes)
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


# --------------------------------------------------------------------------------------------
# the model side: specs from the ONNX graph


def _specs_from_proto(proto) -> tuple[list[TensorSpec], list[TensorSpec]]:
    import onnx

    inits = {t.name for t in proto.graph.initializer}

    def spec(vi) -> TensorSpec:
        tt = vi.type.tensor_type
        shape: list[int | str] = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                shape.append(d.dim_param or f"{vi.name}_dim{i}")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        return TensorSpec(vi.name, tuple(shape), dtype)

    ins = [spec(vi) for vi in proto.graph.input if vi.name not in inits]
    outs = [spec(vi) for vi in proto.graph.output]
    return ins, outs


def _resolve_graph(graph_or_path):
    from .graph import Graph
    from .onnx_io import load_model

    if isinstance(graph_or_path, Graph):
        return graph_or_path
    if isinstance(graph_or_path, (str, os.PathLike)):
        return load_model(graph_or_path)
    raise WorkbenchError(f"compile_model needs a Graph or a path to an ONNX file, not {type(graph_or_path).__name__}.")


# --------------------------------------------------------------------------------------------
# import + pipeline: the lowering engineer's modules when present, TVM's own pieces otherwise


@dataclass
class Imported:
    """A Relax module imported from ONNX, with lineage (Relax var name -> ONNX node labels)."""

    mod: Any
    lineage: dict[str, list[str]]
    seconds: float


def import_relax(graph) -> Imported:
    """ONNX Graph -> Relax IRModule (weights as constants) through the workbench's import hook
    `core.tvm_import` (lineage + the converter fixes of core.tvm_converters); TVM's plain
    frontend with the same fixes when that module is absent."""
    t0 = time.perf_counter()
    try:
        from . import tvm_import
    except ImportError:
        tvm_import = None
    if tvm_import is not None:
        result = tvm_import.import_graph(graph)
        label = {n.id: n.label for n in graph.nodes}
        lineage = {var: [label[i] for i in ids if i in label] for var, ids in result.lineage.items()}
        return Imported(result.mod, lineage, time.perf_counter() - t0)
    from . import tvm_converters

    proto = graph.to_proto()
    mod = _guarded_import(lambda: tvm_converters.from_onnx_fixed(proto), proto)
    return Imported(mod, {}, time.perf_counter() - t0)


def _guarded_import(fn, proto):
    """Run a frontend import; turn its failures into one sentence naming the op (and keep the
    frontend's own prints off stdout, where `--json` output goes)."""
    import contextlib
    import io

    from .errors import UnsupportedOpError

    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            return fn()
    except WorkbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - every frontend failure is the model's op, told in one sentence
        text = str(e).strip()
        m = re.search(r"not supported for frontend ONNX: (.+)", text)
        if m:
            ops = m.group(1).strip().rstrip(".")
            raise UnsupportedOpError(f"TVM's ONNX frontend does not support the op(s) {ops}; this model cannot be compiled.", op_type=ops) from None
        m = re.search(r"Error converting operator (\w+)", buf.getvalue())
        op = m.group(1) if m else ""
        node = next((n.name or n.op_type for n in proto.graph.node if n.op_type == op), "") if op else ""
        last = text.splitlines()[-1] if text else type(e).__name__
        where = f" at {op} node '{node}'" if op else ""
        raise UnsupportedOpError(f"TVM's ONNX frontend failed{where}: {last}", op_type=op, node_name=node) from None


# Passes from here on turn scheduled Relax+TIR into VM code; compile stops before them to keep the
# scheduled module (memory estimate, lineage) and hands them to tvm.compile.
_VM_LOWERING_START = "DataflowLowering"


def split_pipeline(target, specs=None) -> tuple[list, list]:
    """(graph-to-scheduled-TIR specs, VM-lowering specs) of core.pipeline's list for `target`."""
    from . import pipeline

    specs = list(specs) if specs is not None else pipeline.default_pipeline(target)
    problems = pipeline.validate(specs)
    if problems:
        raise WorkbenchError("the pass pipeline cannot build: " + " ".join(problems))
    names = [s.name for s in specs]
    cut = names.index(_VM_LOWERING_START) if _VM_LOWERING_START in names else len(specs)
    return specs[:cut], specs[cut:]


# --------------------------------------------------------------------------------------------
# Artifact


@dataclass
class Artifact:
    """A compiled model: run it, measure it, export it.

    `library` is a `tvm.relax.VMExecutable` right after compile, or the `tvm.runtime.Module`
    loaded from an exported folder; both run on the Relax VM.
    """

    library: Any
    target: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    manifest: dict = field(default_factory=dict)
    scheduled_mod: Any = None  # Relax+TIR IRModule before VM lowering (for the memory estimate)
    model_bytes: bytes | None = None  # the ONNX model that was compiled
    cuda_source: str | None = None
    kernel_lineage: dict[str, list[str]] = field(default_factory=dict)  # kernel -> ONNX node names
    folder: Path | None = None
    pipeline: Any = None  # the core.pipeline PassSpecs it was built with (None: the default)
    _vm: Any = None

    # -- running -------------------------------------------------------------------------

    @property
    def device(self):
        import tvm

        return tvm.cuda(0) if self.target == "cuda" else tvm.cpu(0)

    def vm(self):
        """The Relax VM (created on first use)."""
        if self._vm is None:
            from tvm import relax

            if self.target == "cuda" and not _gpu_present():
                raise WorkbenchError("this artifact is compiled for CUDA and this machine has no usable CUDA GPU; run it where one is.")
            self._vm = relax.VirtualMachine(self.library, self.device)
        return self._vm

    def to_device(self, feeds: dict[str, np.ndarray]) -> list:
        import tvm

        if self.target == "cuda" and not _gpu_present():
            raise WorkbenchError("this artifact is compiled for CUDA and this machine has no usable CUDA GPU; run it where one is.")

        args = []
        for spec in self.inputs:
            if spec.name not in feeds:
                raise WorkbenchError(f"input '{spec.name}' is missing (the model needs {', '.join(s.name for s in self.inputs)}).")
            a = np.ascontiguousarray(feeds[spec.name])
            if a.dtype != np.dtype(spec.dtype):
                raise WorkbenchError(f"input '{spec.name}' has dtype {a.dtype}, the model needs {spec.dtype}.")
            if a.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, a.shape)):
                raise WorkbenchError(
                    f"input '{spec.name}' has shape {list(a.shape)}, the model needs {list(spec.shape)}."
                )
            args.append(tvm.runtime.tensor(a, self.device))
        return args

    def run_device(self, args: list):
        """One call of main on device tensors; returns the raw VM result (for timing loops)."""
        return self.vm()["main"](*args)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run on numpy inputs (by input name); outputs in the model's output order."""
        out = self.run_device(self.to_device(feeds))
        return _flatten(out)

    # -- export --------------------------------------------------------------------------

    def export(self, folder: str | os.PathLike, measured: dict | None = None) -> Path:
        """Write the deployable folder (library, manifest, runner, source model, CUDA source)."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise WorkbenchError(f"{folder} exists and is not a folder; choose another export location.")
        folder.mkdir(parents=True, exist_ok=True)
        lib_path = folder / LIBRARY
        if self.folder is not None and (self.folder / LIBRARY).exists():
            if self.folder.resolve() != folder.resolve():
                shutil.copy2(self.folder / LIBRARY, lib_path)
        elif self.target == "cuda":
            with quiet_tvm_scope_warnings():
                _export_cuda_library(self.library, lib_path, self.manifest)
        else:
            with quiet_tvm_scope_warnings():
                self.library.export_library(str(lib_path))
        if self.cuda_source:
            (folder / CUDA_SOURCE).write_text(self.cuda_source)
        if self.model_bytes is not None:
            tmp = folder / (SOURCE_MODEL + ".tmp")
            tmp.write_bytes(self.model_bytes)
            os.replace(tmp, folder / SOURCE_MODEL)
        runner = Path(__file__).with_name("runner_template.py")
        shutil.copy2(runner, folder / RUNNER)
        if measured:
            self.manifest["measured"] = measured
        self.manifest["files"] = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
        self.manifest["files"] = sorted(set(self.manifest["files"]) | {MANIFEST})
        (folder / MANIFEST).write_text(json.dumps(self.manifest, indent=2) + "\n")
        self.folder = folder
        return folder


def _flatten(out) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    result = []
    for x in out:
        result.extend(_flatten(x))
    return result


def _gpu_present() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001
        return False


# --------------------------------------------------------------------------------------------
# CUDA export: carry compiled code (a fatbin), not source to be compiled at load


def _cuda_modules(lib) -> list:
    found, stack, seen = [], [lib.mod if hasattr(lib, "mod") else lib], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.kind == "cuda":
            found.append(m)
        stack.extend(m.imports)
    return found


def cuda_source_of(lib) -> str:
    return "\n".join(m.inspect_source("cuda") for m in _cuda_modules(lib))


def nvcc_fatbin(source: str, workdir: Path) -> bytes:
    """Compile CUDA source to a fatbin for the common architectures (+ PTX for newer GPUs)."""
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        raise WorkbenchError("exporting a CUDA artifact needs nvcc (the CUDA toolkit) to compile the kernels; none was found on PATH.")
    cu = workdir / "kernels.cu"
    out = workdir / "kernels.fatbin"
    cu.write_text(source)
    cmd = [nvcc, "--fatbin", "-O3", "-o", str(out), str(cu)]
    for sm in _CUDA_GENCODES:
        cmd += ["-gencode", f"arch=compute_{sm[3:]},code={sm}"]
    cmd += ["-gencode", f"arch={_CUDA_PTX},code={_CUDA_PTX}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise WorkbenchError(f"nvcc could not compile the generated CUDA kernels: {(r.stderr or r.stdout).strip().splitlines()[-1:]}.")
    return out.read_bytes()


def _u64(b: bytes, pos: int) -> tuple[int, int]:
    return struct.unpack_from("<Q", b, pos)[0], pos + 8


def _patch_cuda_blob(blob: bytes, fatbin: bytes) -> bytes:
    """Rewrite a packed module blob so its CUDA module carries `fatbin` instead of CUDA source.

    Layout (tvm-ffi): u64 payload size | import-tree row_ptr (u64 n + n*u64) | child indices
    (u64 n + n*u64) | per module: key (u64 len + bytes), then for non-"_lib" keys the module's
    bytes (u64 len + bytes). A CUDA module's bytes are fmt (string) | function map | code (bytes),
    with code last.
    """
    size, pos = _u64(blob, 0)
    n_row, pos = _u64(blob, pos)
    pos += 8 * n_row
    n_child, pos = _u64(blob, pos)
    pos += 8 * n_child
    out = bytearray(blob[8:pos])
    patched = 0
    for _ in range(n_row - 1):
        klen, p2 = _u64(blob, pos)
        key = blob[p2 : p2 + klen].decode()
        out += blob[pos : p2 + klen]
        pos = p2 + klen
        if key == "_lib":
            continue
        dlen, p3 = _u64(blob, pos)
        data = blob[p3 : p3 + dlen]
        pos = p3 + dlen
        if key == "cuda":
            flen, q = _u64(data, 0)
            fmt = data[q : q + flen].decode()
            if fmt == "cuda":
                # code (the source) is the trailing u64-length-prefixed field
                for start in range(len(data) - 8, q + flen - 1, -1):
                    clen = struct.unpack_from("<Q", data, start)[0]
                    if start + 8 + clen == len(data) and clen > 0:
                        break
                else:  # pragma: no cover - layout changed
                    raise WorkbenchError("the CUDA module's serialized layout is not the one this workbench knows; cannot embed compiled kernels.")
                fmap = data[q + flen : start]
                data = struct.pack("<Q", 6) + b"fatbin" + fmap + struct.pack("<Q", len(fatbin)) + fatbin
                patched += 1
        out += struct.pack("<Q", len(data)) + data
    if patched == 0:
        return blob
    return struct.pack("<Q", len(out)) + bytes(out)


def _blob_from_c(c_src: str) -> tuple[str, bytes, str]:
    m = re.search(r"(const unsigned char (\w+)\[\d+\] = \{)(.*?)(\};)", c_src, re.S)
    if not m:
        raise WorkbenchError("TVM's packed library source has an unexpected layout; cannot embed compiled CUDA kernels.")
    data = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-fA-F]{2})", m.group(3)))
    return c_src[: m.start()], data, m.group(2)


def _export_cuda_library(lib, path: Path, manifest: dict) -> None:
    from tvm.runtime import _ffi_api

    source = cuda_source_of(lib)
    with tempfile.TemporaryDirectory(prefix="mlcwb-cuda-") as tmp:
        tmpd = Path(tmp)
        fatbin = nvcc_fatbin(source, tmpd) if source else b""

        def pack_imports(mod, is_system_lib, prefix, workspace_dir):
            c_src = _ffi_api.ModulePackImportsToC(mod, is_system_lib, prefix)
            head, blob, symbol = _blob_from_c(c_src)
            new_blob = _patch_cuda_blob(blob, fatbin) if fatbin else blob
            body = ",".join(f"0x{b:02x}" for b in new_blob)
            text = head + f"const unsigned char {symbol}[{len(new_blob)}] = {{{body}}};\n#ifdef __cplusplus\n}}\n#endif\n"
            out = os.path.join(workspace_dir, f"{prefix}devc.c")
            with open(out, "w") as f:
                f.write(text)
            return out

        lib.export_library(str(path), fpack_imports=pack_imports)
    manifest.setdefault("cuda", {}).update(
        {
            "kernels": "fatbin" if fatbin else "none",
            "fatbin_bytes": len(fatbin),
            "architectures": list(_CUDA_GENCODES) + [_CUDA_PTX + " (PTX, JIT-compiled by the driver on newer GPUs)"],
            "needs_at_load": "an NVIDIA driver and apache-tvm with CUDA support; no compiler",
            "source": CUDA_SOURCE,
        }
    )


# --------------------------------------------------------------------------------------------
# compile


def _check_cancel(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise CompileCancelled("compile cancelled.")


def compile_model(
    graph_or_path,
    target: str = "cpu",
    *,
    pipeline=None,
    verify: bool = True,
    verify_dims: dict[str, int] | None = None,
    rewrites: list[str] | None = None,
    tune_trials: int = 0,
    tune_db: str | os.PathLike | None = None,
    tune_budget_s: float | None = None,
    progress: Progress | None = None,
    cancel: Callable[[], bool] | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> Artifact:
    """Compile an ONNX model (a Graph or a file) for 'cpu' or 'cuda' and return an Artifact.

    `pipeline` is a list of core.pipeline PassSpecs (the Lowering panel's, edits included);
    default: core.pipeline.default_pipeline(target). With `verify` (the default) the compiled
    model runs against onnxruntime on seeded random inputs (symbolic dims from `verify_dims`,
    default 1); a difference beyond rtol/atol raises CompiledMismatchError naming the first op
    that goes wrong. CUDA is verified only where a GPU exists (code generation needs none).
    Tuning (`tune_budget_s` seconds for the model, or `tune_trials` > 0 with a 600 s budget):
    every candidate config of the schedule rules' templates is measured, then MetaSchedule
    searches `tune_trials` schedules per kernel with the time left; the records go to the
    database folder `tune_db` (default core.tuning.default_database_root()) and the compile
    uses the fastest measured schedule per kernel. A `tune_db` alone only applies that
    database. Tuning is for the cpu target; it reports through `progress` (5-55 %) and stops
    after the measuring round in which `cancel()` turns True.
    `progress(step, fraction)` is called between steps; `cancel()` returning True stops the
    compile with CompileCancelled at the next step.
    """
    import tvm

    from . import pipeline as pl
    from .target import TARGET_KINDS, make_target

    if target not in TARGET_KINDS:
        raise WorkbenchError(f"unknown target '{target}': choose one of {', '.join(TARGET_KINDS)}.")
    tune_budget = _check_tuning_options(target, tune_trials, tune_budget_s)
    report = progress or (lambda step, frac: None)
    t_start = time.perf_counter()
    graph = _resolve_graph(graph_or_path)
    proto = graph.to_proto()
    model_bytes = proto.SerializeToString(deterministic=True)
    inputs, outputs = _specs_from_proto(proto)
    if target == "cuda" and _gpu_present():
        _prefer_nvcc_for_jit()
    tvm_target = make_target(target, cuda_arch=_host_cuda_arch() or "sm_80") if target == "cuda" else make_target(target)
    front, back = split_pipeline(tvm_target, pipeline)
    passes_applied: list[dict] = []

    report("import to Relax", 0.02)
    _check_cancel(cancel)
    imported = import_relax(graph)
    mod = imported.mod
    passes_applied.append({"name": "ONNX import (Relax)", "seconds": round(imported.seconds, 4)})

    steps = [(spec.name, spec) for spec in front if spec.enabled]
    tuning_step = tune_at = None
    tune = tune_trials > 0 or tune_budget_s is not None
    if tune or tune_db is not None:
        tuning_step = _TuningStep(tvm_target, tune_trials, tune_db, tune_budget if tune else None, report, cancel)
        tune_at = next((i for i, (n, _) in enumerate(steps) if n == "ScheduleTIR"), len(steps))
        steps.insert(tune_at, ("MetaSchedule tuning", tuning_step))
    fused = prefused = None
    with tvm_target:
        for i, (name, spec) in enumerate(steps):
            _check_cancel(cancel)
            report(name, _step_fraction(i, len(steps), tune_at))
            t0 = time.perf_counter()
            p = pl.make_pass(spec, tvm_target) if isinstance(spec, pl.PassSpec) else spec
            if name == "FuseOps":
                prefused = mod
            mod = p(mod)
            passes_applied.append({"name": name, "seconds": round(time.perf_counter() - t0, 4)})
            if name == "FuseOps" or (fused is None and name == "LegalizeOps"):
                fused = mod
    scheduled = mod
    _check_cancel(cancel)
    report("code generation", 0.62)
    t0 = time.perf_counter()
    ex = tvm.compile(scheduled, tvm_target, relax_pipeline=pl.build_relax_pipeline(back, tvm_target))
    passes_applied += [{"name": spec.name} for spec in back if spec.enabled]
    passes_applied.append({"name": f"codegen ({'LLVM' if target == 'cpu' else 'CUDA + LLVM host'})", "seconds": round(time.perf_counter() - t0, 4)})

    lineage = kernel_lineage(fused, imported.lineage, graph, prefused, scheduled) if fused is not None else {}
    cuda_src = cuda_source_of(ex) if target == "cuda" else None
    from .tvm_converters import fixes_applied

    manifest = {
        "format_version": FORMAT_VERSION,
        "name": graph.name or (Path(graph.path).stem if getattr(graph, "path", None) else "model"),
        "library": LIBRARY,
        "runner": RUNNER,
        "source_model": SOURCE_MODEL,
        "source_model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "source_path": str(graph.path) if getattr(graph, "path", None) else None,
        "target": {"kind": target, "tvm_target": _target_json(tvm_target)},
        "device": "cuda" if target == "cuda" else "cpu",
        "tvm_version": tvm.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "inputs": [s.to_json() for s in inputs],
        "outputs": [s.to_json() for s in outputs],
        "rewrites": list(rewrites if rewrites is not None else getattr(graph, "applied_rewrites", []) or []),
        "converter_fixes": fixes_applied(proto),
        "passes": passes_applied,
        "tuning": _tuning_manifest(tuning_step, tune_trials, tune_budget if tune else None, tune_db, tvm_target),
        "kernel_lineage": lineage,
    }
    art = Artifact(
        library=ex,
        target=target,
        inputs=inputs,
        outputs=outputs,
        manifest=manifest,
        scheduled_mod=scheduled,
        model_bytes=model_bytes,
        cuda_source=cuda_src,
        kernel_lineage=lineage,
        pipeline=pipeline,
    )
    try:
        from .bench import estimate_memory

        manifest["memory_estimate"] = estimate_memory(art, dims=verify_dims)
    except WorkbenchError:
        raise
    except Exception:  # noqa: BLE001 - an estimate is a figure, not a reason to fail a compile
        logger.exception("memory estimate failed")
    if verify and (target == "cpu" or _gpu_present()):
        _check_cancel(cancel)
        report("check against onnxruntime", 0.8)
        manifest["verification"] = verify_artifact(art, dims=verify_dims, rtol=rtol, atol=atol, cancel=cancel)
    else:
        manifest["verification"] = {"checked": False, "reason": "verification off" if not verify else "no GPU on the compiling machine"}
    manifest["compile_seconds"] = round(time.perf_counter() - t_start, 3)
    report("done", 1.0)
    return art


def _tuning_manifest(step: "_TuningStep | None", trials: int, budget_s: float | None, db, tvm_target) -> dict | None:
    """The manifest's record of tuning: options, database folder, and what it gave this compile."""
    if step is None:
        return None
    from .tuning import database_dir

    return {
        "trials": int(trials),
        "budget_s": budget_s,
        "database": str(database_dir(db, tvm_target)),
        "summary": step.summary,
        "kernels": step.kernels,
        "kernels_from_database": step.from_database,
    }


_GENERIC_VAR = re.compile(r"^(lv|gv)\d*$")


def kernel_lineage(fused_mod, var_lineage: dict[str, list[str]], graph, prefused_mod=None, final_mod=None) -> dict[str, list[str]]:
    """kernel name -> ONNX node labels, read from the module right after FuseOps.

    Each kernel is either a fused Relax function (FuseTIR turns it into one TIR kernel of the same
    name) or a PrimFunc called directly from main. The import names every node's output binding
    after its ONNX tensor, and FuseOps keeps binding names inside the functions it creates, so a
    kernel's nodes are the import lineage of the bindings it contains. Generic names (`lvN`,
    `gvN`) are never trusted: passes reuse them. Each binding inside a fused function (its output
    is renamed `gv`; a function shared by several call sites carries the first site's names) is
    matched to its original in the module before FuseOps by callee and arguments, call site by
    call site;
    nodes whose bindings a pass rewrote (a batch-norm that DecomposeOpsForInference expanded)
    are recovered as the ONNX nodes lying on paths between two nodes of the same kernel.
    FuseTIR may rename kernels (a suffix when a name is taken); main's calls keep their order, so
    the names are taken from `final_mod` (the scheduled module) call by call.
    """
    from tvm import relax

    def bindings(func):
        body = func.body
        if not isinstance(body, relax.SeqExpr):
            return []
        return [b for blk in body.blocks for b in blk.bindings]

    def callee(value):
        if isinstance(value, relax.Call):
            if getattr(value.op, "name", "") == "relax.call_tir":
                return value.args[0].name_hint
            if isinstance(value.op, relax.GlobalVar):
                return value.op.name_hint
        return None

    def arg_names(value) -> tuple[str, ...]:
        args = value.args[1].fields if getattr(value.op, "name", "") == "relax.call_tir" else value.args
        return tuple(a.name if isinstance(a, relax.Var) else "" for a in args)

    def trusted(name: str) -> bool:
        return name in var_lineage and not _GENERIC_VAR.match(name)

    # the module before FuseOps, indexed by (callee, argument names): FuseOps copies these bindings
    # into the fused functions, so each inner binding is matched structurally to its original
    by_call: dict[tuple, list[str]] = {}
    if prefused_mod is not None:
        for b in bindings(prefused_mod["main"]):
            c = callee(b.value)
            if c is not None:
                by_call.setdefault((c, arg_names(b.value)), []).append(b.var.name)

    by_label = {n.label: n.id for n in graph.nodes}
    result: dict[str, list[set[str]]] = {}  # kernel -> the node labels of each call site
    funcs = {gv.name_hint: f for gv, f in fused_mod.functions_items()}
    calls = [b for b in bindings(fused_mod["main"]) if callee(b.value) is not None]
    final_names = [callee(b.value) for b in bindings(final_mod["main"])] if final_mod is not None else []
    final_names = [n for n in final_names if n is not None]
    rename = len(final_names) == len(calls)
    outer_name: dict[str, str] = {}  # var name in the fused main -> its name before FuseOps

    def original(key: tuple) -> str:
        # identical calls (q/k/v projections of one input) are taken in program order
        names = by_call.get(key) or []
        return names.pop(0) if names else ""

    for i, b in enumerate(calls):
        name = callee(b.value)
        labels: set[str] = set()
        result.setdefault(final_names[i] if rename else name, []).append(labels)
        outer_args = [outer_name.get(n, n) for n in arg_names(b.value)]
        inner = funcs.get(name)
        matched = ""
        if isinstance(inner, relax.Function):
            local = {p.name: arg for p, arg in zip(inner.params, outer_args)}
            for ib in bindings(inner):
                c = callee(ib.value)
                mapped = tuple(local.get(n, n) if n else "" for n in arg_names(ib.value)) if c is not None else ()
                matched = original((c, mapped)) if c is not None else ""
                local[ib.var.name] = matched or ib.var.name
                for var in (matched, ib.var.name):
                    if trusted(var):
                        labels.update(var_lineage[var])
                        break
        else:
            matched = original((name, tuple(outer_args)))
        if matched:
            outer_name[b.var.name] = matched
        for var in (matched, b.var.name):
            if trusted(var):
                labels.update(var_lineage[var])
                break
    order = {nid: i for i, nid in enumerate(graph.topological_order())}
    out: dict[str, list[str]] = {}
    for name, sites in result.items():
        all_ids: set[int] = set()
        for labels in sites:
            ids = {by_label[l] for l in labels if l in by_label}
            if len(ids) > 1:  # nodes between two nodes of one call site belong to it
                between = set()
                for a in ids:
                    desc = graph.descendants(a)
                    for b in ids:
                        if b != a and b in desc:
                            between |= desc & graph.ancestors(b)
                ids |= between
            all_ids |= ids
        out[name] = [graph.node(i).label for i in sorted(all_ids, key=lambda i: order.get(i, 0))]
    return out


def _target_json(t) -> dict:
    try:
        return json.loads(str(t))
    except Exception:  # noqa: BLE001
        return {"text": str(t)}


def _prefer_nvcc_for_jit() -> None:
    """With a GPU present TVM compiles CUDA kernels while building (NVRTC by default, which needs
    the cuda-bindings package); use nvcc instead when that package is missing and nvcc is here."""
    import importlib.util

    if importlib.util.find_spec("cuda") is None and shutil.which("nvcc"):
        os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")


def _host_cuda_arch() -> str | None:
    """sm_XY of the local GPU, when there is one (so code is generated for what will run it)."""
    if not _gpu_present():
        return None
    import tvm

    try:
        return "sm_" + str(tvm.cuda(0).compute_version).replace(".", "")
    except Exception:  # noqa: BLE001
        return None


DEFAULT_TUNE_BUDGET_S = 600.0  # the 10 minutes per model
# compile's progress while tuning: the steps before it, the tuning itself, the steps after it
_TUNE_START, _TUNE_END, _AFTER_TUNE_END = 0.05, 0.55, 0.60


def _check_tuning_options(target: str, tune_trials, tune_budget_s) -> float:
    """The tuning budget in seconds, after checking the options; one sentence when one is wrong."""
    import math
    import numbers

    if isinstance(tune_trials, bool) or not isinstance(tune_trials, numbers.Integral) or tune_trials < 0:
        raise WorkbenchError(f"tune_trials must be a whole number of trials per kernel, 0 or more, not {tune_trials!r}.")
    if tune_budget_s is None:
        budget = DEFAULT_TUNE_BUDGET_S
    else:
        try:
            budget = float(tune_budget_s)
        except (TypeError, ValueError):
            budget = float("nan")
        if isinstance(tune_budget_s, bool) or not math.isfinite(budget) or budget <= 0:
            raise WorkbenchError(f"the tuning budget must be a positive number of seconds, not {tune_budget_s!r}.")
    if (tune_trials > 0 or tune_budget_s is not None) and target != "cpu":
        raise WorkbenchError(f"tuning is available for the cpu target only, not {target}; compile for {target} without tuning.")
    return budget


class _TuningStep:
    """The tuning pass as a compile step, keeping what compile reports about it: the tuning
    report's one-line summary and, after the pass, how many kernels got a schedule from the
    tuning database (counted, not taken from the report)."""

    def __init__(self, tvm_target, trials: int, db, budget_s: float | None, report: Progress, cancel: Callable[[], bool] | None):
        from . import schedules

        fn = getattr(schedules, "tuning_pass", None)
        if fn is None:
            raise WorkbenchError("tuning is not available in this build (core.schedules has no tuning_pass); compile without --tune-trials.")
        self.summary: str | None = None
        self.kernels = self.from_database = 0

        def progress(frac, msg=""):
            frac = min(max(float(frac), 0.0), 1.0)
            if frac >= 1.0 and msg:
                self.summary = msg
            report(f"tuning: {msg}" if msg else "tuning", _TUNE_START + (_TUNE_END - _TUNE_START) * frac)

        try:
            self._pass = fn(
                tvm_target,
                trials=trials,
                database=str(db) if db is not None else None,
                budget_s=budget_s,
                progress=progress,
                cancel=cancel,
                on_report=lambda tuning_report: setattr(self, "summary", tuning_report.summary()),
            )
        except ImportError as e:
            raise WorkbenchError(f"tuning is not available in this build ({e}); compile without --tune-trials / --tune-db.") from None

    def __call__(self, mod):
        before = _scheduled_kernels(mod)[0]
        mod = self._pass(mod)
        scheduled, self.kernels = _scheduled_kernels(mod)
        self.from_database = max(0, scheduled - before)
        return mod


def _scheduled_kernels(mod) -> tuple[int, int]:
    """(kernels already scheduled, kernels in all) of a Relax+TIR module."""
    import tvm

    scheduled = total = 0
    for _, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            total += 1
            scheduled += func.attrs is not None and "tirx.is_scheduled" in func.attrs
    return scheduled, total


def _step_fraction(i: int, n: int, tune_at: int | None) -> float:
    """Progress fraction at the start of compile step i of n. Without tuning the steps share
    5-60 %; with it the tuning step (at tune_at) owns 5-55 %, the steps before it 2-5 % and those
    after it 55-60 %, so the bar never runs backwards."""
    if tune_at is None:
        return 0.05 + 0.55 * i / max(n, 1)
    if i < tune_at:
        return 0.02 + (_TUNE_START - 0.02) * i / max(tune_at, 1)
    if i == tune_at:
        return _TUNE_START
    return _TUNE_END + (_AFTER_TUNE_END - _TUNE_END) * (i - tune_at - 1) / max(n - tune_at - 1, 1)


# --------------------------------------------------------------------------------------------
# verification


def verify_artifact(
    art: Artifact,
    *,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    rtol: float = RTOL,
    atol: float = ATOL,
    cancel: Callable[[], bool] | None = None,
) -> dict:
    """Run ours and onnxruntime on the same random inputs; raise CompiledMismatchError naming the
    first op that differs when they disagree. Returns the check's figures for the manifest."""
    feeds = random_feeds(art.inputs, seed=seed, dims=dims)
    ref = ort_run(art.model_bytes, feeds)
    ours = art.run(feeds)
    ok, err, bad = compare_outputs(ours, ref, rtol, atol)
    scale = max((float(np.abs(r).max()) for r in ref if r.size and np.issubdtype(r.dtype, np.number)), default=0.0)
    result = {
        "checked": True, "inputs": "seeded random", "dims": dims or {}, "rtol": rtol, "atol": atol,
        "scale_rtol": SCALE_RTOL, "max_abs_err": err, "output_scale": scale,
    }
    if ok:
        return result
    _check_cancel(cancel)
    out_name = art.outputs[bad].name if 0 <= bad < len(art.outputs) else "?"
    culprit = locate_mismatch(art.model_bytes, art.target, feeds, rtol, atol, art.pipeline) if art.target == "cpu" else None
    if culprit is not None:
        op, node, node_err = culprit
        raise CompiledMismatchError(
            f"the compiled model disagrees with onnxruntime (output '{out_name}', max abs error {err:.3g}); "
            f"the first difference appears at {op} node '{node}' (max abs error {node_err:.3g}): "
            f"TVM's conversion of {op} computes a wrong result here, so the workbench refuses this compile.",
            op_type=op,
            node_name=node,
            max_abs_err=err,
        )
    raise CompiledMismatchError(
        f"the compiled model disagrees with onnxruntime on output '{out_name}' (max abs error {err:.3g}); refusing to hand back a wrong result.",
        max_abs_err=err,
    )


def locate_mismatch(model_bytes: bytes, target: str, feeds: dict[str, np.ndarray], rtol: float, atol: float, pipeline=None):
    """(op_type, node name, error) of the first node, in topological order, whose output differs
    between TVM and onnxruntime while everything before it agrees; None when none is found.

    Works by exposing every float node output as a graph output and compiling once more."""
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(model_bytes)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001
        inferred = model
    known = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    existing = {o.name for o in model.graph.output}
    order: list[tuple[str, str, str]] = []  # (tensor, op, node)
    for node in model.graph.node:
        for out in node.output:
            if out and out in known and known[out].type.tensor_type.elem_type in (1, 10, 11, 16):
                order.append((out, node.op_type, node.name or f"{node.op_type}({out})"))
                if out not in existing:
                    model.graph.output.append(known[out])
    try:
        from .onnx_io import load_model_bytes

        data = model.SerializeToString()
        probe = compile_model(load_model_bytes(data, "probe.onnx"), target, pipeline=pipeline, verify=False)
        ours = probe.run(feeds)
        ref = ort_run(data, feeds)
    except Exception:  # noqa: BLE001 - localisation is best effort; the refusal stands without it
        logger.exception("mismatch localisation failed")
        return None
    by_name = {o.name: i for i, o in enumerate(model.graph.output)}
    for tensor, op, node in order:
        i = by_name[tensor]
        if i >= len(ours):
            continue
        ok, err, _ = compare_outputs([ours[i]], [ref[i]], rtol, atol)
        if not ok:
            return op, node, err
    return None


# --------------------------------------------------------------------------------------------
# loading an exported folder


def load_artifact(folder: str | os.PathLike) -> Artifact:
    """Load an exported artifact folder (manifest + library) for running and measuring.

    Loading runs native code: the library is a shared object the dynamic loader maps and whose
    initializers run at once, so only load artifacts you built or trust (a GUI path that loads one must ask first). The
    library must lie inside the folder; a manifest naming one elsewhere is refused.
    """
    import tvm

    folder = Path(folder)
    manifest, lib_path = check_artifact_folder(folder)
    target = manifest.get("target", {}).get("kind", "cpu")
    if target == "cuda":
        if not _gpu_present():
            raise WorkbenchError(
                f"{folder} holds a CUDA artifact; loading it needs a CUDA GPU and apache-tvm with CUDA support, and this machine has no usable GPU."
            )
        _register_cuda_compile_callback()
    try:
        with quiet_tvm_scope_warnings():
            lib = tvm.runtime.load_module(str(lib_path))
    except Exception as e:  # noqa: BLE001
        raise WorkbenchError(f"{lib_path} cannot be loaded by the TVM runtime: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}.") from None
    src_model = folder / manifest.get("source_model", SOURCE_MODEL)
    cuda_src = folder / CUDA_SOURCE
    return Artifact(
        library=lib,
        target=target,
        inputs=[TensorSpec.from_json(d) for d in manifest.get("inputs", [])],
        outputs=[TensorSpec.from_json(d) for d in manifest.get("outputs", [])],
        manifest=manifest,
        model_bytes=src_model.read_bytes() if src_model.is_file() else None,
        cuda_source=cuda_src.read_text() if cuda_src.is_file() else None,
        kernel_lineage=manifest.get("kernel_lineage", {}),
        folder=folder,
    )


def check_artifact_folder(folder: str | os.PathLike) -> tuple[dict, Path]:
    """The manifest and library path of an artifact folder, checked without loading anything.

    Reads only JSON and file metadata, so a GUI can refuse a bad folder before it asks the user
    whether to run the native code inside; `load_artifact` runs the same checks.
    """
    folder = Path(folder)
    man_path = folder / MANIFEST
    if not folder.is_dir():
        raise WorkbenchError(f"{folder} is not an artifact folder (expected a folder with {MANIFEST} and {LIBRARY}).")
    if not man_path.is_file():
        raise WorkbenchError(f"{folder} has no {MANIFEST}; it is not an exported artifact.")
    try:
        manifest = json.loads(man_path.read_text())
    except (OSError, ValueError) as e:
        raise WorkbenchError(f"{man_path} cannot be read as JSON ({e}).") from None
    if not isinstance(manifest, dict):
        raise WorkbenchError(f"{man_path} is not an artifact manifest (expected a JSON object).")
    library = manifest.get("library", LIBRARY)
    lib_path = folder / str(library)
    if os.path.isabs(str(library)) or not lib_path.resolve().is_relative_to(folder.resolve()):
        raise WorkbenchError(f"{man_path} names the library '{library}', outside the artifact folder; refusing to load it.")
    if not lib_path.is_file():
        raise WorkbenchError(f"{folder} has no compiled library '{lib_path.name}'.")
    return manifest, lib_path


def _register_cuda_compile_callback() -> None:
    """Older exports may carry CUDA source: let TVM compile it with nvcc at load when needed."""
    try:
        import tvm.support.nvcc  # noqa: F401  registers tvm_callback_cuda_compile

        if shutil.which("nvcc"):
            os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    except Exception:  # noqa: BLE001
        pass
