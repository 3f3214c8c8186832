"""core.model.dims: the one NAME=N parser of symbolic dim values (CLI --dim, the Compile panel's
field), refusing a bad value in one sentence naming the dim."""
from __future__ import annotations

import pytest

from core import load_model
from core.errors import WorkbenchError
from core.model.dims import format_dims, parse_dims, symbolic_dims
from tests.conftest import sample


def test_values_as_items_or_as_one_text():
    assert parse_dims(["batch=2", "seq=128"]) == {"batch": 2, "seq": 128}
    assert parse_dims(" batch = 2, seq=128  ") == {"batch": 2, "seq": 128}
    assert parse_dims("") == {} and parse_dims([]) == {}
    assert parse_dims(format_dims({"N": 4, "seq": 7})) == {"N": 4, "seq": 7}


@pytest.mark.parametrize("text, message", [
    ("N=0", "The symbolic dim 'N' needs a whole number of 1 or more, not '0'."),
    ("N=-2", "The symbolic dim 'N' needs a whole number of 1 or more, not '-2'."),
    ("N=four", "The symbolic dim 'N' needs a whole number of 1 or more, not 'four'."),
    ("N=", "The symbolic dim 'N' needs a whole number of 1 or more, not ''."),
    ("N4", "'N4' is not NAME=N: give a symbolic dim's value as e.g. N=4."),
    ("=4", "'=4' is not NAME=N: give a symbolic dim's value as e.g. N=4."),
    ("N=2, N=3", "The symbolic dim 'N' is given twice."),
    ("M=2", "The model has no symbolic dim 'M' (its symbolic dims are N, seq)."),
])
def test_a_bad_value_is_one_sentence_naming_the_dim(text, message):
    with pytest.raises(WorkbenchError) as info:
        parse_dims(text, known=["N", "seq"])
    assert str(info.value) == message


def test_the_symbolic_dims_of_a_models_inputs():
    assert symbolic_dims(load_model(sample("mlp"))) == ["batch"]
    assert symbolic_dims(load_model(sample("small_cnn"))) == []
    with pytest.raises(WorkbenchError, match=r"has no symbolic dim 'N' \(it has none\)"):
        parse_dims("N=2", known=[])
