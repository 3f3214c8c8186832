"""The artifact's manifest (manifest.json) as typed records: what every reader of a compile's
facts (the CLI, the GUI, bench) reads by attribute instead of by key.

`Manifest.from_json` checks the JSON as it reads it: a field of the wrong type, or a required one
missing (`inputs`, `outputs`), is refused in one sentence naming the file and the field, never a
KeyError or TypeError later. The checks are core.compiler.runtime.artifact_check.read_manifest's,
the reader the exported run.py uses too (it ships in the folder), so both refuse the same manifest
with the same sentence. `to_json` writes the same keys the manifest always had, so artifacts
exported before these records load, and keys this version does not know are kept as they were.

The measured figures (`LatencyStats`, `MemoryUse`, `MemoryEstimate`, `Measured`) are defined here
because the manifest records them; core.compiler.measure.bench produces them.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import WorkbenchError
from ..target import TargetKind
from .artifact_check import FORMAT_VERSION, ArtifactRefused, read_manifest

__all__ = [
    "Manifest",
    "ManifestTarget",
    "TensorSpec",
    "FileChecksum",
    "PassRecord",
    "TuningRecord",
    "Verification",
    "ShapeBucket",
    "LatencyStats",
    "MemoryUse",
    "MemoryEstimate",
    "Measured",
    "FORMAT_VERSION",
]

logger = logging.getLogger(__name__)


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
    def from_json(d: dict) -> "TensorSpec":
        """From a tensor record read_manifest has checked."""
        return TensorSpec(d["name"], tuple(d["shape"]), d["dtype"])

    def concrete_shape(self, dims: dict[str, int] | None = None, default: int = 1) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else int((dims or {}).get(d, default)) for d in self.shape)


@dataclass
class ManifestTarget:
    """What the code was built for: the kind, TVM's target as JSON, and the CPU record of
    core.compiler.target.target_cpu ({"name", "features", "requires"})."""

    kind: TargetKind = TargetKind.CPU
    tvm_target: dict = field(default_factory=dict)
    cpu: dict | None = None

    def to_json(self) -> dict:
        return {"kind": str(self.kind), "tvm_target": self.tvm_target, "cpu": self.cpu}



@dataclass(frozen=True)
class FileChecksum:
    """A file of the artifact as export wrote it: its size in bytes and its sha256 (hex)."""

    size: int
    sha256: str

    def to_json(self) -> dict:
        return {"size": self.size, "sha256": self.sha256}


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



@dataclass
class ShapeBucket:
    """A shape bucket (core.compiler.pipeline.buckets): the library's function `function` is the
    model's main compiled for the symbolic dims `dims`; `verification` is its compile check at
    that shape, `general_verification` the general main's check at the same shape."""

    function: str
    dims: dict[str, int]
    verification: Verification | None = None
    general_verification: Verification | None = None

    @property
    def label(self) -> str:
        """'batch=2,sequence=96'."""
        return ",".join(f"{k}={v}" for k, v in self.dims.items())

    def to_json(self) -> dict:
        d: dict[str, Any] = {"function": self.function, "dims": dict(self.dims)}
        if self.verification is not None:
            d["verification"] = self.verification.to_json()
        if self.general_verification is not None:
            d["general_verification"] = self.general_verification.to_json()
        return d

    @staticmethod
    def from_checked(v: dict) -> "ShapeBucket":
        return ShapeBucket(v["function"], dict(v["dims"]),
                           Verification(**v["verification"]) if v["verification"] else None,
                           Verification(**v["general_verification"]) if v["general_verification"] else None)


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



# the manifest's keys in the order they are written; the optional ones are left out when None
_KEYS = ("format_version", "name", "library", "runner", "source_model", "source_model_sha256", "source_path", "target", "device",
         "tvm_version", "created", "inputs", "outputs", "code_names", "rewrites", "converter_fixes", "passes", "tuning",
         "kernel_lineage", "shape_buckets", "parallel_kernels", "memory_estimate", "verification", "compile_seconds", "measured", "cuda",
         "thread_pool", "input_alignment", "deploy", "files", "checksums")
_RECORDS = {"target", "inputs", "outputs", "passes", "tuning", "memory_estimate", "verification", "measured", "checksums", "shape_buckets"}
_OPTIONAL = {"shape_buckets", "parallel_kernels", "memory_estimate", "verification", "compile_seconds", "measured", "cuda", "thread_pool", "input_alignment", "deploy", "checksums"}


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
    shape_buckets: list[ShapeBucket] = field(default_factory=list)  # main compiled for named shapes (none: main only)
    parallel_kernels: int | None = None  # CPU: kernels with a parallel loop (None: not counted)
    memory_estimate: MemoryEstimate | None = None
    verification: Verification | None = None
    compile_seconds: float | None = None
    measured: Measured | None = None
    cuda: dict | None = None  # CUDA: how the kernels ship (core.compiler.backend.cuda.export_cuda_library)
    thread_pool: str | None = None  # the workbench's thread pool library in the folder (None: TVM's)
    input_alignment: int | None = None  # CPU: the bytes the kernels reading an input accept (None: TVM's 64; core.compiler.passes.input_alignment)
    deploy: dict | None = None  # CPU: what the device installs and each part's bytes (core.compiler.runtime.deploy)
    files: list[str] = field(default_factory=list)
    checksums: dict[str, FileChecksum] | None = None  # every file but the manifest (None: exported before files were checked)
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
            "shape_buckets": [b.to_json() for b in self.shape_buckets] or None,
            "measured": self.measured.to_json() if self.measured is not None else None,
            "checksums": None if self.checksums is None else {k: c.to_json() for k, c in sorted(self.checksums.items())},
        }
        d = {k: values[k] for k in _KEYS if not (k in _OPTIONAL and values[k] is None)}
        return {**d, **{k: v for k, v in self.extra.items() if k not in d}}

    @staticmethod
    def from_json(data: Any, source: str | Path = "manifest.json") -> "Manifest":
        """The manifest in `data` (parsed JSON), checked as it is read; `source` names the file in
        the one-sentence refusal of a field that is missing or of the wrong type."""
        try:
            v = read_manifest(data, str(source))
        except ArtifactRefused as e:
            raise WorkbenchError(str(e)) from None
        return Manifest.from_checked(v)

    @staticmethod
    def from_checked(v: dict) -> "Manifest":
        """The manifest from artifact_check.read_manifest's values (checked, defaults filled in)."""
        measured = v["measured"]
        if measured is not None:
            measured = Measured(
                latency_ms=LatencyStats(**measured["latency_ms"]) if measured["latency_ms"] else LatencyStats(),
                memory=MemoryUse(**measured["memory"]) if measured["memory"] else MemoryUse(),
                dims=measured["dims"],
                ort_latency_ms=LatencyStats(**measured["ort_latency_ms"]) if measured["ort_latency_ms"] else None,
                ratio_vs_ort=measured["ratio_vs_ort"],
                measured_on=measured["measured_on"],
            )
        target = v["target"]
        return Manifest(
            **{k: v[k] for k in _KEYS if k not in _RECORDS},
            target=ManifestTarget(TargetKind(target["kind"]), target["tvm_target"], target["cpu"]) if target else ManifestTarget(),
            inputs=[TensorSpec.from_json(t) for t in v["inputs"]],
            outputs=[TensorSpec.from_json(t) for t in v["outputs"]],
            passes=[PassRecord(**p) for p in v["passes"]],
            tuning=TuningRecord(**v["tuning"]) if v["tuning"] else None,
            memory_estimate=MemoryEstimate(**v["memory_estimate"]) if v["memory_estimate"] else None,
            verification=Verification(**v["verification"]) if v["verification"] else None,
            shape_buckets=[ShapeBucket.from_checked(b) for b in v["shape_buckets"]],
            measured=measured,
            checksums=None if v["checksums"] is None else {k: FileChecksum(**c) for k, c in v["checksums"].items()},
            extra=v["extra"],
        )

    @property
    def built_for(self) -> str:
        """'znver4 -avx512f' or 'cortex-a76 +dotprod, aarch64-linux-gnu': the CPU the code is for, the
        feature changes and another architecture's triple ('' when unrecorded)."""
        cpu = self.target.cpu or {}
        text = " ".join([str(cpu.get("name", "")), *(str(x) for x in cpu.get("features", []))]).strip()
        return f"{text}, {cpu['triple']}" if cpu.get("triple") else text
