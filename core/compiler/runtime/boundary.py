"""The numpy boundary of a CPU run (Artifact.run): numpy arrays in, numpy arrays out, at as little
per-run cost as a tiny model allows (issue 40 item 3; figures: docs/performance.md, "The numpy boundary").

* Inputs: checked once per input signature (`NumpyBoundary.arrays`: the same type, dtype and shape
  as the last accepted run skip artifact_check.check_feeds, whose sentences every other run gets);
  read in place where C-contiguous, writable and aligned as the kernels reading them were declared
  (`host_tensor`; the manifest's `input_alignment`: 16, numpy's own, since ReadInputsInPlace
  (core.compiler.passes.input_alignment), else TVM's 64, and LLVM is told so), else copied into a
  buffer kept per input.
* Outputs: handed out without a copy where the VM allocated them in this run (`fresh_outputs`
  reads the VM's bytecode once per function: a tensor made by `vm.builtin.alloc_tensor` on
  storage `vm.builtin.alloc_storage` made for it alone); the numpy array then holds the tensor, so
  the VM's pool cannot give its memory to a later run. Anything else (an input returned as it came,
  a constant, a view made by reshape, a shape, one tensor returned twice) is copied (`to_numpy`).
"""
from __future__ import annotations

import re
import weakref

import numpy as np

from .artifact_check import ArtifactRefused, check_feeds

# Tensors numpy and TVM exchange through DLPack (bfloat16 and other ml_dtypes types go through
# TVM's own copy). TVM's kernels assume 64-byte aligned buffers: tvm.runtime.from_dlpack refuses less.
_DLPACK_DTYPES = frozenset(
    ["bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
DLPACK_TYPES = frozenset(np.dtype(name).type for name in _DLPACK_DTYPES)  # dtype.type: dtype.name costs 2 us
ALIGNMENT = 64


def host_tensor(a: np.ndarray, copy: bool = True, alignment: int = ALIGNMENT):
    """`a` as a CPU TVM tensor: the array itself where it is C-contiguous, writable and 64-byte
    aligned (`alignment`: what the kernels reading it accept; no copy: tvm.runtime.tensor allocates
    and copies, ~20 us of a tiny model's ~40 us run), else a copy into a fresh aligned numpy buffer (fresh per call: concurrent runs share
    nothing). tvm_ffi.from_dlpack, and its data_ptr for the alignment: numpy's ctypes.data costs
    1 us. With `copy` False, None instead of a copy. Figures: docs/performance.md, "numpy boundary"."""
    import tvm
    import tvm_ffi

    if a.dtype.type not in DLPACK_TYPES:
        return tvm.runtime.tensor(a)
    if a.flags.c_contiguous and a.flags.writeable and a.size:  # an empty array may have strides of 0: TVM wants compact ones
        t = tvm_ffi.from_dlpack(a)
        if t.data_ptr() % alignment == 0:
            return t
    if not copy:
        return None
    buf = aligned_empty(a.shape, a.dtype)
    np.copyto(buf, a)
    return tvm_ffi.from_dlpack(buf)


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data is 64-byte aligned."""
    import tvm_ffi

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    return np.ndarray(shape, dtype, raw, -tvm_ffi.from_dlpack(raw).data_ptr() % ALIGNMENT)


def to_numpy(t) -> np.ndarray:
    """A TVM tensor as a numpy array of its own: a copy, since the tensor may be an input read in
    place, a constant of the model or a buffer the VM hands out again. On the CPU the copy is
    numpy's, through a DLPack view (Tensor.numpy() costs ~7 us more per output); what numpy
    cannot import (bfloat16, a GPU tensor) goes through Tensor.numpy()."""
    if t.device.dlpack_device_type() == 1:  # kDLCPU
        try:
            return np.from_dlpack(t).copy()
        except (BufferError, TypeError, ValueError, RuntimeError):
            pass
    return t.numpy()


def _handed_out(t) -> np.ndarray:
    """A CPU tensor the VM allocated in this run as a numpy array without a copy (the array keeps
    the tensor, and with it the memory, alive); a copy where numpy cannot import it."""
    try:
        return np.from_dlpack(t)
    except (BufferError, TypeError, ValueError, RuntimeError):
        return t.numpy()


def flatten_outputs(out, fresh: tuple[bool, ...] | None = None) -> list[np.ndarray]:
    """The VM's result as a flat list of numpy arrays of their own: tensors (copies, to_numpy, or,
    where `fresh` (fresh_outputs: the first outputs) says so for its place in the flat list, the
    tensor itself without a copy),
    tuples (recursively), shapes (a Shape node's output comes back as a ShapeTuple: int64, like
    onnxruntime's) and scalars."""
    import tvm

    leaves: list = []
    _leaves(out, leaves, tvm.runtime.ShapeTuple)
    if fresh is None or len(fresh) > len(leaves):
        fresh = ()
    fresh = tuple(fresh) + (False,) * (len(leaves) - len(fresh))
    result = []
    for x, own in zip(leaves, fresh):
        if hasattr(x, "numpy"):
            result.append(_handed_out(x) if own else to_numpy(x))
        elif isinstance(x, tvm.runtime.ShapeTuple):
            result.append(np.array(list(x), dtype=np.int64))
        else:
            result.append(np.asarray(x))
    return result


def _leaves(out, into: list, shape_tuple) -> None:
    if hasattr(out, "numpy") or isinstance(out, (shape_tuple, bool, int, float, np.generic)):
        into.append(out)
        return
    for x in out:
        _leaves(x, into, shape_tuple)


_INSTRUCTION = re.compile(r"^\s*call\s+(\S+)\s+in:\s*(.*?)\s+dst:\s*(%\S+)\s*$")


def fresh_outputs(text: str, function: str) -> tuple[bool, ...] | None:
    """Which of `function`'s first outputs (flattened, as flatten_outputs lists them) the VM
    allocates anew in every run, read from the executable's text (`as_text`). The returned register,
    or a tuple's element registers (vm.builtin.make_tuple, nested), are taken in order while each is
    a tensor made by vm.builtin.alloc_tensor (one output each); the first other element (an input, a
    constant, a view, anything whose number of outputs the text does not tell) ends the list, and
    the outputs from there on are copied. A tensor is fresh when made once, on a storage register
    made once by vm.builtin.alloc_storage and backing no other tensor, returned once, and passed to
    nothing but kernels and checks (calls without a result) and tuples. None where the text holds
    anything else than calls and one return (branches, jumps), or not the function."""
    lines = _function_lines(text, function)
    if lines is None:
        return None
    defs: dict[str, list[tuple[str, list[str]]]] = {}
    tensors_on: dict[str, int] = {}  # storage register -> tensors allocated on it
    escapes: set[str] = set()  # registers passed to a call that makes something of them
    ret = None
    for line in lines:
        m = _INSTRUCTION.match(line)
        if m:
            callee, args, dst = m.group(1), [a.strip() for a in m.group(2).split(",") if a.strip()], m.group(3)
            if callee != "vm.builtin.null_value":
                defs.setdefault(dst, []).append((callee, args))
            if callee == "vm.builtin.alloc_tensor" and args:
                tensors_on[args[0]] = tensors_on.get(args[0], 0) + 1
            elif dst != "%void" and callee != "vm.builtin.make_tuple":
                escapes.update(args)
        elif line.split()[:1] == ["ret"] and ret is None and len(line.split()) == 2:
            ret = line.split()[1]
        else:
            return None
    if ret is None:
        return None

    def only(reg):
        d = defs.get(reg, [])
        return d[0] if len(d) == 1 else (None, [])

    def flat(reg, depth=0) -> list[str]:
        callee, args = only(reg)
        if callee == "vm.builtin.make_tuple" and depth < 32:
            return [r for a in args for r in flat(a, depth + 1)]
        return [reg]

    regs = flat(ret)
    fresh = []
    for reg in regs:
        callee, args = only(reg)
        if callee != "vm.builtin.alloc_tensor" or not args:
            break  # how many outputs this element is, the text does not say: the rest are copied
        storage = args[0]
        fresh.append(only(storage)[0] == "vm.builtin.alloc_storage" and tensors_on.get(storage) == 1 and regs.count(reg) == 1
                     and reg not in escapes)
    return tuple(fresh)


def _function_lines(text: str, function: str) -> list[str] | None:
    head = f"@{function}:"
    lines = text.splitlines()
    try:
        start = lines.index(head)
    except ValueError:
        return None
    body = []
    for line in lines[start + 1:]:
        if not line.strip() or line.startswith("@"):
            break
        body.append(line)
    return body


def executable_text(library) -> str | None:
    """The VM executable's bytecode as text (a VMExecutable right after compile, the Module
    loaded from model.so), or None where it has none."""
    try:
        return library.as_text() if hasattr(library, "as_text") else library["as_text"]()
    except Exception:  # noqa: BLE001 - no such function: every output is copied
        return None


class _Slow(Exception):
    pass


class NumpyBoundary:
    """One artifact's numpy boundary on the CPU (module docstring): the input signature last
    accepted, the kept aligned input buffers, which outputs each VM function allocates anew.
    Not thread-safe: Artifact.run holds its lock around a run."""

    def __init__(self, specs, library, alignment: int = ALIGNMENT):
        self._specs = list(specs)
        self._alignment = alignment  # what the kernels reading the inputs accept (the manifest's input_alignment)
        self._names = [s.name for s in self._specs]
        self._accepted: list | None = None  # per input: (dtype, shape) of the last accepted run
        # input index -> (aligned array, TVM tensor on it, weak reference to the array last copied into it)
        self._staging: dict[int, tuple] = {}
        self._library = library
        self._fresh: dict[str, tuple[bool, ...] | None] = {}
        import tvm_ffi  # made by Artifact.run, TVM already imported

        self._from_dlpack = tvm_ffi.from_dlpack

    def arrays(self, feeds: dict) -> list:
        """The inputs in the model's order, as check_feeds returns them (its ArtifactRefused where it
        refuses), without its checks when every input has the type, dtype and shape of the last
        accepted run (a non-contiguous array then reaches `tensor` as it is, which copies it)."""
        accepted = self._accepted
        if accepted is not None:
            try:
                arrays = []
                for name, (dtype, shape) in zip(self._names, accepted):
                    a = feeds[name]
                    if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                        raise _Slow
                    arrays.append(a)
                return arrays
            except (KeyError, _Slow):
                pass
        arrays = check_feeds(self._specs, feeds)
        self._accepted = [(a.dtype, a.shape) for a in arrays]
        return arrays

    def tensor(self, index: int, a: np.ndarray):
        """Input `index` as a CPU tensor: `a` itself where host_tensor reads it in place, else a
        copy into this input's kept aligned buffer (~3 us less than a fresh one). The array last
        copied is remembered (a weak reference): given again, it is copied again without asking
        for its address (tvm_ffi.from_dlpack and data_ptr, ~1.3 us); a copy is right whatever
        the array's address has become."""
        kept = self._staging.get(index)
        if kept is not None and kept[2]() is a and kept[0].shape == a.shape and kept[0].dtype == a.dtype:
            np.copyto(kept[0], a)
            return kept[1]
        if a.dtype.type not in DLPACK_TYPES:
            return host_tensor(a)  # TVM's own copy
        flags = a.flags
        if flags.c_contiguous and flags.writeable and a.size:  # host_tensor's test, inlined (~0.5 us)
            t = self._from_dlpack(a)
            if t.data_ptr() % self._alignment == 0:
                return t
        if kept is None or kept[0].shape != a.shape or kept[0].dtype != a.dtype:
            buf = aligned_empty(a.shape, a.dtype)
            kept = (buf, self._from_dlpack(buf))
        self._staging[index] = (kept[0], kept[1], _weak(a))
        np.copyto(kept[0], a)
        return kept[1]

    def outputs(self, out, function: str) -> list[np.ndarray]:
        """The run's result as numpy arrays of their own (flatten_outputs), the ones `function`
        allocates anew per run handed out without a copy (one such tensor: np.from_dlpack at once)."""
        try:
            fresh = self._fresh[function]
        except KeyError:
            text = executable_text(self._library)
            fresh = self._fresh[function] = fresh_outputs(text, function) if text else None
        if fresh == (True,) and hasattr(out, "numpy"):
            return [_handed_out(out)]
        return flatten_outputs(out, fresh)


def _weak(a):
    """A weak reference to `a`, or a function that never returns it (an array type without weak references)."""
    try:
        return weakref.ref(a)
    except TypeError:
        return lambda: None


__all__ = ["ALIGNMENT", "ArtifactRefused", "DLPACK_TYPES", "NumpyBoundary", "aligned_empty", "executable_text", "flatten_outputs",
           "fresh_outputs", "host_tensor", "to_numpy"]
