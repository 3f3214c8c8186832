"""ReadInputsInPlace: the kernels that read a model input take it at numpy's 16-byte alignment.

Why: TVM declares every kernel parameter 64-byte aligned, and LLVM believes it (aligned vector
loads: a kernel given a pointer 16 bytes past a 64-byte boundary crashes). numpy's own buffers
are only 16-byte aligned (glibc's malloc: an mmap'ed block plus its 16-byte header), so the run
boundary (core.compiler.runtime.boundary) copied most inputs into aligned buffers before every
run: a tiny model's two 64 KiB inputs cost it more than its kernel's time difference with
onnxruntime. Declared 16-byte aligned, the same kernels load with unaligned vector moves, which
cost nothing on data that happens to be aligned and nothing measurable on data that is not
(docs/performance.md, "The numpy boundary").

What: after the scheduling step (tuning records match kernels by their structure, alignment
included, so this comes later), every parameter of a kernel that receives a public function's
input, directly or through views of it (reshape, match_cast, a tuple's field), is re-declared
`align=16` (through TVM's JSON form: `_realigned`); the kernel must print back the same but for
`align=16`, else it is left as it was. The module's attribute `mlcwb.input_alignment`
says what every input's readers accept: 16 when each of them was re-declared, else 64, as also
when an input goes anywhere but a kernel (a packed function, a branch) (the manifest records it;
the boundary and run.py read inputs in place at that alignment).
CPU targets only (a GPU's inputs are copied to the device anyway).
"""
from __future__ import annotations

import logging

__all__ = ["ALIGNED", "ATTR", "input_alignment", "input_readers", "read_inputs_in_place", "read_inputs_in_place_pass"]

logger = logging.getLogger(__name__)

ALIGNED = 16  # numpy's allocations (and TVM's own 64) are at least this aligned
DEFAULT = 64  # what TVM declares
ATTR = "mlcwb.input_alignment"
_VIEWS = frozenset(("relax.reshape", "relax.memory.view", "relax.flatten"))


def input_readers(mod) -> dict | None:
    """GlobalVar of a kernel -> the indices of its parameters that receive an input of a public
    Relax function (or a view of one); None where an input (or a view, or a tuple holding one)
    goes anywhere else but a kernel call, a view, a tuple or shape_of (a branch, a packed
    function, another function): who reads it there is not known, so nothing may claim less
    than TVM's 64."""
    from tvm import relax

    readers: dict = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or func.attrs is None or "global_symbol" not in func.attrs:
            continue
        inputs = {p for p in func.params}

        def aliased(e) -> bool:
            if isinstance(e, relax.Var):
                return e in inputs
            if isinstance(e, relax.TupleGetItem):
                return aliased(e.tuple_value)
            return isinstance(e, relax.Call) and getattr(e.op, "name", "") in _VIEWS and bool(e.args) and aliased(e.args[0])

        if not isinstance(func.body, relax.SeqExpr):
            return None
        for block in func.body.blocks:
            for b in block.bindings:
                value = b.value
                op = getattr(value, "op", None) if isinstance(value, relax.Call) else None
                name = getattr(op, "name", "")
                if aliased(value) or (isinstance(value, relax.Tuple) and any(aliased(f) for f in value.fields)):
                    inputs.add(b.var)  # a view, or a tuple that holds one (its fields are views too)
                elif name in ("relax.call_tir", "relax.call_tir_inplace"):
                    args = value.args[1].fields if isinstance(value.args[1], relax.Tuple) else [value.args[1]]
                    hit = {i for i, a in enumerate(args) if aliased(a)}
                    if hit:
                        readers.setdefault(value.args[0], set()).update(hit)
                elif name != "relax.shape_of" and any(v in inputs for v in relax.analysis.free_vars(value)):
                    return None
    return readers


def _realigned(func, indices: set[int]):
    """`func` with parameters `indices` declared ALIGNED-byte aligned, or None where that cannot
    be done exactly. In TVM 0.27 a buffer is a variable whose type carries its alignment: the
    kernel goes through TVM's JSON form, each chosen parameter's variable gets a copy of its type
    with the new alignment (every use of the variable follows), and the kernel must print back
    the same but for `align=16`."""
    import json

    import tvm

    if not any(getattr(p, "data_alignment", 0) > ALIGNED for i, p in enumerate(func.params) if i in indices):
        return func
    try:
        data = json.loads(tvm.ir.save_json(func))
        nodes = data["nodes"]
        params = nodes[nodes[data["root_index"]]["data"]["params"]]["data"]
        for i in sorted(indices):
            var = nodes[params[i]]
            ty = dict(nodes[var["data"]["ty"]])
            if ty.get("type") != "tirx.BufferType" or ty["data"].get("data_alignment", 0) <= ALIGNED:
                continue
            ty["data"] = {**ty["data"], "data_alignment": ALIGNED}
            nodes.append(ty)
            var["data"] = {**var["data"], "ty": len(nodes) - 1}
        new = tvm.ir.load_json(json.dumps(data))
    except Exception:  # noqa: BLE001 - a kernel whose JSON form is not as expected keeps its declaration
        logger.debug("kernel not re-declared", exc_info=True)
        return None
    if new.script().replace(f", align={ALIGNED}", "") != func.script():
        return None
    return new


def read_inputs_in_place(mod):
    """`mod` with its input-reading kernels re-declared (module docstring) and ATTR set."""
    from tvm import tirx

    readers = input_readers(mod)
    if readers is None:
        return mod.with_attr(ATTR, DEFAULT)
    alignment = ALIGNED
    updates = {}
    for gv, indices in readers.items():
        func = mod[gv]
        if not isinstance(func, tirx.PrimFunc):
            alignment = DEFAULT  # not a kernel of this module: what it assumes is unknown
            continue
        new = _realigned(func, indices)
        if new is None:
            alignment = DEFAULT
        elif new is not func:
            updates[gv] = new
    if updates:
        mod = mod.clone()  # a pass leaves the module it is given as it was
        for gv, new in updates.items():
            mod.update_func(gv, new)
    return mod.with_attr(ATTR, alignment)


def input_alignment(mod) -> int:
    """The alignment in bytes every kernel reading an input of `mod` accepts (64: TVM's own, where
    ReadInputsInPlace has not run)."""
    attrs = mod.attrs
    return int(attrs[ATTR]) if attrs is not None and ATTR in attrs else DEFAULT


def read_inputs_in_place_pass(target=None):
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="ReadInputsInPlace")
    def _pass(mod, _ctx):
        return read_inputs_in_place(mod)

    return _pass
