"""Code generation that stops when asked: `tvm.compile` split into steps a cancel can land between.

`tvm.compile(mod, target)` emits the VM's bytecode, then builds every TIR kernel into one LLVM
module: seconds on a big model (TVM's LLVM codegen is single-threaded), during which a cancel
waits. `build_executable` takes the same steps itself, on a module the pipeline runner
(core.compiler.pipeline.runner) has already taken through the VM-lowering passes, one step at a time:

1. the VM bytecode (relax's own VM codegen, through core.compiler.tvm_compat);
2. the kernels in small groups, each built by `tvm.tirx.build` with the default TIR pipeline, on a
   thread pool (one thread per core: the groups are independent, so this is also faster than one
   piece); `cancel()` is polled every 20 ms while they build. On cancel the queued groups are
   dropped and the call raises `BuildCancelled` at once; groups already running finish in the
   background (a group is a few kernels, see `GROUP_KERNELS`);
3. linking exactly as tvm.compile does (relax's `VMLink`), the other groups imported into the first
   group's module: the VM finds kernels through the imports, and `export_library` links every
   group's object file into the one shared library.

CUDA builds stay one `tvm.compile` (the fatbin export expects one CUDA module); cancel is polled
before and after, and the progress message says the step cannot be interrupted.

Passes that run long inside one step poll the same `cancel()`: `cancel_scope(cancel)` makes it the
thread's current one (compile and lower set it around their passes) and `check_cancelled()`
raises `BuildCancelled`. `fold_constant_calls` is such a pass: the weight repacking that the CPU
schedules split out (`R.call_tir(..._weight_prepack, (constant,))`) is computed with the kernels
built as in step 2, instead of relax's FoldConstant, which compiles and runs them one by one in
C++ (SqueezeNet: 3.9 s that no cancel could stop).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ...errors import Cancelled

__all__ = ["BuildCancelled", "build_executable", "cancel_scope", "check_cancelled", "fold_constant_calls", "fold_constant_calls_pass",
           "GROUP_KERNELS", "POLL_S"]

logger = logging.getLogger(__name__)

GROUP_KERNELS = 4  # kernels per build group: bounds the work a cancel leaves running (on par with tvm.compile in time)
POLL_S = 0.02


class BuildCancelled(Cancelled):
    """`cancel()` turned true during code generation or a long pass."""

    def __init__(self):
        super().__init__("build cancelled.")


_scope = threading.local()


@contextlib.contextmanager
def cancel_scope(cancel: Callable[[], bool] | None):
    """Make `cancel` the one long passes on this thread poll (see `check_cancelled`)."""
    previous = getattr(_scope, "cancel", None)
    _scope.cancel = cancel
    try:
        yield
    finally:
        _scope.cancel = previous


def check_cancelled() -> None:
    """Raise BuildCancelled when the current `cancel_scope` says so (no scope: never)."""
    _check(getattr(_scope, "cancel", None))


def _check(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise BuildCancelled()


def build_executable(mod, target, *, cancel: Callable[[], bool] | None = None,
                     workers: int | None = None, progress: Callable[[str], None] | None = None):
    """`tvm.compile(mod, target, relax_pipeline=None)` for a module already through every pass,
    cancellable (module docstring)."""
    import tvm
    from tvm.relax import vm_build

    from ..target import host_cores
    from ..tvm_compat import attach_system_lib_prefix, is_device_module, tir_functions, vm_codegen, vm_link

    report = progress or (lambda msg: None)
    if "gpu" in target.keys:
        _check(cancel)
        report("code generation (CUDA: cannot be interrupted)")
        ex = tvm.compile(mod, target, relax_pipeline=None)
        _check(cancel)
        return ex
    from .fast_math import install as install_fast_math

    install_fast_math()  # exp/erf/tanh as vector arithmetic, even where no schedule step ran
    t0 = time.perf_counter()
    _check(cancel)
    attrs = dict(mod.attrs) if mod.attrs else {}
    ext_libs = list(attrs.get("external_mods", []))
    params = dict(attrs.get("const_name_to_constant", {}))
    builder = tvm.relax.ExecBuilder()
    mod = vm_codegen(builder, mod)
    tir_mod = tir_functions(mod)
    t_vm = time.perf_counter() - t0
    libs = []
    if tir_mod is not None and tir_mod.get_global_vars():
        tir_mod = attach_system_lib_prefix(tir_mod, target)
        funcs = sorted(tir_mod.functions.items(), key=lambda kv: kv[0].name_hint)
        groups = [dict(funcs[i:i + GROUP_KERNELS]) for i in range(0, len(funcs), GROUP_KERNELS)]
        libs = _build_groups(groups, tir_mod.attrs, target, cancel, workers or host_cores())
    if not libs:
        lib = None
    else:
        lib = libs[0]
        for other in libs[1:]:
            lib.import_module(other)
    device_libs = [m for m in ext_libs if is_device_module(m)]
    if lib is not None:
        for m in device_libs:
            lib.import_module(m)
    relax_libs = [m for m in ext_libs if not is_device_module(m)]
    linked = vm_link(builder, target, lib, relax_libs, params)
    logger.debug("codegen: VM passes %.2fs, kernels+link %.2fs", t_vm, time.perf_counter() - t0 - t_vm)
    return vm_build.VMExecutable(linked)


def _build_groups(groups: list[dict], attrs, target, cancel, workers: int) -> list:
    """Build each group of kernels into its own LLVM module (in order), polling `cancel`."""
    import tvm

    from ..target import code_arch, host_arch, target_cpu

    # another architecture's code is only exported (cross-linked), never loaded into this process
    jit = target.kind.name != "llvm" or code_arch(target_cpu(target)) == host_arch()

    def build(group):
        lib = tvm.tirx.build(tvm.IRModule(group, attrs=attrs), target=target)
        # LLVM turns a module into machine code on the first function lookup (its JIT): do it
        # here, in parallel and cancellable, not in the first run of the model
        for gv, func in group.items() if jit else ():
            name = func.attrs["global_symbol"] if func.attrs is not None and "global_symbol" in func.attrs else gv.name_hint
            if lib.get_function(str(name), query_imports=False) is not None:
                break
        return lib

    pool = ThreadPoolExecutor(max(1, min(workers, len(groups))), thread_name_prefix="codegen")
    futures = [pool.submit(build, g) for g in groups]
    try:
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            _check(cancel)
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _symbol(gv, func) -> str:
    attrs = func.attrs
    return str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else gv.name_hint


def fold_constant_calls(mod, target, cancel: Callable[[], bool] | None = None, workers: int | None = None):
    """Replace every `R.call_tir(kernel, (constants...))` with a single static-shaped tensor output
    by its value, computed now (kernels built in cancellable groups, see the module docstring),
    and drop the call. The kernels, now unused, are left to DeadCodeElimination. Returns the module."""
    import tvm
    from tvm import relax

    from ..target import host_cores

    cancel = cancel if cancel is not None else getattr(_scope, "cancel", None)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    found = []  # (function gv, bound var, kernel gv, constant args, shape, dtype)
    for fgv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        for block in func.body.blocks:
            for b in block.bindings:
                v = b.value
                if not (isinstance(b, relax.VarBinding) and isinstance(v, relax.Call) and v.op.same_as(call_tir) and len(v.args) == 2):
                    continue
                args = v.args[1]
                sinfo = b.var.ty  # relax's type (StructInfo before TVM 0.27)
                if not (isinstance(args, relax.Tuple) and args.fields and all(isinstance(a, tvm.ir.expr.Constant) for a in args.fields)):
                    continue
                if not isinstance(sinfo, relax.TensorType) or not isinstance(sinfo.shape, relax.ShapeExpr):
                    continue
                if not all(isinstance(d, tvm.tirx.IntImm) for d in sinfo.shape.values):
                    continue
                kernel = v.args[0]
                if not isinstance(mod[kernel], tvm.tirx.PrimFunc):
                    continue
                found.append((fgv, b.var, kernel, [a.value for a in args.fields], [int(d) for d in sinfo.shape.values], sinfo.dtype))
    if not found:
        return mod
    kernels: dict[str, tuple] = {}
    for _, _, kernel, _, _, _ in found:
        func = mod[kernel]
        if func.attrs is None or "global_symbol" not in func.attrs:  # private kernels are not callable as built
            func = func.with_attr("global_symbol", kernel.name_hint)
        kernels.setdefault(kernel.name_hint, (kernel, func))
    items = sorted(kernels.values(), key=lambda kv: kv[0].name_hint)
    groups = [dict(items[i:i + GROUP_KERNELS]) for i in range(0, len(items), GROUP_KERNELS)]
    libs = _build_groups(groups, mod.attrs, _runnable_here(target), cancel, workers or host_cores())
    lib_of = {gv.name_hint: (lib, _symbol(gv, f)) for group, lib in zip(groups, libs) for gv, f in group.items()}
    values: dict[object, list] = {}
    dev = tvm.cpu(0)
    for fgv, var, kernel, inputs, shape, dtype in found:
        _check(cancel)
        lib, symbol = lib_of[kernel.name_hint]
        out = tvm.runtime.empty(shape, dtype, dev)
        lib.get_function(symbol, query_imports=False)(*inputs, out)
        values.setdefault(fgv, []).append((var, relax.const(out)))

    @relax.expr_functor.mutator
    class _Substitute(relax.PyExprMutator):
        def __init__(self, module, pairs):
            super().__init__(module)
            self.pairs = pairs

        def _constant(self, op):
            return next((const for var, const in self.pairs if op.same_as(var)), None)

        def visit_var_(self, op):
            const = self._constant(op)
            return const if const is not None else super().visit_var_(op)

        def visit_dataflow_var_(self, op):  # the prepack results are dataflow variables
            const = self._constant(op)
            return const if const is not None else super().visit_dataflow_var_(op)

        def visit_var_binding_(self, binding):
            if self._constant(binding.var) is None:  # the folded call itself goes (no one reads it now)
                super().visit_var_binding_(binding)

    for fgv, pairs in values.items():
        mod[fgv] = _Substitute(mod, pairs).visit_expr(mod[fgv])
    return mod


def _runnable_here(target):
    """The target to build the folded kernels for: `target` itself, or, when this machine cannot run
    code built for it (compiling for a deployment CPU with AVX-512 on an AVX2 host), this machine's
    CPU. The kernels keep their schedule (LLVM splits the wider vectors); only their values are kept."""
    from ..target import cannot_run_here, make_target, target_cpu

    if target.kind.name == "llvm" and cannot_run_here(target_cpu(target)):
        return make_target("cpu", mcpu="host", mattr="")
    return target


def fold_constant_calls_pass(target):
    """`fold_constant_calls` as a module pass (polls the thread's `cancel_scope`)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="FoldConstantCalls")
    def _pass(mod, _ctx):
        return fold_constant_calls(mod, target)

    return _pass
