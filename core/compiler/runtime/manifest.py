"""The artifact's manifest (manifest.json) as typed records: what every reader of a compile's
facts (the CLI, the GUI, bench) reads by attribute instead of by key.

`Manifest.from_json` checks the JSON as it reads it: a field of the wrong type, or a required one
missing (`inputs`, `outputs`), is refused in one sentence naming the file and the field, never a
KeyError or TypeError later. `to_json` writes the same keys the manifest always had, so artifacts
exported before these records load, and keys this version does not know are kept as they were.
The exported run.py (run_template.py) reads the JSON itself: it needs only TVM and numpy.

The measured figures (`LatencyStats`, `MemoryUse`, `MemoryEstimate`, `Measured`) are defined here
because the manifest records them; core.compiler.measure.bench produces them.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ...errors import WorkbenchError
from ..target import TARGET_KINDS, TargetKind

__all__ = [
    "Manifest",
    "ManifestTarget",
    "TensorSpec",
    "PassRecord",
    "TuningRecord",
    "Verification",
    "LatencyStats",
    "MemoryUse",
    "MemoryEstimate",
    "Measured",
    "FORMAT_VERSION",
]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1

_MISSING = object()


# ---------------------------------------------------------------------------------------------
# reading JSON with one-sentence refusals


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {json.dumps(value[:40])}"
    return {dict: "an object", list: "a list"}.get(type(value), type(value).__name__)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_dims(v) -> bool:
    return isinstance(v, dict) and all(_is_int(n) for n in v.values())


class _Fields:
    """One JSON object of a manifest, read field by field: `get` returns a field's value after
    checking it, or refuses in one sentence that names the file and the field's path."""

    def __init__(self, data: Any, source: str, where: str = ""):
        self.source, self.where = source, where
        self.data = data if isinstance(data, dict) else self.fail("", "an object", data)

    def fail(self, key: str, expected: str, value: Any = _MISSING) -> NoReturn:
        name = f"{self.where}.{key}" if self.where and key else (key or self.where or "manifest")
        if value is _MISSING:
            raise WorkbenchError(f"{self.source} is not a valid artifact manifest: it has no '{name}' ({expected}).")
        raise WorkbenchError(f"{self.source} is not a valid artifact manifest: its '{name}' is {_describe(value)}, not {expected}.")

    def get(self, key: str, ok: Callable[[Any], bool], expected: str, default: Any = _MISSING) -> Any:
        """The field `key` (`default` when absent, or null with a default of None); refused unless `ok(value)`."""
        value = self.data.get(key, _MISSING)
        if value is _MISSING or (value is None and default is None):
            if default is _MISSING:
                self.fail(key, expected)
            return default
        if not ok(value):
            self.fail(key, expected, value)
        return value

    def number(self, key: str, default: Any = None) -> float | None:
        return self.get(key, _is_num, "a number", default)

    def whole(self, key: str, default: Any = None) -> int | None:
        return self.get(key, _is_int, "a whole number", default)

    def text(self, key: str, default: Any = None) -> str | None:
        return self.get(key, lambda v: isinstance(v, str), "a text", default)

    def obj(self, key: str) -> "_Fields | None":
        """The nested object `key` as _Fields (None when absent or null)."""
        value = self.get(key, lambda v: isinstance(v, dict), "an object", None)
        return None if value is None else _Fields(value, self.source, f"{self.where}.{key}" if self.where else key)

    def items(self, key: str, expected: str, default: Any = _MISSING) -> list["_Fields"]:
        """The list of objects `key` (required unless a default is given), each as _Fields named like 'inputs[0]'."""
        values = self.get(key, lambda v: isinstance(v, list), expected, default)
        name = f"{self.where}.{key}" if self.where else key
        return [_Fields(v, self.source, f"{name}[{i}]") for i, v in enumerate(values)]


def _without_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


# ---------------------------------------------------------------------------------------------
# the records


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: name, shape (ints, or names of symbolic dims), dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}

    @staticmethod
    def from_json(d: dict | _Fields, source: str = "manifest.json") -> "TensorSpec":
        f = d if isinstance(d, _Fields) else _Fields(d, source, "tensor")
        dtype = f.get("dtype", lambda v: isinstance(v, str) and _is_dtype(v), "a numpy dtype name")
        shape = f.get("shape", lambda v: isinstance(v, list) and all(_is_int(x) or isinstance(x, str) for x in v),
                      "a list of sizes and dim names")
        return TensorSpec(f.get("name", lambda v: isinstance(v, str), "a text"), tuple(shape), dtype)

    def concrete_shape(self, dims: dict[str, int] | None = None, default: int = 1) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else int((dims or {}).get(d, default)) for d in self.shape)


def _is_dtype(name: str) -> bool:
    try:
        np.dtype(name)
    except TypeError:
        return False
    return True


@dataclass
class ManifestTarget:
    """What the code was built for: the kind, TVM's target as JSON, and the CPU record of
    core.compiler.target.target_cpu ({"name", "features", "requires"})."""

    kind: TargetKind = TargetKind.CPU
    tvm_target: dict = field(default_factory=dict)
    cpu: dict | None = None

    def to_json(self) -> dict:
        return {"kind": str(self.kind), "tvm_target": self.tvm_target, "cpu": self.cpu}

    @staticmethod
    def from_fields(f: _Fields) -> "ManifestTarget":
        return ManifestTarget(
            kind=TargetKind(f.get("kind", lambda v: v in TARGET_KINDS, " or ".join(TARGET_KINDS), "cpu")),
            tvm_target=f.get("tvm_target", lambda v: isinstance(v, dict), "an object", {}),
            cpu=f.get("cpu", lambda v: isinstance(v, dict), "an object", None),
        )


@dataclass
class PassRecord:
    """One step of the compile and the seconds it took."""

    name: str
    seconds: float | None = None

    def to_json(self) -> dict:
        return _without_none({"name": self.name, "seconds": self.seconds})


@dataclass
class TuningRecord:
    """What tuning did for this compile: its options, its database folder, the tuning run's own
    summary, how many kernels run on schedules from the database, and the model-level A/B's
    outcome (core.compiler.tuning.ab's record, read by its describe_ab)."""

    trials: int = 0
    budget_s: float | None = None
    database: str = ""
    summary: str | None = None
    kernels: int = 0
    kernels_from_database: int = 0
    winograd_choices_from_database: int = 0
    model_ab: dict | None = None

    def to_json(self) -> dict:
        return {"trials": self.trials, "budget_s": self.budget_s, "database": self.database, "summary": self.summary,
                "kernels": self.kernels, "kernels_from_database": self.kernels_from_database,
                "winograd_choices_from_database": self.winograd_choices_from_database, "model_ab": self.model_ab}

    @staticmethod
    def from_fields(f: _Fields) -> "TuningRecord":
        return TuningRecord(
            trials=f.whole("trials", 0), budget_s=f.number("budget_s"), database=f.text("database", ""), summary=f.text("summary"),
            kernels=f.whole("kernels", 0), kernels_from_database=f.whole("kernels_from_database", 0),
            winograd_choices_from_database=f.whole("winograd_choices_from_database", 0),
            model_ab=f.get("model_ab", lambda v: isinstance(v, dict), "an object", None),
        )


@dataclass
class Verification:
    """The compile's check against a reference (core.compiler.check.verification): when `checked`,
    on which inputs, against which reference, with which tolerances (core.tolerances), the largest
    error and the outputs' largest |value|; otherwise why not (`reason`)."""

    checked: bool = False
    reason: str | None = None
    inputs: str | None = None  # "seeded random" or "user-supplied"
    reference: str | None = None  # "onnxruntime" or "onnx reference evaluator"
    dims: dict[str, int] = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None
    scale_rtol: float | None = None
    max_abs_err: float | None = None
    output_scale: float | None = None

    def to_json(self) -> dict:
        if not self.checked:
            return {"checked": False, "reason": self.reason}
        return {"checked": True, "inputs": self.inputs, "reference": self.reference, "dims": dict(self.dims), "rtol": self.rtol,
                "atol": self.atol, "scale_rtol": self.scale_rtol, "max_abs_err": self.max_abs_err, "output_scale": self.output_scale}

    @staticmethod
    def from_fields(f: _Fields) -> "Verification":
        return Verification(
            checked=f.get("checked", lambda v: isinstance(v, bool), "true or false", False), reason=f.text("reason"),
            inputs=f.text("inputs"), reference=f.text("reference"), dims=f.get("dims", _is_dims, "dim names with sizes", {}),
            rtol=f.number("rtol"), atol=f.number("atol"), scale_rtol=f.number("scale_rtol"), max_abs_err=f.number("max_abs_err"),
            output_scale=f.number("output_scale"),
        )


@dataclass
class LatencyStats:
    """Latency over timed runs, in ms (None where there were no runs; records from before p10
    and max were kept lack them)."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None
    runs: int = 0

    def to_json(self) -> dict:
        return {"median": self.median, "p10": self.p10, "p90": self.p90, "min": self.min, "max": self.max, "runs": self.runs}

    @staticmethod
    def from_fields(f: _Fields) -> "LatencyStats":
        return LatencyStats(median=f.number("median"), p10=f.number("p10"), p90=f.number("p90"), min=f.number("min"), max=f.number("max"),
                            runs=f.whole("runs", 0))


@dataclass
class MemoryUse:
    """Memory of a benchmark run, in bytes: the constants, activations with and without TVM's
    static memory planning, and the process's peak resident set (core.compiler.measure.bench)."""

    params_bytes: int | None = None
    planned_bytes: int | None = None
    unplanned_bytes: int | None = None
    peak_rss_bytes: int | None = None

    def to_json(self) -> dict:
        return {"params_bytes": self.params_bytes, "planned_bytes": self.planned_bytes, "unplanned_bytes": self.unplanned_bytes,
                "peak_rss_bytes": self.peak_rss_bytes}

    @staticmethod
    def from_fields(f: _Fields) -> "MemoryUse":
        return MemoryUse(f.whole("params_bytes"), f.whole("planned_bytes"), f.whole("unplanned_bytes"), f.whole("peak_rss_bytes"))


@dataclass
class MemoryEstimate:
    """The compile-time memory estimate, in bytes, with the symbolic dims it was bound to and how
    many allocations had no static size (core.compiler.measure.bench.estimate_memory)."""

    params_bytes: int = 0
    planned_bytes: int = 0
    unplanned_bytes: int = 0
    dims: dict[str, int] = field(default_factory=dict)
    dynamic_allocations: int = 0

    def to_json(self) -> dict:
        return {"params_bytes": self.params_bytes, "planned_bytes": self.planned_bytes, "unplanned_bytes": self.unplanned_bytes,
                "dims": dict(self.dims), "dynamic_allocations": self.dynamic_allocations}

    @staticmethod
    def from_fields(f: _Fields) -> "MemoryEstimate":
        return MemoryEstimate(f.whole("params_bytes", 0), f.whole("planned_bytes", 0), f.whole("unplanned_bytes", 0),
                              f.get("dims", _is_dims, "dim names with sizes", {}), f.whole("dynamic_allocations", 0))


@dataclass
class Measured:
    """The figures an exported manifest records from a benchmark: latency and memory, the dims
    they were measured at, onnxruntime's latency and the ratio where it ran, and the machine."""

    latency_ms: LatencyStats = field(default_factory=LatencyStats)
    memory: MemoryUse = field(default_factory=MemoryUse)
    dims: dict[str, int] = field(default_factory=dict)
    ort_latency_ms: LatencyStats | None = None
    ratio_vs_ort: float | None = None
    measured_on: str | None = None

    def to_json(self) -> dict:
        d: dict[str, Any] = {"latency_ms": self.latency_ms.to_json(), "memory": self.memory.to_json(), "dims": dict(self.dims)}
        if self.ort_latency_ms is not None:
            d["ort_latency_ms"] = self.ort_latency_ms.to_json()
            d["ratio_vs_ort"] = self.ratio_vs_ort
        if self.measured_on is not None:
            d["measured_on"] = self.measured_on
        return d

    @staticmethod
    def from_fields(f: _Fields) -> "Measured":
        lat, mem, ort = f.obj("latency_ms"), f.obj("memory"), f.obj("ort_latency_ms")
        return Measured(
            latency_ms=LatencyStats.from_fields(lat) if lat else LatencyStats(),
            memory=MemoryUse.from_fields(mem) if mem else MemoryUse(),
            dims=f.get("dims", _is_dims, "dim names with sizes", {}),
            ort_latency_ms=LatencyStats.from_fields(ort) if ort else None,
            ratio_vs_ort=f.number("ratio_vs_ort"),
            measured_on=f.text("measured_on"),
        )


# the manifest's keys in the order they are written; the optional ones are left out when None
_KEYS = ("format_version", "name", "library", "runner", "source_model", "source_model_sha256", "source_path", "target", "device",
         "tvm_version", "created", "inputs", "outputs", "code_names", "rewrites", "converter_fixes", "passes", "tuning",
         "kernel_lineage", "parallel_kernels", "memory_estimate", "verification", "compile_seconds", "measured", "cuda",
         "thread_pool", "files")
_OPTIONAL = {"parallel_kernels", "memory_estimate", "verification", "compile_seconds", "measured", "cuda", "thread_pool"}


@dataclass
class Manifest:
    """What manifest.json records about a compiled model (see core.compiler.runtime.artifact).

    An Artifact straight from compile_model carries one from the start; `files`, `measured` and
    `thread_pool` are filled in by Artifact.export."""

    format_version: int = FORMAT_VERSION
    name: str = "model"
    library: str = "model.so"
    runner: str = "run.py"
    source_model: str = "model.onnx"
    source_model_sha256: str | None = None
    source_path: str | None = None
    target: ManifestTarget = field(default_factory=ManifestTarget)
    device: str = "cpu"
    tvm_version: str | None = None
    created: str | None = None  # ISO 8601, UTC
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)
    code_names: dict[str, str] = field(default_factory=dict)  # a symbolic dim's name -> its C identifier in the module
    rewrites: list[str] = field(default_factory=list)
    converter_fixes: list[str] = field(default_factory=list)
    passes: list[PassRecord] = field(default_factory=list)
    tuning: TuningRecord | None = None
    kernel_lineage: dict[str, list[str]] = field(default_factory=dict)  # kernel -> ONNX node names
    parallel_kernels: int | None = None  # CPU: kernels with a parallel loop (None: not counted)
    memory_estimate: MemoryEstimate | None = None
    verification: Verification | None = None
    compile_seconds: float | None = None
    measured: Measured | None = None
    cuda: dict | None = None  # CUDA: how the kernels ship (core.compiler.backend.cuda.export_cuda_library)
    thread_pool: str | None = None  # the workbench's thread pool library in the folder (None: TVM's)
    files: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, written back as read

    def to_json(self) -> dict:
        values = {
            **{k: getattr(self, k) for k in _KEYS},
            "target": self.target.to_json(),
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "passes": [p.to_json() for p in self.passes],
            "tuning": self.tuning.to_json() if self.tuning is not None else None,
            "memory_estimate": self.memory_estimate.to_json() if self.memory_estimate is not None else None,
            "verification": self.verification.to_json() if self.verification is not None else None,
            "measured": self.measured.to_json() if self.measured is not None else None,
        }
        d = {k: values[k] for k in _KEYS if not (k in _OPTIONAL and values[k] is None)}
        return {**d, **{k: v for k, v in self.extra.items() if k not in d}}

    @staticmethod
    def from_json(data: Any, source: str | Path = "manifest.json") -> "Manifest":
        """The manifest in `data` (parsed JSON), checked as it is read; `source` names the file in
        the one-sentence refusal of a field that is missing or of the wrong type."""
        f = _Fields(data, str(source))
        target, tuning, memory, verification, measured = (f.obj(k) for k in ("target", "tuning", "memory_estimate", "verification", "measured"))
        lineage = f.get("kernel_lineage", lambda v: isinstance(v, dict) and all(_is_str_list(x) for x in v.values()),
                        "kernel names with lists of ONNX node names", {})
        return Manifest(
            format_version=f.whole("format_version", FORMAT_VERSION),
            name=f.text("name", "model"),
            library=f.text("library", "model.so"),
            runner=f.text("runner", "run.py"),
            source_model=f.text("source_model", "model.onnx"),
            source_model_sha256=f.text("source_model_sha256"),
            source_path=f.text("source_path"),
            target=ManifestTarget.from_fields(target) if target else ManifestTarget(),
            device=f.get("device", lambda v: v in TARGET_KINDS, " or ".join(TARGET_KINDS), "cpu"),
            tvm_version=f.text("tvm_version"),
            created=f.text("created"),
            inputs=[TensorSpec.from_json(t) for t in f.items("inputs", "a list of tensors")],
            outputs=[TensorSpec.from_json(t) for t in f.items("outputs", "a list of tensors")],
            code_names=f.get("code_names", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
                             "dim names with identifiers", {}),
            rewrites=f.get("rewrites", _is_str_list, "a list of texts", []),
            converter_fixes=f.get("converter_fixes", _is_str_list, "a list of texts", []),
            passes=[PassRecord(p.get("name", lambda v: isinstance(v, str), "a text"), p.number("seconds"))
                    for p in f.items("passes", "a list of steps", [])],
            tuning=TuningRecord.from_fields(tuning) if tuning else None,
            kernel_lineage={k: list(v) for k, v in lineage.items()},
            parallel_kernels=f.whole("parallel_kernels"),
            memory_estimate=MemoryEstimate.from_fields(memory) if memory else None,
            verification=Verification.from_fields(verification) if verification else None,
            compile_seconds=f.number("compile_seconds"),
            measured=Measured.from_fields(measured) if measured else None,
            cuda=f.get("cuda", lambda v: isinstance(v, dict), "an object", None),
            thread_pool=f.text("thread_pool"),
            files=f.get("files", _is_str_list, "a list of file names", []),
            extra={k: v for k, v in f.data.items() if k not in _KEYS},
        )

    @property
    def built_for(self) -> str:
        """'znver4 -avx512f': the CPU the code is for and the feature changes ('' when unrecorded)."""
        cpu = self.target.cpu or {}
        return " ".join([str(cpu.get("name", "")), *(str(x) for x in cpu.get("features", []))]).strip()
