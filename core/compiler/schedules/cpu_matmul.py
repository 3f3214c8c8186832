"""CPU schedule for matmul / dense (Gemm, MatMul, batched MatMul) with their fused epilogue.

Matches a reduction block `C[..., i, j] += A[..., i, k] * B[..., k, j]` (or B[..., j, k]) with one
reduction iterator, as LegalizeOps writes `matmul`. The schedule:

1. packs B to [..., j/VB, k, VB] (a weight: once at compile time; a big or transposed
   activation: a copy per call), so the inner loop streams B contiguously; a row-major activation
   B of cache size with whole column tiles is read in place, with taller tiles
   (`in_place_tile_rows`);
2. computes TI rows x VB columns of C in registers (batch-1 dense: 1 x up to 4 vectors, the
   columns padded to whole tiles rather than fewer accumulators; GEMM: up to 6 rows x 2
   vectors), A broadcast, B one vector load per register; rows no tile divides are padded,
   the padded rows reading A's last row again (no copy of A);
3. loops: batch, i/TI, j/VB (fused, parallel) | k | TI (unrolled) | VB (vectorized); a GEMV
   with a big weight runs that loop in parallel even below the GEMM's work threshold: each
   thread streams its own contiguous part of the packed weight (see `runs_parallel`);
4. the accumulator is written back once with bias, activation etc. inlined.

Symbolic batch or row counts (a model's batch dimension) keep one row per tile. A symbolic
reduction (attention's probs @ V over a symbolic sequence) is taken where B is an activation
with whole column tiles, read in place, and runs in parallel. Not matched (None): symbolic
columns, a symbolic reduction over a weight or a transposed B, or a body that is not a product
of two reads.
"""
from __future__ import annotations

import logging

from ..target import VECTOR_REGISTERS, vector_lanes, vector_registers
from .cpu_common import (
    cache_write_and_inline_epilogue,
    decompose_vector_init,
    inline_epilogue,
    iter_extents,
    iter_kinds,
    layout_free_params,
    pack_read_buffer,
    root_blocks,
    schedule_remaining_blocks,
)

__all__ = ["Matmul", "choose_matmul_tile", "gemv_columns", "in_place_tile_rows", "runs_parallel"]

logger = logging.getLogger(__name__)

# Multiply-adds below which one thread beats waking the pool (and beside a busy process a parallel
# kernel may wait a time slice for its second worker). (docs/performance.md: PARALLEL_MIN_WORK_MATMUL)
PARALLEL_MIN_WORK_MATMUL = 1 << 20

# A GEMV (a few rows: batch-1 dense, a classifier) does one multiply-add per weight element it
# loads, so its time is the weight's bytes over one core's bandwidth, not its multiply-adds over
# the FMA units. Split over the columns from GEMV_PARALLEL_MIN_BYTES, each thread streams its half
# of the packed weight and the second core's bandwidth adds up (onnxruntime's MLAS GEMV splits the
# same way). (docs/performance.md: GEMV_MAX_ROWS and GEMV_PARALLEL_MIN_BYTES)
GEMV_MAX_ROWS = 4
GEMV_PARALLEL_MIN_BYTES = 512 << 10

# An activation B (not a weight) in row-major [K, N] with whole column tiles is already the layout
# the register tile reads: VB contiguous columns of row k, one vector load per register. Packing it
# costs a copy at every call (and, with two threads, a parallel region of its own). Up to this size
# per matrix B stays in L2 across the row tiles and is read in place; bigger ones keep the packed
# copy, whose contiguous stream the prefetchers follow. (docs/performance.md:
# ACTIVATION_B_IN_PLACE_MAX_BYTES and in_place_tile_rows)
ACTIVATION_B_IN_PLACE_MAX_BYTES = 512 << 10

# Vector accumulators a GEMM's register tile keeps in flight, at least, where the register file
# and a little row padding allow. Two FMA pipes x 4 cycles of latency need 8 independent FMAs;
# at exactly 8 (AVX2's 4 rows x 2 vectors, the divisor of BERT's 128 and GPT-2's 64 tokens) every
# broadcast and loop instruction stalls them; AVX2 takes 6 rows x 2 vectors (rows padded to 66 and
# 132). AVX-512 tiles already hold 16 (8 x 2 zmm). (docs/performance.md: MIN_GEMM_ACCUMULATORS)
MIN_GEMM_ACCUMULATORS = 12


def runs_parallel(rows: int | None, cols: int, depth: int, batch: int = 1, dtype_bytes: int = 4) -> bool:
    """Whether a matmul of `batch` x [rows, depth] x [depth, cols] runs its column tiles (and
    row tiles, batches) in parallel: enough multiply-adds to pay for waking the pool (a GEMM),
    or a GEMV whose weight stream is big enough that two cores' bandwidth pays (see
    GEMV_PARALLEL_MIN_BYTES). Symbolic rows count as one (the common deployment case)."""
    rows = 1 if rows is None else rows
    if rows * cols * depth * batch >= PARALLEL_MIN_WORK_MATMUL:
        return True
    return rows * batch <= GEMV_MAX_ROWS and cols * depth * batch * dtype_bytes >= GEMV_PARALLEL_MIN_BYTES


def gemv_columns(cols: int, lanes: int) -> int | None:
    """Columns per register tile of a one-row matmul, or None when padding would waste too much.

    One row gives each vector of columns its own accumulator chain, a dependent FMA per step of
    the reduction: four vectors keep four chains in flight (FMA latency 4 cycles, so one vector
    is latency-bound at a quarter of the load rate). The widest of four, three, two or one vectors
    whose padding stays within 1/16 of the columns: a classifier's 1000 columns take 4 x 16
    lanes (padded to 1024, 2.4% more weight; it took 20-column tiles of 1.25 vectors, one
    chain and a masked one), 48 columns three vectors, 10 columns none of them."""
    for regs in (4, 3, 2, 1):
        width = regs * lanes
        if -cols % width <= cols // 16:
            return width
    return None


def choose_matmul_tile(rows: int, cols: int, lanes: int, registers: int = VECTOR_REGISTERS, pad_gemv: bool = True) -> tuple[int, int]:
    """(TI, VB): rows and columns of C held in registers.

    VB is one to four vectors for a batch-1 GEMV (`gemv_columns`: padded when that costs little;
    with `pad_gemv` False, as for symbolic rows, only whole vectors dividing the columns), one or
    two for a GEMM when whole vectors divide the columns; otherwise the widest divisor that is a
    multiple of 4 (24 columns with 16 lanes: one and a half vectors), and failing that one vector
    whose last tile is padded (10 columns, a ViT's 197 attention columns). TI rows divide the
    rows when a divisor keeps at least half the register file busy; otherwise the rows are padded to a multiple of TI too. Padding costs
    one zero-filled copy of the operand (the weight's at compile time) and a few wasted lanes,
    far less than leaving the kernel unvectorized; the tile height is chosen to pad the fewest rows.
    A divisor leaving fewer than MIN_GEMM_ACCUMULATORS accumulators (AVX2's 4 rows of 2 vectors
    for 64 or 128 rows) gives way to a taller tile whose padding stays within 1/16 of the rows.
    """
    if rows == 1 and pad_gemv and (width := gemv_columns(cols, lanes)) is not None:
        return 1, width
    if rows == 1 and cols % lanes == 0:
        for regs in (4, 2, 1):
            if cols % (lanes * regs) == 0:
                return 1, lanes * regs
    if cols % lanes == 0:
        vb = 2 * lanes if cols % (2 * lanes) == 0 else lanes
    else:
        fitting = [d for d in range(4, 2 * lanes + 1, 4) if cols % d == 0]
        vb = max(fitting) if fitting else lanes
    regs_per_row = -(-vb // lanes)
    max_rows = max(1, (registers - regs_per_row - 1) // regs_per_row)
    ti = max(d for d in range(1, min(max_rows, rows) + 1) if rows % d == 0)
    if rows > max_rows and 2 * ti < max_rows:
        # no divisor keeps half the register file busy (197 rows: a prime): pad to whole tiles,
        # with the tile of at least half the register rows that pads the fewest rows (197 rows,
        # 14 at most: 18 tiles of 11 = 198 rows, where 15 tiles of 14 computed 210)
        ti = min(range(max_rows // 2 + 1, max_rows + 1), key=lambda t: (-(-rows // t) * t, -t))
    if rows > ti and ti * regs_per_row < MIN_GEMM_ACCUMULATORS:
        # too few accumulators to hide the FMA latency: a taller tile, rows padded by at most 1/16
        # (8 rows stay 4 + 4 on AVX2: 12 would pad half of them)
        taller = [t for t in range(ti + 1, min(max_rows, rows) + 1)
                  if t * regs_per_row >= MIN_GEMM_ACCUMULATORS and -rows % t <= rows // 16]
        if taller:
            ti = min(taller, key=lambda t: (-(-rows // t) * t, -t))
    return ti, vb


def in_place_tile_rows(rows: int, ti: int, vb: int, lanes: int, registers: int = VECTOR_REGISTERS) -> int:
    """Rows per register tile when B is read in place (not packed): the tallest tile the register
    file holds whose padding stays within 1/16 of the rows, `ti` failing that. B then comes from
    L2 in strided rows rather than a packed stream, and each step of the reduction loads VB/lanes
    vectors of it for TI x VB/lanes FMAs: a taller tile needs fewer of those loads per FMA. With
    AVX2 (16 registers) mm_relu's 128 rows take 6-row tiles (132 rows, A's last row read again)
    instead of 4. (docs/performance.md: ACTIVATION_B_IN_PLACE_MAX_BYTES and in_place_tile_rows)"""
    regs_per_row = -(-vb // lanes)
    most = max(1, (registers - regs_per_row - 1) // regs_per_row)
    for height in range(min(most, rows), ti, -1):
        if -rows % height <= rows // 16:
            return height
    return ti


class Matmul:
    """Register-blocked matmul with a prepacked right operand (see module docstring)."""

    name = "cpu.Matmul"
    # bumped whenever `candidates` changes, so tuning records from an older space are redone
    # (2: a one-row GEMV's default tile is gemv_columns'; 3: GEMM defaults keep
    # MIN_GEMM_ACCUMULATORS, so a record that beat the old 4-row AVX2 default is measured again)
    space_version = 3

    @staticmethod
    def _find(sch):
        for candidate in root_blocks(sch):
            kinds = iter_kinds(sch, candidate)
            if kinds.endswith("SSR") and kinds.count("R") == 1 and "O" not in kinds:
                if "matmul" in sch.get(candidate).name_hint.lower():
                    return candidate
        return None

    def candidates(self, func, target) -> list[dict]:
        """Register tiles to measure (template tuning), the default first: TI rows (2 to the
        most the register file holds; rows no such tile divides are padded, as the default
        pads them) x VB columns (one to four vectors dividing the columns). [] when the rule
        does not match, the shapes are symbolic or the columns take a part-vector tile."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        block = self._find(sch)
        if block is None:
            return []
        extents = iter_extents(sch, block)
        rows, cols = extents[-3], extents[-2]
        lanes, registers = vector_lanes(target), vector_registers(target)
        if rows is None or cols is None or extents[-1] is None or any(e is None for e in extents) or cols % lanes:
            return []
        ti, vb = choose_matmul_tile(rows, cols, lanes, registers)
        configs = [{"ti": ti, "vb": vb}]
        for vectors in (1, 2, 3, 4):
            width = vectors * lanes
            if cols % width:
                continue
            most = min(rows, (registers - vectors - 1) // vectors)
            heights = sorted({h for h in (most, most - 1, most // 2, 4, 2, 1) if 1 <= h <= most and (h > 1 or rows == 1)}, reverse=True)
            for height in heights[:4]:
                if {"ti": height, "vb": width} not in configs:
                    configs.append({"ti": height, "vb": width})
        return configs if len(configs) > 1 else []

    def apply(self, func, target, config: dict | None = None):
        """The scheduled function, or None when the rule does not match. `config` (one of
        `candidates`) overrides the tile the heuristics pick, as template tuning does."""
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        block = self._find(sch)
        if block is None:
            return None
        _inline_elementwise_tail(sch, block)
        extents = iter_extents(sch, block)
        # columns must be static; batch and rows may be symbolic (a model's batch dimension): then
        # rows are taken one at a time; so may the reduction (attention's probs @ V over a
        # symbolic sequence) where B is an activation read in place
        stmt = sch.get(block)
        if len(stmt.reads) != 2:
            return None
        iters = [str(iv.var) for iv in stmt.iter_vars]
        j_var, k_var = iters[-2], iters[-1]
        b_index = None
        for index, region in enumerate(stmt.reads):
            names = [str(r.min) for r in region.region]
            if len(names) >= 2 and set(names[-2:]) == {j_var, k_var}:
                b_index = index
        if b_index is None:
            return None
        b_region = stmt.reads[b_index]
        b_names = [str(r.min) for r in b_region.region]
        transposed = b_names[-1] == k_var  # B[..., j, k]
        rows, cols = extents[-3], extents[-2]
        lanes = vector_lanes(target)
        if cols is None:
            return None  # symbolic columns (attention's scores over a symbolic sequence): not taken
        # symbolic rows: one row per tile, columns padded no more than a GEMM's would be
        ti, vb = choose_matmul_tile(1 if rows is None else rows, cols, lanes, vector_registers(target), pad_gemv=rows is not None)
        if config is not None:
            ti, vb = int(config["ti"]), int(config["vb"])
            if ti < 1 or vb < 4 or vb % 4 or (rows is None and ti > 1):
                raise ValueError(f"tile {config} does not fit the matmul")
        batch_dims = len(b_region.region) - 2
        pad_cols = -cols % vb
        weight = str(b_region.source.name)
        depth = extents[-1]
        in_place = (not transposed and not pad_cols and weight not in layout_free_params(sch)
                    and (depth is None or depth * cols * _dtype_bytes(stmt) <= ACTIVATION_B_IN_PLACE_MAX_BYTES))
        if depth is None and not in_place:
            return None  # a packed copy of B over a symbolic reduction: not taken
        if in_place and config is None and rows is not None:
            ti = in_place_tile_rows(rows, ti, vb, lanes, vector_registers(target))
        if in_place:
            logger.debug("matmul %s: B %s [%s, %s] read in place, %s x %s tiles", stmt.name_hint, weight, depth, cols, ti, vb)
        pad_rows = 0 if rows is None else -rows % ti
        keep: tuple[str, ...] = ()
        if pad_rows or pad_cols:
            a_name = str(stmt.reads[1 - b_index].source.name)
            a_name = "" if a_name == weight else a_name  # x @ x.T: one buffer, one zero-filled copy
            keep = self._pad(sch, block, len(extents), ti if pad_rows else 1, vb if pad_cols else 1, a_name)
            # inlining A's clamped read may reorder the block's reads
            b_index = next(n for n, r in enumerate(sch.get(block).reads) if str(r.source.name) in (weight, f"{weight}_pad"))


        def pack(*axes):
            lead, last2 = list(axes[:batch_dims]), axes[batch_dims:]
            j, k = (last2[0], last2[1]) if transposed else (last2[1], last2[0])
            return (*lead, j // vb, k, j % vb)

        if not in_place:
            pack_read_buffer(sch, block, b_index, pack, layout_free=weight in layout_free_params(sch))
        if pad_cols:
            # the zero-filling copy of B folds into the packing copy (one pass, still a weight's
            # compile-time step)
            sch.compute_inline(sch.get_sblock(f"{weight}_pad"))
        if pad_rows or pad_cols:
            # the padded result is the accumulator itself; the block that cuts it back to size
            # becomes the write-back (its bounds keep the padding out of the output)
            (unpad,) = sch.get_consumers(block)
            sch.set_scope(block, 0, "local")
            writeback = inline_epilogue(sch, unpad)
        else:
            writeback = cache_write_and_inline_epilogue(sch, block)

        loops = sch.get_loops(block)
        *batch, i, j, k = loops
        i_outer, i_inner = sch.split(i, [None, ti])
        j_outer, j_inner = sch.split(j, [None, vb])
        sch.reorder(*batch, i_outer, j_outer, k, i_inner, j_inner)
        sch.reverse_compute_at(writeback, j_outer)
        parallel = sch.fuse(*batch, i_outer, j_outer)
        # symbolic batch/rows count as 1: the common deployment case, where a parallel launch
        # (waking the pool's threads, tens of microseconds) costs more than a small GEMV saves
        batch_count = 1
        for extent in extents[:-3]:
            batch_count *= extent or 1
        # a symbolic reduction is a sequence (attention): batch x heads x rows of work, in parallel
        if depth is None or runs_parallel(rows, cols, depth, batch_count, _dtype_bytes(stmt)):
            sch.parallel(parallel)
        sch.vectorize(j_inner)
        sch.unroll(i_inner)
        decompose_vector_init(sch, block, k)
        wb_loops = sch.get_loops(writeback)[1:]
        if wb_loops and cols % lanes == 0:
            sch.vectorize(wb_loops[-1])
        schedule_remaining_blocks(sch, lanes, keep=keep)
        return sch

    @staticmethod
    def _pad(sch, block, n_iters: int, row_multiple: int, col_multiple: int, a_name: str) -> tuple[str, ...]:
        """Pad the matmul's rows and columns up to whole tiles (s_tir's pad_einsum: zero-filled
        copies of the operands, the result cut back to size). A (named `a_name`) with padded rows
        is read clamped instead of copied (`_clamp_row_padding`). Returns the names of the copies
        that must stay separate passes: a zero-filled A inlined would put a branch in the inner
        loop; B's copy folds into its packing."""
        padding = [1] * n_iters
        padding[-3], padding[-2] = row_multiple, col_multiple
        before = {sch.get(b).name_hint for b in root_blocks(sch)}
        sch.pad_einsum(block, padding)
        added = [b for b in root_blocks(sch) if sch.get(b).name_hint not in before]
        keep = []
        for pad in added:
            if row_multiple > 1 and sch.get(pad).name_hint == f"{a_name}_pad" and _clamp_row_padding(sch, pad):
                sch.compute_inline(pad)
            else:
                keep.append(sch.get(pad).name_hint)
        return tuple(keep)


def _clamp_row_padding(sch, pad) -> bool:
    """Turn `pad`, a zero-filling copy of A with its rows padded to whole tiles
    (`A_pad[.., i, k] = A[.., i, k] if i < rows else 0`), into a read of A whose row index is
    clamped to the last row (`A[.., min(i, rows - 1), k]`), so that it can be inlined into the
    matmul: no copy of A at every call (vit_encoder's 197 x 768 activation: a 605 KB pass before
    each 197-row GEMM) and no branch in the inner loop. The padded rows then compute a copy of the
    last row, which the write-back's bounds leave out of the result. False (nothing changed)
    when `pad` is not such a copy: only a condition `i < rows` on one index of the load it reads."""
    from tvm import s_tir, tirx
    from tvm.ir import Call, Op, Range, TensorLoad

    stmt = sch.get(pad)
    store = stmt.body
    if not isinstance(store, tirx.BufferStore) or not isinstance(store.value, Call):
        return False
    call = store.value
    if not call.op.same_as(Op.get("prim.if_then_else")) or not isinstance(call.args[1], TensorLoad):
        return False
    cond, load = call.args[0], call.args[1]
    if not (isinstance(cond, tirx.LT) and isinstance(cond.a, tirx.Var) and isinstance(cond.b, tirx.IntImm)):
        return False
    positions = [n for n, index in enumerate(load.indices) if isinstance(index, tirx.Var) and index.same_as(cond.a)]
    if len(positions) != 1:
        return False
    (row,) = positions
    last = tirx.IntImm(str(cond.b.ty), int(cond.b.value) - 1)
    indices = list(load.indices)
    indices[row] = tirx.Min(cond.a, last)
    clamped = tirx.BufferStore(store.buffer, tirx.BufferLoad(load.source, indices), store.indices)
    region = [Range.from_min_extent(index, 1) for index in indices]
    block = s_tir.SBlock(stmt.iter_vars, [tirx.BufferRegion(load.source, region)], stmt.writes, stmt.name_hint, clamped,
                         annotations=stmt.annotations)
    sch.state.replace(sch.get_sref(pad), block, {stmt: block})
    return True


def _dtype_bytes(stmt) -> int:
    """Bytes per element of the block's output (float32: 4)."""
    return max(1, stmt.writes[0].source.dtype.bits // 8)


def _inline_elementwise_tail(sch, block) -> None:
    """Inline the elementwise blocks between the matmul and the function's output into their
    consumers, so the whole tail becomes one block the write-back can absorb. GELU reads the
    biased result twice, x * (erf(x / sqrt 2) + 1) / 2: block by block, the bias add has two
    consumers and the tail would stay a separate pass over the output."""
    blocks = root_blocks(sch)
    position = next(i for i, b in enumerate(blocks) if sch.get(b).same_as(sch.get(block)))
    for candidate in blocks[position + 1 : -1]:
        if "R" in iter_kinds(sch, candidate) or not sch.get_consumers(candidate):
            continue
        try:
            sch.compute_inline(candidate)
        except Exception:  # noqa: BLE001 - not a pure elementwise block: it stays a pass of its own
            logger.debug("kept %s after the matmul", sch.get(candidate).name_hint)
