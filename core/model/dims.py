"""Values for a model's symbolic input dims (a batch 'N', a sequence length 'seq').

The one parser of NAME=N: `compile` / `bench --dim`, `rewrite --verify --dim` and the Compile &
Run panel's dims field all read values through `parse_dims`, which refuses a bad one in one
sentence naming the dim. Where the model is known (`known`), a name it does not have is refused
too: a value for a dim that is not there would be silently ignored, and the dim measured at 1.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..errors import WorkbenchError

__all__ = ["format_dims", "parse_dims", "symbolic_dims"]


def symbolic_dims(graph) -> list[str]:
    """The symbolic dim names of the model's inputs, in order of first use: a Graph's, or a
    compiled Artifact's (its input TensorSpecs name symbolic dims the same way, as strings)."""
    names: list[str] = []
    for value in graph.inputs:
        for dim in value.shape or ():
            if isinstance(dim, str) and dim not in names:
                names.append(dim)
    return names


def parse_dims(items: str | Iterable[str], known: Sequence[str] | None = None) -> dict[str, int]:
    """{name: value} of 'NAME=N' items (or one text of them separated by commas or spaces, as
    the panel's field holds: "N=4, seq=128"). Raises a WorkbenchError, one sentence naming the
    dim, for an item that is not NAME=N, a value that is not a whole number of 1 or more, a
    name given twice, or (with `known`, the model's symbolic dims) a name the model lacks."""
    if isinstance(items, str):
        items = [part for part in re.split(r"[,\s]+", re.sub(r"\s*=\s*", "=", items)) if part]
    dims: dict[str, int] = {}
    for item in items:
        name, equals, value = (part.strip() for part in item.partition("="))
        if not name or not equals:
            raise WorkbenchError(f"'{item}' is not NAME=N: give a symbolic dim's value as e.g. N=4.")
        if not value.isdigit() or int(value) < 1:
            raise WorkbenchError(f"The symbolic dim '{name}' needs a whole number of 1 or more, not '{value}'.")
        if name in dims:
            raise WorkbenchError(f"The symbolic dim '{name}' is given twice.")
        if known is not None and name not in known:
            has = f"its symbolic dims are {', '.join(known)}" if known else "it has none"
            raise WorkbenchError(f"The model has no symbolic dim '{name}' ({has}).")
        dims[name] = int(value)
    return dims


def format_dims(dims: dict[str, int]) -> str:
    """'N=4, seq=128': the text parse_dims reads back."""
    return ", ".join(f"{name}={value}" for name, value in dims.items())
