"""The tuning database's own JSON record files (templates.json, progress.json, model_ab.json,
winograd.json) and MetaSchedule's line files: reading them so that a corrupt or malformed one
never crashes a compile and never applies more than is safe, and writing them whole.

A file that is not JSON, or not an object of records, is corrupt; an entry of the wrong shape
(a string where a time belongs) is malformed. Either gives one warning naming the file, and what
it held is not applied. Where "no record" would mean "apply more" (model_ab.json: no A/B ran,
so every record applies; progress.json: no confirmation ran, so the fastest MetaSchedule record
applies), the file says it cannot tell (`RecordFile.knows`) and the reader applies none.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from ...errors import WorkbenchError
from ...files import atomic_write

__all__ = [
    "MODEL_AB_FILE",
    "PROGRESS_FILE",
    "SEARCH_CONFIRMED",
    "SEARCH_FILES",
    "TEMPLATES_FILE",
    "RecordFile",
    "check_json_lines",
    "load_records",
    "save_records",
]

logger = logging.getLogger(__name__)


PROGRESS_FILE = "progress.json"
TEMPLATES_FILE = "templates.json"
# progress.json, per workload: which MetaSchedule record won (or none did) when the fastest
# records were measured again beside the default at the model's thread count (core.compiler.tuning.tune)
SEARCH_CONFIRMED = "search_confirmed"
# per model (model_key): the outcome of core.compiler.tuning.ab's model-level A/B, i.e. which of
# the records the database has for the model's kernels a compile of that model applies
MODEL_AB_FILE = "model_ab.json"
# MetaSchedule's JSONDatabase: one JSON array a line
SEARCH_FILES = ("database_workload.json", "database_tuning_record.json")
# what a corrupt record file means for a compile, said in its warning (the other files' records
# are simply not applied: the default schedules and the untuned Winograd rule are safe). A
# corrupt file is set aside as NAME.corrupt when it is written again (save_records), and while
# that is there the file still counts as incomplete (RecordFile.corrupt): a record lost with it
# must not read as "none was ever made", which would apply more than is safe.
_CORRUPT_MEANS = {  # file: (what it means when the file is corrupt, when some of its entries are malformed)
    MODEL_AB_FILE: ("which records the model-level A/Bs kept is unknown, so a model with no good outcome in it gets none "
                    "of the database's records (tuning the model again redoes its A/B)",
                    "a model whose outcome is malformed gets none of the database's records (tuning it again redoes its A/B)"),
    PROGRESS_FILE: ("MetaSchedule records cannot be weighed against the default schedule or their confirmation, so a "
                    "kernel with no good entry in it gets none (tuning again measures them)",
                    "those kernels get no MetaSchedule record (tuning again measures them)"),
}


def check_json_lines(path: Path) -> None:
    """Raise a WorkbenchError naming `path` and the line when a line of it is not a JSON array."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), list)
        except ValueError:
            ok = False
        if not ok:
            raise WorkbenchError(f"The tuning database file {path} is corrupt at line {number} (each line must be a "
                                 "JSON array, as MetaSchedule writes them): move it away to tune that target afresh.")


_NUMBER = (int, float)
_MAYBE_NUMBER = (int, float, type(None))
# The fields of a record that the workbench reads, and their types: a record file edited by hand
# or written by another program must not crash a compile (a string where a time belongs).
# (required fields, {field: allowed types} for those present)
_RECORD_FIELDS: dict[str, tuple[tuple[str, ...], dict[str, tuple]]] = {
    PROGRESS_FILE: ((), {"trials": (int,), "default_ms": _MAYBE_NUMBER, SEARCH_CONFIRMED: (dict, type(None)), "name": (str,)}),
    TEMPLATES_FILE: (("ms", "config"), {"ms": _MAYBE_NUMBER, "default_ms": _MAYBE_NUMBER, "rule": (str,), "complete": (bool,),
                                        "measured": (list,), "space": (int,), "confirmed": (dict, type(None))}),
    MODEL_AB_FILE: (("records", "candidates", "untuned_ms", "tuned_ms", "untuned_p10_ms", "tuned_p10_ms"),
                    {"records": (list,), "candidates": (dict,), "untuned_ms": _NUMBER, "tuned_ms": _NUMBER,
                     "untuned_p10_ms": _NUMBER, "tuned_p10_ms": _NUMBER, "trials": (list,)}),
}
_warned: set[tuple] = set()


def _warn_once(path: Path, message: str) -> None:
    """Log `message` once per version of the file (a compile reads a record file several times)."""
    try:
        stat = path.stat()
        version = (str(path), stat.st_mtime_ns, stat.st_size, message)
    except OSError:
        version = (str(path), message)
    if version not in _warned:
        _warned.add(version)
        logger.warning("%s", message)


def _bad_record(name: str, record: object) -> str | None:
    """Why `record` (one entry of the record file `name`) cannot be used, or None when it can."""
    if not isinstance(record, dict):
        return f"an entry is {type(record).__name__}, not an object"
    required, types = _RECORD_FIELDS.get(name, ((), {}))
    for key in required:
        if key not in record:
            return f"an entry has no '{key}'"
    for key, allowed in types.items():
        if key in record and not isinstance(record[key], allowed):
            return f"'{key}' of an entry is {type(record[key]).__name__}"
    # what is read inside the fields: the A/B's kept records (a set of workload keys), and the
    # confirmation that decides whether a MetaSchedule record applies (search_option)
    if name == MODEL_AB_FILE and not all(isinstance(k, str) for k in record["records"]):
        return "'records' of an entry holds a value that is not a workload key"
    confirmed = record.get(SEARCH_CONFIRMED) if name == PROGRESS_FILE else None
    if confirmed is not None and not (isinstance(confirmed.get("top"), str) and isinstance(confirmed.get("record"), (str, type(None)))):
        return f"'{SEARCH_CONFIRMED}' of an entry has no 'top' and 'record' keys"
    return None


class RecordFile(dict):
    """A record file's usable records, {key: record}, and what could not be read of it: `corrupt`
    (the file is not JSON, or not an object of records, or a corrupt version of it was set aside:
    any record may be missing) and `malformed` ({key: entry as read} of entries of the wrong
    shape; written back as they were when the file is saved, so a fix by hand is not lost)."""

    def __init__(self, records=(), corrupt: bool = False, malformed: dict | None = None):
        super().__init__(records)
        self.corrupt = corrupt
        self.malformed = malformed or {}

    def knows(self, key: str) -> bool:
        """Whether the file tells what became of `key`: it has a usable record of it, or surely none."""
        return key in self or (not self.corrupt and key not in self.malformed)


def _read_json(path: Path) -> tuple[object, str | None]:
    """(what `path` holds, None) or (None, why it is corrupt); (None, None) when it does not exist."""
    try:
        text = path.read_text()
    except OSError:
        return None, None
    try:
        records = json.loads(text)
    except ValueError:
        return None, "is not valid JSON"
    if not isinstance(records, dict):
        return None, f"holds a JSON {type(records).__name__}, not an object of records"
    return records, None


def load_records(folder: Path, name: str) -> RecordFile:
    """A record file of the database folder: {key: record}, empty when missing. A file that is not
    JSON, or not an object of records, is corrupt, and a record of the wrong shape (a string
    where a time belongs) malformed: one warning naming the file, and what it held is not
    applied (_CORRUPT_MEANS says what that means where "no record" would apply more)."""
    path = folder / name
    records, why = _read_json(path)
    means, means_malformed = _CORRUPT_MEANS.get(name, ("its records are not applied", None))
    if why is not None:
        _warn_once(path, f"The tuning database file {path} {why}: {means}.")
        return RecordFile(corrupt=True)
    aside = _set_aside(path)
    if aside.exists():
        _warn_once(aside, f"The tuning database file {path} replaced a corrupt one, kept as {aside}: {means}; "
                          "delete it once that is no longer wanted.")
    if records is None:
        return RecordFile(corrupt=aside.exists())
    bad = {key: why for key, record in records.items() if (why := _bad_record(name, record)) is not None}
    if bad:
        key, why = next(iter(bad.items()))
        _warn_once(path, f"The tuning database file {path} has {len(bad)} malformed record(s) (first: '{key}': {why}): "
                         f"they are not applied{'' if means_malformed is None else ': ' + means_malformed}.")
    return RecordFile({key: record for key, record in records.items() if key not in bad}, aside.exists(),
                      {key: records[key] for key in bad})


def _set_aside(path: Path) -> Path:
    return path.with_name(path.name + ".corrupt")


def save_records(folder: Path, name: str, records: dict[str, dict]) -> None:
    """Write a record file whole, through a temporary file (a crash never leaves half of one). A
    corrupt file there is moved to NAME.corrupt first (what it held stays for the user, and the
    file keeps counting as incomplete: load_records); `records`' malformed entries are written back."""
    path = folder / name
    if _read_json(path)[1] is not None:
        path.replace(_set_aside(path))
        logger.warning("The corrupt tuning database file %s is kept as %s; a new one is written.", path, _set_aside(path))
    data = {**getattr(records, "malformed", {}), **records}
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True).encode())  # a full disk is one sentence naming it
