"""Artifact.run's numpy boundary (core.compiler.runtime.boundary; run.py's copies of host_tensor and
to_numpy): inputs checked once per signature, read in place where C-contiguous, writable and aligned
as the manifest's input_alignment says (16: numpy's own), else copied into kept buffers; outputs the VM allocated in the run handed out without a
copy, the rest copied. The results must be bitwise those of the plain path (tvm.runtime.tensor in,
Tensor.numpy() out), and no result may alias an input, a constant of the model or another run's result."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from core.compiler.compile import compile_model
from core.compiler.runtime import run_template
from core.compiler.runtime.artifact import host_tensor, to_numpy
from core.compiler.runtime.boundary import fresh_outputs
from core.errors import WorkbenchError
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
            for name, path in {"small_cnn": sample("small_cnn"), "mlp": sample("mlp"), "mm_relu": sample("mm_relu"),
                               "two": _two_outputs(tmp)}.items()}


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
    raw3 = np.empty(a.nbytes + 128, dtype=np.uint8)
    off = -raw3.ctypes.data % 64 + 16  # numpy's own alignment: 16 bytes past a 64-byte boundary
    numpy16 = raw3[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    numpy16[...] = a
    strided = np.repeat(a[..., None], 2, axis=-1)[..., 0]
    readonly = a.copy()
    readonly.flags.writeable = False
    assert aligned.ctypes.data % 64 == 0 and unaligned.ctypes.data % 16 != 0 and not strided.flags.c_contiguous
    assert numpy16.ctypes.data % 64 == 16
    return {"aligned": aligned, "unaligned": unaligned, "numpy16": numpy16, "strided": strided, "readonly": readonly}


@pytest.mark.parametrize("name", ["small_cnn", "mlp", "mm_relu", "two"])
def test_results_bitwise_as_before_for_every_input_layout(arts, name):
    art = arts[name]
    rng = np.random.default_rng(0)
    base = {s.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in s.shape]).astype(s.dtype) for s in art.inputs}
    want = _plain(art, base)
    layouts = {k: _layouts(v) for k, v in base.items()}
    # each layout twice in a row (the second run takes the checked signature and, for an array copied
    # before, the kept buffer without asking its address), then the layouts mixed
    order = [lay for lay in ("aligned", "unaligned", "numpy16", "strided", "readonly") for _ in range(2)] + ["unaligned", "numpy16", "aligned", "strided"]
    for layout in order:
        feeds = {k: v[layout] for k, v in layouts.items()}
        got = art.run(feeds)
        if layout == "aligned" or (layout == "numpy16" and art.manifest.input_alignment == 16):  # read in place
            arrays = art._boundary.arrays(feeds)
            assert all(art._boundary.tensor(i, a).data_ptr() == a.ctypes.data for i, a in enumerate(arrays)), layout
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
        assert not np.shares_memory(out, x1) and out.flags.writeable
    # y is allocated by the VM in this run: handed out as it is; z (the input) and k (a constant) are copies
    assert not y1.flags.owndata and z1.flags.owndata and k1.flags.owndata
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
    for alignment, in_place in ((64, {"aligned"}), (16, {"aligned", "numpy16"})):  # the manifest's input_alignment
        for layout, arr in a.items():
            t = run_template._host_tensor(tvm, np, arr, alignment)
            assert np.shares_memory(np.from_dlpack(t), arr) == (layout in in_place)
            assert np.from_dlpack(t).ctypes.data % alignment == 0
            out = run_template._to_numpy(np, t)
            assert np.array_equal(out, arr) and not np.shares_memory(out, arr)


def test_the_manifest_says_which_inputs_are_read_in_place(arts):
    """ReadInputsInPlace re-declared every input reader: the manifest says 16 (numpy's alignment);
    an artifact without the field (made before it) is taken as TVM's 64, and copies such arrays."""
    from core.compiler.runtime.boundary import NumpyBoundary

    for name in ("small_cnn", "mlp", "mm_relu", "two"):
        assert arts[name].manifest.input_alignment == 16, name
    art = arts["mm_relu"]
    a = _layouts(np.ones([int(d) for d in art.inputs[0].shape], dtype=np.float32))["numpy16"]
    assert NumpyBoundary(art.inputs, art.library).tensor(0, a).data_ptr() != a.ctypes.data
    assert NumpyBoundary(art.inputs, art.library, 16).tensor(0, a).data_ptr() == a.ctypes.data


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


def test_an_input_array_given_again_is_read_again(arts):
    """The same (misaligned, hence copied) array object, its values changed between runs: each run
    sees the values it holds then, as does a new array at another address."""
    art = arts["mm_relu"]
    rng = np.random.default_rng(3)
    a, b = (_layouts(rng.standard_normal((128, 128)).astype(np.float32))["unaligned"] for _ in range(2))
    for step in range(3):
        a[...] = rng.standard_normal((128, 128)).astype(np.float32)
        want = _plain(art, {"A": a, "B": b})[0]
        assert np.array_equal(art.run({"A": a, "B": b})[0], want), step
    aligned = _layouts(a.copy())["aligned"]
    assert np.array_equal(art.run({"A": aligned, "B": b})[0], _plain(art, {"A": aligned, "B": b})[0])


def test_returned_outputs_survive_later_runs(arts):
    """Outputs handed out without a copy hold their memory: kept ones are never overwritten by
    later runs, and memory freed by dropping one is reused only by a later run's own result."""
    art = arts["mlp"]
    spec = art.inputs[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    xs = [np.random.default_rng(i).standard_normal(shape).astype(spec.dtype) for i in range(12)]
    want = [_plain(art, {spec.name: x})[0] for x in xs]
    kept = []
    for i, x in enumerate(xs):
        out = art.run({spec.name: x})[0]
        assert not out.flags.owndata  # the VM's own buffer, not a copy
        if i % 2 == 0:
            kept.append((i, out))  # the odd runs' outputs are dropped: their memory goes back to the VM's pool
    for i, out in kept:
        assert np.array_equal(out, want[i]), i
    assert len({out.ctypes.data for _, out in kept}) == len(kept)


def test_signature_fast_path_refuses_what_check_feeds_refuses(arts):
    art = arts["mm_relu"]
    a = np.ones((128, 128), np.float32)
    art.run({"A": a, "B": a})
    with pytest.raises(WorkbenchError, match="input 'B' has dtype float64"):
        art.run({"A": a, "B": a.astype(np.float64)})
    with pytest.raises(WorkbenchError, match=r"input 'A' has shape \[128, 64\]"):
        art.run({"A": a[:, :64], "B": a})
    with pytest.raises(WorkbenchError, match="input 'B' is missing"):
        art.run({"A": a})
    with pytest.raises(WorkbenchError, match="input 'A' has dtype float64"):
        art.run({"A": a.tolist(), "B": a})  # a list: converted (float64) and refused as check_feeds does

    class Sub(np.ndarray):
        pass

    sub = art.run({"A": a.view(Sub), "B": a})[0]  # not a plain array: through check_feeds' conversion
    assert type(sub) is np.ndarray and np.array_equal(sub, art.run({"A": a, "B": a})[0])


_TEXT = """@main:
  call  vm.builtin.check_tensor_info in: %0, i2, c[0], c[1] dst: %void
  call  vm.builtin.alloc_storage in: %vm, c[2], i0, c[3], c[4] dst: %1
  call  vm.builtin.alloc_tensor in: %1, i0, c[5], c[0] dst: %2
  call  vm.builtin.null_value in:              dst: %1
  call  vm.builtin.alloc_storage in: %vm, c[2], i0, c[3], c[4] dst: %3
  call  vm.builtin.alloc_tensor in: %3, i0, c[5], c[0] dst: %4
  call  vm.builtin.alloc_tensor in: %3, i64, c[5], c[0] dst: %5
  call  fused_relu_add1  in: %0, c[6], %2 dst: %void
  call  vm.builtin.reshape in: %2, c[8]   dst: %6
  call  vm.builtin.make_tuple in: %5, c[7] dst: %7
  call  vm.builtin.make_tuple in: %2, %0, c[7], %6, %4, %7, %2 dst: %8
  call  vm.builtin.null_value in:              dst: %2
  ret   %8

@single:
  call  vm.builtin.alloc_storage in: %vm, c[2], i0, c[3], c[4] dst: %1
  call  vm.builtin.alloc_tensor in: %1, i0, c[5], c[0] dst: %2
  call  k in: %0, %2 dst: %void
  ret   %2

@branchy:
  call  vm.builtin.alloc_storage in: %vm, c[2], i0, c[3], c[4] dst: %1
  If    %0, 3
  call  vm.builtin.alloc_tensor in: %1, i0, c[5], c[0] dst: %2
  ret   %2

@vm.builtin.alloc_storage packed_func;
"""


def test_fresh_outputs_reads_the_bytecode():
    # %2 returned twice (and made into the view %6), %0 the input ends the list (what follows is copied)
    assert fresh_outputs(_TEXT, "main") == (False,)
    assert fresh_outputs(_TEXT, "single") == (True,)
    assert fresh_outputs(_TEXT, "branchy") is None  # anything but calls and one return: copy everything
    assert fresh_outputs(_TEXT, "absent") is None
    once = _TEXT.replace(", %2 dst: %8", " dst: %8")  # %2 returned once, but a view of it (%6) is made
    assert fresh_outputs(once, "main") == (False,)
    no_view = once.replace("  call  vm.builtin.reshape in: %2, c[8]   dst: %6\n", "").replace(", %6,", ",")
    assert fresh_outputs(no_view, "main") == (True,)
    # %4 and %5 share storage %3: neither is fresh
    first = no_view.replace("make_tuple in: %2, %0, c[7], %4, %7 dst: %8", "make_tuple in: %2, %4, %7, %0 dst: %8")
    assert fresh_outputs(first, "main") == (True, False, False)
