"""Dialogs that write (Export, Save ONNX…) start where a user writes: never inside the Python
installation. Checked against the report of issue 41 item 8: a model opened from the onnx wheel's
test data (site-packages) made Export's folder dialog open in site-packages."""
from __future__ import annotations

import sysconfig
from pathlib import Path

from app.dialogs.files import remember_dir, start_dir
from tests.conftest import light, sample


def test_export_never_starts_inside_site_packages(window, qtbot, monkeypatch, tmp_path):
    model = light("resnet50")
    assert Path(sysconfig.get_paths()["purelib"]).resolve() in model.resolve().parents
    window.document.path = model  # as after opening it; nothing else is needed here
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path))
    assert start_dir(window, "model") == str(model.parent.resolve())  # opening: where the user was
    assert start_dir(window, "export", writing=True) == str(tmp_path)  # writing: home instead
    # a folder remembered inside the installation is skipped too; an ordinary one is kept
    remember_dir(window, "export", str(model))
    assert start_dir(window, "export", writing=True) == str(tmp_path)
    remember_dir(window, "export", str(tmp_path / "out" / "mlp_cpu"))
    (tmp_path / "out").mkdir()
    assert start_dir(window, "export", writing=True) == str(tmp_path / "out")


def test_writing_dialogs_start_in_the_model_folder_when_it_is_a_users(window, qtbot, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(sample("mlp").read_bytes())
    window.document.path = model
    assert start_dir(window, "onnx-out", writing=True) == str(tmp_path)
