"""Compilation targets that know the machine: the host CPU's name, features and core count,
and the CPU code is compiled for (this host by default, or a deployment host: `--cpu`,
`MLCWB_CPU` / `MLCWB_CPU_FEATURES`), with what this host lacks to run that code."""
from __future__ import annotations

import enum
import functools
import logging
import os

__all__ = [
    "make_target",
    "host_cpu",
    "host_cores",
    "TargetKind",
    "TARGET_KINDS",
    "CPU_ENV",
    "CPU_FEATURES_ENV",
    "NO_GATHER",
    "check_cpu_name",
    "parse_cpu_features",
    "target_cpu",
    "required_features",
    "host_lacks",
    "foreign_code",
    "cannot_run_here",
    "vector_lanes",
    "vector_registers",
    "VECTOR_REGISTERS",
]

logger = logging.getLogger(__name__)

# LLVM tuning flags every AVX-512 target gets: LLVM's own vectorizer turns loops no schedule rule
# took (a reshape's // and %, a symbolic batch) into gathers/scatters, slower than the AVX2 code's
# contiguous vectors (docs/performance.md: NO_GATHER). Not features: the manifest's "features" and
# the tuning key leave them out.
NO_GATHER = ("+prefer-no-gather", "+prefer-no-scatter")

# The environment's default CPU to compile for (an LLVM CPU name, or "host") and its feature
# changes ("-avx512f", "+avx2,-fma"): read by make_target only, so every compile, lowering, test
# and benchmark that does not name a CPU builds for this one.
CPU_ENV = "MLCWB_CPU"
CPU_FEATURES_ENV = "MLCWB_CPU_FEATURES"


class TargetKind(enum.StrEnum):
    """What code is built for: the CPU (LLVM) or an NVIDIA GPU (CUDA, the CPU as its host). The
    values are the words of the CLI (`--target cpu`) and of the manifest, so JSON stays the same."""

    CPU = "cpu"
    CUDA = "cuda"

    @classmethod
    def parse(cls, value) -> "TargetKind":
        """`value` ('cpu', 'cuda' or a TargetKind) as a TargetKind, refused in one sentence naming it otherwise."""
        try:
            return cls(value)
        except ValueError:
            from ..errors import WorkbenchError

            raise WorkbenchError(f"unknown target '{value}': choose one of {', '.join(TARGET_KINDS)}.") from None

    @classmethod
    def of(cls, target) -> "TargetKind":
        """The kind of a tvm Target (a GPU one is CUDA, the only GPU kind built here), or of a kind's name."""
        if isinstance(target, str):
            return cls.parse(target)
        return cls.CUDA if "gpu" in target.keys else cls.CPU


TARGET_KINDS = tuple(k.value for k in TargetKind)


@functools.lru_cache(maxsize=1)
def host_cpu() -> str:
    """LLVM's name for this CPU (e.g. 'znver3', 'skylake-avx512'); drives vector width and features."""
    import tvm

    return str(tvm.get_global_func("target.llvm_get_system_cpu")())


def host_cores() -> int:
    """Cores this process may use (respects affinity masks / containers)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def make_target(kind: TargetKind | str = TargetKind.CPU, cuda_arch: str = "sm_80", *, mcpu: str | None = None, mattr=None, cores: int | None = None):
    """A tvm.target.Target for 'cpu' (LLVM) or 'cuda' (with the CPU as host).

    The CPU is `mcpu` (an LLVM CPU name; "host": this machine's) with the feature changes `mattr`
    (a list or "-avx512f,+fma" text); when `mcpu` is None, the environment's default
    (MLCWB_CPU, with MLCWB_CPU_FEATURES unless `mattr` is given), else this host. So code can be
    built for another CPU than this one (a deployment host, or this host with AVX-512 off:
    mattr="-avx512f"); the schedules read vector width and register file from the target, never
    from the machine compiling. An unknown CPU or feature name is refused in one sentence."""
    import tvm

    kind = TargetKind.parse(kind)  # an unknown kind is refused before anything is built
    if mcpu is None:
        mcpu = os.environ.get(CPU_ENV, "").strip() or None
        if mattr is None:
            mattr = os.environ.get(CPU_FEATURES_ENV, "")
    name = check_cpu_name(mcpu)
    features = parse_cpu_features(mattr, name)
    spec = {"kind": "llvm", "mcpu": name, "num-cores": cores or host_cores()}
    if features:
        spec["mattr"] = features
    cpu = tvm.target.Target(spec)
    if "avx512f" in _features(cpu):
        cpu = tvm.target.Target({**spec, "mattr": [*features, *NO_GATHER]})
    if kind is TargetKind.CUDA:
        return tvm.target.Target({"kind": "cuda", "arch": cuda_arch}, host=cpu)
    return cpu


@functools.lru_cache(maxsize=1)
def _known_cpus() -> tuple[str, ...]:
    """The CPU names this TVM's LLVM knows for this machine's architecture (LLVM's own list)."""
    import tvm

    probe = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()})
    return tuple(str(c) for c in tvm.get_global_func("target.llvm_get_cpu_archlist")(probe))


def check_cpu_name(name: str | None) -> str:
    """The LLVM CPU name for `name` (None or "host": this machine's), refused in one sentence
    when LLVM does not know it (LLVM would only warn and build generic code)."""
    from ..errors import WorkbenchError

    text = (name or "").strip()
    if not text or text == "host":
        return host_cpu()
    known = _known_cpus()
    if text not in known:
        import difflib

        close = difflib.get_close_matches(text, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else f" (for example {host_cpu()}, znver3, skylake-avx512, haswell)"
        raise WorkbenchError(f"unknown CPU '{text}': LLVM knows no such CPU name{hint}; use 'host' for this machine.")
    return text


def _features(target) -> set[str]:
    """The features LLVM enables for an LLVM target (its mcpu with its mattr applied)."""
    import tvm

    return {str(k) for k in tvm.get_global_func("target.llvm_get_cpu_features")(target)}


def vector_lanes(target, dtype_bits: int = 32) -> int:
    """Lanes of `dtype_bits` in one vector register of `target`: for float32 16 with AVX-512, 8 with
    AVX2, else 4. Read from the target's features (its mcpu/mattr), not from the machine compiling."""
    from tvm.target import codegen

    try:
        if codegen.target_has_features("avx512f", target):
            return 512 // dtype_bits
        if codegen.target_has_features("avx2", target) or codegen.target_has_features("avx", target):
            return 256 // dtype_bits
    except Exception:  # non-x86 or a target LLVM cannot describe: assume 128-bit NEON/SSE
        logger.debug("could not query vector features of %s", target)
    return 128 // dtype_bits


VECTOR_REGISTERS = 16  # AVX/AVX2, SSE and NEON-sized register files


def vector_registers(target) -> int:
    """Vector registers of `target`'s ISA: 32 (zmm0-31) with AVX-512, else 16.

    Read from the target's features (its mcpu/mattr), not from the machine compiling: code
    built for another host must be tiled for that host's register file."""
    from tvm.target import codegen

    try:
        if codegen.target_has_features("avx512f", target):
            return 32
    except Exception:  # noqa: BLE001 - non-x86 target
        logger.debug("could not query vector features of %s", target)
    return VECTOR_REGISTERS


@functools.lru_cache(maxsize=1)
def _host_features() -> dict[str, bool]:
    """LLVM's reading of this machine's features (name -> present), from CPUID."""
    import tvm

    return {str(k): bool(v) for k, v in tvm.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")().items()}


def parse_cpu_features(features, cpu: str | None = None) -> list[str]:
    """Feature changes as LLVM's mattr list: "-avx512f,+fma" (or a list; a bare name means "+"),
    each name one LLVM knows, else one sentence naming it."""
    import tvm

    from ..errors import WorkbenchError

    items = features.replace(" ", ",").split(",") if isinstance(features, str) else list(features or [])
    out = []
    cpu = cpu or host_cpu()
    known = set(_host_features()) | _features(tvm.target.Target({"kind": "llvm", "mcpu": cpu}))
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if name not in known:
            raise WorkbenchError(f"unknown CPU feature '{name}' in '{item}': LLVM knows no such feature of {cpu} (write it like -avx512f or +avx2).")
        out.append(sign + name)
    return out


def target_cpu(target) -> dict:
    """What the code of an LLVM target (or a CUDA target's host) was built for: {"name", "features"
    (the mattr changes), "requires" (required_features)}; the artifact's manifest records it."""
    cpu = target.host if target.kind.name != "llvm" and target.host is not None else target
    attrs = cpu.attrs
    return {
        "name": str(attrs["mcpu"]) if "mcpu" in attrs else host_cpu(),
        "features": [str(f) for f in attrs["mattr"] if str(f) not in NO_GATHER] if "mattr" in attrs else [],
        "requires": required_features(cpu),
    }


# Features whose instructions compiled numeric code may contain (vector, FMA, conversion, bit
# manipulation). Other CPU features (system instructions such as pku or rdpru, which some
# virtual machines hide, and LLVM's tuning flags) never decide whether a model's code runs.
_CODE_FEATURE_PREFIXES = ("avx", "sse", "fma", "f16c", "amx", "xop", "bmi", "tbm", "lzcnt", "popcnt", "movbe", "gfni", "vaes", "vpclmulqdq", "cx16")


def required_features(target) -> list[str]:
    """The instruction-set features code built for an LLVM `target` may use (sorted)."""
    return sorted(f for f in _features(target) if f.startswith(_CODE_FEATURE_PREFIXES))


def host_lacks(features) -> list[str]:
    """Those of `features` (LLVM names) this machine does not have (sorted; names LLVM's reading
    of this machine does not know are not held against it)."""
    host = _host_features()
    return sorted(f for f in features if f in host and not host[f])


def foreign_code(cpu: dict | None) -> str | None:
    """None when this machine runs code built for `cpu` (a target_cpu record), else why not:
    "code for sapphirerapids needs amx-bf16, ..., which this machine (znver4) lacks"."""
    if not cpu or not isinstance(cpu, dict):
        return None
    missing = host_lacks(cpu.get("requires") or [])
    if not missing:
        return None
    built = " ".join([str(cpu.get("name", "?")), *cpu.get("features", [])])
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    return f"code for {built} needs {shown}, which this machine ({host_cpu()}) lacks"


def cannot_run_here(cpu: dict | None) -> str | None:
    """None when this machine runs code built for `cpu` (a target_cpu record), else the one
    sentence that refuses to run it."""
    why = foreign_code(cpu)
    return f"cannot run this model here: its {why}; run it on such a CPU, or compile it for this one (CPU 'host')." if why else None


def gpu_present() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001
        return False
