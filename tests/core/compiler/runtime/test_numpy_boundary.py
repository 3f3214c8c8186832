"""Artifact.run's numpy boundary (host_tensor, to_numpy; run.py's copies of them): inputs read in
place where C-contiguous, writable and 64-byte aligned, else copied; outputs copied out. The
results must be bitwise those of the plain path (tvm.runtime.tensor in, Tensor.numpy() out), and no
result may alias an input, a constant of the model or another run's result."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.compile import compile_model
from core.compiler.runtime import run_template
from core.compiler.runtime.artifact import host_tensor, to_numpy
from tests.conftest import sample


def _two_outputs(tmp_path):
    """y = relu(x) + c, z = x (an output that is the input itself) and k (a constant)."""
    c = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 4), "c")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "c"], ["y"]),
         helper.make_node("Identity", ["x"], ["z"]), helper.make_node("Identity", ["k0"], ["k"])],
        "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [3])],
        [c, helper.make_tensor("k0", TensorProto.INT64, [3], [7, 7, 7])],
    )
    path = tmp_path / "two.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("boundary")
    return {name: compile_model(str(path), "cpu", verify=False)
            for name, path in {"small_cnn": sample("small_cnn"), "mlp": sample("mlp"), "two": _two_outputs(tmp)}.items()}


def _plain(art, feeds):
    """The path Artifact.run took before: TVM's copying tensor() in, Tensor.numpy() out."""
    import tvm

    out = art.run_device([tvm.runtime.tensor(np.ascontiguousarray(feeds[s.name])) for s in art.inputs])
    outs = out if not hasattr(out, "numpy") else [out]
    return [o.numpy() for o in outs]


def _layouts(a: np.ndarray):
    """`a` as an aligned, an unaligned, a non-contiguous and a read-only array of equal values."""
    raw = np.empty(a.nbytes + 128, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    aligned = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    aligned[...] = a
    raw2 = np.empty(a.nbytes + 128, dtype=np.uint8)
    off = -raw2.ctypes.data % 64 + a.dtype.itemsize  # one element past a 64-byte boundary
    unaligned = raw2[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    unaligned[...] = a
    strided = np.repeat(a[..., None], 2, axis=-1)[..., 0]
    readonly = a.copy()
    readonly.flags.writeable = False
    assert aligned.ctypes.data % 64 == 0 and unaligned.ctypes.data % 64 != 0 and not strided.flags.c_contiguous
    return {"aligned": aligned, "unaligned": unaligned, "strided": strided, "readonly": readonly}


@pytest.mark.parametrize("name", ["small_cnn", "mlp", "two"])
def test_results_bitwise_as_before_for_every_input_layout(arts, name):
    art = arts[name]
    rng = np.random.default_rng(0)
    base = {s.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in s.shape]).astype(s.dtype) for s in art.inputs}
    want = _plain(art, base)
    for layout in ("aligned", "unaligned", "strided", "readonly"):
        feeds = {k: _layouts(v)[layout] for k, v in base.items()}
        got = art.run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g, w), layout  # bitwise: same kernels on the same bytes


def test_outputs_alias_no_input_constant_or_earlier_run(arts):
    art = arts["two"]
    x1 = _layouts(np.arange(8, dtype=np.float32).reshape(2, 4) - 3)["aligned"]  # read in place
    y1, z1, k1 = art.run({"x": x1})
    kept = [y1.copy(), z1.copy(), k1.copy()]
    for out in (y1, z1, k1):
        assert not np.shares_memory(out, x1) and out.flags.owndata and out.flags.writeable
    z1[...] = 100.0  # writing a result changes neither the input nor the model
    k1[...] = 0
    x2 = _layouts(np.ones((2, 4), dtype=np.float32))["aligned"]
    y2, z2, k2 = art.run({"x": x2})
    assert np.array_equal(y1, kept[0]) and np.array_equal(x1, np.arange(8, dtype=np.float32).reshape(2, 4) - 3)
    assert np.array_equal(k2, [7, 7, 7]) and np.array_equal(z2, x2)
    assert not np.shares_memory(y1, y2) and not np.shares_memory(z2, x2)


def test_host_tensor_reads_aligned_arrays_in_place_and_copies_the_rest():
    a = _layouts(np.arange(12, dtype=np.float32).reshape(3, 4))
    t = host_tensor(a["aligned"])
    assert np.shares_memory(np.from_dlpack(t), a["aligned"])
    for layout in ("unaligned", "strided", "readonly"):
        v = np.from_dlpack(host_tensor(a[layout]))
        assert not np.shares_memory(v, a[layout]) and v.ctypes.data % 64 == 0 and np.array_equal(v, a[layout])
    scalar = host_tensor(np.float32(2.5).reshape(()))
    assert to_numpy(scalar).shape == () and to_numpy(scalar) == np.float32(2.5)
    assert np.array_equal(to_numpy(host_tensor(np.array([True, False]))), [True, False])


def test_run_py_boundary_matches_the_workbench():
    import tvm

    a = _layouts(np.arange(12, dtype=np.int64).reshape(3, 4))
    for layout, arr in a.items():
        t = run_template._host_tensor(tvm, np, arr)
        assert np.shares_memory(np.from_dlpack(t), arr) == (layout == "aligned")
        out = run_template._to_numpy(np, t)
        assert np.array_equal(out, arr) and not np.shares_memory(out, arr)


def test_kept_input_buffers_serve_one_run_at_a_time(arts):
    """Inputs that cannot be read in place are copied into buffers the artifact keeps: a run's
    results are its own, and runs from several threads at once (they take turns: the VM is not
    thread-safe either) each get their own inputs' results. Without the turns this test failed or
    crashed the interpreter in 2 of 4 runs."""
    from concurrent.futures import ThreadPoolExecutor

    art = arts["mlp"]
    spec = art.inputs[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    xs = [_layouts(np.random.default_rng(i).standard_normal(shape).astype(spec.dtype))["unaligned"] for i in range(8)]
    want = [_plain(art, {spec.name: x})[0] for x in xs]
    first = art.run({spec.name: xs[0]})[0]
    second = art.run({spec.name: xs[1]})[0]
    assert np.array_equal(first, want[0]) and np.array_equal(second, want[1])
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda x: art.run({spec.name: x})[0], xs))
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
