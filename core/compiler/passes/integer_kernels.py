"""The int8 kernels of IntegerConv (core.compiler.passes.integer_conv), built and scheduled here:
uint8 x int8 -> int32 by AVX-512 VNNI's `vpdpbusd` (16 output channels by 4 input channels per
instruction, through a tensor intrinsic of the workbench's own), then onnxruntime's requantization.

* `integer_conv_kernel`: NCHW in, NCHW out; x copied into blocks of 4 channels with its zero point
  as padding; tiles of up to 14 output columns (a stem with one input block: two output blocks by
  8 columns) whose accumulators stay in registers.
* `integer_dense_kernel`: (rows, depth) x packed (cols, depth) -> (rows, cols); uint8 rows read in
  place, 4 bytes broadcast per instruction; tiles of up to 14 rows.
* `pack_weight`: an int8 (O, C, KH, KW) weight in the kernels' (O/16, C/4, KH, KW, 16, 4) order.

Both take `c` (int32: bias - (x_zero_point + shift_for(x_dtype)) * sum(w)) and `m` (float32:
x_scale * w_scale / y_scale) per output channel and write
`saturate(round_half_even(float32(acc + c) * m) + y_zero_point)`.
"""
from __future__ import annotations

import functools

__all__ = ["DEPTH", "INTRINSIC", "LANES", "RANGES", "has_vnni", "integer_conv_kernel", "integer_dense_kernel", "pack_weight",
           "shift_for"]

INTRINSIC = "mlcwb_vnni_u8s8_16x4"
LANES, DEPTH = 16, 4  # output channels per vpdpbusd, input channels per lane
_MAX_TILE = 14  # output columns per register tile (14 accumulators + weights + broadcasts < 32 zmm)
RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def has_vnni(target) -> bool:
    """Whether `target` (an LLVM target) has AVX-512 VNNI (vpdpbusd on 512-bit registers), read
    from its mcpu/mattr, not from the machine compiling."""
    from tvm.target import codegen

    if target is None or target.kind.name != "llvm":
        return False
    try:
        return bool(codegen.target_has_features("avx512vnni", target) and codegen.target_has_features("avx512bw", target))
    except Exception:  # noqa: BLE001 - a non-x86 target LLVM cannot describe
        return False


@functools.lru_cache(maxsize=1)
def _register_intrinsic() -> str:
    """The 16x4 u8 x s8 -> s32 dot product as a tensor intrinsic. TVM's own (dot_16x4_vnni) calls
    vpdpbusd with the pre-LLVM-17 signature (i32 vectors), which the LLVM it ships with rejects."""
    from tvm.s_tir import TensorIntrin
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((4,), "uint8", offset_factor=1, align=4), b: T.Buffer((16, 4), "int8", offset_factor=1),
             c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((4,), "uint8", offset_factor=1, align=4), b: T.Buffer((16, 4), "int8", offset_factor=1),
             c: T.Buffer((16,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(c[0:16], a[0:4], b[0:16, 0:4])
            T.writes(c[0:16])
            four = T.reinterpret(a.vload([0], "uint8x4"), dtype="int32")
            c[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                c.vload([0], dtype="int32x16"),
                T.reinterpret(T.broadcast(four, 16), dtype="int8x64"),
                b.vload([0, 0], dtype="int8x64"),
                dtype="int32x16",
            )

    TensorIntrin.register(INTRINSIC, desc, impl, override=True)
    return INTRINSIC


def integer_conv_kernel(x_shape, x_dtype: str, out_channels: int, kernel: tuple[int, int], strides, pads,
                        x_zero_point: int, y_zero_point: int, y_dtype: str):
    """The scheduled PrimFunc (x, w_packed, c, m) -> y of the module docstring.

    x: `x_shape` (N, C, H, W) of `x_dtype`; w_packed: (O/16, ceil(C/4), KH, KW, 16, 4) int8 (`pack_weight`);
    c: (O,) int32 (`bias - (x_zero_point + shift_for(x_dtype)) * sum(w)`); m: (O,) float32; y: (N, O, OH, OW) of `y_dtype`. `pads` are (top, left, bottom,
    right)."""
    from tvm import s_tir, te, tirx

    n, ch, h, w = (int(d) for d in x_shape)
    kh_n, kw_n = kernel
    sh, sw = strides
    pt, pl, pb, pr = pads
    blocks = -(-ch // DEPTH)
    hp, wp = h + pt + pb, w + pl + pr
    oh, ow = (hp - kh_n) // sh + 1, (wp - kw_n) // sw + 1
    shift = shift_for(x_dtype)
    x = te.placeholder((n, ch, h, w), x_dtype, name="x")
    wt = te.placeholder((out_channels // LANES, blocks, kh_n, kw_n, LANES, DEPTH), "int8", name="w")
    corr = te.placeholder((out_channels,), "int32", name="c")
    mult = te.placeholder((out_channels,), "float32", name="m")

    def source(b, c, i, j, k):
        v = x[b, c * DEPTH + k, i - pt, j - pl]
        v = (v.astype("int32") + shift).astype("uint8") if shift else v
        inside = tirx.all(i >= pt, i < h + pt, j >= pl, j < w + pl, c * DEPTH + k < ch)
        return tirx.if_then_else(inside, v, tirx.const(x_zero_point + shift, "uint8"))

    packed = te.compute((n, blocks, hp, wp, DEPTH), source, name="pack")
    rc = te.reduce_axis((0, blocks), "rc")
    ry = te.reduce_axis((0, kh_n), "ry")
    rx = te.reduce_axis((0, kw_n), "rx")
    rk = te.reduce_axis((0, DEPTH), "rk")
    acc = te.compute(
        (n, out_channels // LANES, oh, ow, LANES),
        lambda b, oc, i, j, lane: te.sum(
            packed[b, rc, i * sh + ry, j * sw + rx, rk].astype("int32") * wt[oc, rc, ry, rx, lane, rk].astype("int32"),
            axis=[rc, ry, rx, rk]),
        name="acc")

    y = te.compute((n, out_channels, oh, ow), lambda b, o, i, j: _requantized(
        acc[b, o // LANES, i, j, o % LANES] + corr[o], mult[o], y_zero_point, y_dtype), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, wt, corr, mult, y]))
    pack_b, acc_b, out_b = sch.get_sblock("pack"), sch.get_sblock("acc"), sch.get_sblock("y")
    # one input block (an image stem's 3 channels): two output blocks share each broadcast, on 8 columns
    pair = 2 if blocks == 1 and out_channels % (2 * LANES) == 0 else 1
    tile = max(t for t in range(1, (_MAX_TILE if pair == 1 else 8) + 1) if ow % t == 0)
    b, o, i, j = sch.get_loops(out_b)
    oc, ob, lane = sch.split(o, [None, pair, LANES])
    jo, ji = sch.split(j, [None, tile])
    sch.reorder(b, oc, i, jo, ob, lane, ji)
    sch.compute_at(acc_b, jo)  # the accumulator is one tile: registers
    sch.parallel(sch.fuse(b, oc, i))
    sch.vectorize(sch.get_loops(out_b)[-1])
    pack_loops = sch.get_loops(pack_b)
    sch.parallel(sch.fuse(*pack_loops[:3]))
    sch.vectorize(pack_loops[-1])
    return _tensorized(sch, acc_b, (("pair", pair), ("col", tile), ("lane", LANES), ("rc", blocks), ("ry", kh_n), ("rx", kw_n),
                                    ("rk", DEPTH)), ("rc", "ry", "rx", "pair", "col", "lane", "rk"), ("pair", "col"))


def shift_for(x_dtype: str) -> int:
    """What the kernel adds to `x_dtype` activations to read them as uint8 (vpdpbusd's unsigned operand)."""
    return 128 if x_dtype == "int8" else 0


def _tensorized(sch, acc_b, extents, order, unrolled):
    """The accumulator's tile loops (named in `extents` in their order after compute_at, which
    elides those of extent 1) put in `order`, its zeroing split off, the 16 lanes x 4 depths
    tensorized as one vpdpbusd and the `unrolled` loops unrolled (their accumulators stay in
    registers): the finished PrimFunc, marked scheduled and opaque (never fused)."""
    kept = [name for name, extent in extents if extent > 1]
    loops = dict(zip(kept, sch.get_loops(acc_b)[-len(kept):]))
    ordered = [loops[k] for k in order if k in loops]
    sch.reorder(*ordered)
    init = sch.decompose_reduction(acc_b, ordered[0])
    sch.tensorize(loops["lane"], _register_intrinsic())
    for name in unrolled:
        if name in loops:
            sch.unroll(loops[name])
    sch.vectorize(sch.get_loops(init)[-1])
    prim = sch.mod["main"].without_attr("global_symbol")
    return prim.with_attr("tirx.is_scheduled", True).with_attr("op_pattern", 8)


def _requantized(total, mult, y_zero_point: int, y_dtype: str):
    """saturate(round_half_even(float32(total) * mult) + y_zero_point) as `y_dtype` (a TIR expression)."""
    from tvm import tirx

    lo, hi = RANGES[y_dtype]
    v = tirx.round(total.astype("float32") * mult) + tirx.const(float(y_zero_point), "float32")
    return tirx.max(tirx.min(v, float(hi)), float(lo)).astype(y_dtype)


def pack_weight(weight):
    """(O, C, KH, KW) int8 -> (O/16, ceil(C/4), KH, KW, 16, 4), input channels padded with zeros."""
    import numpy as np

    o, c, kh, kw = weight.shape
    c4 = -(-c // DEPTH) * DEPTH
    full = np.zeros((o, c4, kh, kw), np.int8)
    full[:, :c] = weight
    return np.ascontiguousarray(full.reshape(o // LANES, LANES, c4 // DEPTH, DEPTH, kh, kw).transpose(0, 2, 4, 5, 1, 3))


def integer_dense_kernel(rows: int, depth: int, a_dtype: str, cols: int, a_zero_point: int, y_zero_point: int, y_dtype: str):
    """The scheduled PrimFunc (a, w_packed, c, m) -> y of a quantized matmul: a (rows, depth) of
    `a_dtype`, w_packed (cols/16, ceil(depth/4), 16, 4) int8 (`pack_weight` of the (cols, depth)
    weight), c and m per column as for the conv, y (rows, cols) of `y_dtype`. Rows are read in place
    (4 bytes of a row broadcast per vpdpbusd) when a is uint8 with depth a multiple of 4, else copied
    (int8 moved to uint8, depth padded)."""
    from tvm import s_tir, te, tirx

    blocks = -(-depth // DEPTH)
    a = te.placeholder((rows, depth), a_dtype, name="a")
    wt = te.placeholder((cols // LANES, blocks, LANES, DEPTH), "int8", name="w")
    corr = te.placeholder((cols,), "int32", name="c")
    mult = te.placeholder((cols,), "float32", name="m")
    src = a
    if a_dtype != "uint8" or depth % DEPTH:
        shift = shift_for(a_dtype)
        src = te.compute((rows, blocks * DEPTH), lambda i, k: tirx.if_then_else(
            k < depth, (a[i, k].astype("int32") + shift).astype("uint8") if shift else a[i, k], tirx.const(0, "uint8")), name="pack")
    rk = te.reduce_axis((0, blocks), "rk")
    r4 = te.reduce_axis((0, DEPTH), "r4")
    acc = te.compute((cols // LANES, rows, LANES), lambda nb, i, lane: te.sum(
        src[i, rk * DEPTH + r4].astype("int32") * wt[nb, rk, lane, r4].astype("int32"), axis=[rk, r4]), name="acc")

    y = te.compute((rows, cols), lambda i, j: _requantized(acc[j // LANES, i, j % LANES] + corr[j], mult[j], y_zero_point, y_dtype),
                   name="y")
    sch = s_tir.Schedule(te.create_prim_func([a, wt, corr, mult, y]))
    acc_b, out_b = sch.get_sblock("acc"), sch.get_sblock("y")
    tile = max(t for t in range(1, _MAX_TILE + 1) if rows % t == 0)
    i, j = sch.get_loops(out_b)
    io, ii = sch.split(i, [None, tile])
    nb, lane = sch.split(j, [None, LANES])
    sch.reorder(io, nb, ii, lane)
    sch.compute_at(acc_b, nb)
    sch.parallel(sch.fuse(io, nb))
    sch.vectorize(sch.get_loops(out_b)[-1])
    if src is not a:
        pack_b = sch.get_sblock("pack")
        pl = sch.get_loops(pack_b)
        sch.parallel(pl[0])
        sch.vectorize(pl[-1])
    return _tensorized(sch, acc_b, (("row", tile), ("lane", LANES), ("rk", blocks), ("r4", DEPTH)), ("rk", "row", "lane", "r4"), ("row",))
