"""Linking code built for another architecture: the cross C compiler that turns an AArch64
module into the artifact's model.so (Debian's gcc-aarch64-linux-gnu), found on PATH or named by
MLCWB_CROSS_CC, and refused in one sentence saying what to install when it is missing."""
from __future__ import annotations

import os
import shutil

__all__ = ["CROSS_CC_ENV", "cross_compiler_for", "export_options"]

CROSS_CC_ENV = "MLCWB_CROSS_CC"

# Debian's package of the cross compiler, by the first word of the triple
_PACKAGES = {"aarch64": "gcc-aarch64-linux-gnu"}


def cross_compiler_for(triple: str) -> str:
    """The path of the C compiler that links code for `triple` (e.g. aarch64-linux-gnu-gcc), or
    one sentence (WorkbenchError) naming what to install."""
    from ...errors import WorkbenchError

    named = os.environ.get(CROSS_CC_ENV, "").strip()
    if named:
        found = shutil.which(named)
        if not found:
            raise WorkbenchError(f"{CROSS_CC_ENV}={named} names no compiler on PATH; set it to the C compiler that links code for {triple}.")
        return found
    arch, _, rest = triple.partition("-")
    candidates = [f"{triple}-gcc", f"{arch}-linux-gnu-gcc"] if "linux" in rest else [f"{triple}-gcc"]
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    package = _PACKAGES.get(arch, f"a C cross compiler for {triple}")
    raise WorkbenchError(f"linking the code for {triple} into model.so needs the cross compiler {candidates[-1]}, which is not on PATH; "
                         f"install it (Debian/Ubuntu: apt-get install {package}) or name one with {CROSS_CC_ENV}.")


def export_options(cpu: dict | None) -> dict:
    """export_library's keyword arguments for code built for the target_cpu record `cpu`: the
    cross compiler when its triple is another architecture's, else none (this machine's cc)."""
    from ..target import code_arch, host_arch

    if not cpu or code_arch(cpu) == host_arch():
        return {}
    from tvm.support import cc

    return {"fcompile": cc.cross_compiler(cross_compiler_for(str(cpu["triple"])))}
