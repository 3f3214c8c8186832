"""The load's checks as arranged for speed: onnx.checker on the file's bytes on a thread beside the
onnx_ir deserialization, shape inference on the same bytes, one walk over the tensors. A file is
refused for the same problem, in the same sentence, as when everything ran one after another."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from core import InvalidModelError, load_model
from core.model.graph import _INFERRED
from core.model.onnx_checks import check_with_checker, parse_model, read_model_bytes
from core.model.shapes import infer_types
from tests.conftest import LIGHT_DIR, SAMPLES_DIR


def _model(nodes, inits=(), opsets=(("", 17),)):
    return helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], list(inits)),
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _checker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "onnx-checker"]


def test_structure_problem_wins_over_the_checkers_and_no_checker_is_left_running(tmp_path):
    # both wrong: 'ghost' is read but never made (check_structure), Frobnicate is no ONNX op (the checker)
    m = _model([helper.make_node("Frobnicate", ["x", "ghost"], ["y"], name="frob")])
    onnx.save(m, tmp_path / "both.onnx")
    with pytest.raises(InvalidModelError, match="'frob' \\(Frobnicate\\) reads tensor 'ghost', which no node") as info:
        load_model(tmp_path / "both.onnx")
    assert "ONNX validation" not in str(info.value)
    assert _checker_threads() == []


def test_the_checkers_problem_is_still_reported_from_the_thread(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1.0)])  # Relu takes no attributes
    onnx.save(m, tmp_path / "attr.onnx")
    with pytest.raises(InvalidModelError, match=f"{tmp_path / 'attr.onnx'}: the model fails ONNX validation: .*alpha"):
        load_model(tmp_path / "attr.onnx")
    assert _checker_threads() == []


def test_checker_on_the_files_bytes_says_what_it_says_on_the_protobuf(tmp_path):
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1.0)])
    path = tmp_path / "attr.onnx"
    onnx.save(m, path)
    parsed = parse_model(read_model_bytes(path), path)
    messages = []
    for kwargs in ({}, {"parsed": parsed}):
        with pytest.raises(InvalidModelError) as info:
            check_with_checker(parsed.proto, path, **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    good = SAMPLES_DIR / "small_cnn.onnx"
    parsed = parse_model(read_model_bytes(good), good)
    assert parsed.external is False and parsed.data == good.read_bytes()
    check_with_checker(parsed.proto, good, parsed=parsed)


def test_external_data_is_found_once_and_still_checked(tmp_path):
    w = numpy_helper.from_array(np.arange(9, dtype=np.float32).reshape(3, 3), "w")
    m = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [w])
    onnx.save(m, tmp_path / "ext.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    parsed = parse_model(read_model_bytes(tmp_path / "ext.onnx"), tmp_path / "ext.onnx")
    assert parsed.external is True
    g = load_model(tmp_path / "ext.onnx")
    np.testing.assert_array_equal(g.value("w").numpy(), np.arange(9, dtype=np.float32).reshape(3, 3))
    assert g.value("y").shape == (2, 3)
    # a checker problem in a model with external weights: found on the stand-in copy, as before
    bad = onnx.load(tmp_path / "ext.onnx", load_external_data=False)
    bad.graph.node[0].attribute.append(helper.make_attribute("alpha", 1.0))
    onnx.save(bad, tmp_path / "ext.onnx")
    with pytest.raises(InvalidModelError, match="fails ONNX validation"):
        load_model(tmp_path / "ext.onnx")


@pytest.mark.parametrize("path", [SAMPLES_DIR / "small_cnn.onnx", LIGHT_DIR / "light_resnet50.onnx"], ids=lambda p: Path(p).stem)
def test_shapes_inferred_from_the_bytes_equal_those_from_the_protobuf(path):
    data = read_model_bytes(path)
    proto = parse_model(data, path).proto
    a, problems_a = infer_types(proto)
    b, problems_b = infer_types(proto, data=data)
    assert problems_a == problems_b == [] and len(a) == len(b) > 0
    names = [vi.name for vi in proto.graph.output] + [n.output[0] for n in proto.graph.node]
    assert [a.get(n) for n in names] == [b.get(n) for n in names]


def test_inferring_again_replaces_the_earlier_inference():
    g = load_model(SAMPLES_DIR / "small_cnn.onnx")
    inferred = [v for v in g.model.graph.outputs if _INFERRED in v.meta] + [
        o for n in g.model.graph for o in n.outputs if _INFERRED in o.meta]
    assert inferred, "the sample has values only inference types"
    before = {v.name: v.meta[_INFERRED] for v in inferred}
    inferred[0].meta[_INFERRED] = (None, ("stale",))
    g.infer_shapes()
    assert {v.name: v.meta[_INFERRED] for v in inferred} == before


# ---- one walk over the nodes stands in for the text and structure loops: the same sentence ----

def _reference_sentence(path: Path) -> str | None:
    """The first problem as the checks found it one by one (before the single walk)."""
    from core.model import onnx_checks

    proto = onnx.ModelProto.FromString(path.read_bytes())
    try:
        onnx_checks.check_text(proto, path)
        onnx_checks._check_value_types(proto.graph, path)
        onnx_checks.check_structure(proto, path)  # no `produced`: every node loop of its own
    except InvalidModelError as e:
        return str(e)
    return None


def _io_model(nodes, outputs=("y",), opsets=(("", 17),), functions=()):
    m = helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2]) for o in outputs]),
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], functions=list(functions))
    return m


def _if_node(branch_node):
    body = helper.make_graph([branch_node], "body", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    return helper.make_node("If", ["c"], ["y"], name="if", then_branch=body, else_branch=body)


_N = helper.make_node
_STRUCTURE_CASES = {
    "fine": [_N("Relu", ["x"], ["a"], name="r"), _N("Relu", ["a"], ["y"], name="s")],
    "dangling": [_N("Add", ["x", "ghost"], ["y"], name="adder")],
    "cycle": [_N("Relu", ["x"], ["a"], name="r1"), _N("Add", ["a", "c"], ["b"], name="loop_add"),
              _N("Relu", ["b"], ["c"], name="loop_relu"), _N("Identity", ["b"], ["y"], name="out")],
    "out_of_order": [_N("Relu", ["a"], ["y"], name="late_reader"), _N("Relu", ["x"], ["a"], name="producer")],
    "produced_twice": [_N("Relu", ["x"], ["y"], name="one"), _N("Relu", ["x"], ["y"], name="two")],
    "overwrites_input": [_N("Relu", ["x"], ["x"], name="inplace"), _N("Relu", ["x"], ["y"], name="r")],
    "self_read": [_N("Add", ["x", "y"], ["y"], name="selfish")],
    "undeclared_domain": [_N("Frob", ["x"], ["y"], name="frob", domain="com.example")],
    "output_unproduced": [_N("Relu", ["x"], ["a"], name="r")],
    "bytes_node_name": [_N("Relu", ["x"], ["a"], name="Zbad_node"), _N("Relu", ["a"], ["y"], name="s")],
    "bytes_after_dangling": [_N("Add", ["x", "ghost"], ["a"], name="adder"), _N("Relu", ["a"], ["Zbad_t"], name="r"),
                             _N("Relu", ["Zbad_t"], ["y"], name="s")],
    "bytes_domain_declared": [_N("Frob", ["x"], ["y"], name="frob", domain="Zbad.dom")],
    "bytes_attribute_name": [_N("Relu", ["x"], ["y"], name="r", Zbad_attr=1)],
    "bytes_in_a_branch": [_N("Constant", [], ["c"], name="cond", value=helper.make_tensor("v", TensorProto.BOOL, [], [True])),
                          _if_node(_N("Relu", ["x"], ["b"], name="Zbad_inner"))],
    "bytes_input_read_later": [_N("Relu", ["x"], ["a"], name="r"), _N("Frob", ["a"], ["b"], name="f", domain="com.example"),
                               _N("Add", ["a", "Zbad_ghost"], ["y"], name="s")],
}


@pytest.mark.parametrize("case", sorted(_STRUCTURE_CASES))
def test_the_single_walk_refuses_with_the_sentence_the_separate_checks_give(case, tmp_path):
    opsets = (("", 17), ("Zbad.dom", 1)) if case == "bytes_domain_declared" else (("", 17),)
    m = _io_model(_STRUCTURE_CASES[case], ("y",), opsets)
    data = m.SerializeToString().replace(b"Zbad", b"\xffbad")  # every 'Zbad' (a name, a domain) becomes bytes
    path = tmp_path / f"{case}.onnx"
    path.write_bytes(data)
    expected = _reference_sentence(path)
    if case == "fine":
        assert expected is None
        parsed = parse_model(data, path)
        assert parsed.produced == {"a", "y"}
        load_model(path)
        return
    assert expected is not None
    with pytest.raises(InvalidModelError) as info:
        load_model(path)
    assert str(info.value) == expected
    if case.startswith("bytes"):
        assert "not valid UTF-8 text" in expected
