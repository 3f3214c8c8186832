"""Test helpers shared across the suite."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, timeout: float = 120, cwd: Path | str = ROOT) -> subprocess.CompletedProcess:
    """Run `python main.py ARGS` in a fresh process, as a user would: its own exit status, and
    stdout/stderr read from its file descriptors (so output from C++ or a crash counts too).

    The process is forked from a server that has imported the workbench, TVM and onnxruntime once
    (multiprocessing's forkserver): each of the suite's ~50 CLI runs then starts in milliseconds
    instead of paying ~1.5 s of imports. The command itself runs from main.main in the fresh
    process, in `cwd` (the repository root by default), with the caller's environment (as a child
    process inherits it: TVM's pool variables the workbench sets in this process included). Where
    a workbench or Python variable differs from the server's (MLCWB_*, PYTHON*: a test that set
    one), a plain `python main.py` runs instead, since modules imported in advance might have read it."""
    argv = [str(a) for a in args]
    if _forkserver_env is not None and _import_time_env(os.environ) != _import_time_env(_forkserver_env):
        return _run_fresh_interpreter(argv, timeout, cwd)
    return _run_forked(argv, timeout, cwd)


def _import_time_env(env) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(("MLCWB_", "PYTHON"))}


def _run_fresh_interpreter(argv: list[str], timeout: float, cwd: Path | str = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *argv], check=False, capture_output=True, text=True, timeout=timeout, cwd=str(cwd))


# modules every CLI command imports; the forkserver imports them once (tests.runtime_ready first:
# the workbench's parallel launch loads before TVM, as `python main.py` loads it for lower, compile, ...)
_PRELOAD = ["tests.runtime_ready", "core", "main", "cli", "numpy", "onnx", "onnxruntime", "tvm", "tvm.relax", "core.model.graph", "core.compiler.compile"]
_forkserver_env: dict[str, str] | None = None


def _cli_child(argv: list[str], out_path: str, err_path: str, cwd: str, env: dict[str, str]) -> None:
    """In the forked process: fds 1 and 2 to files, then main.main(argv) as `python main.py` runs it."""
    import traceback

    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out_path), (2, err_path)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stdout, closed at exit
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    sys.argv = [str(ROOT / "main.py"), *argv]
    status = 1
    try:
        import main

        code = main.main(argv)
        status = 0 if code is None else code
    except SystemExit as exc:  # what `sys.exit(main())` or argparse would end the process with
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - an uncaught error ends the interpreter with status 1
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(status)


def _run_forked(argv: list[str], timeout: float, cwd: Path | str) -> subprocess.CompletedProcess:
    import multiprocessing
    import tempfile

    global _forkserver_env
    ctx = multiprocessing.get_context("forkserver")
    if _forkserver_env is None:
        ctx.set_forkserver_preload(_PRELOAD)
        _forkserver_env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        process = ctx.Process(target=_cli_child, args=(argv, out_path, err_path, str(cwd), dict(os.environ)))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired([sys.executable, "main.py", *argv], timeout)
        read = [Path(p).read_text(errors="replace") if os.path.exists(p) else "" for p in (out_path, err_path)]
    return subprocess.CompletedProcess([sys.executable, str(ROOT / "main.py"), *argv], process.exitcode, read[0], read[1])


def random_feeds(model: onnx.ModelProto, seed: int = 0, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Seeded random inputs for a model's real inputs (symbolic dims from `dims`, default 2)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else (dims or {}).get(d.dim_param, 2) for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[vi.name] = rng.integers(0, 4, size=shape).astype(dtype)
    return feeds


def ort_run(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    data = model if isinstance(model, bytes) else model.SerializeToString()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def exporter_names_model() -> onnx.ModelProto:
    """Names as exporters write them: '.', '/', ':' and '-', a digit first, and three inputs that
    clean up to the same identifier."""
    from onnx import TensorProto, helper, numpy_helper

    dims = ["batch:0", 8]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("a.b", "a/b", "a_b", "input-1", "0")]
    w = numpy_helper.from_array(np.arange(8, dtype=np.float32), "/encoder/layer.0/w")
    nodes = [
        helper.make_node("Add", ["a.b", "a/b"], ["s.1"]),
        helper.make_node("Add", ["s.1", "a_b"], ["s:2"]),
        helper.make_node("Mul", ["s:2", "input-1"], ["s-3"]),
        helper.make_node("Sub", ["s-3", "0"], ["s/4"]),
        helper.make_node("Add", ["s/4", "/encoder/layer.0/w"], ["out:0"]),
    ]
    g = helper.make_graph(nodes, "exporter_names", ins, [helper.make_tensor_value_info("out:0", TensorProto.FLOAT, dims)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def external_weights_cnn(folder: Path, name: str = "cnn_bn_ext") -> Path:
    """A small CNN (Conv, BatchNormalization, Relu, pool, MatMul) saved with every weight in
    `<name>.data` beside `<name>.onnx`, as exporters write large models."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    arrays = {"stem_w": rng.standard_normal((8, 3, 3, 3)), "stem_b": rng.standard_normal(8), "bn_s": rng.uniform(0.5, 1.5, 8),
              "bn_b": rng.standard_normal(8), "bn_m": rng.standard_normal(8), "bn_v": rng.uniform(0.5, 1.5, 8),
              "fc_w": rng.standard_normal((8, 4))}
    inits = [numpy_helper.from_array(a.astype(np.float32), k) for k, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "stem_w", "stem_b"], ["c"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["b"], name="bn"),
             helper.make_node("Relu", ["b"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc_w"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    onnx.save(model, path, save_as_external_data=True, location=f"{name}.data", size_threshold=0, all_tensors_to_one_file=True)
    return path


def relax_through(model: onnx.ModelProto, target, last: str | None = None):
    """The Relax module after the default pipeline's passes for `target` (core.compiler.pipeline.pass_list,
    as compile runs them), up to and including the pass named `last` (all of them when None)."""
    import tempfile

    from core.compiler.compile import _resolve_graph, import_relax
    from core.compiler.pipeline.pass_list import default_pipeline, make_pass

    path = Path(tempfile.mkdtemp()) / "model.onnx"
    onnx.save(model, str(path))
    mod = import_relax(_resolve_graph(str(path))).mod
    with target:
        for spec in default_pipeline(target):
            if spec.enabled:
                mod = make_pass(spec, target)(mod)
            if spec.name == last:
                return mod
    if last is not None:
        raise AssertionError(f"{last} is not in the default pipeline for {target}")
    return mod


def scheduled_through(model: onnx.ModelProto, target):
    """The model's Relax+TIR module after FuseTIR, through the default CPU schedule (weights
    prepacked), as compile schedules it."""
    from core.compiler.schedules import schedule_pass

    mod = relax_through(model, target, last="FuseTIR")
    with target:
        return schedule_pass(target)(mod)


def vm_matches_onnxruntime(model: onnx.ModelProto, target, x: np.ndarray, runs: int = 1, rtol=1e-3, atol=1e-4) -> None:
    """Build `model` (one input) through the pipeline for `target` (this host's) and assert its
    output matches onnxruntime's on `x`, `runs` times (the pool's threads may take any part of a
    split kernel: the same result each run)."""
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(relax_through(model, target, "VMFinalize"), target), tvm.cpu())
    (ref,) = ort_run(model, {model.graph.input[0].name: x})
    for _ in range(runs):
        np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), ref, rtol=rtol, atol=atol)


def loops_around(script: str, block: str) -> list[str]:
    """The `for` lines enclosing the block named `block` in a TVMScript listing, outermost first."""
    lines = script.splitlines()
    at = next(i for i, line in enumerate(lines) if f'T.sblock("{block}")' in line)
    indent = len(lines[at]) - len(lines[at].lstrip())
    loops = []
    for line in reversed(lines[:at]):
        depth = len(line) - len(line.lstrip())
        if line.strip() and depth < indent:
            indent = depth
            if line.strip().startswith("for "):
                loops.append(line.strip())
    return loops[::-1]


def conv_tile(config: dict) -> dict:
    """A channel-blocked conv's config (core.compiler.schedules.cpu_conv_nchwc) without the order
    of its parallel loop ("rows_outer" or "bands", which the weights' size decides): its register tile."""
    return {k: v for k, v in config.items() if k not in ("rows_outer", "bands")}


def configs_compute_the_same(rule, func, target, configs: list[dict], seed: int = 3) -> int:
    """Build `func` scheduled by `rule` with each of `configs` for `target` (this host's) and assert
    that every one computes what the first does on the same seeded random inputs; returns how
    many were run."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    from core.compiler.measure.kernel_measure import _random_args

    expected = None
    for config in configs:
        scheduled = rule.apply(func, target, config).mod["main"].without_attr("tirx.is_scheduled").with_attr("global_symbol", "main")
        lib = tvm.compile(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(tvm.IRModule({"main": scheduled})), target=target)
        args = _random_args(func, seed=seed)
        lib["main"](*args)
        out = args[-1].numpy()
        if expected is None:
            expected = out
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5, err_msg=str(config))
    return len(configs)


def relax_ops(model: onnx.ModelProto, last: str) -> list[str]:
    """The Relax ops main calls, in order (e.g. "nn.layer_norm", "matmul"), after the default CPU
    pipeline up to and including the pass `last`."""
    import re

    from core.compiler.target import make_target

    mod = relax_through(model, make_target("cpu"), last)
    return re.findall(r"= R\.([a-z_.0-9]+)\(", mod["main"].script(show_meta=False))


def kernel_names(model: onnx.ModelProto) -> list[str]:
    """The TIR kernels main calls, in order (e.g. "fused_matmul_add"), after the default CPU
    pipeline through FuseTIR."""
    import re

    from core.compiler.target import make_target

    script = relax_through(model, make_target("cpu"), "FuseTIR")["main"].script(show_meta=False)
    return re.findall(r"R\.call_tir\((?:cls\.)?(\w+),", script)


def checked_model(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    """`graph` as a model of the default domain at `opset`, checked by onnx.checker."""
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def compiled_matches_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray], folder: Path, rtol=1e-4, atol=1e-5) -> None:
    """Compile `model` for this host's CPU (core.compiler.compile, its own verification off) and
    assert its first output on `feeds` is onnxruntime's."""
    from core.compiler.compile import compile_model

    path = Path(folder) / "model.onnx"
    onnx.save(model, str(path))
    (ref,) = ort_run(model, feeds)[:1]
    np.testing.assert_allclose(compile_model(str(path), "cpu", verify=False).run(feeds)[0], ref, rtol=rtol, atol=atol)


def foreign_cpu() -> str | None:
    """An LLVM CPU whose code this host cannot run (AVX-512 or AMX ones), or None where it runs them all."""
    from core.compiler.target import cannot_run_here, make_target, target_cpu

    candidates = ("sapphirerapids", "graniterapids", "znver5", "znver4", "skylake-avx512")
    return next((c for c in candidates if cannot_run_here(target_cpu(make_target("cpu", mcpu=c)))), None)
