#!/usr/bin/env python3
"""Rebuild the model of this artifact with TVM alone, and check it bit for bit. Needs apache-tvm and numpy.

This file is copied as `recipe/rebuild.py` into every exported artifact folder. It imports nothing of
MLC Workbench: it reads `module.json` beside it (the module exactly as the workbench's code generation
received it) and builds it as that code generation does, with the lowering rules of `fast_math.py`
(copied beside it) on CPU, then writes a new artifact folder and runs the old and the new library on
the same seeded random inputs:

    python recipe/rebuild.py -o NEW_FOLDER           # exit 0: every output identical, 1: one differs
    python recipe/rebuild.py -o NEW_FOLDER --seed 3  # other random inputs for the check

Before anything is loaded the artifact folder is checked with its `artifact_check.py` (every file the
manifest lists, the recipe's included, against its size and sha256): a damaged folder, like a bad
argument, is one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # loading artifact_check.py and fast_math.py leaves no __pycache__ in the artifact
HERE = os.path.dirname(os.path.abspath(__file__))
ARTIFACT = os.path.dirname(HERE)
RECIPE = os.path.basename(HERE)


class Refused(Exception):
    """A folder or argument refused; str() is one sentence."""


def _fail(message: str) -> int:
    print(f"rebuild.py: {message}", file=sys.stderr)
    return 2


def _load_file(name: str, path: str):
    """A module of this artifact, loaded by its path (never another module of that name)."""
    if not os.path.isfile(path):
        raise Refused(f"{path} is missing; the artifact folder is incomplete.")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quiet(fn, *args):
    """fn(*args) without the "Scope Saving:"/"Scope Loaded:" lines TVM 0.27 prints per function."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        return fn(*args)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            return fn(*args)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().splitlines(keepends=True):
                if b"Scope Saving" not in line and b"Scope Loaded" not in line:
                    os.write(2, line)


def _parse(argv):
    parser = argparse.ArgumentParser(prog="rebuild.py", description="Rebuild this artifact's model.so from its recipe with TVM alone "
                                     "and check the new one against it bit for bit.")
    parser.add_argument("-o", "--output", required=True, metavar="NEW_FOLDER", help="the new artifact folder (must not exist, or be empty)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs of the check")
    parser.add_argument("--no-check", action="store_true", help="rebuild only; do not run the two libraries")
    return parser.parse_args(argv)


def _checked_folder(checks) -> dict:
    """The artifact's manifest after artifact_check has checked every listed file; the recipe's own
    files must be among them."""
    manifest, man_path, _lib = checks.check_folder(ARTIFACT)
    sums = manifest["checksums"] or {}
    for name in (f"{RECIPE}/module.json", f"{RECIPE}/rebuild.py"):
        if name not in sums:
            raise Refused(f"{man_path} records no size and sha256 for {name}; re-export the artifact (the recipe is rebuilt "
                          "only from files the manifest vouches for).")
    return manifest


def _output_folder(path: str) -> str:
    out = os.path.abspath(path)
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise Refused(f"{path} exists and is not an empty folder; choose a new one.")
    real_art = os.path.realpath(ARTIFACT)
    if os.path.commonpath([os.path.realpath(out), real_art]) == real_art:
        raise Refused(f"{path} is inside the artifact being rebuilt; choose a folder outside it.")
    return out


def _build(manifest: dict):
    """The VM executable built from module.json as the workbench's code generation builds it."""
    import tvm

    if manifest.get("tvm_version") and manifest["tvm_version"] != tvm.__version__:
        print(f"rebuild.py: this artifact was made with TVM {manifest['tvm_version']} and this is {tvm.__version__}; "
              "the rebuilt code may differ.", file=sys.stderr)
    try:
        target = tvm.target.Target(manifest["target"]["tvm_target"])
    except Exception as e:  # noqa: BLE001 - TVM raises several types
        raise Refused(f"the manifest's target cannot be made by this TVM ({str(e).strip().splitlines()[-1] if str(e).strip() else e}).") from None
    _load_file("mlcwb_recipe_fast_math", os.path.join(HERE, "fast_math.py")).install()
    with open(os.path.join(HERE, "module.json"), encoding="utf-8") as f:
        text = f.read()
    try:
        mod = tvm.ir.load_json(text)
    except Exception as e:  # noqa: BLE001
        raise Refused(f"{os.path.join(HERE, 'module.json')} cannot be loaded by TVM {tvm.__version__} ({type(e).__name__}).") from None
    return _quiet(lambda: tvm.compile(mod, target, relax_pipeline=None))


def _write(ex, manifest: dict, checks, out: str) -> str:
    """The new folder: the new library, the artifact's other files and the recipe copied, the manifest
    with the library's checksum recomputed; written beside `out` and renamed into place."""
    parent = os.path.dirname(out) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.rebuild-", dir=parent)
    try:
        library = manifest["library"]
        linker = _linker(manifest)
        _quiet(lambda: ex.export_library(os.path.join(staging, library), **linker))
        sums = {}
        for name in sorted(manifest["checksums"]):
            if name != library:
                os.makedirs(os.path.dirname(os.path.join(staging, name)) or staging, exist_ok=True)
                shutil.copy2(os.path.join(ARTIFACT, name), os.path.join(staging, name))
        for name in sorted(set(manifest["checksums"]) | {library}):
            sums[name] = checks.file_checksum(os.path.join(staging, name))
        with open(os.path.join(ARTIFACT, checks.MANIFEST), encoding="utf-8") as f:
            data = json.load(f)
        data["checksums"] = sums
        data["files"] = sorted(set(sums) | {checks.MANIFEST})
        data["rebuilt"] = {"from": ARTIFACT, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with open(os.path.join(staging, checks.MANIFEST), "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2) + "\n")
        os.chmod(staging, 0o755)
        if os.path.isdir(out):
            os.rmdir(out)  # empty (checked)
        os.rename(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out


def _foreign_triple(manifest: dict) -> str | None:
    """The triple of code built for another architecture than this machine's, else None."""
    import platform

    triple = ((manifest.get("target") or {}).get("cpu") or {}).get("triple")
    here = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    return triple if triple and {"arm64": "aarch64"}.get(triple.split("-")[0], triple.split("-")[0]) != here else None


def _linker(manifest: dict) -> dict:
    """export_library's cross compiler for another architecture's code (MLCWB_CROSS_CC, else
    TRIPLE-gcc on PATH), as the workbench's export links it."""
    triple = _foreign_triple(manifest)
    if not triple:
        return {}
    from tvm.support import cc

    name = os.environ.get("MLCWB_CROSS_CC", "").strip() or f"{triple}-gcc"
    if not shutil.which(name):
        raise Refused(f"linking the code for {triple} needs the cross compiler {name}, which is not on PATH "
                      "(Debian/Ubuntu: apt-get install gcc-aarch64-linux-gnu), or name one with MLCWB_CROSS_CC.")
    return {"fcompile": cc.cross_compiler(shutil.which(name))}


def _seeded_inputs(np, manifest: dict, seed: int) -> list:
    """Random inputs of the manifest's shapes (symbolic dims at the sizes the compile verified, else 1)."""
    rng = np.random.default_rng(seed)
    dims = ((manifest.get("verification") or {}).get("dims")) or {}
    arrays = []
    for spec in manifest["inputs"]:
        shape = [d if isinstance(d, int) else int(dims.get(d, 1)) for d in spec["shape"]]
        dtype = np.dtype(spec["dtype"])
        if np.issubdtype(dtype, np.floating):
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif dtype == np.bool_:
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 4, size=shape).astype(dtype))
    return arrays


def _flatten(out) -> list:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    if isinstance(out, (bool, int, float)):
        import numpy as np

        return [np.asarray(out)]
    result = []
    for x in out:
        result.extend(_flatten(x))
    return result


def _run(tvm, path: str, arrays: list) -> list:
    from tvm import relax

    vm = relax.VirtualMachine(_quiet(tvm.runtime.load_module, path), tvm.cpu(0))
    return _flatten(vm["main"](*[tvm.runtime.tensor(a) for a in arrays]))


def _compare(manifest: dict, out: str, seed: int) -> int:
    import numpy as np
    import tvm

    if _foreign_triple(manifest):
        print(f"rebuilt {out}; not checked: the code is for {_foreign_triple(manifest)}, which this machine cannot run "
              "(run both libraries on such a device).")
        return 0
    read = tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures", allow_missing=True)
    needs = ((manifest.get("target") or {}).get("cpu") or {}).get("requires") or []
    host = {str(k): bool(v) for k, v in read().items()} if read is not None else {}
    lacking = [f for f in needs if f in host and not host[f]]
    if lacking:
        print(f"rebuilt {out}; not checked: the code is for a CPU with {', '.join(lacking[:4])}, which this one lacks.")
        return 0
    arrays = _seeded_inputs(np, manifest, seed)
    old = _run(tvm, os.path.join(ARTIFACT, manifest["library"]), arrays)
    new = _run(tvm, os.path.join(out, manifest["library"]), arrays)
    names = [o["name"] for o in manifest["outputs"]] + [f"output {i}" for i in range(len(manifest["outputs"]), len(old))]
    differ = []
    for name, a, b in zip(names, old, new):
        if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.shape == b.shape and a.size else float("nan")
            differ.append(f"{name} (max |difference| {diff:.3g})")
    if len(old) != len(new):
        differ.append(f"{len(old)} outputs against {len(new)}")
    if differ:
        print(f"rebuilt {out}; its outputs differ from the original's on seeded inputs (seed {seed}): {', '.join(differ)}.")
        return 1
    print(f"rebuilt {out}; its {len(old)} output(s) are bit for bit the original's on seeded inputs (seed {seed}).")
    return 0


def main(argv=None) -> int:
    args = _parse(argv)
    try:
        checks = _load_file("mlcwb_artifact_check", os.path.join(ARTIFACT, "artifact_check.py"))
    except Refused as e:
        return _fail(str(e))
    try:
        manifest = _checked_folder(checks)
        if manifest.get("device", "cpu") != "cpu" or (manifest.get("target") or {}).get("kind", "cpu") != "cpu":
            raise Refused("this artifact is compiled for CUDA, and rebuild.py rebuilds CPU artifacts only (a CUDA rebuild needs "
                          "a CUDA-enabled TVM, nvcc and a GPU to check it); the recipe's files describe it all the same.")
        out = _output_folder(args.output)
        ex = _build(manifest)
        _write(ex, manifest, checks, out)
    except (Refused, checks.ArtifactRefused) as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"{e.filename or args.output} cannot be written or read ({e.strerror or e}).")
    if args.no_check:
        print(f"rebuilt {out} (not checked: --no-check).")
        return 0
    return _compare(manifest, out, args.seed)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        _fail("interrupted.")
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - one line, as run.py reports its own errors
        if os.environ.get("REBUILD_PY_DEBUG"):
            raise
        print(f"rebuild.py: internal error: {type(e).__name__}: {e} (set REBUILD_PY_DEBUG=1 for the traceback).", file=sys.stderr)
        sys.exit(1)
