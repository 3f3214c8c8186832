"""The tuning database's JSON record files (core.compiler.tuning_db): a file that is not JSON, or
JSON of the wrong shape, is corrupt (one warning naming it; what it holds is not applied), and
never raises."""
from __future__ import annotations

import json
import logging

import pytest

from core.compiler import tuning_db
from core.compiler.tuning_db import (
    MODEL_AB_FILE,
    PROGRESS_FILE,
    TEMPLATES_FILE,
    load_model_ab,
    save_model_ab,
)

OUTCOME = {"records": ["a"], "candidates": {"a": "template 1 ms"}, "untuned_ms": 2.0, "tuned_ms": 1.9,
           "untuned_p10_ms": 1.9, "tuned_p10_ms": 1.8}


@pytest.fixture
def folder(tmp_path):
    from core.compiler.target import make_target

    target = make_target("cpu")
    path = tuning_db.database_dir(tmp_path, target)
    path.mkdir(parents=True)
    return tmp_path, target, path


@pytest.mark.parametrize("text, held", [("[1, 2]", "list"), ("42", "int"), ('"x"', "str"), ("{not json", None)])
def test_a_model_ab_file_that_is_no_object_is_corrupt_not_an_error(folder, caplog, text, held):
    root, target, path = folder
    (path / MODEL_AB_FILE).write_text(text)
    with caplog.at_level(logging.WARNING, logger="core.compiler.tuning_db"):
        assert load_model_ab(root, target) == {}
        assert load_model_ab(root, target) == {}  # read again: still one warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path / MODEL_AB_FILE) in warnings[0]
    assert (f"JSON {held}" if held else "not valid JSON") in warnings[0]
    # filing an outcome replaces the corrupt file with a good one
    save_model_ab(root, target, "model", OUTCOME)
    assert json.loads((path / MODEL_AB_FILE).read_text()) == {"model": OUTCOME}


def test_records_of_the_wrong_shape_are_dropped_and_the_rest_kept(folder, caplog):
    root, target, path = folder
    (path / MODEL_AB_FILE).write_text(json.dumps({"good": OUTCOME, "bad": {**OUTCOME, "records": "a"}, "worse": 3}))
    template = {"ms": 0.5, "config": [4, 2], "default_ms": 0.6, "rule": "conv", "complete": True, "measured": []}
    (path / TEMPLATES_FILE).write_text(json.dumps({"w1": template, "w2": {**template, "ms": "fast"}, "w3": {"ms": 1.0}}))
    (path / PROGRESS_FILE).write_text(json.dumps({"w1": {"trials": 3, "default_ms": None}, "w2": {"trials": "many"}}))
    with caplog.at_level(logging.WARNING, logger="core.compiler.tuning_db"):
        assert load_model_ab(root, target) == {"good": OUTCOME}
        assert tuning_db._load_templates(path) == {"w1": template}
        assert tuning_db._load_progress(path) == {"w1": {"trials": 3, "default_ms": None}}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert str(path / MODEL_AB_FILE) in warnings[0] and "2 malformed" in warnings[0]
    assert str(path / TEMPLATES_FILE) in warnings[1] and "'ms' of an entry is str" in warnings[1]
    assert str(path / PROGRESS_FILE) in warnings[2] and "'trials' of an entry is str" in warnings[2]
