"""A compiled model as an object (`Artifact`: run, export) and as a folder on disk (`load_artifact`).

An exported artifact folder holds:

* `model.so`: the compiled library (weights embedded as constants; for CUDA the kernels are
  compiled to a fatbin by nvcc at export, so nothing is compiled at load);
* `manifest.json`: inputs/outputs (shapes with symbolic dims, dtypes), target, TVM version, source
  model sha256, rewrites and passes applied, verification and measured figures (read and written
  as a core.compiler.runtime.manifest.Manifest);
* `run.py`: a runner that needs only `apache-tvm` and `numpy`;
* `model.onnx`: the model that was compiled (the optimized one when rewrites were applied), so
  `bench ARTIFACT --vs-ort` can compare against onnxruntime later;
* `kernels.cu` for CUDA: the generated CUDA source, for reading.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import UnsupportedOpError, WorkbenchError
from ..backend.cuda import CUDA_SOURCE, export_cuda_library, register_cuda_compile_callback
from ..target import TargetKind, cannot_run_here, gpu_present
from .manifest import FORMAT_VERSION, Manifest, Measured, TensorSpec

__all__ = [
    "Artifact",
    "Manifest",
    "TensorSpec",
    "load_artifact",
    "check_artifact_folder",
    "specs_from_proto",
    "flatten_outputs",
    "quiet_tvm_scope_warnings",
    "MANIFEST",
    "LIBRARY",
    "RUNNER",
    "SOURCE_MODEL",
    "FORMAT_VERSION",
]

logger = logging.getLogger(__name__)


MANIFEST = "manifest.json"


LIBRARY = "model.so"


RUNNER = "run.py"


SOURCE_MODEL = "model.onnx"


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


def specs_from_proto(proto) -> tuple[list[TensorSpec], list[TensorSpec]]:
    import onnx

    inits = {t.name for t in proto.graph.initializer}

    def spec(vi, kind: str) -> TensorSpec:
        if not vi.type.HasField("tensor_type"):
            what = {"sequence_type": "a sequence of tensors", "optional_type": "an optional value", "map_type": "a map",
                    "sparse_tensor_type": "a sparse tensor"}.get(vi.type.WhichOneof("value"), "not a tensor")
            raise UnsupportedOpError(
                f"the model's {kind} '{vi.name}' is {what}; the workbench compiles models whose inputs and outputs are "
                f"tensors, so make '{vi.name}' a tensor (for example by ending the graph with ConcatFromSequence)."
            )
        tt = vi.type.tensor_type
        shape: list[int | str] = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                shape.append(int(d.dim_value))
            else:
                shape.append(d.dim_param or f"{vi.name}_dim{i}")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
        return TensorSpec(vi.name, tuple(shape), dtype)

    ins = [spec(vi, "input") for vi in proto.graph.input if vi.name not in inits]
    outs = [spec(vi, "output") for vi in proto.graph.output]
    return ins, outs


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
    manifest: Manifest = field(default_factory=Manifest)
    scheduled_mod: Any = None  # Relax+TIR IRModule before VM lowering (for the memory estimate)
    model_bytes: bytes | None = None  # the ONNX model that was compiled
    cuda_source: str | None = None
    kernel_lineage: dict[str, list[str]] = field(default_factory=dict)  # kernel -> ONNX node names
    folder: Path | None = None
    pipeline: Any = None  # the core.compiler.pipeline.pass_list PassSpecs it was built with (None: the default)
    _vm: Any = None
    _governor: Any = None  # core.compiler.runtime.threads.ThreadGovernor, on first CPU run
    _main: Any = None  # the VM's "main", looked up once (a lookup is a sizeable part of a tiny model's run)

    # -- running -------------------------------------------------------------------------

    @property
    def device(self):
        import tvm

        return tvm.cuda(0) if self.target == TargetKind.CUDA else tvm.cpu(0)

    def vm(self):
        """The Relax VM (created on first use)."""
        if self._vm is None:
            from tvm import relax

            if self.target == TargetKind.CUDA and not gpu_present():
                raise WorkbenchError("this artifact is compiled for CUDA and this machine has no usable CUDA GPU; run it where one is.")
            self.check_runs_here()
            self._vm = relax.VirtualMachine(self.library, self.device)
        return self._vm

    def check_runs_here(self) -> None:
        """Refuse (one sentence) CPU code this machine cannot execute: built for a CPU with
        features this one lacks (AVX-512 code on an AVX2 host), it would die of an illegal
        instruction. The manifest records the CPU (core.compiler.target.target_cpu)."""
        if self.target == TargetKind.CPU:
            why = cannot_run_here(self.manifest.target.cpu)
            if why:
                raise WorkbenchError(why)

    def to_device(self, feeds: dict[str, np.ndarray]) -> list:
        import tvm

        if self.target == TargetKind.CUDA and not gpu_present():
            raise WorkbenchError("this artifact is compiled for CUDA and this machine has no usable CUDA GPU; run it where one is.")

        args = []
        for spec in self.inputs:
            if spec.name not in feeds:
                raise WorkbenchError(f"input '{spec.name}' is missing (the model needs {', '.join(s.name for s in self.inputs)}).")
            # np.asarray(order="C"), not np.ascontiguousarray: the latter makes a 0-d scalar shape (1,)
            a = np.asarray(feeds[spec.name], order="C")
            if a.dtype != np.dtype(spec.dtype):
                raise WorkbenchError(f"input '{spec.name}' has dtype {a.dtype}, the model needs {spec.dtype}.")
            if a.ndim != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, a.shape)):
                raise WorkbenchError(
                    f"input '{spec.name}' has shape {list(a.shape)}, the model needs {list(spec.shape)}."
                )
            args.append(tvm.runtime.tensor(a, self.device))
        return args

    def run_device(self, args: list):
        """One call of main on device tensors; returns the raw VM result (for timing loops).
        On the CPU, as many threads as the cores other processes leave free
        (core.compiler.runtime.threads), unless no kernel has a parallel loop (the manifest's
        parallel_kernels is 0): choosing would then cost a tiny model a few percent for nothing."""
        if self._main is None:
            self._main = self.vm()["main"]
        if self.target != TargetKind.CUDA and self.manifest.parallel_kernels != 0:
            if self._governor is None:
                from .threads import ThreadGovernor

                self._governor = ThreadGovernor()
            self._governor.before_run()
            try:
                return self._main(*args)
            finally:
                self._governor.after_run()
        return self._main(*args)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run on numpy inputs (by input name); outputs in the model's output order."""
        args = self.to_device(feeds)
        try:
            out = self.run_device(args)
        except WorkbenchError:
            raise
        except Exception as e:  # noqa: BLE001 - a kernel's runtime check (shape, bounds) failed on these inputs
            from ...errors import brief_reason

            raise WorkbenchError(f"the compiled model fails on these inputs at run time ({brief_reason(e)}); check the inputs' shapes and values.") from e
        return flatten_outputs(out)

    # -- export --------------------------------------------------------------------------

    def export(self, folder: str | os.PathLike, measured: Measured | None = None) -> Path:
        """Write the deployable folder (library, manifest, runner, source model, CUDA source)."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise WorkbenchError(f"{folder} exists and is not a folder; choose another export location.")
        folder.mkdir(parents=True, exist_ok=True)
        lib_path = folder / LIBRARY
        if self.folder is not None and (self.folder / LIBRARY).exists():
            if self.folder.resolve() != folder.resolve():
                shutil.copy2(self.folder / LIBRARY, lib_path)
        elif self.target == TargetKind.CUDA:
            with quiet_tvm_scope_warnings():
                self.manifest.cuda = export_cuda_library(self.library, lib_path)
        else:
            with quiet_tvm_scope_warnings():
                self.library.export_library(str(lib_path))
        if self.cuda_source:
            (folder / CUDA_SOURCE).write_text(self.cuda_source)
        if self.model_bytes is not None:
            tmp = folder / (SOURCE_MODEL + ".tmp")
            tmp.write_bytes(self.model_bytes)
            os.replace(tmp, folder / SOURCE_MODEL)
        runner = Path(__file__).with_name("run_template.py")
        shutil.copy2(runner, folder / RUNNER)
        if self.target != TargetKind.CUDA:
            self._export_thread_pool(folder)
        if measured is not None:
            self.manifest.measured = measured
        self.manifest.files = sorted({p.name for p in folder.iterdir() if p.is_file()} | {MANIFEST})
        (folder / MANIFEST).write_text(json.dumps(self.manifest.to_json(), indent=2) + "\n")
        self.folder = folder
        return folder


    def _export_thread_pool(self, folder: Path) -> None:
        """The workbench's parallel launch (core.compiler.runtime.native_pool) as a library of the folder,
        which run.py loads before TVM; without it (no C compiler here) run.py uses TVM's pool."""
        from . import native_pool

        dest = folder / native_pool.ARTIFACT_FILE
        try:
            shutil.copy2(native_pool.build(), dest)
        except OSError as e:
            logger.warning("the artifact runs on TVM's thread pool: the workbench's could not be built (%s)", e)
            dest.unlink(missing_ok=True)
            self.manifest.thread_pool = None
            return
        self.manifest.thread_pool = native_pool.ARTIFACT_FILE


def flatten_outputs(out) -> list[np.ndarray]:
    """The VM's result as a flat list of numpy arrays: tensors, tuples (recursively), shapes
    (a Shape node's output comes back as a ShapeTuple: int64, like onnxruntime's) and scalars."""
    import tvm

    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, tvm.runtime.ShapeTuple):
        return [np.array(list(out), dtype=np.int64)]
    if isinstance(out, (bool, int, float, np.generic)):
        return [np.asarray(out)]
    result = []
    for x in out:
        result.extend(flatten_outputs(x))
    return result


def load_artifact(folder: str | os.PathLike) -> Artifact:
    """Load an exported artifact folder (manifest + library) for running and measuring.

    Loading runs native code: the library is a shared object the dynamic loader maps and whose
    initializers run at once, so only load artifacts you built or trust (a GUI path that loads one must ask first). The
    library must lie inside the folder; a manifest naming one elsewhere is refused.
    """
    from .setup import prepare

    prepare()  # TVM's thread settings and the workbench's pool, before TVM is first imported (a no-op once done)
    import tvm

    folder = Path(folder)
    manifest, lib_path = check_artifact_folder(folder)
    target = manifest.target.kind
    if target == TargetKind.CUDA:
        if not gpu_present():
            raise WorkbenchError(
                f"{folder} holds a CUDA artifact; loading it needs a CUDA GPU and apache-tvm with CUDA support, and this machine has no usable GPU."
            )
        register_cuda_compile_callback()
    try:
        with quiet_tvm_scope_warnings():
            lib = tvm.runtime.load_module(str(lib_path))
    except Exception as e:  # noqa: BLE001
        raise WorkbenchError(f"{lib_path} cannot be loaded by the TVM runtime: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}.") from None
    src_model = folder / manifest.source_model  # inside the folder: check_artifact_folder saw to it
    model_bytes = src_model.read_bytes() if src_model.is_file() else None
    if model_bytes is not None:
        _check_source_model(src_model, model_bytes, manifest)
    cuda_src = folder / CUDA_SOURCE
    return Artifact(
        library=lib,
        target=target,
        inputs=list(manifest.inputs),
        outputs=list(manifest.outputs),
        manifest=manifest,
        model_bytes=model_bytes,
        cuda_source=cuda_src.read_text() if cuda_src.is_file() else None,
        kernel_lineage=manifest.kernel_lineage,
        folder=folder,
    )


def check_artifact_folder(folder: str | os.PathLike) -> tuple[Manifest, Path]:
    """The manifest and library path of an artifact folder, checked without loading anything.

    Reads only JSON and file metadata, so a GUI can refuse a bad folder before it asks the user
    whether to run the native code inside; `load_artifact` runs the same checks. The paths the
    manifest names are checked first (confined to the folder), then every field (Manifest.from_json).
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
    lib_path = _inside(folder, man_path, manifest, "library", LIBRARY, "library")
    _inside(folder, man_path, manifest, "source_model", SOURCE_MODEL, "source model")
    _inside(folder, man_path, manifest, "runner", RUNNER, "runner")
    if "thread_pool" in manifest:
        _inside(folder, man_path, manifest, "thread_pool", "", "thread pool library")
    files = manifest.get("files", [])
    if not isinstance(files, list):
        raise WorkbenchError(f"{man_path} lists its files as {type(files).__name__}, not a list of file names.")
    for name in files:
        _inside(folder, man_path, {"file": name}, "file", "", "file")
    checked = Manifest.from_json(manifest, man_path)
    if not lib_path.is_file():
        raise WorkbenchError(f"{folder} has no compiled library '{lib_path.name}'.")
    return checked, lib_path


def _inside(folder: Path, man_path: Path, manifest: dict, key: str, default: str, what: str) -> Path:
    """The path `manifest[key]` names, refused unless it is a plain relative name inside the
    artifact folder: a manifest must not make the workbench read or load files elsewhere."""
    value = manifest.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise WorkbenchError(f"{man_path} names the {what} as {json.dumps(value)}, which is not a file name.")
    path = folder / value
    if os.path.isabs(value) or not path.resolve().is_relative_to(folder.resolve()):
        raise WorkbenchError(f"{man_path} names the {what} '{value}', outside the artifact folder; refusing to read it.")
    return path


def _check_source_model(path: Path, data: bytes, manifest: Manifest) -> None:
    """The source model must be the one compiled: an ONNX file whose hash the manifest records
    (onnxruntime would otherwise fail later with an internal error, or compare another model)."""
    import hashlib

    want = manifest.source_model_sha256
    if want and hashlib.sha256(data).hexdigest() != want:
        raise WorkbenchError(f"{path} is not the model this artifact was compiled from (its sha256 differs from the manifest's).")
    import onnx

    try:
        onnx.ModelProto().ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf raises several types on garbage
        raise WorkbenchError(f"{path} is not an ONNX model.") from None
