"""Shape buckets: the model's `main` specialised to shapes the user names, beside the general one.

A kernel whose extents are symbolic (a batch `N`, a sequence length) gets weaker schedules than a
static one: the matmul rule takes one row per register tile and no parallel loop, attention's
matmuls and the row reductions are not matched at all. So a model with symbolic dims can be
compiled with buckets: for each named shape (`{"batch": 2, "sequence": 96}`) a copy of `main` with
its symbolic vars bound (Relax's `bind_symbolic_vars`) is added to the imported module under its
own name (`main_bucket0`, ...), before any pass, so every pass and schedule rule sees static shapes
and its kernels are the static ones. `main` stays the general function: the fallback for every
other shape. At run time (core.compiler.runtime.artifact, the artifact's run.py) the bucket whose
dims equal the inputs' is called, else `main` (artifact_check.choose_bucket).

Every symbolic dim of the inputs must be given a value: a partly bound bucket would keep symbolic
kernels and save little.
"""
from __future__ import annotations

import logging

from ...errors import WorkbenchError

__all__ = ["BUCKET_PREFIX", "add_shape_buckets", "as_main", "bucket_function", "input_dims", "normalise_buckets"]

logger = logging.getLogger(__name__)

BUCKET_PREFIX = "main_bucket"


def bucket_function(index: int) -> str:
    """The Relax function name of bucket `index`: a C identifier the VM exports."""
    return f"{BUCKET_PREFIX}{index}"


def input_dims(specs) -> list[str]:
    """The symbolic dim names of the inputs (TensorSpecs), in order of first appearance."""
    names: list[str] = []
    for s in specs:
        for d in s.shape:
            if isinstance(d, str) and d not in names:
                names.append(d)
    return names


def normalise_buckets(buckets, specs) -> list[dict[str, int]]:
    """`buckets` (dicts dim name -> size) checked against the inputs' symbolic dims: each names
    every dim, no unknown one, sizes >= 1; duplicates dropped, order kept. One sentence
    (WorkbenchError) naming the bucket and the dim otherwise."""
    dims = input_dims(specs)
    out: list[dict[str, int]] = []
    for bucket in buckets or []:
        text = ",".join(f"{k}={v}" for k, v in bucket.items())
        if not dims:
            raise WorkbenchError(f"shape bucket {text}: the model has no symbolic input dims, so there is nothing to specialise.")
        unknown = [k for k in bucket if k not in dims]
        if unknown:
            raise WorkbenchError(f"shape bucket {text}: '{unknown[0]}' is not a symbolic dim of the model's inputs (they have {', '.join(dims)}).")
        missing = [d for d in dims if d not in bucket]
        if missing:
            raise WorkbenchError(f"shape bucket {text} leaves '{missing[0]}' symbolic; give every symbolic dim a size ({', '.join(dims)}).")
        bad = [k for k, v in bucket.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
        if bad:
            raise WorkbenchError(f"shape bucket {text}: '{bad[0]}' must be a whole number of at least 1, not {bucket[bad[0]]!r}.")
        ordered = {d: int(bucket[d]) for d in dims}
        if ordered not in out:
            out.append(ordered)
    return out


def add_shape_buckets(mod, buckets: list[dict[str, int]], code_names: dict[str, str] | None = None):
    """`mod` (the imported Relax module) with one function per bucket added: `main` with the
    bucket's symbolic vars bound, named bucket_function(i). `buckets` come from
    normalise_buckets (the model's dim names; `code_names` maps a renamed one to its C
    identifier in the module). Returns (module, [function names])."""
    import tvm
    from tvm import relax

    if not buckets:
        return mod, []
    main = mod["main"]
    code = code_names or {}
    defined = {v.name: v for v in relax.analysis.defined_symbolic_vars(main)}
    out = tvm.IRModule({gv: f for gv, f in mod.functions_items()}, attrs=mod.attrs, global_infos=mod.global_infos)
    names = []
    for i, bucket in enumerate(buckets):
        binding = {}
        for dim, size in bucket.items():
            var = defined.get(code.get(dim, dim))
            if var is None:  # a dim the import never made symbolic (an unused input's): nothing to bind
                logger.debug("shape bucket %s: no symbolic var %s in main", bucket, dim)
                continue
            binding[var] = size
        name = bucket_function(i)
        out[name] = main.bind_symbolic_vars(binding).with_attr("global_symbol", name)
        names.append(name)
    return out, names


def as_main(mod, function: str):
    """`mod` with `function` in the place of `main`: for code that reads a model's one entry
    function (kernel lineage), pointed at a bucket."""
    import tvm

    if mod is None or function == "main":
        return mod
    names = {gv.name_hint for gv in mod.get_global_vars()}
    if function not in names:
        return None
    out = tvm.IRModule({gv: f for gv, f in mod.functions_items()}, attrs=mod.attrs, global_infos=mod.global_infos)
    out.update_func(out.get_global_var("main"), mod[function])
    return out
