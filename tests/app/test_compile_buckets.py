"""Compile & Run with shape buckets: the panel's field beside the symbolic dims compiles the model
for those shapes too (compile --shape-buckets), a bucket that leaves a dim symbolic or names one
the model lacks is refused before anything starts, and the result line says which code the
measurement ran: the bucket at its shape, the general kernels at any other."""
from __future__ import annotations

import pytest

from tests.app.test_compile_dims import batched


@pytest.mark.isa
def test_the_buckets_field_compiles_buckets_and_the_result_says_which_code_ran(window, qtbot, monkeypatch, tmp_path):
    import core.compiler.compile as core_compile

    assert window.open_model(batched(tmp_path / "batched.onnx"), wait=True)
    panel = window.panels["compile"].widget()
    assert panel.buckets.isVisibleTo(panel) and panel.buckets.text() == ""
    panel.buckets.setText("M=2")
    panel.start()
    assert panel.status.text() == "The model has no symbolic dim 'M' (its symbolic dims are N)." and panel.job is None
    seen = {}
    real = core_compile.compile_model
    monkeypatch.setattr(core_compile, "compile_model", lambda *args, **kwargs: seen.update(kwargs) or real(*args, **kwargs))
    panel.runs.setValue(2)
    panel.vs_ort.setChecked(False)
    for dims, said in (("N=3", "ran the general kernels"), ("N=4", "ran shape bucket N=4")):
        panel.buckets.setText("N=4; N=8")
        panel.dims.setText(dims)
        panel.result = None
        panel.start()
        qtbot.waitUntil(lambda: panel.result is not None, timeout=120_000)
        assert seen["shape_buckets"] == [{"N": 4}, {"N": 8}]
        assert said in panel.status.text(), panel.status.text()
        assert [b.label for b in panel.artifact.manifest.shape_buckets] == ["N=4", "N=8"]
    # the per-kernel view of the bucket's run names the model's nodes (the heat map's lineage)
    assert any(set(k.onnx_nodes) >= {"matmul", "add", "relu"} for k in panel.result.kernels)
