"""The benchmark's int8 rows: an fp32 network and the same network quantized by onnxruntime (QDQ),
with the same inputs, so both builds run on one set of feeds."""
from __future__ import annotations

from collections import Counter

from benchmarks.common import QuantizedRow, feeds_for, load_proto, quantized_models


def test_the_quantized_row_is_its_fp32_network_quantized():
    rows = quantized_models()
    assert set(rows) == {"resnet18_qdq", "small_cnn_qdq"} and all(isinstance(r, QuantizedRow) for r in rows.values())
    row = rows["small_cnn_qdq"]
    quantized, fp32 = load_proto(row), row.fp32()
    q_ops, f_ops = Counter(n.op_type for n in quantized.graph.node), Counter(n.op_type for n in fp32.graph.node)
    assert q_ops["QuantizeLinear"] > 0 and q_ops["DequantizeLinear"] > q_ops["QuantizeLinear"]
    assert f_ops["QuantizeLinear"] == f_ops["DequantizeLinear"] == 0 and q_ops["Conv"] == f_ops["Conv"]
    assert [i.name for i in quantized.graph.input] == [i.name for i in fp32.graph.input]
    assert set(feeds_for(quantized)) == set(feeds_for(fp32))
