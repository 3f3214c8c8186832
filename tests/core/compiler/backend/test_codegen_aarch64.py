"""AArch64 code of the CPU schedule rules, read from the assembly (codegen only: built for
aarch64-linux-gnu on any host, never run; the emulated runs are benchmarks/arm_check.py's).

The mirror of the x86 codegen tests (tests/core/compiler/schedules: vfmadd on zmm/ymm, no lanes
assembled one by one): through the compile pipeline (channel-blocked layout, Winograd, prepacked
weights), the register tiles of the conv, depthwise conv and matmul kernels are NEON vector FMAs
(`fmla vN.4s`) and keep their accumulators and operands in v0-v31: no 128-bit register stored to
or loaded from the stack (`str q.., [sp` / `ldr q.., [sp`) among the innermost loop's FMAs. A tile loop
is an innermost loop whose floating-point arithmetic is mostly FMAs (`_tile_loops`); the Winograd
transforms and a GELU epilogue (fadd, fmul) are other loops. For the generic ARM64 CPU and for Cortex-A76 with
+dotprod (its scheduling model orders the loads differently: it once spilled where generic did not).
"""
from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

TRIPLE = "aarch64-linux-gnu"
CPUS = [("generic", None), ("cortex-a76", ["+dotprod"])]

_LABEL = re.compile(r"^(\.?[A-Za-z_$][\w.$]*):")
_BACK_BRANCH = re.compile(r"^\s+(?:b\.\w+|cbn?z|tbn?z)\s+(?:[^\n]*,\s*)?(\.?[A-Za-z_$][\w.$]*)\s*$")
_SPILL = re.compile(r"^\s+(?:str|ldr|stp|ldp|stur|ldur)\s+q\d+[^\n]*\[sp\b")
_OTHER_FP = ("fadd", "fsub", "fmul", "fdiv", "fmax", "fmaxnm", "fmin", "fminnm", "fcmp", "fcvt")


def _weight(rng, name, shape):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _model(name, nodes, inits, x_shape, y_shape) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _conv(name, x_shape, out_channels, k, stride=1, group=1) -> onnx.ModelProto:
    """Conv (+ bias) + Relu, padded to keep the size at stride 1."""
    rng = np.random.default_rng(7)
    _, channels, h, w = x_shape
    pad = k // 2
    out_hw = [(h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1]
    inits = [_weight(rng, "w", (out_channels, channels // group, k, k)), _weight(rng, "b", (out_channels,))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2, group=group),
             helper.make_node("Relu", ["c"], ["y"])]
    return _model(name, nodes, inits, x_shape, [1, out_channels, *out_hw])


def _matmul(rows: int, depth: int, cols: int) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [_weight(rng, "w", (depth, cols)), _weight(rng, "b", (cols,))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    return _model("matmul", nodes, inits, [rows, depth], [rows, cols])


MODELS = {
    # a 3x3 conv of few channels: the direct channel-blocked register tile (below Winograd's minimum)
    "conv3x3": lambda: _conv("conv3x3", [1, 8, 20, 20], 16, 3),
    # a stride-2 3x3 conv: its columns share inputs across the kernel's width (it spilled)
    "conv3x3_s2": lambda: _conv("conv3x3_s2", [1, 32, 28, 28], 64, 3, stride=2),
    "conv1x1": lambda: _conv("conv1x1", [1, 32, 28, 28], 64, 1),
    # an image stem: 3 input channels, a block of 3 (it spilled)
    "stem": lambda: _conv("stem", [1, 3, 32, 32], 16, 3, stride=2),
    # 64 -> 64 3x3 on 28 x 28: Winograd, whose batched GEMM is the register tile
    "winograd": lambda: _conv("winograd", [1, 64, 28, 28], 64, 3),
    # depthwise, on its own (NCHW, the channel-blocked row form: 14 columns spilled)
    "depthwise": lambda: _conv("depthwise", [1, 32, 28, 28], 32, 3, group=32),
    "matmul": lambda: _matmul(64, 256, 128),
    "gemv": lambda: _matmul(1, 512, 256),
}


def _functions(asm: str) -> dict[str, list[str]]:
    """The assembly's instruction lines by function (a parallel lambda, a local .L symbol, counts
    with the function before it), comments and directives left out."""
    out: dict[str, list[str]] = {}
    name = None
    for line in asm.splitlines():
        m = _LABEL.match(line)
        if m and not m.group(1).startswith(".L"):
            name = m.group(1)
            out.setdefault(name, [])
        elif name is not None and not line.strip().startswith(("//", ".loc", ".cfi", "#")):
            out[name].append(line)
    return out


def _innermost_loops(lines: list[str]) -> list[list[str]]:
    """Every innermost loop: from a label to a conditional branch back to it, holding no other
    such loop and no return."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    loops = []
    for j, line in enumerate(lines):
        m = _BACK_BRANCH.match(line)
        if m and m.group(1) in labels and labels[m.group(1)] < j:
            start = labels[m.group(1)]
            if not any(x.strip() == "ret" for x in lines[start:j]):
                loops.append((start, j))
    inner = [a for a in loops if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)]
    return [lines[a : b + 1] for a, b in inner]


def _ops(loop: list[str]) -> list[str]:
    return [line.split()[0] for line in loop if line.startswith("\t") and line.split()]


def _tile_loops(asm: str) -> list[list[str]]:
    """The register tiles: innermost loops whose floating-point arithmetic is three quarters FMAs
    or more (a small kernel's tile loop may hold its epilogue too: 63 FMAs beside a bias add and a
    ReLU per accumulator; Winograd's transforms and a GELU epilogue are under 0.75)."""
    tiles = []
    for lines in _functions(asm).values():
        for loop in _innermost_loops(lines):
            ops = _ops(loop)
            fmas, other = ops.count("fmla"), sum(op in _OTHER_FP for op in ops)
            if fmas and fmas >= 3 * other:
                tiles.append(loop)
    return tiles


_ASM: dict = {}


def _assembly(name: str, cpu: str, features) -> str:
    """The model's assembly as `lower --triple aarch64-linux-gnu --asm` shows it (once per model and CPU)."""
    key = (name, cpu)
    if key not in _ASM:
        from core.compiler.lowering import lower
        from core.compiler.target import make_target
        from core.model.onnx_io import load_model_bytes

        graph = load_model_bytes(MODELS[name]().SerializeToString(), f"{name}.onnx")
        stages = lower(graph, make_target("cpu", triple=TRIPLE, mcpu=cpu, mattr=features), assembly=True)
        _ASM[key] = next(s.text for s in stages if s.language == "asm")
    return _ASM[key]


def _check_tiles(asm: str, min_fmas: int) -> list[list[str]]:
    assert "%xmm" not in asm and "%ymm" not in asm and "vfmadd" not in asm, "x86 code for an AArch64 target"
    tiles = _tile_loops(asm)
    assert tiles, "no innermost loop of FMAs (a register tile) in the kernel"
    for loop in tiles:
        fmas = [line for line in loop if _ops([line]) == ["fmla"]]
        assert len(fmas) >= min_fmas, f"{len(fmas)} FMAs in a register tile:\n" + "\n".join(loop)
        scalar = [line for line in fmas if not re.search(r"\bv\d+\.4s,", line)]
        assert not scalar, "scalar FMAs in a register tile:\n" + "\n".join(scalar)
        # from its first FMA to its last: where LLVM unrolled the whole reduction, the loop over
        # tiles holds the epilogue too, which may reload a loop-invariant bias from the stack
        first = next(i for i, line in enumerate(loop) if _ops([line]) == ["fmla"])
        last = max(i for i, line in enumerate(loop) if _ops([line]) == ["fmla"])
        spills = [line.strip() for line in loop[first : last + 1] if _SPILL.match(line)]
        assert not spills, f"the register tile spills ({len(spills)} stack accesses):\n" + "\n".join(loop)
    return tiles


@pytest.mark.parametrize("cpu,features", CPUS)
@pytest.mark.parametrize("name", ["conv3x3", "conv3x3_s2", "conv1x1", "stem"])
def test_direct_conv_tiles_are_neon_fmas_without_spills(name, cpu, features):
    """The channel-blocked conv's inner loop: one `fmla vN.4s` per (input channel, tap, column)
    of a 4-lane output-channel block, accumulators and inputs in registers."""
    tiles = _check_tiles(_assembly(name, cpu, features), min_fmas=6)
    # NEON's by-element form: each broadcast input is one lane of a register (fmla v.4s, w.4s, x.s[i])
    assert any(re.search(r"fmla\s+v\d+\.4s, v\d+\.4s, v\d+\.s\[\d\]", line) for loop in tiles for line in loop)


@pytest.mark.parametrize("cpu,features", CPUS)
def test_winograd_gemm_tile_is_neon_fmas_without_spills(cpu, features):
    """Winograd's batched GEMM (the conv's register tile) as FMAs on 4-lane vectors, in registers;
    the transforms around it are loops of additions (not checked here: their 6 x 6 patches exceed
    any register file)."""
    asm = _assembly("winograd", cpu, features)
    assert "winograd" in asm
    _check_tiles(asm, min_fmas=6)


@pytest.mark.parametrize("cpu,features", CPUS)
def test_depthwise_tile_is_neon_fmas_without_spills(cpu, features):
    """The depthwise conv's row tile: every tap an FMA of an input vector and a weight vector (no
    lane broadcast), the tile narrowed so its inputs fit beside the accumulators."""
    _check_tiles(_assembly("depthwise", cpu, features), min_fmas=9)


@pytest.mark.parametrize("cpu,features", CPUS)
@pytest.mark.parametrize("name", ["matmul", "gemv"])
def test_matmul_tile_is_neon_fmas_without_spills(name, cpu, features):
    """The matmul's k loop: rows x vectors of columns as `fmla vN.4s` (a GEMM's tile holds 16
    accumulators, a GEMV's four vectors of columns), with B's vectors and A's broadcasts beside them."""
    tiles = _check_tiles(_assembly(name, cpu, features), min_fmas=4)
    if name == "matmul":
        assert max(sum(op == "fmla" for op in _ops(loop)) for loop in tiles) >= 12
        used = {int(r) for loop in tiles for line in loop if _ops([line]) == ["fmla"] for r in re.findall(r"\bv(\d+)\.", line)}
        assert len(used) >= 16, f"the GEMM tile uses {len(used)} of v0-v31"


def test_schedules_read_neon_from_the_target():
    """The rules see AArch64's 4 lanes and 32 registers, and the AArch64 guard is the target's
    triple, not this host's architecture."""
    from core.compiler.schedules.cpu_common import is_aarch64
    from core.compiler.target import host_arch, make_target, vector_lanes, vector_registers

    for cpu, features in CPUS:
        target = make_target("cpu", triple=TRIPLE, mcpu=cpu, mattr=features)
        assert (vector_lanes(target), vector_registers(target), is_aarch64(target)) == (4, 32, True)
    assert is_aarch64(make_target("cpu", mcpu="host")) == (host_arch() == "aarch64")
