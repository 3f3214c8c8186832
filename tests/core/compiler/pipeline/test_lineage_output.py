"""The graph's last node belongs to the kernel that computes it: main's result keeps the generic
name `gv` from the import on, and kernel lineage once dropped it (the ResNet/CNN head, the last
Add of an MLP went uncoloured by the heat map and unnamed by the debugger)."""
from __future__ import annotations

from core.compiler.compile import compile_model
from core.model.onnx_io import load_model_bytes
from tests.core.accuracy.test_debug import mlp_tanh
from tests.core.views.test_diff_matching import cnn


def test_the_last_node_of_each_model_is_in_a_kernel():
    for proto in (mlp_tanh(), cnn(names=True)):
        g = load_model_bytes(proto.SerializeToString(), "m.onnx")
        lineage = compile_model(g, verify=False).kernel_lineage
        covered = {label for labels in lineage.values() for label in labels}
        last = g.nodes[-1].label
        assert last in covered, (last, lineage)
