"""What the compile check is given besides the model: an .npz of inputs and the tolerances.

Shared by `compile --verify-inputs/--rtol/--atol` (cli/compile_cmd.py) and the Compile & Run
panel's Check… dialog (app/dialogs/check.py), so a bad file or number gets the same one sentence
in both."""
from __future__ import annotations

import math
import zipfile

import numpy as np

from core.errors import WorkbenchError

__all__ = ["fit_check_inputs", "parse_tolerance", "read_npz"]


def parse_tolerance(text: str | None, name: str, default: float | None = None) -> float:
    """A tolerance as a number (`default` when `text` is None); one sentence naming `name` when
    it is not a number of at least 0."""
    if text is None and default is not None:
        return default
    text = (text or "").strip()
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0:
        raise WorkbenchError(f"{name} must be a number of at least 0, not '{text}'.")
    return value


def read_npz(path: str, label: str | None = None) -> dict[str, np.ndarray]:
    """The arrays of the .npz at `path` by name; one sentence naming the file (`label`, else
    `path`) when it cannot be read or holds a single unnamed array (an .npy)."""
    label = label or path
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise WorkbenchError(f"{path} does not exist.") from None
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise WorkbenchError(f"{label} cannot be read as a NumPy .npz file of input arrays ({e}).") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise WorkbenchError(f"{label} holds one unnamed array, not an .npz file of arrays named by input.")
    try:
        with data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise WorkbenchError(f"{label} cannot be read as a NumPy .npz file of input arrays ({e}).") from None


def fit_check_inputs(arrays: dict[str, np.ndarray], inputs, label: str) -> dict[str, np.ndarray]:
    """`arrays` in the order of the model's `inputs` (core.model values: name, dtype, shape,
    shape_text), checked: every input given, no other array, each with the input's dtype and a
    shape its declared shape takes (a named or unknown dim takes any size, the same size wherever
    the name recurs). One sentence naming the file (`label`) and the input when not."""
    names = [v.name for v in inputs]
    extra = [k for k in arrays if k not in names]
    if extra:
        raise WorkbenchError(f"{label} has an array '{extra[0]}', which is not an input of the model (its inputs: {', '.join(names) or 'none'}).")
    missing = [n for n in names if n not in arrays]
    if missing:
        raise WorkbenchError(f"{label} lacks the model input '{missing[0]}' (give all of {', '.join(names)}).")
    sizes: dict[str, int] = {}
    for v in inputs:
        a = arrays[v.name]
        if v.dtype and str(a.dtype) != v.dtype:
            raise WorkbenchError(f"{label}: input '{v.name}' is {a.dtype}, the model takes {v.dtype}.")
        shape = v.shape
        if shape is None:
            continue
        fits = len(shape) == a.ndim
        for d, n in zip(shape, a.shape) if fits else ():
            if isinstance(d, int):
                fits = fits and d == n
            elif isinstance(d, str):
                fits = fits and sizes.setdefault(d, n) == n
        if not fits:
            raise WorkbenchError(f"{label}: input '{v.name}' has shape {list(a.shape)}, the model takes {v.shape_text}.")
    return {n: arrays[n] for n in names}

