"""The one place the workbench touches TVM's private (underscore) APIs.

TVM keeps some of what the workbench needs behind leading underscores: relax's VM code generator
and linker (the steps of `tvm.compile`, taken one by one so a cancel can land between them), the
ONNX frontend's converter map and its importer's hooks, and TOPI's Cook-Toom construction of the
Winograd matrices. Each is reached through a small function here with a public name, checked on
TVM 0.27 (`CHECKED_ON`). When an upgrade moves or drops one, the function raises one sentence
("TVM X.Y no longer provides ...; the workbench was checked on 0.27") instead of an AttributeError
deep in a pass; tests/core/compiler/test_tvm_compat.py exercises every function against the
installed TVM and fails if a module outside this one uses the private names.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from typing import Any

from ..errors import WorkbenchError

__all__ = [
    "CHECKED_ON",
    "IMPORTER_HOOKS",
    "LIBRARY_BIN_SYMBOL",
    "RPC_SERVER_START",
    "attach_system_lib_prefix",
    "cook_toom_matrices",
    "importer_params",
    "is_device_module",
    "onnx_convert_map",
    "onnx_graph_importer",
    "patched_convert_map",
    "tir_functions",
    "vm_codegen",
    "vm_link",
]

logger = logging.getLogger(__name__)

CHECKED_ON = "0.27"  # the TVM version every function here was checked on

_ONNX_FRONTEND = "tvm.relax.frontend.onnx.onnx_frontend"
_VM_BUILD = "tvm.relax.vm_build"
# the ONNXGraphImporter methods core.compiler.frontend.onnx_import's importer overrides or calls
IMPORTER_HOOKS = ("_construct_nodes", "_convert_operator", "_new_var", "_check_for_unsupported_ops", "from_onnx")
_convert_map_lock = threading.RLock()


def _tvm_version() -> str:
    import tvm

    return ".".join(str(tvm.__version__).split(".")[:2])


def _missing(what: str) -> WorkbenchError:
    return WorkbenchError(f"TVM {_tvm_version()} no longer provides {what}; the workbench was checked on {CHECKED_ON}.")


def _private(module: str, name: str, what: str) -> Any:
    """`module.name`, or the one-sentence error naming `what` when TVM no longer has it."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise _missing(f"{what} ({module}.{name})") from e


# ---- relax's VM build, step by step (core.compiler.backend.codegen) ---------------------------
def vm_codegen(builder, mod):
    """The VM bytecode of `mod`'s Relax functions emitted into `builder` (a relax.ExecBuilder);
    returns the module with them lowered (`vm_build._vmcodegen(builder, mod, "bytecode")`, TVM 0.27)."""
    return _private(_VM_BUILD, "_vmcodegen", "relax's VM code generator")(builder, mod, "bytecode")


def tir_functions(mod):
    """The TIR functions of `mod` as an IRModule, or None when it has none
    (`vm_build._filter_tir`, TVM 0.27)."""
    return _private(_VM_BUILD, "_filter_tir", "relax's TIR filter of the VM build")(mod)


def attach_system_lib_prefix(tir_mod, target):
    """`tir_mod` with the system-library prefix the target asks for, as tvm.compile attaches it
    (`vm_build._auto_attach_system_lib_prefix`, TVM 0.27)."""
    return _private(_VM_BUILD, "_auto_attach_system_lib_prefix", "the VM build's system-library prefix step")(tir_mod, target, None)


def is_device_module(module) -> bool:
    """Whether an external runtime module is device code (CUDA, ...) that the kernels' library
    imports, rather than a Relax library the VM links (`vm_build._is_device_module`, TVM 0.27)."""
    return bool(_private(_VM_BUILD, "_is_device_module", "the VM build's device-module test")(module))


def vm_link(builder, target, lib, ext_libs: list, params: dict):
    """The linked VM executable's runtime module: bytecode, kernels and external libraries, as
    tvm.compile links them (`vm_build._ffi_api.VMLink`, TVM 0.27); wrap in relax.VMExecutable."""
    ffi_api = _private(_VM_BUILD, "_ffi_api", "relax's VM build FFI functions")
    link = getattr(ffi_api, "VMLink", None)
    if link is None:
        raise _missing("relax's VM linker (tvm.relax.vm_build._ffi_api.VMLink)")
    return link(builder, target, lib, ext_libs, params)


# ---- the ONNX frontend (core.compiler.frontend) -----------------------------------------------
def onnx_convert_map() -> dict[str, Any]:
    """TVM's ONNX converters by op type (`onnx_frontend._get_convert_map()`, TVM 0.27)."""
    return dict(_private(_ONNX_FRONTEND, "_get_convert_map", "the ONNX frontend's converter map")())


@contextlib.contextmanager
def patched_convert_map(extra: dict[str, Any]):
    """For the duration, TVM's ONNX converter map with `extra` (op type -> converter class)
    overlaid, for code that calls TVM's plain `from_onnx`. The frontend reads the map through a
    module-level function (`onnx_frontend._get_convert_map`, TVM 0.27), which is replaced and put
    back; a lock keeps two threads from nesting the swap wrongly."""
    fe = importlib.import_module(_ONNX_FRONTEND)
    with _convert_map_lock:
        original = _private(_ONNX_FRONTEND, "_get_convert_map", "the ONNX frontend's converter map")

        def convert_map():
            m = dict(original())
            m.update(extra)
            return m

        fe._get_convert_map = convert_map
        try:
            yield
        finally:
            fe._get_convert_map = original


def onnx_graph_importer() -> type:
    """TVM's ONNX graph importer class (`onnx_frontend.ONNXGraphImporter`, TVM 0.27), after checking
    it still has the hooks the workbench's importer overrides (IMPORTER_HOOKS: per-node
    construction, operator conversion, input variables, the unsupported-op check). A subclass also
    reads the importer's `_nodes`, `_params` and `bb`, exercised by the adapter's test."""
    cls = _private(_ONNX_FRONTEND, "ONNXGraphImporter", "the ONNX frontend's graph importer")
    gone = [name for name in IMPORTER_HOOKS if not callable(getattr(cls, name, None))]
    if gone:
        raise _missing(f"the ONNX graph importer's {', '.join(gone)}")
    return cls


def importer_params(importer) -> dict[str, Any]:
    """The parameters an ONNX graph importer kept as inputs, by name (its `_params`, a map of
    name -> (Relax var, tensor) in TVM 0.27)."""
    params = getattr(importer, "_params", None)
    if not isinstance(params, dict):
        raise _missing("the ONNX graph importer's kept parameters (ONNXGraphImporter._params)")
    return {name: entry[1] if isinstance(entry, tuple) else entry for name, entry in params.items()}


# ---- RPC (core.compiler.measure.remote, core.compiler.runtime.emulation) -----------------------
# Both are used where the workbench cannot call a function of this module, so they are names:
# the symbol under which an exported library embeds its VM executable (remote.py renames it so a
# device loads the kernels alone), and tvm.rpc.server's in-process start of a server, which the
# emulated device's Python calls itself (tvm.rpc.Server would exec a child interpreter).
# tests/core/compiler/test_tvm_compat.py checks both against the installed TVM.
LIBRARY_BIN_SYMBOL = "__tvm_ffi__library_bin"
RPC_SERVER_START = "_popen_start_rpc_server"


# ---- TOPI (core.compiler.passes.layout.winograd) -----------------------------------------------
def cook_toom_matrices(m: int, r: int = 3):
    """(A, B, G) of Winograd's F(m, r) as float64 numpy arrays: alpha x m, alpha x alpha, alpha x r
    with alpha = m + r - 1, by TOPI's Cook-Toom construction on its interpolation points
    (`winograd_util._cook_toom_convolution`, `_interpolation_points`, TVM 0.27)."""
    module = "tvm.topi.nn.winograd_util"
    points = _private(module, "_interpolation_points", "TOPI's Winograd interpolation points")(m + r - 1)
    return _private(module, "_cook_toom_convolution", "TOPI's Cook-Toom construction")(points, m, r)
