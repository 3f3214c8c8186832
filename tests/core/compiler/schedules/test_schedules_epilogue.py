"""core.compiler.schedules.cpu_common.inline_epilogue: only a pointwise tail (elementwise, or a
broadcast into the producer's shape) is folded into a register-tiled kernel's write-back. A
data-movement consumer (a strided_slice FuseOps put into a blocked conv's kernel) keeps a pass
of its own: folded in, it stored every column the conv computed into the narrower output, the
last one into the next row and past the buffer's end."""
from __future__ import annotations

import numpy as np
import pytest

CPUS = ("znver5", "znver4", "znver3")


def _conv_tail(tail: str):
    """One PrimFunc as FuseTIR writes a fused kernel: a channel-blocked conv (3 -> 32 channels,
    7x7, stride 2, on a 39x41 image: 17 x 18 outputs), its bias and ReLU, then `tail`: "none",
    "cut" (columns 0:17, what WidenConvRows' cut would be as a strided_slice), "offset" (rows
    1:17), "step" (every second column) or "block" (channels 0:8 of each 16-wide block)."""
    from tvm import te, topi

    from core.compiler.target import make_target

    data = te.placeholder((1, 1, 39, 41, 3), name="data")
    kernel = te.placeholder((2, 1, 7, 7, 3, 16), name="kernel")
    bias = te.placeholder((1, 2, 1, 1, 16), name="bias")
    with make_target("cpu", mcpu="znver4"):  # topi asks for a target; the compute is the same for any
        conv = topi.nn.conv2d_NCHWc(data, kernel, (2, 2), (0, 0), (1, 1), "NCHW3c", "NCHW16c", "float32")
    out = topi.nn.relu(topi.add(conv, bias))
    begin, end, steps = {
        "none": (None, None, None),
        "cut": ([0, 0, 0, 0, 0], [1, 2, 17, 17, 16], [1, 1, 1, 1, 1]),
        "offset": ([0, 0, 1, 0, 0], [1, 2, 17, 18, 16], [1, 1, 1, 1, 1]),
        "step": ([0, 0, 0, 0, 0], [1, 2, 17, 18, 16], [1, 1, 1, 2, 1]),
        "block": ([0, 0, 0, 0, 0], [1, 2, 17, 18, 8], [1, 1, 1, 1, 1]),
    }[tail]
    if begin is not None:
        out = topi.strided_slice(out, begin, end, steps)
    return te.create_prim_func([data, kernel, bias, out])


def _reference(tail: str, x, w, b):
    """numpy: the same conv, bias, ReLU and slice."""
    out = np.zeros((1, 2, 17, 18, 16), np.float32)
    for kh in range(7):
        for kw in range(7):
            patch = x[0, 0, kh : kh + 33 : 2, kw : kw + 35 : 2, :]  # 17 x 18 x 3
            out[0] += np.einsum("yxi,cio->cyxo", patch, w[:, 0, kh, kw])
    out = np.maximum(out + b, 0)
    return {"none": out, "cut": out[..., :17, :], "offset": out[:, :, 1:], "step": out[..., ::2, :],
            "block": out[..., :8]}[tail]


def _out_of_bounds(func) -> str | None:
    """TVM's out-of-bounds checker on the scheduled function: its message, or None when every
    access stays within its buffer."""
    import tvm

    try:
        tvm.s_tir.analysis.OOBChecker()(tvm.IRModule({"main": func}))
    except Exception as exc:  # noqa: BLE001 - the checker reports through a ScheduleError
        return str(exc).splitlines()[0]
    return None


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("tail", ["cut", "offset", "step", "block"])
def test_slice_after_blocked_conv_stores_within_its_output(cpu, tail):
    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import make_target

    scheduled, rule = schedule_cpu_func(_conv_tail(tail), make_target("cpu", mcpu=cpu))
    assert rule == "cpu.Conv2dNCHWc"
    assert _out_of_bounds(scheduled) is None
    # the slice is a pass of its own, after the conv's write-back
    assert "T.sblock(\"T_strided_slice" in scheduled.script()


@pytest.mark.parametrize("cpu", CPUS)
def test_elementwise_tail_still_folds_into_the_write_back(cpu):
    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.target import make_target

    scheduled, _ = schedule_cpu_func(_conv_tail("none"), make_target("cpu", mcpu=cpu))
    text = scheduled.script()
    # bias and ReLU are computed in the block that writes the accumulator back: no pass of their own
    assert "T.sblock(\"T_add" not in text and "T.sblock(\"T_relu" not in text
    assert "T.max(conv2d_NCHWc_global" in text


@pytest.mark.isa
@pytest.mark.parametrize("tail", ["cut", "offset", "step", "block"])
def test_slice_after_blocked_conv_matches_numpy_at_two_threads(tail):
    import tvm

    from core.compiler.schedules import schedule_cpu_func
    from core.compiler.runtime.threads import runtime_threads
    from core.compiler.target import make_target

    target = make_target("cpu")
    scheduled, _ = schedule_cpu_func(_conv_tail(tail), target)
    lib = tvm.compile(tvm.IRModule({"main": scheduled}), target=target)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 1, 39, 41, 3)).astype(np.float32)
    w = (0.2 * rng.standard_normal((2, 1, 7, 7, 3, 16))).astype(np.float32)
    b = rng.standard_normal((1, 2, 1, 1, 16)).astype(np.float32)
    expected = _reference(tail, x, w, b)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(a, dev) for a in (x, w, b)]
    with runtime_threads(2):
        for _ in range(20):  # the workers' order varies from call to call
            out = tvm.runtime.tensor(np.full(expected.shape, np.nan, np.float32), dev)
            lib["main"](*args, out)
            np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cpu", CPUS)
def test_tail_with_a_symbolic_batch_still_folds_into_the_write_back(cpu):
    """The mlp sample's batch is symbolic: its bias and ReLU fold into the matmul's write-back
    (compared as expressions, not as constants)."""
    import re

    import onnx
    import tvm

    from core.compiler.target import make_target
    from tests.conftest import sample
    from tests.helpers import scheduled_through

    mod = scheduled_through(onnx.load(sample("mlp")), make_target("cpu", mcpu=cpu))
    kernels = {gv.name_hint: re.findall(r'T\.sblock\("([^"]+)"', f.script())
               for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc) and "matmul" in gv.name_hint}
    assert len(kernels) == 3
    for name, blocks in kernels.items():
        assert not {"compute", "T_add"} & set(blocks), (name, blocks)
