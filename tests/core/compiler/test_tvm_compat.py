"""core.compiler.tvm_compat against the installed TVM: every adapter function, and no private use elsewhere.

Checked on TVM 0.27.0.post1. On an upgrade that moves one of TVM's privates, the test of that
function fails here (with the adapter's one sentence), not somewhere deep in a pass.
"""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from core.compiler import tvm_compat
from core.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[3]


def test_the_adapter_names_the_version_it_was_checked_on():
    import tvm

    assert tvm_compat.CHECKED_ON == "0.27"
    assert tvm.__version__.startswith(tvm_compat.CHECKED_ON + "."), (
        f"TVM {tvm.__version__} is installed; check core/compiler/tvm_compat.py against it and update CHECKED_ON.")


def test_vm_build_steps_make_a_runnable_executable():
    """vm_codegen, tir_functions, attach_system_lib_prefix, is_device_module and vm_link, taken as
    core.compiler.backend.codegen takes them, give an executable that adds two tensors."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    y = relax.Var("y", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(x, y))
        bb.emit_func_output(out)
    target = tvm.target.Target({"kind": "llvm"})
    with target:
        mod = relax.get_pipeline("default")(bb.get())
    builder = relax.ExecBuilder()
    mod = tvm_compat.vm_codegen(builder, mod)
    tir_mod = tvm_compat.tir_functions(mod)
    assert tir_mod is not None and len(tir_mod.get_global_vars()) >= 1
    tir_mod = tvm_compat.attach_system_lib_prefix(tir_mod, target)
    lib = tvm.tirx.build(tir_mod, target=target)
    assert not tvm_compat.is_device_module(lib)
    ex = relax.VMExecutable(tvm_compat.vm_link(builder, target, lib, [], {}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    a, b = np.arange(6, dtype="float32").reshape(2, 3), np.ones((2, 3), "float32")
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b)).numpy(), a + b)


def test_tir_functions_of_a_module_without_kernels_is_none():
    import tvm

    assert tvm_compat.tir_functions(tvm.IRModule({})) is None


def test_onnx_convert_map_holds_the_frontends_converters():
    convert_map = tvm_compat.onnx_convert_map()
    assert {"Conv", "Relu", "MatMul", "Reshape"} <= set(convert_map)
    assert all(hasattr(c, "get_converter") for c in convert_map.values())


def test_patched_convert_map_overlays_and_puts_back():
    class Marker:
        pass

    before = tvm_compat.onnx_convert_map()
    with tvm_compat.patched_convert_map({"Relu": Marker, "NotAnOnnxOp": Marker}):
        patched = tvm_compat.onnx_convert_map()
        assert patched["Relu"] is Marker and patched["NotAnOnnxOp"] is Marker
        assert patched["Conv"] is before["Conv"]
    assert tvm_compat.onnx_convert_map() == before


def test_patched_convert_map_reaches_tvms_from_onnx():
    """The swap is the one TVM's own from_onnx reads: a converter put in for Relu is called."""
    from tvm.relax.frontend.onnx import from_onnx

    calls = []
    relu = tvm_compat.onnx_convert_map()["Relu"]

    class CountingRelu(relu):
        @classmethod
        def _impl_v14(cls, bb, inputs, attr, params):
            calls.append(1)
            return relu.get_converter(14)(bb, inputs, attr, params)

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with tvm_compat.patched_convert_map({"Relu": CountingRelu}):
        from_onnx(model)
    assert calls == [1]


def test_onnx_graph_importer_has_the_hooks_and_state_the_workbench_uses():
    """The class has every hook; an import through the workbench's subclass (which reads the
    importer's _nodes, _params and bb) works, and importer_params gives the kept weights."""
    from core.compiler.frontend.onnx_import import import_graph
    from tests.core.compiler.frontend.test_onnx_import import _graph_of

    cls = tvm_compat.onnx_graph_importer()
    assert all(callable(getattr(cls, hook)) for hook in tvm_compat.IMPORTER_HOOKS)
    weight = np.arange(6, dtype="float32").reshape(3, 2)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              initializer=[onnx.numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = import_graph(_graph_of(model), keep_params_in_input=True)
    assert list(result.params) == ["w"]
    np.testing.assert_array_equal(result.params["w"].numpy(), weight)


def test_importer_params_names_what_is_missing():
    with pytest.raises(WorkbenchError, match=r"^TVM \d+\.\d+ no longer provides .*_params.*checked on 0\.27\.$"):
        tvm_compat.importer_params(object())


def test_cook_toom_matrices_compute_a_winograd_convolution():
    """F(2,3) and F(4,3): Y = A^T [(G g) * (B^T d)] equals the direct 1-D correlation."""
    rng = np.random.default_rng(0)
    for m in (2, 4):
        a, b, g = tvm_compat.cook_toom_matrices(m)
        alpha = m + 2
        assert a.shape == (alpha, m) and b.shape == (alpha, alpha) and g.shape == (alpha, 3)
        d, k = rng.standard_normal(alpha), rng.standard_normal(3)
        direct = np.array([d[i:i + 3] @ k for i in range(m)])
        np.testing.assert_allclose(a.T @ ((g @ k) * (b.T @ d)), direct, rtol=1e-9, atol=1e-9)


def test_a_missing_private_is_one_sentence_naming_it(monkeypatch):
    from tvm.relax import vm_build

    monkeypatch.delattr(vm_build, "_vmcodegen")
    with pytest.raises(WorkbenchError) as info:
        tvm_compat.vm_codegen(None, None)
    message = str(info.value)
    assert message.startswith("TVM ") and "relax's VM code generator (tvm.relax.vm_build._vmcodegen)" in message
    assert message.endswith("; the workbench was checked on 0.27.")


# TVM's private names the workbench uses; only core/compiler/tvm_compat.py may name them
TVM_PRIVATES = {"_vmcodegen", "_filter_tir", "_auto_attach_system_lib_prefix", "_is_device_module", "_vmlink", "_ffi_api",
                "_get_convert_map", "_cook_toom_convolution", "_interpolation_points", "_nn_conv2d"}


def private_uses(path: Path, package: str, names: set[str]) -> list[str]:
    """Where `path` imports a private module or name of `package`, or reads an attribute in `names`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            if any(p.startswith("_") for p in node.module.split(".") + [a.name for a in node.names]):
                found.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names
                      if a.name.split(".")[0] == package and any(p.startswith("_") for p in a.name.split("."))]
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def sources(*exclude: str) -> list[Path]:
    """The workbench's Python files (main.py, core, app, rewrites, benchmarks) less `exclude`."""
    files = [ROOT / "main.py"]
    for folder in ("core", "app", "rewrites", "benchmarks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [f for f in files if str(f.relative_to(ROOT)) not in exclude]


def test_the_scan_finds_a_private_use(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import tvm.relax\n"
                      "from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map\n"
                      "def f(vm_build):\n    return vm_build._vmcodegen\n")
    assert private_uses(sample, "tvm", TVM_PRIVATES) == [
        "sample.py:2 from tvm.relax.frontend.onnx.onnx_frontend import ...", "sample.py:4 ._vmcodegen"]


def test_no_module_outside_the_adapter_uses_tvms_privates():
    uses = [f"{f.relative_to(ROOT).parent}/{u}" for f in sources("core/compiler/tvm_compat.py")
            for u in private_uses(f, "tvm", TVM_PRIVATES)]
    assert not uses, "TVM privates used outside core/compiler/tvm_compat.py: " + "; ".join(uses)


def test_the_rpc_paths_internals_are_in_this_tvm(tmp_path):
    """remote.py renames the symbol an exported library embeds its VM executable under, and the
    emulated device calls tvm.rpc.server's in-process start: both still there, by those names."""
    import tvm
    import tvm.rpc.server
    from tvm.script import relax as R

    from core.compiler.tvm_compat import LIBRARY_BIN_SYMBOL, RPC_SERVER_START

    assert callable(getattr(tvm.rpc.server, RPC_SERVER_START, None))

    @tvm.script.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor((4,), "float32")):
            return R.add(x, x)

    path = tmp_path / "m.so"
    tvm.compile(Module, target="llvm").export_library(str(path))
    assert LIBRARY_BIN_SYMBOL.encode() + b"\x00" in path.read_bytes()
