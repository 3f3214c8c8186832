"""An artifact's `recipe/`: what rebuilds its `model.so` with TVM alone, and how it was made, to read.

compile keeps, beside the executable, the modules the recipe needs (`RecipeSource`); export writes:

* `module.json`: the module exactly as code generation received it (after every step: graph passes,
  legalization, fusion, schedules, weight prepacking, VM lowering), as TVM's own JSON (`tvm.ir.save_json`:
  it round-trips exactly, constants included, where the TVMScript printer does not);
* `rebuild.py` (a copy of rebuild_template.py): loads it, builds it as the workbench's code generation
  does (`tvm.compile(mod, target, relax_pipeline=None)`), writes a new artifact folder and checks it
  against this one bit for bit; `fast_math.py` (CPU): the lowering rules for float32 exp/erf/tanh/
  sigmoid/pow that code generation installs (core.compiler.backend.fast_math, copied: it imports only TVM);
* `relax_module.py`: the Relax module after the workbench's graph passes, as TVMScript (weights elided);
* `schedules/KERNEL.py`: each kernel's schedule as TVM's schedule trace in Python, and where it came
  from (a schedule rule, a tuning record, a hand schedule); `tuning_records.json` for the tuned ones;
* `stages/NN_STEP.py`: the module after each step as TVMScript, as the Lowering panel shows it;
* `README.md`: what each file is, the TVM version and target that made them.

Every file is listed in the manifest with its size and sha256, as the artifact's other files are.
"""
from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RECIPE", "REBUILD", "MODULE_JSON", "RecipeSource", "write_recipe", "copy_recipe"]

logger = logging.getLogger(__name__)

RECIPE = "recipe"  # the folder inside the artifact
REBUILD = "rebuild.py"
MODULE_JSON = "module.json"
RELAX_MODULE = "relax_module.py"
FAST_MATH = "fast_math.py"
TUNING_RECORDS = "tuning_records.json"


@dataclass
class RecipeSource:
    """What compile keeps for the recipe: the target, the module code generation received (`final`),
    the Relax module after the graph passes as TVMScript (`relax`), the module after each step that
    changed it as TVMScript (`stages`: (step name, text), the import first) and each kernel's
    core.compiler.schedules.KernelTrace. Compile prints each step's module as it goes (`of_stages`),
    so neither it nor the artifact holds every step's module, and their weights."""

    target: Any
    final: Any
    relax: str | None = None
    stages: list[tuple[str, str]] = field(default_factory=list)
    traces: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_stages(cls, target, final, relax: str | None, stage_texts: list[tuple[str, str]], traces) -> "RecipeSource":
        """From each step's (name, TVMScript) in order, the import first: the steps that changed it."""
        texts: list[tuple[str, str]] = []
        previous = None
        for i, (name, text) in enumerate(stage_texts, start=1):  # 1: the Relax import, as the Lowering panel numbers it
            if text != previous:
                texts.append((f"{i:02d}_{_safe(name)}", text))
            previous = text
        return cls(target, final, relax, texts, traces)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:120] or "_"


def _kernels(mod) -> list[str]:
    import tvm

    return sorted(gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc))


def _trace_of(kernel: str, traces: dict):
    """The trace noted for `kernel`, or for the kernel it was split from: relax's
    SplitLayoutRewritePreproc renames a scheduled kernel whose weight repacking it moves out
    ('K' becomes 'K_prepacked')."""
    if kernel in traces:
        return traces[kernel]
    return traces.get(kernel.removesuffix("_prepacked"))


def _trace_python(kernel: str, source: str, trace) -> str:
    head = [f"# kernel {kernel}: {source}",
            "# TVM's schedule trace of it, as Python: apply(sch) replays it on tvm.s_tir.Schedule(kernel before ScheduleTIR).",
            "# (Some rules rewrite a kernel before scheduling it; ../module.json holds every kernel exactly as built.)",
            "", "", "def apply(sch):"]
    try:
        lines = list(trace.as_python(remove_postproc=False)) if trace is not None else []
    except Exception as e:  # noqa: BLE001 - a trace TVM cannot print is reported, not invented
        return "\n".join(head[:1] + [f"# no trace: TVM could not print it ({type(e).__name__})", ""])
    return "\n".join(head + ["    " + ln for ln in lines or ["pass"]]) + "\n"


def write_recipe(folder: Path, source: RecipeSource, manifest) -> None:
    """The recipe's files into `folder`/recipe (`manifest`: the artifact's, for the README)."""
    import tvm

    root = Path(folder) / RECIPE
    root.mkdir()
    (root / MODULE_JSON).write_text(tvm.ir.save_json(source.final))
    here = Path(__file__).parent
    shutil.copy2(here / "rebuild_template.py", root / REBUILD)
    cpu = "gpu" not in source.target.keys
    if cpu:
        from ..backend import fast_math

        shutil.copy2(fast_math.__file__, root / FAST_MATH)
    if source.relax is not None:
        (root / RELAX_MODULE).write_text(source.relax)
    kernels = _kernels(source.final)
    traced = {k: t for k in kernels if (t := _trace_of(k, source.traces)) is not None}
    if traced:
        (root / "schedules").mkdir()
        for kernel, kt in traced.items():
            (root / "schedules" / f"{_safe(kernel)}.py").write_text(_trace_python(kernel, kt.source, kt.trace))
    tuned = [{"kernel": k, "source": kt.source, "trace": _trace_json(kt.trace)} for k, kt in traced.items() if kt.source.startswith("tuning")]
    if tuned:
        (root / TUNING_RECORDS).write_text(json.dumps(tuned, indent=1) + "\n")
    stage_names = _write_stages(root / "stages", source.stages)
    (root / "README.md").write_text(_readme(manifest, source, cpu, kernels, traced, bool(tuned), stage_names))


def _trace_json(trace):
    try:
        return None if trace is None else json.loads(_tvm_json(trace.as_json(remove_postproc=False)))
    except Exception:  # noqa: BLE001 - recorded as missing, said so in the README
        return None


def _tvm_json(value) -> str:
    """TVM's JSON-style object (ffi containers) as JSON text."""
    def plain(v):
        if isinstance(v, (str, int, float, bool)) or v is None:
            return v
        if hasattr(v, "items"):
            return {str(k): plain(x) for k, x in v.items()}
        if hasattr(v, "value"):
            return plain(v.value)
        try:
            return [plain(x) for x in v]
        except TypeError:
            return str(v)

    return json.dumps(plain(value))


def _write_stages(folder: Path, stages: list[tuple[str, str]]) -> list[str]:
    """The stages' TVMScript (as the Lowering panel prints it), a file per step that changed the
    module; returns the file names."""
    names = []
    for stem, text in stages:
        folder.mkdir(exist_ok=True)
        names.append(f"{stem}.py")
        (folder / names[-1]).write_text(text)
    return names


def copy_recipe(src_folder: Path, dst_folder: Path, listed: list[str]) -> None:
    """A loaded artifact's recipe files (those its manifest lists) into a new export's folder."""
    for name in listed:
        if name.startswith(RECIPE + "/") and (src_folder / name).is_file():
            (dst_folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src_folder / name, dst_folder / name)


def _readme(manifest, source: RecipeSource, cpu: bool, kernels: list[str], traced: dict, tuned: bool, stages: list[str]) -> str:
    untraced = [k for k in kernels if k not in traced]
    lines = [
        f"# Recipe of {manifest.name}",
        "",
        f"Made by TVM {manifest.tvm_version} for the target `{json.dumps(manifest.target.tvm_target)}`.",
        "It rebuilds `../model.so` with TVM, numpy and nothing of MLC Workbench:",
        "",
        "    python recipe/rebuild.py -o NEW_FOLDER",
        "",
        "writes a new artifact folder and runs both libraries on the same seeded inputs: exit status 0 when",
        "every output is bit for bit the same, 1 when one differs (the largest difference is printed), 2 on",
        "a damaged folder or bad arguments. It needs the same TVM version (JSON of another version may not",
        "load) and, as every export, a C compiler to link the library.",
        "",
        "| file | what it is |",
        "| --- | --- |",
        "| `../model.onnx` | the ONNX model as compiled: after the user's edits and rewrites |",
        f"| `{MODULE_JSON}` | the module exactly as code generation received it (every step done: graph passes, "
        "LegalizeOps, fusion, schedules, prepacked weights, VM lowering), as `tvm.ir.save_json` writes it; what `rebuild.py` builds |",
        f"| `{REBUILD}` | the rebuild (see above) |",
    ]
    if cpu:
        lines.append(f"| `{FAST_MATH}` | the float32 exp/erf/tanh/sigmoid/pow lowering rules code generation installs for LLVM "
                     "(a copy of the workbench's; it imports only TVM); `rebuild.py` installs them too |")
    if source.relax is not None:
        lines.append(f"| `{RELAX_MODULE}` | the Relax module after the workbench's graph passes, before LegalizeOps, as TVMScript "
                     "(weights elided: `metadata[...]`); for reading |")
    if traced:
        lines.append("| `schedules/KERNEL.py` | each kernel's schedule as TVM's schedule trace in Python (`apply(sch)`), "
                     "headed by where it came from: a schedule rule, a tuning record or a hand schedule |")
    if tuned:
        lines.append(f"| `{TUNING_RECORDS}` | the tuning records this compile applied: kernel, record, trace (JSON) |")
    if stages:
        lines.append("| `stages/NN_STEP.py` | the module after each step, as TVMScript, as the Lowering panel shows it "
                     "(a step that changed nothing has no file) |")
    lines.append("| `README.md` | this file |")
    lines.append("")
    if untraced:
        shown = ", ".join(f"`{k}`" for k in untraced[:12]) + (f" and {len(untraced) - 12} more" if len(untraced) > 12 else "")
        why = ("dlight's GPU rules keep no trace" if not cpu else
               "no schedule rule matched them, or their schedule was made without a trace")
        lines += [f"No trace for {len(untraced)} of {len(kernels)} kernels ({why}): {shown}. "
                  f"`{MODULE_JSON}` and the stages hold them as built.", ""]
    if not cpu:
        lines += ["This artifact is for CUDA: `rebuild.py` says so and stops (rebuilding it needs a CUDA-enabled TVM, "
                  "nvcc and a GPU to check); the files here describe it all the same.", ""]
    return "\n".join(lines)
