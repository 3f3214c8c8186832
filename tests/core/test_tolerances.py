"""core.tolerances: one judgement of outputs, shared by the rewrite check (core.verify) and the
compile's check (core.compiler.check); both must call the same pair of outputs the same."""
from __future__ import annotations

import math

import numpy as np
import pytest

from core.compiler.check.reference import compare_outputs
from core.tolerances import ATOL, RTOL, judge
from core.verify import compare

_REF = np.array([4000.0, 0.0, -3.0], np.float32)

PAIRS = {
    # (ours, reference, matches)
    "equal": (_REF.copy(), _REF, True),
    "within rtol/atol": (_REF + np.float32(1e-5), _REF, True),
    # float32 summation noise: off by 1e-2 near zero where the values reach 4000 (VGG-19's Gemm)
    "rounding on the scale of the values": (_REF + np.array([0, 0.01, 0], np.float32), _REF, True),
    "one percent off": (_REF * np.float32(1.01), _REF, False),
    "NaN where the reference has NaN": (np.array([np.nan, 1.0], np.float32), np.array([np.nan, 1.0], np.float32), True),
    "NaN where the reference has a number": (np.array([np.nan, 1.0], np.float32), np.array([0.0, 1.0], np.float32), False),
    "infinities agree": (np.array([np.inf, 1.0]), np.array([np.inf, 1.0]), True),
    "booleans differ": (np.array([True, False]), np.array([True, True]), False),
    # integers get no allowance for rounding, however large their values
    "an index off by one": (np.array([20000, 3], np.int64), np.array([20000, 4], np.int64), False),
    "shapes differ": (np.zeros(3, np.float32), np.zeros(2, np.float32), False),
    "dtypes differ": (np.zeros(3, np.int32), np.zeros(3, np.int64), False),
    "empty": (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), True),
}


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_the_rewrite_check_and_the_compile_check_judge_a_pair_alike(case):
    ours, ref, matches = PAIRS[case]
    rewrite = compare({"y": ref}, {"y": ours})  # core.verify: the model before the rewrite is the reference
    ok, err, first = compare_outputs([ours], [ref])  # core.compiler.check: onnxruntime's outputs are the reference
    assert rewrite.ok is ok is matches, case
    assert first == (-1 if matches else 0)
    assert rewrite.max_abs == err or (math.isinf(err) and math.isinf(rewrite.max_abs))


def test_judge_says_why_values_could_not_be_compared():
    assert judge(np.zeros(3), np.zeros(2)).problem == "shape [3] versus [2]"
    assert judge(np.zeros(3, np.int32), np.zeros(3, np.int64)).problem == "dtype int32 versus int64"
    j = judge(_REF * np.float32(1.01), _REF)
    assert not j.ok and j.problem == "" and j.scale == 4000.0 and j.max_abs == pytest.approx(40.0, rel=1e-3)


def test_one_set_of_default_tolerances():
    from core.compiler.check import reference, verification
    from core.verify import DEFAULT_ATOL, DEFAULT_RTOL

    assert (DEFAULT_RTOL, DEFAULT_ATOL) == (reference.RTOL, reference.ATOL) == (RTOL, ATOL)
    defaults = verification.verify_artifact.__kwdefaults__
    assert (defaults["rtol"], defaults["atol"]) == (RTOL, ATOL)
