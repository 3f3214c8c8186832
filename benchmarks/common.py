"""What the benchmark scripts share: the process set-up, the benchmark models, their inputs, the host.

Importing this module prepares the process the way the workbench does before anything imports tvm
(TVM's thread defaults, the workbench's parallel launch: `core.compiler.runtime.prepare`), so
every script imports it first. Run as a file (`python benchmarks/x.py`), a script puts the
repository root on sys.path before importing it.

The models: the nine light models shipped in the onnx wheel (`light_models`), core.model.samples'
(`sample_models`) and benchmarks.architectures' full-size networks (`architecture_models`), all
by name in `benchmark_models`; `load_proto` makes an ONNX ModelProto of one and `feeds_for` its
seeded random inputs.
"""
from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# before tvm: TVM's thread defaults and the workbench's thread pool (a core without prepare() did
# this when imported, which importing core.compiler.runtime does)
_prepare = getattr(importlib.import_module("core.compiler.runtime"), "prepare", None)
if _prepare is not None:
    _prepare()

__all__ = [
    "ROOT",
    "BackgroundLoad",
    "DynamicRow",
    "architecture_models",
    "benchmark_models",
    "dynamic_bert",
    "dynamic_models",
    "feeds_for",
    "host_description",
    "host_has_avx512",
    "light_models",
    "load_proto",
    "ours_runner",
    "sample_models",
]


def light_models() -> dict[str, Path]:
    """The onnx wheel's light models by name ('squeezenet', ...): their files."""
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {p.stem.removeprefix("light_"): p for p in sorted(folder.glob("light_*.onnx"))}


def sample_models() -> dict:
    """core.model.samples' models by name: functions that build them."""
    from core.model import samples

    return dict(samples.SAMPLES) if hasattr(samples, "SAMPLES") else {}


def architecture_models() -> dict:
    """benchmarks.architectures' networks by name: functions that build them (seeded weights)."""
    from benchmarks.architectures import ARCHITECTURES

    return dict(ARCHITECTURES)


@dataclass(frozen=True)
class DynamicRow:
    """A model with symbolic dims, measured at `dims`; ours compiled with `buckets` (shape
    buckets, core.compiler.pipeline.buckets) and, beside it, without (the general kernels)."""

    build: Callable
    dims: dict
    buckets: tuple = ()

    def __call__(self):
        return self.build()


def dynamic_bert(layers: int = 4, seq: int = 128):
    """benchmarks.architectures' BERT encoder as torch.onnx.export writes it with
    dynamic_axes={batch, sequence}: inputs [batch, sequence], the heads' Reshapes copying batch and
    sequence from their input (0 in the target shape), the position embeddings sliced to the
    sequence (Shape -> Slice); `seq` is the longest sequence. The same weights as the static one."""
    import onnx
    from onnx import helper, numpy_helper

    from benchmarks.architectures.transformers import bert_encoder

    m = bert_encoder(layers=layers, seq=seq)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    for node in g.node:
        if node.op_type == "Reshape":  # [1, seq, ...] -> [0, 0, ...]
            c = inits[node.input[1]]
            a = numpy_helper.to_array(c).copy()
            a[:2] = 0
            c.CopyFrom(numpy_helper.from_array(a.astype(np.int64), c.name))
    pos = "onnx::Add_position_token_type"
    g.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "/embeddings/zero"),
                          numpy_helper.from_array(np.array([1], np.int64), "/embeddings/one")])
    for node in g.node:
        for i, name in enumerate(node.input):
            if name == pos:
                node.input[i] = "/embeddings/Slice_output_0"
    head = [helper.make_node("Shape", ["input_ids"], ["/embeddings/Shape_output_0"], name="/embeddings/Shape", start=1, end=2),
            helper.make_node("Slice", [pos, "/embeddings/zero", "/embeddings/Shape_output_0", "/embeddings/one"],
                             ["/embeddings/Slice_output_0"], name="/embeddings/Slice")]
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(head + nodes)
    for vi in [*g.input, *g.output]:
        dims = vi.type.tensor_type.shape.dim
        dims[0].ClearField("dim_value")
        dims[0].dim_param = "batch"
        if vi.name != "pooler_output":
            dims[1].ClearField("dim_value")
            dims[1].dim_param = "sequence"
    m.doc_string = f"BERT encoder, {layers} layers, dynamic batch and sequence (at most {seq}; seeded random weights)."
    onnx.checker.check_model(m)
    return m


def _sample_mlp():
    from core.model import samples

    return samples.mlp()


_BERT_SHAPES = ({"batch": 2, "sequence": 96}, {"batch": 1, "sequence": 128})


def dynamic_models() -> dict:
    """The symbolic-shape rows (issue 40): the dynamic BERT at two shapes, both compiled as shape
    buckets, and the MLC course's MLP (symbolic batch) at batch 8 with a bucket for it."""
    return {
        "bert_dyn@2x96": DynamicRow(dynamic_bert, _BERT_SHAPES[0], _BERT_SHAPES),
        "bert_dyn@1x128": DynamicRow(dynamic_bert, _BERT_SHAPES[1], _BERT_SHAPES),
        "mlp_dyn@N=8": DynamicRow(_sample_mlp, {"batch": 8}, ({"batch": 8},)),
    }


@dataclass(frozen=True)
class QuantizedRow:
    """An fp32 network quantized by onnxruntime's quantize_static (QDQ, benchmarks.architectures.qdq):
    ours and onnxruntime's int8 kernels run the quantized model, and our build of `fp32` (the same
    network unquantized) runs beside them in the same alternation."""

    fp32: Callable

    def __call__(self):
        from benchmarks.architectures.qdq import quantize_qdq

        return quantize_qdq(self.fp32())


def _resnet18():
    from benchmarks.architectures.resnet import resnet18

    return resnet18()


def _small_cnn():
    from core.model import samples

    return samples.small_cnn()


def quantized_models() -> dict:
    """The int8 rows (issue 40): a QDQ ResNet-18 and the small CNN sample, quantized by onnxruntime."""
    return {"resnet18_qdq": QuantizedRow(_resnet18), "small_cnn_qdq": QuantizedRow(_small_cnn)}


def benchmark_models() -> dict:
    """Every benchmark model by name: the light models, the samples, the architectures (the
    symbolic-shape rows are dynamic_models')."""
    return {**light_models(), **sample_models(), **architecture_models()}


def load_proto(model):
    """The ONNX ModelProto of a benchmark model (a file, or a function that builds it)."""
    import onnx

    return onnx.load(str(model)) if isinstance(model, (str, Path)) else model()


def feeds_for(proto, dims: dict[str, int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for `proto`'s graph inputs (initializers left out): standard normal
    floats, and 0/1 for int64 inputs; a symbolic dim takes its value from `dims`, else 1."""
    import onnx

    rng = np.random.default_rng(seed)
    init_names = {i.name for i in proto.graph.initializer}
    feeds = {}
    for vi in proto.graph.input:
        if vi.name in init_names:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 1) for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            # token ids and attention masks: 0 and 1 are valid for both (a mask with padding)
            feeds[vi.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def host_description(target) -> str:
    """'AMD EPYC 9xxx (znver4, AVX-512)': the CPU's model name, LLVM's name for it, `target`'s widest ISA."""
    import platform

    from tvm.target import codegen

    from core.compiler.target import host_cpu

    name = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    isa = "AVX-512" if codegen.target_has_features("avx512f", target) else "AVX2" if codegen.target_has_features("avx2", target) else "SSE/other"
    return f"{name or 'unknown CPU'} ({host_cpu()}, {isa})"


def host_has_avx512() -> bool:
    """Whether this host's CPU has AVX-512 (LLVM's view of it, as host_description's)."""
    from tvm.target import codegen

    from core.compiler.target import make_target

    return bool(codegen.target_has_features("avx512f", make_target("cpu", mcpu="host")))


def ours_runner(vm, feeds, threads: int | None = None, adaptive: bool = False, boundary: str = "numpy"):
    """A function n -> [ms of n runs of `vm`]. `boundary` "numpy": each run takes numpy inputs
    and returns numpy outputs as Artifact.run does (core.compiler.runtime.boundary, when `vm.input_specs`
    holds the artifact's and `vm.library` its executable; else host_tensor, flatten_outputs), the boundary onnxruntime's session.run
    is timed at; "device": inputs converted once before, outputs left on the device. `adaptive`: before each run (timed with it) the
    thread count is chosen as Artifact.run_device chooses it (core.compiler.runtime.threads: the cores
    other processes leave free, at most `threads`, and the pool's run choice), and not at all for a
    model without a parallel kernel (`vm.parallel_kernels` 0), as there; else exactly `threads` of
    TVM's pool (the same executable, see core.compiler.runtime.threads.runtime_threads), or the pool as it
    is when None."""
    import contextlib

    import tvm

    from core.compiler.runtime.native_pool import run_threads
    from core.compiler.runtime.threads import ThreadGovernor, runtime_threads

    from core.compiler.runtime.artifact import flatten_outputs, host_tensor
    from core.compiler.runtime.boundary import NumpyBoundary

    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    entry = getattr(vm, "entry", "main")
    main = vm[entry]  # a shape bucket's function where one matches (build_vm_workbench)
    specs = getattr(vm, "input_specs", None)
    if boundary == "numpy" and specs is not None:
        # Artifact.run's boundary (core.compiler.runtime.boundary): inputs checked once per signature,
        # kept buffers for inputs it cannot read in place, outputs the VM allocated handed out uncopied
        numpy_boundary = NumpyBoundary(specs, getattr(vm, "library", None), getattr(vm, "input_alignment", None) or 64)

        def fn(*_):
            ins = numpy_boundary.arrays(feeds)
            return numpy_boundary.outputs(main(*[numpy_boundary.tensor(i, a) for i, a in enumerate(ins)]), entry)
    elif boundary == "numpy":
        arrays = list(feeds.values())

        def fn(*_):
            return flatten_outputs(main(*[host_tensor(a) for a in arrays]))
    else:
        fn = main
    governed = adaptive and getattr(vm, "parallel_kernels", None) != 0
    governor = ThreadGovernor(max_threads=threads, enabled=True) if governed else None

    def run(n: int) -> list[float]:
        times = []
        with runtime_threads(threads) if threads and governor is None else contextlib.nullcontext():
            for _ in range(n):
                t0 = time.perf_counter()
                if governor is not None:
                    used = governor.before_run()
                    if used < (threads or 0):
                        if used < run_threads():  # the pool measured one thread faster
                            run.one_thread += 1
                        else:  # the governor saw other work
                            run.fewer_threads += 1
                    try:
                        fn(*args)
                    finally:
                        governor.after_run()
                else:
                    fn(*args)
                times.append((time.perf_counter() - t0) * 1e3)
        run.runs += n
        return times

    run.fewer_threads = 0  # runs the governor gave fewer than `threads` threads (it saw other work)
    run.one_thread = 0  # runs the pool gave one thread because one measured faster (core.compiler.runtime.threads)
    run.runs = 0
    return run


def _busy(stop) -> None:  # pragma: no cover - runs in a child process
    x = 0
    while not stop.is_set():
        x += 1


class BackgroundLoad:
    """N processes that keep one core each busy (pure Python spin), for measurements under load."""

    def __init__(self, n: int):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._procs = [ctx.Process(target=_busy, args=(self._stop,), daemon=True) for _ in range(n)]

    def __enter__(self):
        for p in self._procs:
            p.start()
        time.sleep(0.5 if self._procs else 0)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
