"""Issue 41 item 5: a torch.onnx BERT under the size threshold opens with its layers collapsed,
the layer boxes in one column, and the attention mask drawn as a labelled stub into each layer."""
from __future__ import annotations

import onnx

from benchmarks.architectures.transformers import bert_encoder
from core.views.scopes import is_scope_id


def test_bert_opens_with_layers_collapsed_in_a_column_and_mask_stubs(window, tmp_path):
    path = tmp_path / "bert.onnx"
    onnx.save(bert_encoder(layers=12, hidden=32, heads=2, mlp=64, seq=16, vocab=50), path)
    assert window.open_model(path, wait=True)
    c = window.canvas
    boxes = c.layout_result.boxes
    layers = [f"scope:encoder/layer.{i}" for i in range(12)]
    assert all(i in boxes for i in layers) and len(c.view.nodes) < 40  # ~300 ONNX nodes, collapsed
    assert len({round(boxes[i].x, 1) for i in layers}) == 1  # one straight column
    assert all(boxes[a].y < boxes[b].y for a, b in zip(layers, layers[1:]))  # top to bottom
    stubs = [(e, r) for e, r in zip(c.view.edges, c.layout_result.routes) if e.data.get("stub")]
    assert sorted(e.dst for e, _ in stubs) == sorted(layers[1:])
    for e, route in stubs:  # short: starts in the gap just above its layer box
        top = boxes[e.dst].y - boxes[e.dst].h / 2
        assert top - 30 < route[0][1] < top and abs(route[-1][1] - top) < 0.01
    labels = window.scopes.stub_labels
    assert len(labels) == 11 and {lab.text() for lab in labels} == {"attention_mask"}
    assert all(lab.scene() is c.scene() for lab in labels)
    # opening a layer from the menu's action keeps the others in their column
    c.select([layers[5]])
    window.scopes.expand_selected()
    boxes = c.layout_result.boxes
    assert layers[5] not in boxes and any(is_scope_id(i) and i.startswith("scope:encoder/layer.5/") for i in boxes)
    assert len({round(boxes[i].x, 1) for i in layers[:5]}) == 1
