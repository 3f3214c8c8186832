"""The editable pass pipeline: what lowering steps through and what compile builds with.

A pipeline is a list of `PassSpec`s: a registered pass name, the abstraction level it works at, and
an `enabled` flag. `default_pipeline(target)` is TVM's own default Relax pipeline for CPU/CUDA
(`relax.backend.{cpu_generic,cuda}.pipeline`) taken apart into one spec per pass, with a few graph
passes in front (DecomposeOpsForInference, CanonicalizeBindings, the workbench's FoldWeights,
FuseLayerNorm, FoldLinearReshape, FoldScaleIntoConv and, for CPUs, PadAttentionKeys (core.compiler.passes.pad_attention),
CombineParallelMatmul (core.compiler.passes.combine_matmul),
ConvertLayoutNCHWc (core.compiler.passes.layout.nchwc), FuseLRN (core.compiler.passes.lrn) and WidenConvRows
(core.compiler.passes.layout.conv_width), TVM's FoldConstant)
and the scheduling step owned by `core.compiler.schedules.schedule_pass(target)`. LegalizeOps knows
the channel-blocked conv2d relax's own legalization refuses (`layout_nchwc.legalize_conv2d`).

The runner (core.compiler.pipeline.runner) runs the enabled specs one by one for everything that compiles:
lowering snapshots the module after each, compile builds with the very same list, so what the
Lowering panel shows is what gets compiled. `build_relax_pipeline(specs, target)` packs a list as
one pass for code that calls `tvm.compile(mod, target, relax_pipeline=...)` itself. Specs marked `required` are needed to
produce a runnable module (the VM lowering); `validate(specs)` explains what a given edit breaks.

A pass's role is a flag of its `PassInfo` (`legalizes`, `fuses`, `schedules`, `vm_lowering`,
`cancellable`, ...): lowering, lineage, compile and `validate` ask the flag, so a step is found by
what it does; names are for display and for the user's pass list.

Adding a pass: one entry in `PASSES` (name, level, factory(target) -> tvm Pass, description, flags).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Callable

from ...errors import WorkbenchError
from ..levels import Level
from ..target import TargetKind

__all__ = [
    "PassSpec",
    "PassInfo",
    "PASSES",
    "default_pipeline",
    "make_pass",
    "build_relax_pipeline",
    "validate",
    "fold_weights_pass",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassSpec:
    """One step of the pipeline: a registered pass, by name, switched on or off."""

    name: str
    enabled: bool = True

    @property
    def info(self) -> "PassInfo":
        try:
            return PASSES[self.name]
        except KeyError:
            raise WorkbenchError(f"unknown pass '{self.name}': choose one of {', '.join(PASSES)}.") from None

    @property
    def level(self) -> Level:
        return self.info.level

    @property
    def required(self) -> bool:
        return self.info.required

    def toggled(self, enabled: bool | None = None) -> "PassSpec":
        return replace(self, enabled=(not self.enabled) if enabled is None else enabled)


@dataclass(frozen=True)
class PassInfo:
    """A registered pass: its level, how to make it, what it does, and the flags that say what
    role it plays in the chain (what lowering, lineage, compile and `validate` ask)."""

    name: str
    level: Level
    factory: Callable  # factory(target) -> tvm.transform.Pass
    description: str
    required: bool = False  # the module cannot be built without it
    legalizes: bool = False  # high-level ops become TIR kernels (call_tir): kernels exist from here on
    annotates: bool = False  # tags each kernel's op pattern, which the fusing step reads
    fuses: bool = False  # groups calls into fused Relax functions (lineage reads the modules around it)
    merges: bool = False  # merges each fused group into one TIR kernel: after the fusing step
    needs_kernels: bool = False  # works on TIR kernels: after the legalizing step
    schedules: bool = False  # schedules the kernels (tuning runs before it; hand scheduling starts before it)
    vm_lowering: bool = False  # scheduled Relax+TIR towards VM code (compile keeps the module before the first)
    cancellable: bool = False  # polls cancel while it runs: a cancel stops it within a fraction of a second


# ---- the workbench's own passes -------------------------------------------------------------------

_NUMPY_UNARY = {
    "relax.sqrt": "sqrt",
    "relax.exp": "exp",
    "relax.negative": "negative",
    "relax.abs": "abs",
    "relax.log": "log",
    "relax.tanh": "tanh",
}
_NUMPY_BINARY = {
    "relax.add": "add",
    "relax.subtract": "subtract",
    "relax.multiply": "multiply",
    "relax.divide": "divide",
    "relax.power": "power",
    "relax.maximum": "maximum",
    "relax.minimum": "minimum",
}


def _np_eval(call, env):
    """numpy value of a Relax call whose tensor arguments are all known constants, else None."""
    import numpy as np
    from tvm import relax

    op = getattr(call.op, "name", None)
    if op is None:
        return None

    def arg(e):
        if isinstance(e, relax.Var):
            hit = env.get(e.name)
            return hit[1] if hit is not None and hit[0].same_as(e) else None
        if type(e).__name__ in ("GenericConst", "Constant"):
            return e.value.numpy()
        return None

    def shape_of(e):
        if isinstance(e, relax.ShapeExpr):
            try:
                return tuple(int(v) for v in e.values)
            except TypeError:
                return None
        return None

    a = call.args
    if op in _NUMPY_UNARY and len(a) == 1:
        x = arg(a[0])
        return None if x is None else getattr(np, _NUMPY_UNARY[op])(x)
    if op == "relax.rsqrt" and len(a) == 1:
        x = arg(a[0])
        return None if x is None else (1.0 / np.sqrt(x)).astype(x.dtype)
    if op in _NUMPY_BINARY and len(a) == 2:
        x, y = arg(a[0]), arg(a[1])
        if x is None or y is None:
            return None
        return getattr(np, _NUMPY_BINARY[op])(x, y)
    if op in ("relax.broadcast_to", "relax.reshape") and len(a) == 2:
        x, shape = arg(a[0]), shape_of(a[1])
        if x is None or shape is None:
            return None
        return np.broadcast_to(x, shape) if op == "relax.broadcast_to" else x.reshape(shape)
    if op == "relax.expand_dims":
        x = arg(a[0])
        if x is None:
            return None
        out = x
        for ax in sorted(int(v) if int(v) >= 0 else int(v) + x.ndim + len(call.attrs.axis) for v in call.attrs.axis):
            out = np.expand_dims(out, ax)
        return out
    if op == "relax.squeeze":
        x = arg(a[0])
        if x is None:
            return None
        axes = call.attrs.axis
        return np.squeeze(x, axis=None if axes is None else tuple(int(v) for v in axes))
    if op == "relax.permute_dims":
        x = arg(a[0])
        if x is None:
            return None
        axes = call.attrs.axes
        return np.transpose(x, None if axes is None else tuple(int(v) for v in axes))
    if op == "relax.astype":
        x = arg(a[0])
        return None if x is None else x.astype(str(call.attrs.dtype))
    if op == "relax.layout_transform":  # weights and biases put in NCHW{b}c by ConvertLayoutNCHWc
        from ..passes.layout.nchwc import layout_transform_numpy

        x = arg(a[0])
        return None if x is None else layout_transform_numpy(x, call.attrs.index_map, call.attrs.pad_value)
    return None


def _fold_weights(mod):
    """Replace bindings computed only from constants by their value, computed with numpy."""
    import numpy as np
    from tvm import relax

    from ..passes.relax_rewrite import array_const

    @relax.expr_functor.mutator
    class FoldWeights(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.env: dict[str, tuple] = {}  # var name -> (var, numpy value)
            self.consts: dict[str, tuple] = {}  # var name -> (var, relax constant), made on first use

        def _lookup(self, op):
            hit = self.consts.get(op.name)
            if hit is not None and hit[0].same_as(op):
                return hit[1]
            hit = self.env.get(op.name)
            if hit is not None and hit[0].same_as(op):
                # used by something not folded: materialize now (intermediates never are)
                const = array_const(np.asarray(hit[1], order="C"))  # ascontiguousarray makes 0-d shape (1,)
                self.consts[op.name] = (op, const)
                return const
            return None

        def visit_var_(self, op):
            return self._lookup(op) or super().visit_var_(op)

        def visit_dataflow_var_(self, op):
            return self._lookup(op) or super().visit_dataflow_var_(op)

        def visit_var_binding_(self, binding):
            value = binding.value
            if isinstance(value, relax.Call):
                dtype = getattr(binding.var.ty, "dtype", None)
                try:
                    result = _np_eval(value, self.env)
                except Exception:  # noqa: BLE001 - anything odd: leave it to TVM
                    result = None
                if result is not None and dtype is not None and np.dtype(result.dtype).name == str(dtype):
                    self.env[binding.var.name] = (binding.var, result)
                    if not isinstance(binding.var, relax.DataflowVar):
                        # an output of the dataflow block: keep the binding, now to a constant
                        self.builder_.emit_normalized(relax.VarBinding(binding.var, self._lookup(binding.var)))
                    return
            super().visit_var_binding_(binding)

    folder = FoldWeights(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            folder.builder_.update_func(gv, folder.visit_expr(func))
    return folder.builder_.get()


def fold_weights_pass(target=None):
    """FoldWeights: fold weight computations (broadcasts, batch-norm arithmetic) with numpy.

    TVM's FoldConstant evaluates each constant call by compiling it with LLVM, ~0.15 s a call:
    16 s for ResNet-50's weights alone. The common ones are a few numpy lines each, so this pass
    computes them on the host in milliseconds and leaves the rest (anything it does not know) to
    FoldConstant, which then has little left to do.
    """
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="FoldWeights")
    def _pass(mod, _ctx):
        return _fold_weights(mod)

    return _pass


# ---- registry -----------------------------------------------------------------------------------

def _relax(name: str, **kwargs):
    def factory(target):
        from tvm import relax

        return getattr(relax.transform, name)(**kwargs)

    return factory


def _own(module: str, factory: str):
    """The factory of one of the workbench's own passes: `factory(target)` of core.compiler.`module`,
    imported when the pass is made (so that listing the pipeline imports no pass module)."""
    def make(target):
        import importlib

        return getattr(importlib.import_module(f"core.compiler.{module}"), factory)(target)

    return make


def _convert_layout(target):
    import tvm

    from ..passes.layout.nchwc import convert_layout_pass

    # the constant transforms it adds (weights, biases, batch-norm scales) folded right away
    return tvm.transform.Sequential([convert_layout_pass(target), fold_weights_pass(target)], name="ConvertLayoutNCHWc")


def _schedule(target):
    from ..schedules import schedule_pass

    return schedule_pass(target)


def _seq(*names: str):
    def factory(target):
        import tvm
        from tvm import relax

        return tvm.transform.Sequential([getattr(relax.transform, n)() for n in names], name="+".join(names))

    return factory


def _legalize(target):
    from ..passes.layout.nchwc import legalize_conv2d
    from ..passes.legalize_cache import legalize_pass, legalize_round

    # and the channel-blocked conv2d, which relax's own legalization refuses
    overrides = {"relax.nn.conv2d": legalize_conv2d}
    if target is not None and not _is_gpu(target):  # GPU kernels keep TVM's own (no vectorized loops there)
        overrides["relax.round"] = legalize_round
    return legalize_pass(target, overrides=overrides)


def _dispatch(target):
    import tvm
    from tvm import relax

    return tvm.transform.Sequential([relax.backend.DispatchSampling(), relax.backend.DispatchSortScan()], name="LibraryDispatch")


PASSES: dict[str, PassInfo] = {}


def _register(info: PassInfo) -> None:
    PASSES[info.name] = info


for _info in [
    PassInfo("DecomposeOpsForInference", Level.GRAPH, _relax("DecomposeOpsForInference"),
             "batch_norm, layer_norm and friends become elementwise arithmetic (inference semantics)."),
    PassInfo("CanonicalizeBindings", Level.GRAPH, _relax("CanonicalizeBindings"),
             "removes trivial re-bindings (x = y) and folds tuple accesses of known tuples."),
    PassInfo("IntegerConv", Level.GRAPH, _own("passes.integer_conv", "integer_conv_pass"),
             "a quantized conv or matmul (DequantizeLinear -> Conv / MatMul / Gemm -> QuantizeLinear) becomes one int8 "
             "kernel: uint8 x int8 summed in int32 by AVX-512 VNNI, requantized once, as onnxruntime's QLinearConv (CPUs with VNNI; "
             "core.compiler.passes.integer_conv)."),
    PassInfo("FoldWeights", Level.GRAPH, fold_weights_pass,
             "computes weight-only expressions (broadcasts, batch-norm scale/shift) on the host with numpy."),
    PassInfo("FuseLayerNorm", Level.GRAPH, _own("passes.fuse_layer_norm", "fuse_layer_norm_pass"),
             "a layer norm written out op by op (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) "
             "becomes one layer_norm: one row kernel instead of three (core.compiler.passes.fuse_layer_norm)."),
    PassInfo("PadAttentionKeys", Level.GRAPH, _own("passes.pad_attention", "pad_attention_keys_pass"),
             "attention over a key count no vector width divides (a ViT's 197) runs over keys padded to whole "
             "vectors, the padding masked out of the softmax with -inf (CPU; core.compiler.passes.pad_attention)."),
    PassInfo("FoldLinearReshape", Level.GRAPH, _own("passes.fold_linear_reshape", "fold_linear_reshape_pass"),
             "Reshape -> Gemm -> Reshape around a linear layer (GPT-2's Conv1D) becomes one matmul on the 3-D "
             "activation, so what follows (GELU, residual add) fuses into it (core.compiler.passes.fold_linear_reshape)."),
    PassInfo("CombineParallelMatmul", Level.GRAPH, _own("passes.combine_matmul", "combine_parallel_matmul_pass"),
             "linear layers reading one activation (an attention layer's Q, K and V projections) become one matmul "
             "over their weights side by side, each output a column slice that fuses into the heads' reshape/transpose: "
             "two kernels fewer per layer; a split of one such matmul (GPT-2's c_attn) becomes the same slices (CPU; "
             "core.compiler.passes.combine_matmul)."),
    PassInfo("FoldScaleIntoConv", Level.GRAPH, _own("passes.fold_conv_scale", "fold_conv_scale_pass"),
             "per-channel scales and shifts after a conv (inference batch norm) folded into its weight: one bias add left."),
    PassInfo("ConvertLayoutNCHWc", Level.GRAPH, _convert_layout,
             "convs and the ops between them in channel-blocked NCHW[x]c (x = the vector width: 16 AVX-512, 8 AVX2), "
             "converted once at the entry and exit of each blocked region (core.compiler.passes.layout.nchwc)."),
    PassInfo("FuseLRN", Level.GRAPH, _own("passes.lrn", "fuse_lrn_pass"),
             "a local response normalization (LRN: seven ops, two layout copies, a libm pow per element) becomes one "
             "kernel in the model's own layout, reading its input once (CPU; core.compiler.passes.lrn)."),
    PassInfo("WidenConvRows", Level.GRAPH, _own("passes.layout.conv_width", "widen_conv_rows_pass"),
             "a channel-blocked conv whose output rows have no register tile (a prime width: zfnet512's 109) "
             "computes one more column, cut off after its bias and ReLU (CPU; core.compiler.passes.layout.conv_width)."),
    PassInfo("FoldConstant", Level.GRAPH, _relax("FoldConstant"),
             "TVM's constant folding: evaluates remaining all-constant calls by compiling them."),
    PassInfo("LibraryDispatch", Level.GRAPH, _dispatch,
             "routes sampling/sort/scan ops to library kernels (TVM's default dispatch).", required=True),
    PassInfo("LegalizeOps", Level.TENSOR_PROGRAM, _legalize,
             "every high-level Relax op becomes a call_tir into a TIR tensor program (Relax + TIR).", required=True,
             legalizes=True),
    PassInfo("AnnotateTIROpPattern", Level.TENSOR_PROGRAM, _relax("AnnotateTIROpPattern"),
             "tags each TIR function as elementwise/broadcast/injective/reduction/out-fusable for FuseOps.",
             annotates=True, needs_kernels=True),
    PassInfo("FoldConstantTIR", Level.TENSOR_PROGRAM, _relax("FoldConstant"),
             "constant folding again, now over call_tir (TVM's default pipeline runs it here)."),
    PassInfo("FuseOps", Level.TENSOR_PROGRAM, _relax("FuseOps"),
             "groups neighbouring calls (conv + bias + relu, ...) into fused Relax functions.", fuses=True),
    PassInfo("FuseTIR", Level.TENSOR_PROGRAM, _relax("FuseTIR"),
             "merges each fused group's TIR functions into one TIR kernel.", required=True, merges=True,
             needs_kernels=True),
    PassInfo("DeadCodeElimination", Level.TENSOR_PROGRAM, _relax("DeadCodeElimination"),
             "drops unused bindings and functions."),
    PassInfo("ScheduleTIR", Level.TENSOR_PROGRAM, _schedule,
             "schedules every kernel for the target (core.compiler.schedules): tiling, threads or vectors.",
             schedules=True, needs_kernels=True, cancellable=True),
    PassInfo("DataflowLowering", Level.TENSOR_PROGRAM, _seq("RewriteDataflowReshape", "ToNonDataflow", "RemovePurityChecking"),
             "reshapes become views, dataflow blocks become plain bindings, purity checks go.", required=True,
             vm_lowering=True),
    PassInfo("ReadInputsInPlace", Level.TENSOR_PROGRAM, _own("passes.input_alignment", "read_inputs_in_place_pass"),
             "the kernels that read a model input declare it 16-byte aligned (numpy's alignment), so a run reads the "
             "caller's arrays in place instead of copying them (CPU; core.compiler.passes.input_alignment).",
             needs_kernels=True, vm_lowering=True),
    PassInfo("CallTIRRewrite", Level.TENSOR_PROGRAM, _relax("CallTIRRewrite"),
             "call_tir becomes explicit output allocation + a call in destination-passing style.", required=True,
             needs_kernels=True, vm_lowering=True),
    PassInfo("StaticPlanBlockMemory", Level.TENSOR_PROGRAM, _relax("StaticPlanBlockMemory"),
             "memory planning: allocations with disjoint lifetimes share storage.", vm_lowering=True),
    PassInfo("RewriteCUDAGraph", Level.TENSOR_PROGRAM, _relax("RewriteCUDAGraph"),
             "captures static parts of the graph as CUDA graphs (CUDA only).", vm_lowering=True),
    PassInfo("VMFinalize", Level.TENSOR_PROGRAM,
             _seq("LowerAllocTensor", "KillAfterLastUse", "LowerRuntimeBuiltin", "ComputePrimValue", "VMShapeLower", "AttachGlobalSymbol"),
             "VM builtins for allocation, frees after last use, shape computation, global symbols.", required=True,
             vm_lowering=True),
]:
    _register(_info)

_DEFAULT = [
    "DecomposeOpsForInference",
    "CanonicalizeBindings",
    "IntegerConv",
    "FoldWeights",
    "FuseLayerNorm",
    "PadAttentionKeys",
    "FoldLinearReshape",
    "CombineParallelMatmul",
    "FoldScaleIntoConv",
    "ConvertLayoutNCHWc",
    "FuseLRN",
    "WidenConvRows",
    "FoldConstant",
    "LibraryDispatch",
    "LegalizeOps",
    "AnnotateTIROpPattern",
    "FoldConstantTIR",
    "FuseOps",
    "FuseTIR",
    "DeadCodeElimination",
    "ScheduleTIR",
    "DataflowLowering",
    "ReadInputsInPlace",
    "CallTIRRewrite",
    "StaticPlanBlockMemory",
    "VMFinalize",
]


# On by default everywhere except these: TVM's graph-level FoldConstant finds nothing left after
# FoldWeights yet costs ~1 s on ResNet-50 (it legalizes to test every call); it stays in the list
# so it can be switched on.
_OFF_BY_DEFAULT = {"FoldConstant"}


def default_pipeline(target) -> list[PassSpec]:
    """The default chain for `target` (a tvm Target, a TargetKind or 'cpu'/'cuda')."""
    names = list(_DEFAULT)
    if _is_gpu(target):
        names.remove("ConvertLayoutNCHWc")  # a CPU layout (the CUDA rules are dlight's)
        names.remove("PadAttentionKeys")  # padded to the CPU's vector width
        names.remove("CombineParallelMatmul")  # measured, and sized to L2, for the CPU's matmul schedule
        names.remove("FuseLRN")  # its kernel is scheduled by a CPU rule (schedules.cpu_lrn)
        names.remove("WidenConvRows")  # for the CPU's channel-blocked conv tiles
        names.remove("ReadInputsInPlace")  # a GPU's inputs are copied to the device
        names.remove("IntegerConv")  # an x86 kernel (VNNI)
        names.insert(names.index("VMFinalize"), "RewriteCUDAGraph")
    return [PassSpec(n, enabled=n not in _OFF_BY_DEFAULT) for n in names]


def _is_gpu(target) -> bool:
    return TargetKind.of(target) is TargetKind.CUDA


def make_pass(spec: PassSpec, target):
    """The tvm Pass of one spec for `target`."""
    return spec.info.factory(target)


def validate(specs: list[PassSpec]) -> list[str]:
    """Why this pipeline would not build, one sentence per problem ([] when it builds)."""
    problems = []
    for s in specs:
        _ = s.info  # unknown names raise
        if s.required and not s.enabled:
            problems.append(f"{s.name} is required to build a runnable module; it cannot be disabled.")
    # the order the passes' roles need, by their flags (the sentences name the passes)
    order = [s.info for s in specs if s.enabled]

    def first(role: Callable[[PassInfo], bool]) -> int | None:
        return next((i for i, info in enumerate(order) if role(info)), None)

    fuse = first(lambda info: info.fuses)
    if fuse is not None:
        for info in order[:fuse]:
            if info.merges:
                problems.append(f"{info.name} must come after {order[fuse].name}.")
        tag = first(lambda info: info.annotates)
        if tag is None or tag > fuse:
            tagger = next((n for n, info in PASSES.items() if info.annotates), "a pass tagging the kernels' op patterns")
            problems.append(f"{order[fuse].name} needs {tagger} before it (it fuses by the kernels' patterns).")
    legalize = first(lambda info: info.legalizes)
    if legalize is not None:
        for info in order[:legalize]:
            if info.needs_kernels:
                problems.append(f"{info.name} works on TIR kernels and must come after {order[legalize].name}.")
    return problems


def build_relax_pipeline(specs: list[PassSpec], target):
    """A module pass running the enabled specs: pass it as tvm.compile's `relax_pipeline`."""
    import tvm

    passes = [make_pass(s, target) for s in specs if s.enabled]

    @tvm.transform.module_pass(opt_level=0, name="WorkbenchPipeline")
    def _pipeline(mod, _ctx):
        t0 = time.perf_counter()
        with target:
            mod = tvm.transform.Sequential(passes)(mod)
        logger.debug("workbench relax pipeline: %.2fs", time.perf_counter() - t0)
        return mod

    return _pipeline
