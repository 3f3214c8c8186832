"""The manifest's `deploy` record (core.compiler.runtime.deploy): what the device installs and what
each part weighs, measured on the installed packages, the runtime far smaller than TVM with its compiler."""
from __future__ import annotations

import json

from tests.conftest import sample


def test_an_exported_artifact_says_what_the_device_installs_and_each_parts_size(tmp_path):
    from core.compiler.compile import compile_model
    from core.compiler.runtime.deploy import deploy_summary
    from core.compiler.runtime.artifact import load_artifact

    out = compile_model(str(sample("mm_relu")), "cpu").export(tmp_path / "art")
    deploy = json.loads((out / "manifest.json").read_text())["deploy"]
    assert deploy["packages"]["apache-tvm"] and deploy["packages"]["numpy"]
    assert deploy["artifact_bytes"]["model.so"] == (out / "model.so").stat().st_size
    assert set(deploy["check_only_bytes"]) == {"model.onnx", "recipe/"}
    runtime = deploy["runtime_bytes"]
    assert 0 < runtime["libtvm_runtime.so"] < runtime["tvm (runtime part of apache-tvm)"]
    # the compiler is most of an installed apache-tvm; the device loads none of it
    assert runtime["apache-tvm as installed (with the compiler)"] > 5 * runtime["tvm (runtime part of apache-tvm)"]
    assert load_artifact(out).manifest.deploy == deploy  # read back as written
    text = deploy_summary(deploy)
    assert "needs Python with numpy" in text and "model.so" in text and "measured on the linux-" in text
