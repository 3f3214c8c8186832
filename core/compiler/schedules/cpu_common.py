"""Shared pieces of the CPU schedule rules: block lookup, epilogue fusion, weight prepacking and a
safe parallel+vectorize for whatever blocks a rule leaves behind (vector width and register count
are the target's: core.compiler.target.vector_lanes / vector_registers).

Every helper works on a `tvm.s_tir.Schedule` of one PrimFunc as FuseTIR wrote it (for example
`pad_temp -> conv2d_nchw -> T_add -> compute` for conv+bias+relu).
"""
from __future__ import annotations

import logging

__all__ = [
    "root_blocks",
    "find_block",
    "iter_kinds",
    "iter_extents",
    "const_int",
    "layout_free_params",
    "pack_read_buffer",
    "ACCUMULATOR_SCOPE",
    "cache_write_and_inline_epilogue",
    "split_padding_by_rows",
    "PARALLEL_PADDING",
    "inline_epilogue",
    "is_pointwise_tail",
    "decompose_vector_init",
    "schedule_remaining_blocks",
    "schedule_injective",
    "fit_lanes",
    "PARALLEL_MIN_WORK",
    "PARALLEL_LAUNCH_US",
    "PARALLEL_MIN_US",
    "fma_microseconds",
    "parallel_pays",
    "conv_runs_parallel",
    "is_aarch64",
]

logger = logging.getLogger(__name__)

# Below this many innermost iterations a parallel region costs more than it saves on a 2-core
# machine: waking the pool, and on a busy machine waiting at the closing barrier for a worker the
# OS has not scheduled yet (every worker's static share must finish). 64 Ki with TVM's pool; 16 Ki
# with the workbench's (core.compiler.runtime.native_pool). (docs/performance.md: PARALLEL_MIN_WORK)
PARALLEL_MIN_WORK = 1 << 14

# What one parallel region costs at 2 threads (the handshake with the spinning worker, plus the data
# moving between the cores), and the estimated one-core work from which a kernel is split: two
# launches' worth for each of two threads. (docs/performance.md: PARALLEL_LAUNCH_US and PARALLEL_MIN_US)
PARALLEL_LAUNCH_US = 1.5
PARALLEL_MIN_US = 4 * PARALLEL_LAUNCH_US
# Multiply-adds per microsecond of a register-tiled conv on one core; not scaled by the vector width
# (some CPUs execute AVX-512 on 256-bit units). (docs/performance.md: FMA_MACS_PER_US)
FMA_MACS_PER_US = 45_000


def fma_microseconds(macs: int) -> float:
    """Estimated one-core time of `macs` register-tiled multiply-adds (see FMA_MACS_PER_US)."""
    return macs / FMA_MACS_PER_US


def parallel_pays(one_core_us: float) -> bool:
    """Whether a kernel of `one_core_us` estimated one-core time is worth a parallel region
    (see PARALLEL_LAUNCH_US / PARALLEL_MIN_US)."""
    return one_core_us >= PARALLEL_MIN_US


def conv_runs_parallel(macs: int) -> bool:
    """Whether a (non-depthwise) conv of `macs` multiply-adds runs its outer loop in parallel: from
    its estimated one-core time (see PARALLEL_MIN_US): 0.27 M multiply-adds and up."""
    return parallel_pays(fma_microseconds(macs))


def is_aarch64(target) -> bool:
    """Whether `target` builds AArch64 code (its triple's, or this machine's when it names none).

    NEON's FMA takes no memory operand: where x86 folds each broadcast input into its FMA
    (vfmadd231ps with a broadcast memory operand), AArch64 loads it into a vector register of its
    own (ldr s / ld1r, then fmla by lane), so its register tiles leave room for those inputs."""
    from ..target import code_arch, target_cpu

    try:
        return code_arch(target_cpu(target)) == "aarch64"
    except Exception:  # noqa: BLE001 - a target without a CPU record
        return False


def const_int(expr) -> int | None:
    """The value of an integer constant expression, or None when it is symbolic."""
    value = getattr(expr, "value", None)
    return int(value) if isinstance(value, int) else None


def root_blocks(sch):
    """The blocks directly under the root block, in program order."""
    root = sch.get_sblock("root")
    return list(sch.get_child_blocks(root))


def iter_kinds(sch, block) -> str:
    """'S'/'R'/'O' per block iterator: spatial, reduction, other (as dlight spells them)."""
    import tvm

    kinds = {tvm.tirx.IterVar.DataPar: "S", tvm.tirx.IterVar.CommReduce: "R"}
    return "".join(kinds.get(iv.iter_type, "O") for iv in sch.get(block).iter_vars)


def iter_extents(sch, block) -> list[int | None]:
    """The static extent of each block iterator (None where symbolic)."""
    return [const_int(iv.dom.extent) for iv in sch.get(block).iter_vars]


def find_block(sch, names, kinds: str):
    """(block, static loop extents) of the first root-level block named one of `names` whose loop
    kinds read `kinds` (e.g. "SSSSRRR"), or None: no such block, or an extent not a constant.
    How every rule finds the computation it schedules."""
    for block in root_blocks(sch):
        if sch.get(block).name_hint in names and iter_kinds(sch, block) == kinds:
            extents = iter_extents(sch, block)
            return None if any(e is None for e in extents) else (block, extents)
    return None


def layout_free_params(sch) -> set:
    """Buffers of the PrimFunc's parameters that AttachAttrLayoutFreeBuffers marked as weights
    (relax constants or model parameters): their layout may be changed once, ahead of time."""
    func = sch.mod["main"]
    indices = func.attrs.get("layout_free_buffers") if func.attrs is not None else None
    if not indices:
        return set()
    # TVM 0.27: a PrimFunc's parameters are its buffers (no separate buffer_map)
    return {str(func.params[int(index)].name) for index in indices}


def pack_read_buffer(sch, block, read_index: int, index_map, layout_free: bool) -> None:
    """Give `block` its `read_index`-th input in the layout `index_map` describes.

    A cached copy in the new layout is read instead of the original. When the input is a weight
    (layout free) the copy block is marked as a layout-rewrite preprocessing step, so that
    relax's SplitLayoutRewritePreproc moves it out of the kernel and FoldConstant runs it once
    at compile time; otherwise the copy runs at every call (still correct, just slower).
    """
    packed = sch.cache_read(block, read_index, "global")
    if layout_free:
        sch.annotate(packed, "meta_schedule.layout_rewrite_preproc", True)
    sch.transform_layout(block, ("read", read_index), index_map)
    if not layout_free:
        schedule_injective(sch, packed, 8)


# Storage scope of a register tile's accumulator. TVM lowers a "local" buffer through
# TVMBackendAllocWorkspace always (per iteration inside a parallel loop, in heap memory LLVM cannot
# promote to registers), and only a "global" one under 1 KiB to a stack array that stays in registers
# (tirx.LowerTVMBuiltin). (docs/performance.md: ACCUMULATOR_SCOPE)
ACCUMULATOR_SCOPE = "global"


def cache_write_and_inline_epilogue(sch, block, scope: str | None = None):
    """Accumulate `block` in a buffer of `scope` (default ACCUMULATOR_SCOPE) and fold the
    elementwise tail (bias, relu, residual add, batch-norm arithmetic) into the block that
    writes the accumulator back.

    Returns the write-back block; epilogue blocks that cannot be inlined stay at the root and
    are scheduled later by `schedule_remaining_blocks`.
    """
    return inline_epilogue(sch, sch.cache_write(block, 0, scope or ACCUMULATOR_SCOPE))


def inline_epilogue(sch, writeback):
    """Fold the elementwise tail that follows `writeback` into it; returns `writeback`.

    Only a consumer `is_pointwise_tail` accepts is folded in. reverse_compute_inline moves the
    consumer's store into the write-back's loops as it is, without narrowing them: a strided_slice
    folded into a conv computing 18 columns stored all 18 into its 17-wide output, the last one
    into the next row and past the buffer's end at the last row (wrong values at 2 threads, two
    workers overwriting each other's row ends). A refused consumer stays at the root, a pass of its
    own, and `schedule_remaining_blocks` schedules it."""
    params = {str(p.name) for p in sch.mod["main"].params}
    while True:
        consumers = sch.get_consumers(writeback)
        # Only a tail that is the sole reader of what the write-back produces, and otherwise
        # reads only the function's inputs, is folded in. (TVM would also fold one of two
        # readers - GELU's x * (erf(x/sqrt 2) + 1) reads x twice - and leave the other reading a
        # buffer nothing writes any more.)
        if len(consumers) != 1:
            break
        produced = sch.get(writeback).writes[0].source
        reads = [r.source for r in sch.get(consumers[0]).reads]
        if any(not buf.same_as(produced) and str(buf.name) not in params for buf in reads):
            break
        if not is_pointwise_tail(sch, consumers[0], produced):
            break
        try:
            sch.reverse_compute_inline(consumers[0])
        except Exception:  # noqa: BLE001 - a consumer that is not a pure elementwise tail
            break
    return writeback


def is_pointwise_tail(sch, block, produced) -> bool:
    """Whether `block` may be folded into the block that writes `produced`: it iterates exactly
    over `produced`'s shape (spatial iterators from 0), writes a buffer of that shape at its own
    iterators, and reads `produced` only there (elementwise, or broadcast of other inputs into
    that shape: bias, residual, batch-norm scale). Read from the block's body, not its annotations.
    Refused: slice, pad, transpose, reshape, concatenate, split, resize, any reduction."""
    from tvm import s_tir, tirx
    from tvm.sym.analyzer import Analyzer

    stmt = sch.get(block)
    store = stmt.body
    if stmt.init is not None or not isinstance(store, tirx.BufferStore):
        return False
    shape = list(produced.shape)  # symbolic dims (a batch) compared as expressions
    if len(store.buffer.shape) != len(shape) or len(stmt.iter_vars) != len(shape):
        return False
    analyzer = Analyzer()
    for iv, extent, written in zip(stmt.iter_vars, shape, store.buffer.shape):
        if iv.iter_type != tirx.IterVar.DataPar or const_int(iv.dom.min) != 0:
            return False
        if not analyzer.can_prove_equal(iv.dom.extent, extent) or not analyzer.can_prove_equal(written, extent):
            return False
    axes = [iv.var for iv in stmt.iter_vars]

    def at_own_iterators(indices) -> bool:
        return len(indices) == len(axes) and all(index.same_as(axis) for index, axis in zip(indices, axes))

    if not at_own_iterators(store.indices):
        return False
    buffers = {buf: buf for buf in [store.buffer, produced, *(r.source for r in stmt.reads)]}
    reads, _writes = s_tir.analysis.get_sblock_read_write_region(stmt, buffers)
    for region in reads:
        if region.source.same_as(produced):
            if any(const_int(r.extent) != 1 for r in region.region):
                return False  # two different elements read (or a data-dependent index)
            if not at_own_iterators([r.min for r in region.region]):
                return False
    return True


def _is_at_root(sch, block) -> bool:
    """True when no loop of `block` was already placed by a rule (compute_at, tiling...)."""
    loops = sch.get_loops(block)
    if not loops:
        return True
    for loop in loops:
        if sch.get(loop).kind != 0 or sch.get(loop).annotations:  # parallel/vectorized/unrolled
            return False
    return True


def fit_lanes(extent: int, lanes: int) -> int | None:
    """The widest vector of `lanes`, half or a quarter of it (at least 4 lanes) that divides
    `extent`: a 56-wide row gets 8-lane vectors where AVX-512's 16 do not divide it."""
    for width in (lanes, lanes // 2, lanes // 4):
        if width >= 4 and extent % width == 0:
            return width
    return None


def schedule_injective(sch, block, lanes: int) -> None:
    """Parallelize and vectorize a spatial block.

    The innermost loop is vectorized only when the vector width divides it (a vector that
    straddles rows turns every index into a division and every load into a gather); the loops
    outside it are fused and spread over the cores.
    """
    loops = sch.get_loops(block)
    if not loops:
        return
    extents = [const_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return
    total = 1
    for e in extents:
        total *= e
    inner = loops[-1]
    outer_loops = list(loops[:-1])
    width = fit_lanes(extents[-1], lanes)
    if width is None and 4 <= extents[-1] <= 2 * lanes:
        width = extents[-1]  # a whole short row (7, 14) as one vector: no straddling, no division
    if width:
        if extents[-1] > width:
            inner_outer, inner = sch.split(inner, [None, width])
            outer_loops.append(inner_outer)
        sch.vectorize(inner)
    if total >= PARALLEL_MIN_WORK:
        if len(outer_loops) > 1:
            sch.parallel(sch.fuse(*outer_loops))
        elif outer_loops:
            sch.parallel(outer_loops[0])
        else:  # one loop the vector width does not divide
            sch.parallel(inner)


# Whether a split conv's (direct or Winograd) padded copy is split by rows however small
# (split_padding_by_rows); off: copies under PARALLEL_MIN_WORK elements stay serial, as before.
PARALLEL_PADDING = True


def split_padding_by_rows(sch, block, lanes: int) -> bool:
    """Split a channel-blocked padded copy `block` (loops n, chunks, H, W, c) over the threads by
    rows: n, H and the chunks fused in that order, so each thread copies a contiguous run of whole
    rows; its channel block vectorized when it is one to four vectors. For the copy before a conv
    that is split over the threads, however small the copy (schedule_injective splits copies of
    PARALLEL_MIN_WORK elements and more): made by the calling thread alone, it is a serial stretch
    before the split conv, and the worker reads every row of it from the caller's cache; split by
    rows, a thread whose part of the conv is rows too reads mostly rows it copied
    (docs/performance.md: PARALLEL_PADDING). Returns whether it could (another loop nest, or
    PARALLEL_PADDING off, leaves it as it is)."""
    loops = sch.get_loops(block)
    if not PARALLEL_PADDING or len(loops) != 5:
        return False
    n, chunk, h, w, c = loops
    sch.reorder(n, h, chunk, w, c)
    sch.parallel(sch.fuse(n, h, chunk))
    if lanes <= (const_int(sch.get(c).extent) or 0) <= 4 * lanes:
        sch.vectorize(c)
    return True


def decompose_vector_init(sch, block, loop, unrolled: int = 0) -> None:
    """Split `block`'s accumulator initialization out at `loop` (TVM's decompose_reduction), store
    it as whole vectors (its innermost loop vectorized) and unroll the `unrolled` loops just
    outside that (a register tile's rows / columns), as every register-tiled rule does."""
    init_loops = sch.get_loops(sch.decompose_reduction(block, loop))
    sch.vectorize(init_loops[-1])
    for tile_loop in init_loops[len(init_loops) - 1 - unrolled : -1]:
        sch.unroll(tile_loop)


def schedule_reduction(sch, block, lanes: int) -> None:
    """A reduction with no dedicated rule (pooling, mean, softmax sums, odd matmuls).

    Window reductions (pooling: small reduction, wide innermost spatial axis) get the innermost
    spatial axis moved inside the reduction and vectorized, so each output row is accumulated in
    vector registers. Long reductions (mean over a plane, softmax over classes) keep the
    reduction innermost. Either way the outer spatial loops run in parallel when large enough.
    """
    kinds = iter_kinds(sch, block)
    loops = sch.get_loops(block)
    if len(loops) != len(kinds) or "O" in kinds or kinds.rstrip("R") != kinds.replace("R", ""):
        # loops do not mirror the iterators (already transformed) or spatial/reduction interleave
        return
    extents = [const_int(sch.get(loop).extent) for loop in loops]
    if any(e is None for e in extents):
        return
    n_spatial = kinds.count("S")
    spatial, reduction = loops[:n_spatial], loops[n_spatial:]
    spatial_extents = extents[:n_spatial]
    reduction_work = 1
    for e in extents[n_spatial:]:
        reduction_work *= e
    total_spatial = 1
    for e in spatial_extents:
        total_spatial *= e
    if n_spatial == 0:
        return
    inner_extent = spatial_extents[-1]
    window = reduction and reduction_work <= 64 and inner_extent >= lanes // 2
    if window:
        inner = spatial[-1]
        outer_spatial = list(spatial[:-1])
        if inner_extent > 64:  # keep the vector accumulators within the register file
            pieces = [d for d in range(lanes, 65, lanes) if inner_extent % d == 0]
            piece = max(pieces) if pieces else max(d for d in range(1, 65) if inner_extent % d == 0)
            inner_outer, inner = sch.split(inner, [None, piece])
            outer_spatial.append(inner_outer)
        sch.reorder(*outer_spatial, *reduction, inner)
        if len(outer_spatial) > 1:
            par = sch.fuse(*outer_spatial)
        elif outer_spatial:
            par = outer_spatial[0]
        else:
            par = None
        # parallel before the reduction is decomposed: after it the update block is no longer a
        # reduction block to TVM (its init is a block of its own) and `parallel` refuses the loop
        # (pooling and ONNX Sum's stack+sum ran on one thread: 2.4% of ResNet-50 at 1 thread)
        if par is not None and total_spatial * reduction_work >= PARALLEL_MIN_WORK:
            sch.parallel(par)
        decompose_vector_init(sch, block, reduction[0])
        sch.vectorize(inner)
        return
    if total_spatial * max(reduction_work, 1) >= PARALLEL_MIN_WORK and total_spatial >= 2:
        par = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        sch.parallel(par)


def _is_split(sch, block) -> bool:
    """Whether a rule split `block` over the threads already (a parallel loop around it)."""
    from tvm.tirx import ForKind

    return any(sch.get(loop).kind == ForKind.PARALLEL for loop in sch.get_loops(block))


def schedule_remaining_blocks(sch, lanes: int, keep: tuple[str, ...] = ()) -> None:
    """Schedule every root-level block no rule has touched: first inline pure elementwise
    producers into their consumers (fewer passes over memory), then parallel+vectorize the
    spatial blocks and give reductions the generic treatment. Blocks named in `keep` are not
    inlined (a conv's padding: inlined it would branch in the inner loop). Failures leave the
    block as is."""
    for block in root_blocks(sch):
        if "R" in iter_kinds(sch, block) or not _is_at_root(sch, block):
            continue
        if sch.get(block).name_hint in keep:
            continue
        if sch.get(block).annotations.get("meta_schedule.layout_rewrite_preproc") is not None:
            continue
        try:
            if sch.get_consumers(block):
                sch.compute_inline(block)
        except Exception:  # noqa: BLE001 - not inlinable (e.g. padding read by a window op)
            pass
    for block in root_blocks(sch):
        if not _is_at_root(sch, block) or _is_split(sch, block):
            continue
        if sch.get(block).annotations.get("meta_schedule.layout_rewrite_preproc") is not None:
            continue
        try:
            if "R" in iter_kinds(sch, block):
                schedule_reduction(sch, block, lanes)
            else:
                schedule_injective(sch, block, lanes)
        except Exception as exc:  # noqa: BLE001 - never fail the build over a missed speed-up
            logger.debug("left block %s unscheduled: %s", sch.get(block).name_hint, exc)
