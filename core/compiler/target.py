"""Compilation targets that know the machine: the host CPU's name, features and core count,
and the CPU code is compiled for (this host by default, or a deployment host: `--cpu`,
`MLCWB_CPU` / `MLCWB_CPU_FEATURES`, another architecture with `--triple aarch64-linux-gnu`, or a
named device preset), with what this host lacks to run that code."""
from __future__ import annotations

import dataclasses
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
    "host_arch",
    "code_arch",
    "check_triple",
    "known_cpus",
    "DevicePreset",
    "DEVICE_PRESETS",
    "device_preset",
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


def make_target(kind: TargetKind | str = TargetKind.CPU, cuda_arch: str = "sm_80", *, mcpu: str | None = None, mattr=None, cores: int | None = None,
                triple: str | None = None):
    """A tvm.target.Target for 'cpu' (LLVM) or 'cuda' (with the CPU as host).

    The CPU is `mcpu` (an LLVM CPU name; "host": this machine's) with the feature changes `mattr`
    (a list or "-avx512f,+fma" text); when `mcpu` is None, the environment's default
    (MLCWB_CPU, with MLCWB_CPU_FEATURES unless `mattr` is given), else this host. So code can be
    built for another CPU than this one (a deployment host, or this host with AVX-512 off:
    mattr="-avx512f"); the schedules read vector width and register file from the target, never
    from the machine compiling. `triple` (e.g. "aarch64-linux-gnu") builds for another
    architecture: its CPU defaults to "generic" and its cores to 4, and the environment's CPU does
    not apply. An unknown triple, CPU or feature name is refused in one sentence."""
    import tvm

    kind = TargetKind.parse(kind)  # an unknown kind is refused before anything is built
    triple = check_triple(triple)
    if triple is not None:
        if kind is TargetKind.CUDA:
            from ..errors import WorkbenchError

            raise WorkbenchError(f"--triple {triple} builds CPU code for another architecture; CUDA code is built with this machine as its host (drop --triple).")
        name = check_cpu_name(mcpu or "generic", triple)
        features = parse_cpu_features(mattr, name, triple)
        spec = {"kind": "llvm", "mtriple": triple, "mcpu": name, "num-cores": cores or _FOREIGN_CORES}
        if features:
            spec["mattr"] = features
        return tvm.target.Target(spec)
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


# Cores assumed for a foreign-architecture target without a preset: a phone's or a board's
# big cluster. Only the parallel split of the kernels depends on it.
_FOREIGN_CORES = 4

# Architectures code can be built for, by the first word of an LLVM triple (the Debian cross
# toolchain's prefix follows from it: aarch64-linux-gnu-gcc).
_ARCHES = {"aarch64": "aarch64", "arm64": "aarch64", "x86_64": "x86_64", "amd64": "x86_64"}


@functools.lru_cache(maxsize=1)
def host_arch() -> str:
    """This machine's architecture, as the first word of LLVM triples ('x86_64', 'aarch64')."""
    import platform

    machine = platform.machine().lower()
    return _ARCHES.get(machine, machine)


def _triple_arch(triple: str) -> str:
    first = triple.split("-", 1)[0].lower()
    return _ARCHES.get(first, first)


def check_triple(triple: str | None) -> str | None:
    """`triple` as LLVM's target triple for a foreign architecture, or None for this machine's
    (None, "", "host", or a triple of this machine's architecture); one sentence when it is not
    one the workbench builds for."""
    text = (triple or "").strip()
    if not text or text == "host":
        return None
    arch = _triple_arch(text)
    if arch not in set(_ARCHES.values()) or text.count("-") < 1:
        from ..errors import WorkbenchError

        raise WorkbenchError(f"unknown target triple '{text}': the workbench builds for aarch64-linux-gnu (ARM64 Linux) and for this machine (leave --triple out).")
    return None if arch == host_arch() else text


def code_arch(cpu: dict | None) -> str:
    """The architecture code built for a target_cpu record runs on ('aarch64', 'x86_64'): its
    triple's, or this machine's when it names none (records written before triples)."""
    triple = (cpu or {}).get("triple") if isinstance(cpu, dict) else None
    return _triple_arch(str(triple)) if triple else host_arch()


@functools.lru_cache(maxsize=4)
def known_cpus(triple: str | None = None) -> tuple[str, ...]:
    """The CPU names this TVM's LLVM knows for this machine's architecture, or for `triple`'s
    (LLVM's own list)."""
    import tvm

    probe = tvm.target.Target({"kind": "llvm", "mtriple": triple} if triple else {"kind": "llvm", "mcpu": host_cpu()})
    return tuple(str(c) for c in tvm.get_global_func("target.llvm_get_cpu_archlist")(probe))


def check_cpu_name(name: str | None, triple: str | None = None) -> str:
    """The LLVM CPU name for `name` (None or "host": this machine's; for a foreign `triple`,
    None is "generic"), refused in one sentence when LLVM does not know it (LLVM would only warn
    and build generic code)."""
    from ..errors import WorkbenchError

    text = (name or "").strip()
    if triple and text == "host":
        raise WorkbenchError(f"CPU 'host' is this {host_arch()} machine, and the code is for {triple}; name that device's CPU (e.g. cortex-a76, neoverse-n1, generic) or a --preset.")
    if not text or text == "host":
        return "generic" if triple else host_cpu()
    known = known_cpus(triple)
    if text not in known:
        import difflib

        close = difflib.get_close_matches(text, known, n=3)
        example = "cortex-a72, cortex-a76, neoverse-n1, generic" if triple else f"{host_cpu()}, znver3, skylake-avx512, haswell"
        hint = f" (did you mean {', '.join(close)}?)" if close else f" (for example {example})"
        where = f" for {triple}" if triple else ""
        also = "" if triple else "; use 'host' for this machine"
        raise WorkbenchError(f"unknown CPU '{text}': LLVM knows no such CPU name{where}{hint}{also}.")
    return text


def _features(target) -> set[str]:
    """The features LLVM enables for an LLVM target (its mcpu with its mattr applied)."""
    import tvm

    return {str(k) for k in tvm.get_global_func("target.llvm_get_cpu_features")(target)}


def vector_lanes(target, dtype_bits: int = 32) -> int:
    """Lanes of `dtype_bits` in one vector register of `target`: for float32 16 with AVX-512, 8 with
    AVX2, else 4 (SSE, and NEON's 128-bit registers on AArch64: SVE's wider vectors are not used).
    Read from the target's features (its triple, mcpu/mattr), not from the machine compiling."""
    from tvm.target import codegen

    if _is_aarch64(target):
        return 128 // dtype_bits
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
    """Vector registers of `target`'s ISA: 32 with AVX-512 (zmm0-31) and on AArch64 (v0-v31),
    else 16.

    Read from the target (its triple, mcpu/mattr), not from the machine compiling: code
    built for another host must be tiled for that host's register file."""
    from tvm.target import codegen

    if _is_aarch64(target):
        return 32
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


def _is_aarch64(target) -> bool:
    """Whether an LLVM target (or a CUDA target's host) builds AArch64 code."""
    cpu = target.host if target.kind.name != "llvm" and target.host is not None else target
    triple = str(cpu.attrs["mtriple"]) if "mtriple" in cpu.attrs else ""
    return _triple_arch(triple) == "aarch64" if triple else host_arch() == "aarch64"


# Features LLVM knows for every AArch64 CPU, beside those of the CPU named (a feature such as
# +dotprod may be added to a CPU that lacks it, e.g. generic)
_AARCH64_EXTRA = ("neon", "fp-armv8", "dotprod", "i8mm", "bf16", "fullfp16", "fp16fml", "sve", "sve2", "rdm", "crc", "lse", "sme")


def parse_cpu_features(features, cpu: str | None = None, triple: str | None = None) -> list[str]:
    """Feature changes as LLVM's mattr list: "-avx512f,+fma" (or a list; a bare name means "+"),
    each name one LLVM knows (for `triple`'s architecture when given), else one sentence naming it."""
    import tvm

    from ..errors import WorkbenchError

    items = features.replace(" ", ",").split(",") if isinstance(features, str) else list(features or [])
    out = []
    if triple:
        cpu = cpu or "generic"
        known = set(_AARCH64_EXTRA) | _features(tvm.target.Target({"kind": "llvm", "mtriple": triple, "mcpu": cpu}))
        example = "+dotprod or +i8mm"
    else:
        cpu = cpu or host_cpu()
        known = set(_host_features()) | _features(tvm.target.Target({"kind": "llvm", "mcpu": cpu}))
        example = "-avx512f or +avx2"
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if name not in known:
            raise WorkbenchError(f"unknown CPU feature '{name}' in '{item}': LLVM knows no such feature of {cpu} (write it like {example}).")
        out.append(sign + name)
    return out


def target_cpu(target) -> dict:
    """What the code of an LLVM target (or a CUDA target's host) was built for: {"name", "features"
    (the mattr changes), "requires" (required_features)}; the artifact's manifest records it."""
    cpu = target.host if target.kind.name != "llvm" and target.host is not None else target
    attrs = cpu.attrs
    record = {
        "name": str(attrs["mcpu"]) if "mcpu" in attrs else host_cpu(),
        "features": [str(f) for f in attrs["mattr"] if str(f) not in NO_GATHER] if "mattr" in attrs else [],
        "requires": required_features(cpu),
    }
    if "mtriple" in attrs and check_triple(str(attrs["mtriple"])):
        record["triple"] = str(attrs["mtriple"])  # another architecture's code: run.py's device must match it
    return record


# Features whose instructions compiled numeric code may contain (vector, FMA, conversion, bit
# manipulation). Other CPU features (system instructions such as pku or rdpru, which some
# virtual machines hide, and LLVM's tuning flags) never decide whether a model's code runs.
_CODE_FEATURE_PREFIXES = ("avx", "sse", "fma", "f16c", "amx", "xop", "bmi", "tbm", "lzcnt", "popcnt", "movbe", "gfni", "vaes", "vpclmulqdq", "cx16")


def required_features(target) -> list[str]:
    """The instruction-set features code built for an LLVM `target` may use (sorted)."""
    if _is_aarch64(target):
        return sorted(f for f in _features(target) if f in _AARCH64_EXTRA)
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
    if code_arch(cpu) != host_arch():
        built = " ".join([str(cpu.get("name", "?")), *cpu.get("features", [])])
        return f"code for {cpu.get('triple')} ({built}) runs on an {_ARCH_NAMES.get(code_arch(cpu), code_arch(cpu))} CPU, not on this {host_arch()} machine"
    missing = host_lacks(cpu.get("requires") or [])
    if not missing:
        return None
    built = " ".join([str(cpu.get("name", "?")), *cpu.get("features", [])])
    shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    return f"code for {built} needs {shown}, which this machine ({host_cpu()}) lacks"


_ARCH_NAMES = {"aarch64": "ARM64 (AArch64)", "x86_64": "x86-64"}


def cannot_run_here(cpu: dict | None) -> str | None:
    """None when this machine runs code built for `cpu` (a target_cpu record), else the one
    sentence that refuses to run it."""
    why = foreign_code(cpu)
    if why and code_arch(cpu) != host_arch():
        return (f"cannot run this model here: its {why}; run it on such a device (copy the artifact folder, python run.py), "
                "time it there through an RPC server (bench --rpc), or check it here under emulation (bench --check-only).")
    return f"cannot run this model here: its {why}; run it on such a CPU, or compile it for this one (CPU 'host')." if why else None


def gpu_present() -> bool:
    try:
        import tvm

        return bool(tvm.cuda(0).exist)
    except Exception:  # noqa: BLE001
        return False


@dataclasses.dataclass(frozen=True)
class DevicePreset:
    """A device people deploy to, as the target that builds for its CPU: `--preset rpi5`."""

    name: str
    title: str
    triple: str
    cpu: str
    features: tuple[str, ...] = ()
    cores: int = 4

    def target(self, kind: TargetKind | str = TargetKind.CPU):
        return make_target(kind, mcpu=self.cpu, mattr=list(self.features), cores=self.cores, triple=self.triple)


# The CPU, features and cores of common ARM64 devices (the cores of the cluster a model runs on).
DEVICE_PRESETS = {p.name: p for p in (
    DevicePreset("rpi4", "Raspberry Pi 4 (Cortex-A72)", "aarch64-linux-gnu", "cortex-a72"),
    DevicePreset("rpi5", "Raspberry Pi 5 (Cortex-A76, dotprod)", "aarch64-linux-gnu", "cortex-a76", ("+dotprod",)),
    DevicePreset("jetson-orin", "Jetson Orin CPU (Cortex-A78AE, 8 cores)", "aarch64-linux-gnu", "cortex-a78ae", ("+dotprod",), 8),
    DevicePreset("graviton2", "AWS Graviton2 (Neoverse N1)", "aarch64-linux-gnu", "neoverse-n1", ("+dotprod",)),
    DevicePreset("graviton3", "AWS Graviton3 (Neoverse V1, i8mm)", "aarch64-linux-gnu", "neoverse-v1", ("+dotprod", "+i8mm")),
    DevicePreset("arm64", "Any ARM64 Linux device (generic, NEON)", "aarch64-linux-gnu", "generic"),
)}


def device_preset(name: str) -> DevicePreset:
    """The preset called `name`, refused in one sentence listing the presets otherwise."""
    preset = DEVICE_PRESETS.get((name or "").strip().lower())
    if preset is None:
        from ..errors import WorkbenchError

        raise WorkbenchError(f"unknown device preset '{name}': choose one of {', '.join(DEVICE_PRESETS)}.")
    return preset
