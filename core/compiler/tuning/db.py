"""The tuning database: where tuning records live, how they are read and written, and the pass
that gives each kernel its fastest measured schedule.

A folder per target (`<root>/<target key>/`) holds MetaSchedule's JSONDatabase (searched
schedules keyed by the kernel's structure), `templates.json` (the best template config per
workload, with the default schedule's time) and `progress.json` (trials spent and the default's
time per workload), `model_ab.json` (per model, which records its model-level A/B kept) and
`winograd.json` (core.compiler.tuning.winograd_choice). core.compiler.tuning.tune fills it; compile applies
it (`apply_database_pass`), so a kernel tuned once is fast in every later compile of any model
that has it. How the record files are read and written, corrupt or not: core.compiler.tuning.files.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from ...errors import WorkbenchError
from ..schedules import note_trace
from .files import MODEL_AB_FILE, PROGRESS_FILE, SEARCH_CONFIRMED, SEARCH_FILES, TEMPLATES_FILE, RecordFile, check_json_lines, load_records, save_records

__all__ = [
    "PROGRESS_FILE",
    "TEMPLATES_FILE",
    "default_database_root",
    "target_key",
    "database_dir",
    "open_database",
    "database_coverage",
    "apply_database_pass",
    "prepare_module",
    "kernel_workload",
    "tuned_schedule",
    "record_schedule",
    "database_choice",
    "SEARCH_CONFIRMED",
    "trace_key",
    "search_records",
    "search_option",
    "schedule_from_record",
    "MODEL_AB_FILE",
    "model_key",
    "load_model_ab",
    "save_model_ab",
    "database_records",
]

logger = logging.getLogger(__name__)


def default_database_root() -> Path:
    """Where tuning records live unless a folder is given: shared by all models and runs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlc-workbench" / "tuning"


def target_key(target) -> str:
    """A folder name that identifies what a measurement is valid for: kind, CPU/arch, its feature
    changes (znver4 with -avx512f is another ISA than znver4: "llvm-znver4-no-avx512f-cores2"), cores."""
    kind = target.kind.name
    attrs = target.attrs
    parts = [kind]
    for key in ("mcpu", "mattr", "arch", "num-cores"):
        if key == "mattr" and key in attrs:
            parts.extend(f"no-{str(f)[1:]}" if str(f).startswith("-") else str(f).lstrip("+")
                         for f in attrs[key] if not str(f).startswith("+prefer-no-"))  # LLVM tuning flags, not an ISA
        elif key in attrs:
            parts.append(f"{key.replace('num-cores', 'cores')}{attrs[key]}" if key == "num-cores" else str(attrs[key]))
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts))


def database_dir(root, target) -> Path:
    return Path(root if root is not None else default_database_root()) / target_key(target)


def open_database(root, target):
    """The JSON tuning database for `target` under `root` (created when missing). A MetaSchedule
    file that is not one JSON array a line is refused in one sentence naming it (TVM's own reader
    fails with "Cannot tokenize" or a type error that names neither file nor line)."""
    from tvm.s_tir import meta_schedule as ms

    folder = database_dir(root, target)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkbenchError(f"cannot use tuning database folder '{folder}': {exc.strerror}.") from exc
    for name in SEARCH_FILES:
        check_json_lines(folder / name)
    try:
        return ms.database.JSONDatabase(work_dir=str(folder), module_equality="structural")
    except Exception as exc:  # noqa: BLE001 - TVM's reader: any failure is a file it cannot use
        raise WorkbenchError(f"The tuning database files {', '.join(SEARCH_FILES)} in {folder} cannot be read by "
                             f"MetaSchedule ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): "
                             "move them away to tune that target afresh.") from exc


def _load_progress(folder: Path) -> RecordFile:
    return load_records(folder, PROGRESS_FILE)


def _save_progress(folder: Path, progress: dict[str, dict]) -> None:
    save_records(folder, PROGRESS_FILE, progress)


def _load_templates(folder: Path) -> RecordFile:
    return load_records(folder, TEMPLATES_FILE)


def _save_templates(folder: Path, templates: dict[str, dict]) -> None:
    save_records(folder, TEMPLATES_FILE, templates)


def _template_rules() -> list:
    """core.compiler.schedules rules that expose `candidates(func, target)` configs to search."""
    from ..schedules.cpu_conv import Conv2dNCHW
    from ..schedules.cpu_conv_nchwc import Conv2dNCHWc
    from ..schedules.cpu_depthwise_nchwc import DepthwiseConv2dNCHWc
    from ..schedules.cpu_matmul import Matmul
    from ..schedules.cpu_winograd import Conv2dWinogradNCHWc

    return [Conv2dWinogradNCHWc(), DepthwiseConv2dNCHWc(), Conv2dNCHWc(), Conv2dNCHW(), Matmul()]


def _template_rule(name: str):
    return next((rule for rule in _template_rules() if rule.name == name), None)


def _current_space(record: dict) -> bool:
    """True when `record` searched the rule's present candidate space (else it is redone)."""
    rule = _template_rule(record.get("rule", ""))
    return rule is not None and record.get("space") == getattr(rule, "space_version", 0)


def _prepare(mod):
    """Mark weights as layout free (so tuned kernels may prepack them), as schedule_pass does."""
    from tvm import relax

    return relax.transform.AttachAttrLayoutFreeBuffers()(mod)


def _workload_key(task_mod) -> str:
    import tvm_ffi  # TVM 0.27 keeps structural_hash in tvm_ffi, not tvm.ir

    return f"{tvm_ffi.structural_hash(task_mod) & 0xFFFFFFFFFFFFFFFF:016x}"


def _best_seconds(database, task_mod) -> float | None:
    """Seconds of the kernel's fastest MetaSchedule record that ran (None when none did)."""
    records = search_records(database, task_mod, 1)
    return _record_seconds(records[0]) if records else None


def _record_seconds(record) -> float:
    secs = [float(s) for s in record.run_secs]
    return sum(secs) / len(secs)


def search_records(database, task_mod, k: int) -> list:
    """The `k` fastest MetaSchedule records of a kernel that ran (fastest first; [] when none)."""
    if database is None or not database.has_workload(task_mod):
        return []
    return [r for r in database.get_top_k(database.commit_workload(task_mod), k) if r.run_secs]


def trace_key(record) -> str:
    """A short key of a record's schedule: its trace with every sampling decision (the same
    schedule read back from the database files has the same key)."""
    import hashlib

    return hashlib.sha1(str(record.trace.as_json(remove_postproc=False)).encode()).hexdigest()[:16]


# how far down a kernel's records a confirmed winner is looked for (it was among the few fastest)
_CONFIRMED_LOOKUP = 16


def search_option(database, task_mod, entry: dict) -> tuple | None:
    """(MetaSchedule record a compile may give the kernel, its one-thread ms), or None.

    `entry` is the kernel's progress.json entry. Where tuning confirmed its search
    (SEARCH_CONFIRMED: the fastest records measured again beside the default at the model's
    thread count), the record that won there, or None when none did. Where the fastest record
    is not the one that confirmation saw first (a schedule filed by hand since, or a database
    from before confirmations), the fastest record, as measured."""
    records = search_records(database, task_mod, _CONFIRMED_LOOKUP)
    if not records:
        return None
    confirmed = entry.get(SEARCH_CONFIRMED)
    if confirmed is None or confirmed.get("top") != trace_key(records[0]):
        return records[0], _record_seconds(records[0]) * 1e3
    winner = confirmed.get("record")
    found = next((r for r in records if winner is not None and trace_key(r) == winner), None)
    return None if found is None else (found, _record_seconds(found) * 1e3)


def schedule_from_record(record, task_mod):
    """A Schedule of the kernel module with the record's trace replayed (raises when it does not apply)."""
    from tvm import s_tir

    sch = s_tir.Schedule(task_mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def _task_module(func):
    """The IRModule MetaSchedule's task extraction makes of a kernel (its workload key)."""
    import tvm

    return tvm.IRModule({"main": func.with_attr("global_symbol", "main")})


def database_coverage(mod, target, database=None) -> tuple[int, int]:
    """(kernels of the fused module the database holds tuned records for - template configs
    or searched schedules -, kernels in all)."""
    import tvm

    folder = database_dir(database, target)
    have_search = (folder / "database_workload.json").exists()
    templates = _load_templates(folder)
    funcs = [f for _, f in _prepare(mod).functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    if not have_search and not templates:
        return 0, len(funcs)
    db = open_database(database, target) if have_search else None
    known = 0
    for func in funcs:
        task_mod = _task_module(func)
        known += _workload_key(task_mod) in templates or (db is not None and _best_seconds(db, task_mod) is not None)
    return known, len(funcs)


def model_key(mod) -> str:
    """The database's key of a whole model: a hash of its kernels' workload keys (the fused module
    as the tuning pass sees it, weights marked layout-free; kernels already scheduled left out).
    The same model through the same pipeline has the same key, whatever its file is called."""
    import hashlib

    import tvm

    keys = sorted(
        _workload_key(_task_module(f))
        for _, f in _prepare(mod).functions_items()
        if isinstance(f, tvm.tirx.PrimFunc) and not (f.attrs is not None and "tirx.is_scheduled" in f.attrs)
    )
    return hashlib.sha1("\n".join(keys).encode()).hexdigest()[:16]


def load_model_ab(root, target) -> RecordFile:
    """model_ab.json of the database folder for `target`: model key -> A/B outcome ({} when none)."""
    return load_records(database_dir(root, target), MODEL_AB_FILE)


def save_model_ab(root, target, key: str, outcome: dict) -> None:
    """File the A/B outcome of the model `key` (replacing an earlier one)."""
    folder = database_dir(root, target)
    folder.mkdir(parents=True, exist_ok=True)
    outcomes = load_records(folder, MODEL_AB_FILE)
    outcomes[key] = outcome
    save_records(folder, MODEL_AB_FILE, outcomes)


def _dropped_by_ab(folder: Path, mod) -> set[str] | None:
    """Workload keys the model's A/B tried and did not keep: `candidates` less `records`. A record
    the A/B never saw (a kernel tuned or filed by hand since, or a model it never measured) is
    not in it, so it applies as it did before A/Bs existed. None (drop every record) where
    model_ab.json cannot tell: it is corrupt, or the model's outcome is malformed (load_records
    warns): applying all would undo the A/B's point, none is the untuned build it measured against."""
    outcomes = load_records(folder, MODEL_AB_FILE)
    key = model_key(mod)
    if not outcomes.knows(key):
        return None
    outcome = outcomes.get(key)
    if not outcome:
        return set()
    return set(outcome.get("candidates", {})) - set(outcome.get("records", []))


def _database_schedules(mod, target, database, only: set[str] | None, skip: set[str], apply: bool = True) -> tuple[Any, dict[str, str]]:
    """(`mod` with the database's tuned schedules applied, {workload key: which record, e.g.
    'template 0.0123 ms' or 'search 0.0456 ms'} of the kernels that got one). Only workloads in
    `only` (all when None) and not in `skip`. With `apply` False nothing is scheduled: the
    records the database would choose are only listed (and `mod` comes back prepared)."""
    import tvm

    folder = database_dir(database, target)
    have_search = (folder / "database_workload.json").exists()
    templates = _load_templates(folder)
    if not have_search and not templates:
        return mod, {}
    db = open_database(database, target) if have_search else None
    saved = _load_progress(folder)
    mod = _prepare(mod)
    updated, applied = {}, {}
    for gvar, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc) or (func.attrs is not None and "tirx.is_scheduled" in func.attrs):
            continue
        task_mod = _task_module(func)
        key = _workload_key(task_mod)
        if key in skip or (only is not None and key not in only):
            continue
        template = templates.get(key)
        options = _schedule_options(key, task_mod, template, db, saved)
        choice = _choose(options)
        if choice in (None, "default"):
            continue
        if not apply:
            applied[key] = f"{choice} {dict(options)[choice]:.6g} ms"
            continue
        scheduled = None
        if choice == "template":
            scheduled = _apply_template(func, target, template, gvar.name_hint)
        elif choice == "search":
            scheduled = _apply_search_record(search_option(db, task_mod, saved.get(key, {}))[0], task_mod, gvar.name_hint)
        if scheduled is not None:
            updated[gvar] = scheduled.without_attr("global_symbol").with_attr("tirx.is_scheduled", True)
            applied[key] = f"{choice} {dict(options)[choice]:.6g} ms"
    for gvar, func in updated.items():
        mod[gvar] = func
    return mod, applied


def database_records(mod, target, database=None) -> dict[str, str]:
    """{workload key: which record ('template 0.0123 ms', 'search 0.0456 ms')}: the kernels of the
    fused module `mod` the database gives a tuned schedule, before any model-level A/B outcome is
    taken into account (listed, not scheduled: the A/B's builds schedule them). (A record re-tuned since an A/B has another figure: the A/B is redone.)"""
    return _database_schedules(mod, target, database, None, set(), apply=False)[1]


def apply_database_pass(target, database=None, only=None):
    """A module pass that gives every kernel the database knows its fastest tuned schedule -
    unless the default schedule measured faster (then schedule_pass schedules it as usual).
    Kernels it applies are marked scheduled; the rest are left to schedule_pass.

    Where a model-level A/B (core.compiler.tuning.ab) measured this model (model_key), the records
    it did not keep are left out, so the compiled model is no slower than untuned on this host as
    far as the A/B could tell; records the A/B never saw apply as before. `only` (workload keys)
    applies exactly those records that are in it and ignores the A/B's outcome (the A/B's own
    candidate builds)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="ApplyTuningDatabase")
    def _pass(mod, _ctx):
        folder = database_dir(database, target)
        if only is not None:
            return _database_schedules(mod, target, database, set(only), set())[0]
        if not (folder / "database_workload.json").exists() and not (folder / TEMPLATES_FILE).exists():
            return mod
        dropped = _dropped_by_ab(folder, mod)
        return mod if dropped is None else _database_schedules(mod, target, database, None, dropped)[0]

    return _pass


# How much faster than the default a tuned schedule must have measured to replace it. A pick
# within the noise is as likely to be slower (docs/performance.md: SEARCH_MARGIN). (Template configs
# must also have won again beside the default at the model's thread count:
# tuning_runners.confirm_at_threads.)
SEARCH_MARGIN = 0.03


def _choose(options: list[tuple[str, float | None]]) -> str | None:
    """The kind of schedule a kernel gets from `_schedule_options`: the fastest, where a tuned
    one (template config or searched record) must beat a known default by SEARCH_MARGIN; None
    when nothing is known."""
    default_ms = options[0][1]
    known = [(kind, ms) for kind, ms in options if ms is not None]
    if default_ms is not None:
        known = [(kind, ms) for kind, ms in known if kind == "default" or ms < default_ms * (1.0 - SEARCH_MARGIN)]
    if not known:
        return None
    return min(known, key=lambda x: x[1])[0]


def _schedule_options(key: str, task_mod, template: dict | None, db, saved: RecordFile) -> list[tuple[str, float | None]]:
    """[(kind, ms)] of one kernel's measured schedules: default first, then the best template
    config and the MetaSchedule database's record (searched and confirmed, or made by hand:
    `search_option`)."""
    default_ms = saved.get(key, {}).get("default_ms")
    if default_ms is None and template is not None:
        default_ms = template.get("default_ms")
    options: list[tuple[str, float | None]] = [("default", default_ms)]
    if template is not None:
        options.append(("template", template["ms"]))
    # where progress.json cannot tell whether a record was confirmed, or what the default takes, none applies
    found = search_option(db, task_mod, saved.get(key, {})) if saved.knows(key) else None
    if found is not None:
        options.append(("search", found[1]))
    return options


def _apply_template(func, target, record: dict, name: str):
    """`func` scheduled by the template rule's recorded config, or None (default schedule)."""
    rule = _template_rule(record.get("rule", ""))
    if rule is None:
        logger.warning("tuning record for %s names an unknown rule %s", name, record.get("rule"))
        return None
    try:
        sch = rule.apply(func, target, record["config"])
    except Exception as exc:  # noqa: BLE001 - a stale record: the default schedule will do
        logger.warning("tuned config for %s does not apply: %s", name, exc)
        return None
    if sch is None:
        return None
    note_trace(name, f"tuning database: template config of {record.get('rule')} {record['config']}", sch)
    return sch.mod["main"]


def _apply_search_record(record, task_mod, name: str):
    try:
        sch = schedule_from_record(record, task_mod)
    except Exception as exc:  # noqa: BLE001 - a stale record: the default schedule will do
        logger.warning("tuning record for %s does not apply: %s", name, exc)
        return None
    note_trace(name, "tuning database: a MetaSchedule record (searched, or a hand schedule filed by Use in compile)", sch)
    return sch.mod["main"]


# ---- hand-made schedules (core.compiler.manual.session) ------------------------------------------

def prepare_module(mod):
    """The fused module as tuning and apply_database_pass see it (weights marked layout-free):
    a kernel taken from it has the workload key the database files its records under."""
    return _prepare(mod)


def kernel_workload(func) -> str:
    """The database key of one kernel (a PrimFunc of prepare_module's result)."""
    return _workload_key(_task_module(func))


def tuned_schedule(func, target, database=None):
    """The database's fastest tuned schedule of kernel `func`: (kind 'template' | 'search',
    scheduled PrimFunc, recorded ms), or None when the database has none for its workload."""
    folder = database_dir(database, target)
    have_search = (folder / "database_workload.json").exists()
    template = _load_templates(folder).get(kernel_workload(func))
    if not have_search and template is None:
        return None
    task_mod = _task_module(func)
    db = open_database(database, target) if have_search else None
    saved = _load_progress(folder)
    options = [(k, ms) for k, ms in _schedule_options(kernel_workload(func), task_mod, template, db, saved)[1:] if ms is not None]
    for kind, ms in sorted(options, key=lambda x: x[1]):
        name = str(func.attrs["global_symbol"]) if func.attrs is not None and "global_symbol" in func.attrs else "kernel"
        if kind == "template":
            scheduled = _apply_template(func, target, template, name)
        else:
            scheduled = _apply_search_record(search_option(db, task_mod, saved.get(kernel_workload(func), {}))[0], task_mod, name)
        if scheduled is not None:
            return kind, scheduled, ms
    return None


def record_schedule(func, target, trace, ms: float, database=None, default_ms: float | None = None) -> str:
    """File a schedule made by hand (a trace on kernel `func`, measured at `ms`) in the MetaSchedule
    database of `target`, where compile's apply_database_pass weighs it against the default and
    the tuned schedules like any searched record. `default_ms`, measured beside it, becomes the
    default's figure when the database has none. Returns the database folder."""
    from tvm.s_tir import meta_schedule as ms_

    folder = database_dir(database, target)
    db = open_database(database, target)
    task_mod = _task_module(func)
    workload = db.commit_workload(task_mod)
    db.commit_tuning_record(
        ms_.database.TuningRecord(
            trace, workload, run_secs=[float(ms) / 1e3], target=target, args_info=ms_.arg_info.ArgInfo.from_prim_func(task_mod["main"])
        )
    )
    # an entry even without a default's figure: where progress.json was corrupt (RecordFile.knows),
    # a kernel with none gets no MetaSchedule record, and this one was filed to be applied
    saved = _load_progress(folder)
    entry = saved.setdefault(kernel_workload(func), {})
    if default_ms is not None and entry.get("default_ms") is None:
        entry["default_ms"] = float(default_ms)
    _save_progress(folder, saved)
    return str(folder)


def database_choice(func, target, database=None) -> tuple[str | None, list[tuple[str, float | None]]]:
    """Which schedule a compile applying `database` gives kernel `func` ('default', 'template',
    'search' or None when the database knows nothing of it), and the options it weighed."""
    folder = database_dir(database, target)
    have_search = (folder / "database_workload.json").exists()
    task_mod = _task_module(func)
    key = kernel_workload(func)
    db = open_database(database, target) if have_search else None
    options = _schedule_options(key, task_mod, _load_templates(folder).get(key), db, _load_progress(folder))
    if all(ms is None for kind, ms in options if kind != "default"):
        return None, options
    return _choose(options), options
