"""The tuning database's JSON record files (core.compiler.tuning.files, read by tuning_db and
winograd_choice): a file that is not JSON, or JSON of the wrong shape, is corrupt (one warning
naming it; what it holds is not applied), and never raises. Where "no record" would apply more
(model_ab.json: every record; progress.json: unconfirmed MetaSchedule records), a file that
cannot tell applies less. MetaSchedule's own files are refused in one sentence naming them."""
from __future__ import annotations

import json
import logging

import pytest

from core.compiler.tuning import db as tuning_db
from core.compiler.tuning.db import (
    MODEL_AB_FILE,
    PROGRESS_FILE,
    TEMPLATES_FILE,
    load_model_ab,
    save_model_ab,
)
from core.compiler.tuning.files import RecordFile, load_records, save_records
from core.errors import WorkbenchError

LOGGER = "core.compiler.tuning.files"

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
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_model_ab(root, target) == {}
        assert load_model_ab(root, target) == {}  # read again: still one warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path / MODEL_AB_FILE) in warnings[0]
    assert (f"JSON {held}" if held else "not valid JSON") in warnings[0]
    # filing an outcome replaces the corrupt file with a good one, and keeps the corrupt one aside:
    # the outcomes it held are still unknown, so another model's absence does not mean "no A/B"
    save_model_ab(root, target, "model", OUTCOME)
    assert json.loads((path / MODEL_AB_FILE).read_text()) == {"model": OUTCOME}
    assert (path / (MODEL_AB_FILE + ".corrupt")).read_text() == text
    outcomes = load_model_ab(root, target)
    assert outcomes == {"model": OUTCOME} and outcomes.knows("model") and not outcomes.knows("other")
    (path / (MODEL_AB_FILE + ".corrupt")).unlink()  # the user lets it go: absence means "no A/B" again
    assert load_model_ab(root, target).knows("other")


def test_records_of_the_wrong_shape_are_dropped_and_the_rest_kept(folder, caplog):
    root, target, path = folder
    (path / MODEL_AB_FILE).write_text(json.dumps({"good": OUTCOME, "bad": {**OUTCOME, "records": "a"}, "worse": 3,
                                                  "nested": {**OUTCOME, "records": ["a", ["b"]]}}))
    template = {"ms": 0.5, "config": [4, 2], "default_ms": 0.6, "rule": "conv", "complete": True, "measured": []}
    (path / TEMPLATES_FILE).write_text(json.dumps({"w1": template, "w2": {**template, "ms": "fast"}, "w3": {"ms": 1.0}}))
    (path / PROGRESS_FILE).write_text(json.dumps({"w1": {"trials": 3, "default_ms": None}, "w2": {"trials": "many"},
                                                  "w3": {"trials": 1, tuning_db.SEARCH_CONFIRMED: {"ms": 1.0}}}))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_model_ab(root, target) == {"good": OUTCOME}
        assert tuning_db._load_templates(path) == {"w1": template}
        assert tuning_db._load_progress(path) == {"w1": {"trials": 3, "default_ms": None}}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert str(path / MODEL_AB_FILE) in warnings[0] and "3 malformed" in warnings[0]
    assert str(path / TEMPLATES_FILE) in warnings[1] and "'ms' of an entry is str" in warnings[1]
    assert str(path / PROGRESS_FILE) in warnings[2] and "2 malformed" in warnings[2] and "'trials' of an entry is str" in warnings[2]


def test_malformed_entries_are_written_back_as_they_were(folder):
    """Saving a record file keeps what it could not read: a fix by hand is not lost, and the
    entry stays unknown (not "none") to the next reader."""
    root, target, path = folder
    (path / MODEL_AB_FILE).write_text(json.dumps({"bad": {**OUTCOME, "records": "a"}}))
    save_model_ab(root, target, "model", OUTCOME)
    assert json.loads((path / MODEL_AB_FILE).read_text()) == {"bad": {**OUTCOME, "records": "a"}, "model": OUTCOME}
    outcomes = load_model_ab(root, target)
    assert not outcomes.knows("bad") and outcomes.knows("model") and outcomes.knows("never-measured")
    save_model_ab(root, target, "bad", OUTCOME)  # a new A/B of that model replaces it
    assert load_model_ab(root, target).knows("bad")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", None, "bad entry"])
def test_a_model_ab_file_that_cannot_tell_applies_none_of_the_models_records(folder, monkeypatch, text):
    """The A/B exists so that records which made the model slower do not apply: where its outcome
    for the model cannot be read, no record applies (the untuned build the A/B measured against);
    where the file surely has none (no A/B of that model), all apply, as before A/Bs."""
    root, target, path = folder
    monkeypatch.setattr(tuning_db, "model_key", lambda mod: "model")
    files = {"{not json": "{not json", "[1, 2]": "[1, 2]", None: json.dumps({"other": OUTCOME}),
             "bad entry": json.dumps({"model": {**OUTCOME, "records": [["a"]]}})}
    (path / MODEL_AB_FILE).write_text(files[text])
    dropped = tuning_db._dropped_by_ab(path, mod=None)
    assert dropped == set() if text is None else dropped is None
    (path / MODEL_AB_FILE).write_text(json.dumps({"model": {**OUTCOME, "candidates": {"a": "t", "b": "t"}}}))
    assert tuning_db._dropped_by_ab(path, mod=None) == {"b"}


def test_a_progress_file_that_cannot_tell_applies_no_metaschedule_record(folder, monkeypatch):
    """A MetaSchedule record applies only where progress.json says it was confirmed or that no
    confirmation was ever made (a hand-filed schedule): a corrupt file says neither."""
    root, target, path = folder
    monkeypatch.setattr(tuning_db, "search_option", lambda db, task_mod, entry: ("record", 0.5))
    template = {"ms": 0.7, "config": [1], "default_ms": 1.0}

    def options(saved):
        return dict(tuning_db._schedule_options("w1", None, template, None, saved))

    assert options(RecordFile()) == {"default": 1.0, "template": 0.7, "search": 0.5}
    assert options(RecordFile(corrupt=True)) == {"default": 1.0, "template": 0.7}  # templates carry their own default
    assert options(RecordFile(malformed={"w1": {"trials": "x"}})) == {"default": 1.0, "template": 0.7}
    assert options(RecordFile({"w1": {"trials": 1}}, corrupt=True))["search"] == 0.5


def test_the_winograd_file_corrupt_leaves_the_rule_and_is_kept_aside(folder, caplog):
    """winograd.json: a corrupt file's choices are not applied (the untuned rule decides, which is
    safe); tuning writing a new one keeps the corrupt one aside."""
    from core.compiler.tuning.winograd_choice import WINOGRAD_FILE, load_choices

    root, target, path = folder
    (path / WINOGRAD_FILE).write_text('{"conv2d 1x2": {"choice": "winograd4"')
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_choices(root, target) == {}
        assert load_choices(root, target) == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path / WINOGRAD_FILE) in warnings[0] and "not valid JSON" in warnings[0]
    records = load_records(path, WINOGRAD_FILE)
    records["conv2d 1x3"] = {"choice": "direct", "rule": "direct"}
    save_records(path, WINOGRAD_FILE, records)
    assert load_choices(root, target) == {"conv2d 1x3": "direct"}
    assert (path / (WINOGRAD_FILE + ".corrupt")).read_text().startswith('{"conv2d 1x2"')


@pytest.mark.parametrize("line, where", [("{bad", 2), ('{"a": 1}', 2), ("", None)])
def test_a_corrupt_metaschedule_file_is_refused_naming_it_and_the_line(folder, line, where):
    """TVM's JSONDatabase fails on a corrupt line with "Cannot tokenize" or a type error that names
    no file; the workbench names the file and the line."""
    root, target, path = folder
    (path / "database_workload.json").write_text("")
    (path / "database_tuning_record.json").write_text("\n".join(['[0, ["x"]]', line]) if where else "")
    if where is None:
        tuning_db.open_database(root, target)
        return
    with pytest.raises(WorkbenchError) as info:
        tuning_db.open_database(root, target)
    message = str(info.value)
    assert str(path / "database_tuning_record.json") in message and f"line {where}" in message
