"""A compiled model as an object (`Artifact`: run, export) and as a folder on disk (`load_artifact`).

An exported artifact folder holds:

* `model.so`: the compiled library (weights embedded as constants; for CUDA the kernels are
  compiled to a fatbin by nvcc at export, so nothing is compiled at load);
* `manifest.json`: inputs/outputs (shapes with symbolic dims, dtypes), target, TVM version, source
  model sha256, rewrites and passes applied, verification and measured figures (read and written
  as a core.compiler.runtime.manifest.Manifest);
* `run.py`: a runner that needs only `apache-tvm` and `numpy`, and `artifact_check.py`, the
  checks it shares with the workbench (core.compiler.runtime.artifact_check);
* `model.onnx`: the model that was compiled (the optimized one when rewrites were applied), so
  `bench ARTIFACT --vs-ort` can compare against onnxruntime later;
* `kernels.cu` for CUDA: the generated CUDA source, for reading;
* `recipe/`: what rebuilds `model.so` with TVM alone (`recipe/rebuild.py`) and how it was made
  (core.compiler.runtime.recipe).

The manifest records every other file's size and sha256 (the recipe's as `recipe/NAME`), and nothing in a folder is loaded before
they are checked (`check_artifact_folder`): loading a shared library runs its code.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import UnsupportedOpError, WorkbenchError
from ..backend.cuda import CUDA_SOURCE, export_cuda_library, register_cuda_compile_callback
from ..target import TargetKind, cannot_run_here, code_arch, gpu_present, host_arch
from .boundary import ALIGNMENT, NumpyBoundary, flatten_outputs, host_tensor, to_numpy
from .artifact_check import CHECK_MODULE, LIBRARY, MANIFEST, RUNNER, SOURCE_MODEL, ArtifactRefused, cannot_load, check_feeds, check_folder, choose_bucket, file_checksum, run_failure, path_text
from .manifest import FORMAT_VERSION, FileChecksum, Manifest, Measured, ShapeBucket, TensorSpec
from .recipe import RECIPE, RecipeSource, copy_recipe, write_recipe

__all__ = [
    "Artifact",
    "Manifest",
    "TensorSpec",
    "load_artifact",
    "check_artifact_folder",
    "specs_from_proto",
    "flatten_outputs",
    "host_tensor",
    "to_numpy",
    "quiet_tvm_scope_warnings",
    "MANIFEST",
    "LIBRARY",
    "RUNNER",
    "SOURCE_MODEL",
    "CHECK_MODULE",
    "FORMAT_VERSION",
]

logger = logging.getLogger(__name__)


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
    recipe: RecipeSource | None = None  # what export writes into recipe/ (compile keeps it; a loaded artifact copies its folder's)
    _vm: Any = None
    _governor: Any = None  # core.compiler.runtime.threads.ThreadGovernor, on first CPU run
    _main: Any = None  # the VM's "main", looked up once (a lookup is a sizeable part of a tiny model's run)
    _functions: dict = field(default_factory=dict, repr=False)  # shape buckets' VM functions, looked up once
    # run's numpy boundary on the CPU (core.compiler.runtime.boundary: kept input buffers, outputs handed
    # out without a copy), and the lock that makes runs from several threads take turns (the VM is not
    # thread-safe; nor would the buffers be)
    _boundary: Any = field(default=None, repr=False)
    _run_lock: Any = field(default_factory=threading.Lock, repr=False)
    # the last run ran under user-mode emulation (code for another architecture: core.compiler.runtime.emulation),
    # so a caller says so, and that it measured nothing
    ran_emulated: bool = False

    # -- running -------------------------------------------------------------------------

    @property
    def device(self):
        import tvm

        return tvm.cuda(0) if self.target == TargetKind.CUDA else tvm.cpu(0)

    @property
    def foreign(self) -> bool:
        """Whether the code is for another architecture than this machine's (an AArch64 build on x86-64):
        `run` then runs it under emulation, and nothing else here can run it."""
        return self.target != TargetKind.CUDA and code_arch(self.manifest.target.cpu) != host_arch()

    def vm(self):
        """The Relax VM (created on first use)."""
        if self._vm is None:
            from tvm import relax

            if self.foreign:
                triple = (self.manifest.target.cpu or {}).get("triple")
                raise WorkbenchError(f"this model is compiled for {triple}, which this {host_arch()} machine runs only under emulation, where "
                                     f"nothing is measured; run or check it here (run, bench --check-only), measure it on such a device.")

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

        try:
            arrays = check_feeds(self.inputs, feeds)  # the checks run.py makes, with its sentences
        except ArtifactRefused as e:
            raise WorkbenchError(str(e)) from None
        if self.target == TargetKind.CUDA:
            return [tvm.runtime.tensor(a, self.device) for a in arrays]
        alignment = self.manifest.input_alignment or ALIGNMENT
        return [host_tensor(a, alignment=alignment) for a in arrays]

    def bucket_for(self, shapes) -> ShapeBucket | None:
        """The shape bucket whose dims the inputs' `shapes` (in input order) match exactly, or None
        (the general main runs): core.compiler.pipeline.buckets."""
        return choose_bucket(self.manifest.shape_buckets, self.inputs, shapes)

    def path_for(self, feeds: dict[str, np.ndarray]) -> str:
        """Which code a run on `feeds` takes, in words: 'bucket batch=2,sequence=96' or 'general kernels'."""
        return path_text(self.bucket_for([np.shape(feeds[s.name]) for s in self.inputs if s.name in feeds]))

    def _function(self, name: str):
        if name == "main":
            if self._main is None:
                self._main = self.vm()["main"]
            return self._main
        fn = self._functions.get(name)
        if fn is None:
            fn = self._functions[name] = self.vm()[name]
        return fn

    def run_device(self, args: list, function: str | None = None):
        """One call of main on device tensors; returns the raw VM result (for timing loops).
        With shape buckets, the bucket whose dims the inputs match is called instead (`function`
        names one to call regardless: "main" for the general kernels).
        On the CPU, as many threads as the cores other processes leave free
        (core.compiler.runtime.threads), unless no kernel has a parallel loop (the manifest's
        parallel_kernels is 0): choosing would then cost a tiny model a few percent for nothing.
        A failure in the VM (a kernel's or the parameters' runtime check) is one sentence
        (artifact_check.run_failure, run.py's too)."""
        if function is None and self.manifest.shape_buckets:
            bucket = self.bucket_for([a.shape for a in args])
            function = bucket.function if bucket is not None else None
        fn = self._function(function or "main")
        try:
            if self.target != TargetKind.CUDA and self.manifest.parallel_kernels != 0:
                if self._governor is None:
                    from .threads import ThreadGovernor

                    self._governor = ThreadGovernor()
                self._governor.before_run()
                try:
                    return fn(*args)
                finally:
                    self._governor.after_run()
            return fn(*args)
        except WorkbenchError:
            raise
        except Exception as e:  # noqa: BLE001 - TVM's runtime checks raise several types
            man_path = str(self.folder / MANIFEST) if self.folder is not None else None
            raise WorkbenchError(run_failure(e, man_path, self.manifest.library)) from e

    def run(self, feeds: dict[str, np.ndarray], function: str | None = None) -> list[np.ndarray]:
        """Run on numpy inputs (by input name); outputs in the model's output order, arrays of
        their own (never views of the inputs, the model's constants or another run's results).
        On the CPU (core.compiler.runtime.boundary) the inputs are checked once per signature, read in
        place where they can be and copied into buffers kept for the next run where they cannot; an
        output the VM allocated in this run is handed out as it is (the array keeps its memory from
        later runs), any other is copied. Runs from several threads take turns. `function`:
        as in run_device (default: the matching shape bucket, else main).
        Code for another architecture runs under emulation (`ran_emulated` says so afterwards): the
        exported folder's run.py under qemu-user (core.compiler.runtime.emulation), which picks the
        shape bucket itself; where emulation is not set up, one sentence says how."""
        boundary = self._boundary  # made by the first CPU run of code for this machine
        if boundary is None and self.foreign:
            return self._run_emulated(feeds)
        with self._run_lock:
            self.ran_emulated = False
            if self.target == TargetKind.CUDA:
                return flatten_outputs(self.run_device(self.to_device(feeds), function))
            if boundary is None:
                boundary = self._boundary = NumpyBoundary(self.inputs, self.library, self.manifest.input_alignment or ALIGNMENT)
            try:
                arrays = boundary.arrays(feeds)
            except ArtifactRefused as e:
                raise WorkbenchError(str(e)) from None
            args = [boundary.tensor(i, a) for i, a in enumerate(arrays)]
            if function is None and self.manifest.shape_buckets:
                bucket = self.bucket_for([a.shape for a in arrays])
                function = bucket.function if bucket is not None else None
            function = function or "main"
            return boundary.outputs(self.run_device(args, function), function)

    def _run_emulated(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """`run` for code of another architecture: the folder's run.py under emulation (a model not
        yet exported is exported to a temporary folder first)."""
        from .emulation import emulator, not_set_up, run_emulated

        triple = str((self.manifest.target.cpu or {}).get("triple"))
        if emulator(triple) is None:
            raise WorkbenchError(not_set_up(f"the artifact {self.folder}" if self.folder is not None else "this model", triple))
        try:
            check_feeds(self.inputs, feeds)
        except ArtifactRefused as e:
            raise WorkbenchError(str(e)) from None
        with self._run_lock, contextlib.ExitStack() as stack:
            folder = self.folder
            if folder is None:
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mlcwb-foreign-")))
                self.export(tmp / "artifact")
                folder, self.folder = self.folder, None
            out = run_emulated(folder, feeds)
            self.ran_emulated = True
        return [out[s.name] for s in self.outputs]

    # -- export --------------------------------------------------------------------------

    def export(self, folder: str | os.PathLike, measured: Measured | None = None) -> Path:
        """Write the deployable folder (library, manifest, runner and its checks, source model,
        CUDA source); the manifest records every other file's size and sha256.

        The files are written into a hidden folder beside `folder` and put in place once all are
        written, so a failure (a full disk: an OSError naming the path) leaves nothing behind and
        an earlier artifact there as it was. A new folder is renamed into place; an earlier
        artifact's folder that holds only its own files is swapped for the new one; any other
        existing folder gets the new files moved in one by one, the manifest last."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise WorkbenchError(f"{folder} exists and is not a folder; choose another export location.")
        made = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = _hidden_beside(folder, "export")
        try:
            self._write_files(staging, measured)
            _put_in_place(staging, folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            for parent in made:  # innermost first: the folders this export created, if still empty
                with contextlib.suppress(OSError):
                    parent.rmdir()
            raise
        self.folder = folder
        return folder

    def _write_files(self, folder: Path, measured: Measured | None) -> None:
        """Every file of the artifact into the empty `folder`, the manifest last."""
        lib_path = folder / LIBRARY
        with _disk_errors(lib_path):
            if self.folder is not None and (self.folder / LIBRARY).exists():
                shutil.copy2(self.folder / LIBRARY, lib_path)
            elif self.target == TargetKind.CUDA:
                with quiet_tvm_scope_warnings():
                    self.manifest.cuda = export_cuda_library(self.library, lib_path)
            else:
                from ..backend.cross import export_options

                with quiet_tvm_scope_warnings():
                    self.library.export_library(str(lib_path), **export_options(self.manifest.target.cpu))
        if self.cuda_source:
            (folder / CUDA_SOURCE).write_text(self.cuda_source)
        if self.model_bytes is not None:
            (folder / SOURCE_MODEL).write_bytes(self.model_bytes)
        here = Path(__file__).parent
        shutil.copy2(here / "run_template.py", folder / RUNNER)
        shutil.copy2(here / CHECK_MODULE, folder / CHECK_MODULE)  # run.py's manifest reader and file checks
        if self.target != TargetKind.CUDA and code_arch(self.manifest.target.cpu) == host_arch():
            self._export_thread_pool(folder)  # built for this machine: another architecture's run.py uses TVM's pool
        if self.recipe is not None:
            write_recipe(folder, self.recipe, self.manifest)
        elif self.folder is not None:  # a loaded artifact exported again: its recipe as it was
            copy_recipe(self.folder, folder, self.manifest.files)
        if measured is not None:
            self.manifest.measured = measured
        from .deploy import deploy_for

        self.manifest.deploy = deploy_for(folder, self.manifest)
        written = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        self.manifest.files = sorted({*written, MANIFEST})
        self.manifest.checksums = {name: FileChecksum(**file_checksum(folder / name)) for name in written}
        (folder / MANIFEST).write_text(json.dumps(self.manifest.to_json(), indent=2) + "\n")

    def _export_thread_pool(self, folder: Path) -> None:
        """The workbench's parallel launch (core.compiler.runtime.native_pool) as a library of the folder,
        which run.py loads before TVM; without it (no C compiler here) run.py uses TVM's pool."""
        from . import native_pool

        try:
            built = native_pool.build()
        except OSError as e:
            logger.warning("the artifact runs on TVM's thread pool: the workbench's could not be built (%s)", e)
            self.manifest.thread_pool = None
            return
        # a failed copy (a full disk) fails the export, as any other file of the folder would: the
        # artifact is not written without the pool it was measured with
        shutil.copy2(built, folder / native_pool.ARTIFACT_FILE)
        self.manifest.thread_pool = native_pool.ARTIFACT_FILE


def load_artifact(folder: str | os.PathLike) -> Artifact:
    """Load an exported artifact folder (manifest + library) for running and measuring.

    Loading runs native code: the library is a shared object the dynamic loader maps and whose
    initializers run at once, so only load artifacts you built or trust (a GUI path that loads one
    must ask first). Nothing is loaded before `check_artifact_folder` has passed: every path in
    the folder, every field, and every file's size and sha256 as the manifest records them.
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
        if target != TargetKind.CUDA and code_arch(manifest.target.cpu) != host_arch():
            lib = None  # another architecture's code: not loadable here, run under emulation (Artifact.run)
        else:
            with quiet_tvm_scope_warnings():
                lib = tvm.runtime.load_module(str(lib_path))
    except Exception as e:  # noqa: BLE001 - TVM raises several types
        raise WorkbenchError(cannot_load(lib_path, e)) from None
    src_model = folder / manifest.source_model  # inside the folder, and its hash checked, by check_artifact_folder
    model_bytes = src_model.read_bytes() if src_model.is_file() else None
    if model_bytes is not None:
        _check_source_model(src_model, model_bytes)
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

    Reads the JSON and hashes the files, so a GUI can refuse a bad folder before it asks the user
    whether to run the native code inside; `load_artifact` runs the same checks, and so does the
    exported run.py (artifact_check.check_folder): the paths the manifest names (confined to the
    folder), then every field, then every file against its recorded size and sha256.
    """
    try:
        values, _man_path, lib_path = check_folder(Path(folder))
    except ArtifactRefused as e:
        raise WorkbenchError(str(e)) from None
    return Manifest.from_checked(values), Path(lib_path)


def _check_source_model(path: Path, data: bytes) -> None:
    """The source model, the file the manifest vouches for, must parse as ONNX (onnxruntime
    would otherwise fail later with an internal error)."""
    import onnx

    try:
        onnx.ModelProto().ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf raises several types on garbage
        raise WorkbenchError(f"{path} is not an ONNX model.") from None


def _hidden_beside(folder: Path, tag: str) -> Path:
    """A new, empty, hidden folder beside `folder` (same parent, so a rename moves it into place)."""
    while True:
        path = folder.parent / f".{folder.name}.{tag}-{secrets.token_hex(4)}"
        try:
            path.mkdir()  # not tempfile.mkdtemp: its mode 0700 would become the artifact's
            return path
        except FileExistsError:
            continue


def _artifact_files(folder: Path) -> set[str] | None:
    """The files an existing artifact folder's manifest lists (None: no readable manifest)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        return None
    sums = data.get("checksums")
    names = {str(n) for n in data["files"]} | (set(map(str, sums)) if isinstance(sums, dict) else set()) | {MANIFEST}
    return names | {n.split("/", 1)[0] for n in names if n.startswith(RECIPE + "/")}


def _put_in_place(staging: Path, folder: Path) -> None:
    """Move the complete artifact in `staging` to `folder` (see Artifact.export)."""
    if not folder.exists() and not folder.is_symlink():
        os.rename(staging, folder)
        return
    old = _artifact_files(folder)
    recipe_ok = not (folder / RECIPE).exists() or _earlier_recipe(folder / RECIPE, old)
    if old is not None and not folder.is_symlink() and {p.name for p in folder.iterdir()} <= old and recipe_ok:
        aside = _hidden_beside(folder, "replaced")
        aside.rmdir()
        os.rename(folder, aside)
        try:
            os.rename(staging, folder)
        except OSError:
            os.rename(aside, folder)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        return
    names = sorted(p.name for p in staging.iterdir())
    for name in names:
        if name == RECIPE and _earlier_recipe(folder / name, old):
            continue
        if (folder / name).is_dir() and not (folder / name).is_symlink():
            raise WorkbenchError(f"{folder / name} is a folder where the artifact's file '{name}' goes; choose another export location.")
    (folder / MANIFEST).unlink(missing_ok=True)  # no longer an artifact until the new manifest is in
    for name in [n for n in names if n != MANIFEST] + [MANIFEST]:
        if name == RECIPE and (folder / name).is_dir():
            shutil.rmtree(folder / name)  # the earlier artifact's recipe (_earlier_recipe)
        os.replace(staging / name, folder / name)
    for name in (old or set()) - set(names):  # the earlier artifact's files the new one does not have
        if name == RECIPE or name.startswith(RECIPE + "/"):
            continue  # the recipe folder was replaced as a whole
        with contextlib.suppress(OSError):
            (folder / name).unlink()
    staging.rmdir()


def _earlier_recipe(path: Path, old: set[str] | None) -> bool:
    """Whether `path` is a recipe folder holding only files of the earlier artifact's manifest
    (`old`), which export may replace; any other folder there is the user's."""
    if old is None or path.is_symlink() or not path.is_dir():
        return False
    return all(p.relative_to(path.parent).as_posix() in old for p in path.rglob("*") if not p.is_dir())


@contextlib.contextmanager
def _disk_errors(path: Path):
    """A full disk while TVM or nvcc writes `path` as an OSError naming it: their errors are
    RuntimeErrors carrying the compiler's message, which is the only place the cause shows."""
    try:
        yield
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - re-raised as it was unless the disk is full
        from ...files import user_errno

        code = user_errno(e)
        if code is not None:
            raise OSError(code, os.strerror(code), str(path)) from e
        raise
