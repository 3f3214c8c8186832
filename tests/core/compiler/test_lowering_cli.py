"""`main.py lower`: stage table / JSON, numbered dumps, exit 2 naming the op and node."""
from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import sample
from tests.helpers import run_cli


@pytest.mark.slow
def test_lower_json_and_dump(tmp_path):
    out = tmp_path / "stages"
    r = run_cli("lower", sample("mlp"), "--json", "--dump", out, "--disable", "FuseOps")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["target"] == "cpu"
    stages = obj["stages"]
    assert [s["name"] for s in stages][:2] == ["ONNX graph", "Relax import"]
    assert "FuseOps" not in [s["name"] for s in stages]
    assert stages[-1]["name"] == "LLVM IR" and stages[-1]["level"] == "target code"
    for i, s in enumerate(stages):
        assert set(s) >= {"name", "level", "pass", "seconds", "file"}
        path = tmp_path / "stages" / s["file"].split("/")[-1]
        assert path.exists() and path.name.startswith(f"{i:02d}_")
    assert "define " in (out / stages[-1]["file"].split("/")[-1]).read_text()


@pytest.mark.slow
def test_lower_unsupported_op_exits_2_and_keeps_what_came_before(tmp_path):
    nodes = [helper.make_node("Celu", ["x"], ["y"], name="the_celu")]
    g = helper.make_graph(nodes, "celu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = tmp_path / "celu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = run_cli("lower", model, "--dump", tmp_path / "d")
    assert r.returncode == 2
    assert "the_celu" in r.stderr and "Celu" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    assert (tmp_path / "d" / "00_ONNX_graph.txt").exists()
    r = run_cli("lower", sample("mlp"), "--disable", "NoSuchPass")
    assert r.returncode == 2 and "NoSuchPass" in r.stderr
