"""CUDA export: carry compiled code (an nvcc fatbin) in the library, not source to be compiled at load."""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from ...errors import WorkbenchError
from ..target import gpu_present, host_cores

__all__ = [
    "cuda_source_of",
    "nvcc_fatbin",
    "explain_nvcc_failure",
    "kernel_at_line",
    "export_cuda_library",
    "prefer_nvcc_for_jit",
    "host_cuda_arch",
    "register_cuda_compile_callback",
    "CUDA_SOURCE",
]

logger = logging.getLogger(__name__)


CUDA_SOURCE = "kernels.cu"


# nvcc targets for the exported fatbin: machine code for A100 (sm_80) and H100/H200 (sm_90) plus
# PTX that the driver JIT-compiles on any other GPU from sm_80 on. MLCWB_CUDA_ARCHS=sm_86,sm_89
# replaces the machine-code list (each architecture adds a full nvcc pass over the kernels).
_CUDA_GENCODES = tuple(a.strip() for a in os.environ.get("MLCWB_CUDA_ARCHS", "sm_80,sm_90").split(",") if a.strip())


_CUDA_PTX = "compute_80"


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
    # one pass per architecture: run them side by side on the cores this process may use
    cmd += ["--threads", str(max(1, min(len(_CUDA_GENCODES) + 1, host_cores())))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise WorkbenchError(explain_nvcc_failure(r.stderr or r.stdout, source))
    return out.read_bytes()


_NVCC_ERROR = re.compile(r"^(?:.*[\\/])?" + re.escape(CUDA_SOURCE) + r"\((\d+)\): (?:catastrophic )?error[^:]*: (.*)$", re.M)
_KERNEL_DEF = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")


def kernel_at_line(source: str, line: int) -> str | None:
    """The __global__ function whose definition holds 1-based `line` of `source` (None: the
    preamble before the first kernel, or a line past the end)."""
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        return None
    own = _KERNEL_DEF.search(lines[line - 1])
    if own:  # the line declares or defines a kernel (a bad parameter name lands here)
        return own.group(1)
    for text in reversed(lines[: line - 1]):
        m = _KERNEL_DEF.search(text)
        if m and not text.rstrip().endswith(";"):  # a definition, not a forward declaration
            return m.group(1)
    return None


def explain_nvcc_failure(stderr: str, source: str) -> str:
    """One sentence for a failed nvcc run: the kernel and the first compiler error.

    nvcc reports `kernels.cu(LINE): error: TEXT`; the line is mapped back to the __global__
    function that contains it, since that (not a line of generated code) is what a user can find
    in the Lowering panel and the kernel lineage."""
    errors = _NVCC_ERROR.findall(stderr or "")
    if not errors:
        last = [ln.strip() for ln in (stderr or "").strip().splitlines() if ln.strip()][-1:] or ["no message"]
        return f"nvcc could not compile the generated CUDA kernels: {last[0].rstrip('.')}."
    line, text = int(errors[0][0]), errors[0][1].strip().rstrip(".")
    kernel = kernel_at_line(source, line)
    where = f"kernel '{kernel}': {CUDA_SOURCE} line {line}" if kernel else f"code: {CUDA_SOURCE} line {line} (before the first kernel)"
    more = {0: "", 1: " (1 more error follows)"}.get(len(errors) - 1, f" ({len(errors) - 1} more errors follow)")
    return f"nvcc could not compile the generated CUDA {where}: {text}{more}."


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
            # "cuda" (source) where no GPU is; where one is, TVM already compiled the kernels for
            # that GPU alone ("ptx", "fatbin", "cubin"): either way the fatbin for every listed
            # architecture replaces the code, so the manifest's list is what ships
            if fmt in ("cuda", "ptx", "fatbin", "cubin"):
                # code is the trailing u64-length-prefixed field
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


def _packed_imports(mod) -> bytes:
    """The serialized import tree TVM embeds in a library (u64 size + payload), as bytes."""
    import tvm

    return tvm.get_global_func("runtime.ModulePackImportsToTensor")(mod).numpy().tobytes()


def _host_triple() -> str:
    """The triple of the C compiler that links the library (as TVM's export_library asks it)."""
    import tvm
    from tvm.support import cc

    ask = getattr(cc.create_shared, "get_target_triple", None)
    triple = (ask() if ask else None) or tvm.get_global_func("target.llvm_get_system_triple")()
    return str(triple).strip()


def export_cuda_library(lib, path: Path) -> dict:
    """export_library, with the CUDA module's source swapped for an nvcc fatbin; returns the
    manifest's record of how the kernels ship (its 'cuda').

    The import tree (host code, CUDA module, weights) is packed into the library as an LLVM
    object, as TVM does by default: TVM's alternative, a C file with every byte written out as a
    hex literal, took a C compiler over 17 GB of memory for ResNet-50's weights."""
    import tvm

    source = cuda_source_of(lib)
    with tempfile.TemporaryDirectory(prefix="mlcwb-cuda-") as tmp:
        tmpd = Path(tmp)
        fatbin = nvcc_fatbin(source, tmpd) if source else b""
        llvm_target = json.dumps({"kind": "llvm", "mtriple": _host_triple()})

        def pack_imports(mod, is_system_lib, prefix, workspace_dir):
            blob = _packed_imports(mod)
            if fatbin:
                blob = _patch_cuda_blob(blob, fatbin)
            obj = tvm.get_global_func("codegen.codegen_blob")(blob, is_system_lib, llvm_target, prefix)
            out = os.path.join(workspace_dir, f"{prefix}devc.o")
            obj.write_to_file(out)
            return out

        lib.export_library(str(path), fpack_imports=pack_imports)
    return {
        "kernels": "fatbin" if fatbin else "none",
        "fatbin_bytes": len(fatbin),
        "architectures": list(_CUDA_GENCODES) + [_CUDA_PTX + " (PTX, JIT-compiled by the driver on newer GPUs)"],
        "needs_at_load": "an NVIDIA driver and apache-tvm with CUDA support; no compiler",
        "source": CUDA_SOURCE,
    }


def prefer_nvcc_for_jit() -> None:
    """With a GPU present TVM compiles CUDA kernels while building (NVRTC by default, which needs
    the cuda-bindings package); use nvcc instead when that package is missing and nvcc is here."""
    import importlib.util

    if importlib.util.find_spec("cuda") is None and shutil.which("nvcc"):
        os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")


def host_cuda_arch() -> str | None:
    """sm_XY of the local GPU, when there is one (so code is generated for what will run it)."""
    if not gpu_present():
        return None
    import tvm

    try:
        return "sm_" + str(tvm.cuda(0).compute_version).replace(".", "")
    except Exception:  # noqa: BLE001
        return None


def register_cuda_compile_callback() -> None:
    """Older exports may carry CUDA source: let TVM compile it with nvcc at load when needed."""
    try:
        import tvm.support.nvcc  # noqa: F401  registers tvm_callback_cuda_compile

        if shutil.which("nvcc"):
            os.environ.setdefault("TVM_CUDA_COMPILE_MODE", "nvcc")
    except Exception:  # noqa: BLE001
        pass
