"""core.compiler.target: vector width and register file are the target's, read from its CPU and
features, never from the machine compiling."""
from __future__ import annotations

import pytest

from core.compiler.target import VECTOR_REGISTERS, make_target, vector_lanes, vector_registers


@pytest.mark.parametrize(
    ("cpu", "features", "lanes", "registers"),
    [
        ("skylake-avx512", None, 16, 32),  # AVX-512: 512-bit zmm0-31
        ("skylake-avx512", "-avx512f", 8, 16),  # the same CPU with AVX-512 off: AVX2
        ("haswell", None, 8, 16),  # AVX2
        ("x86-64", None, 4, 16),  # SSE2 only
    ],
)
def test_vector_width_and_registers_come_from_the_target(cpu, features, lanes, registers):
    target = make_target("cpu", mcpu=cpu, mattr=features)
    assert vector_lanes(target) == lanes
    assert vector_lanes(target, dtype_bits=16) == 2 * lanes
    assert vector_registers(target) == registers


def test_a_cuda_target_is_read_as_128_bit_with_the_default_register_file():
    target = make_target("cuda")  # no x86 features to read: the narrow, safe assumption
    assert vector_lanes(target) == 4 and vector_registers(target) == VECTOR_REGISTERS
